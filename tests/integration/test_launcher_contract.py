"""One contract, every launcher: what _lifecycle and the wait may rely on, whichever launcher runs a server.

Parametrised over every launcher of ``launchers.LAUNCHERS`` and a test-only one written in one file
(niced_launcher.py): registered, it is driven through ServerControl - checked, compared, launched, relaunched when
its own setting changes, stopped - with real simulated servers on a fake GPU host. The process part runs for the
launchers this machine can run (systemd is not its init); the systemd launcher's processes are exercised by the
molecule scenario ``systemd`` (systemd inside the LXC containers).
"""

import copy
import os
import re
import time
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.gpuops.sglang.plugins.module_utils import (
    host_job,
    launchers,
    server_plan,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.job import (
    ServerControl,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.request import (
    ServerControlError,
)
from ansible_collections.gpuops.sglang.plugins.modules.server import ARGUMENT_SPEC

from .conftest import alive, read_state
from .niced_launcher import NicedLauncher

MODULE_UTILS = Path(launchers.__file__).parent
EVERY_LAUNCHER = [*launchers.LAUNCHERS.values(), NicedLauncher]
# The launchers whose processes this machine can run.
RUNNABLE = [launchers.DetachedLauncher, NicedLauncher]


@pytest.fixture
def registered(monkeypatch):
    """The test-only launcher registered like the others (the host job's worker, a fork, sees it too)."""
    monkeypatch.setitem(launchers.LAUNCHERS, NicedLauncher.name, NicedLauncher)


def module_params(host_args, servers, **options):
    """The server module's options as AnsibleModule would hand them over (defaults applied)."""
    # A copy: validation fills the default of the systemd suboptions in place (the shared spec must stay as written).
    validated = ArgumentSpecValidator(copy.deepcopy(ARGUMENT_SPEC)).validate(
        dict(host_args, servers=servers, progress_interval=1))
    assert not validated.error_messages, validated.error_messages
    return dict(validated.validated_parameters, **options)


def run(params):
    """One module call's work, followed to the end of its host job."""
    result = ServerControl(params).apply(slice_seconds=30)
    deadline = time.time() + 120
    while "carry" in result:
        assert time.time() < deadline, result
        result = host_job.follow_result(params["state_dir"], result["carry"]["job"], time.time() + 30)
    return result


@pytest.mark.parametrize("launcher", EVERY_LAUNCHER, ids=lambda launcher: launcher.name)
def test_a_launcher_declares_what_it_adds_and_checks_its_own_options(launcher, tmp_path):
    instance = launcher.for_call(owner=None, params={"state_dir": str(tmp_path / "state")})
    assert isinstance(instance, launchers.Launcher) and instance.name == launcher.name
    spec = {"name": "gpu0", "port": 30000, "gpus": [0], "launch_script": "/opt/s/gpu0.sh",
            "log_path": "/var/log/s/gpu0.log"}
    # Its compared settings are its own: none of the planner's, none of another launcher's.
    others = {key for other in EVERY_LAUNCHER if other is not launcher for key, _words in other.compared}
    own = [key for key, _words in launcher.compared]
    assert set(instance.desired(spec)) == set(own)
    assert not set(own) & (others | {"script_sha256", "launch_script", "port", "gpus", "log_path", "launcher"})
    assert instance.option_problems({}) == [] and instance.server_problems("servers[0] (gpu0)", spec) == []
    relative = instance.server_problems("servers[0] (gpu0)", dict(spec, launch_script="gpu0.sh"))
    assert relative == [] or all(problem.startswith("servers[0] (gpu0).launch_script 'gpu0.sh'")
                                 for problem in relative)


def test_the_server_modules_launcher_choices_are_the_registry():
    assert ARGUMENT_SPEC["launcher"]["choices"] == list(launchers.LAUNCHERS)
    assert launchers.DEFAULT_LAUNCHER == ARGUMENT_SPEC["launcher"]["default"]
    assert launchers.DEFAULT_LAUNCHER in launchers.LAUNCHERS


def test_no_module_util_but_launchers_knows_which_launcher_it_talks_to():
    special = re.compile(r"isinstance\([^)]*Launcher\)|SystemdLauncher|DetachedLauncher|[=!]= \"(systemd|detached)\"")
    offenders = [f"{path.relative_to(MODULE_UTILS)}:{number}: {line.strip()}"
                 for path in sorted(MODULE_UTILS.rglob("*.py")) if path.name != "launchers.py"
                 for number, line in enumerate(path.read_text().splitlines(), 1) if special.search(line)]
    assert offenders == []


@pytest.mark.usefixtures("registered")
@pytest.mark.parametrize("launcher", RUNNABLE, ids=lambda launcher: launcher.name)
def test_a_launcher_starts_observes_relaunches_and_stops_a_server(launcher, make_server, host_args, fake_gpus):
    spec = make_server("gpu0", [0])
    params = module_params(host_args, [spec], launcher=launcher.name, niceness=5)

    launched = run(params)
    [entry] = launched["servers"]
    assert (entry["action"], entry.get("error")) == ("launched", None), launched
    recorded = server_plan.recorded_settings(_state(host_args))
    assert recorded["launcher"] == launcher.name
    running = launcher.for_call(ServerControl(params).owner, params).observe("gpu0", _state(host_args))
    assert running.main is not None and running.main.pid == entry["pid"] and entry["pid"] in running.processes

    again = run(params)
    assert [server["action"] for server in again["servers"]] == ["unchanged"], again

    if launcher is NicedLauncher:
        # Its own setting changed: the comparison names it, and the server is launched again with it.
        changed = run(dict(params, niceness=7))
        [entry] = changed["servers"]
        assert (entry["action"], entry["reason"]) == ("relaunched", "changed: niceness"), changed
        assert os.getpriority(os.PRIO_PROCESS, entry["pid"]) == 7
        params = dict(params, niceness=7)
    else:
        assert not launcher.compared

    pids = list(running.processes)
    stopped = run(dict(params, state="stopped"))
    assert [server["action"] for server in stopped["servers"]] == ["stopped"], stopped
    assert not [pid for pid in pids + [entry["pid"]] if alive(pid)]
    assert not os.path.exists(os.path.join(host_args["state_dir"], "gpu0.json"))
    assert launcher.for_call(ServerControl(params).owner, params).observe("gpu0", {}).processes == {}


@pytest.mark.usefixtures("registered")
def test_a_launchers_own_checks_refuse_before_anything_is_touched(make_server, host_args):
    spec = make_server("gpu0", [0])
    params = module_params(host_args, [dict(spec, launch_script="gpu0.sh")], launcher=NicedLauncher.name,
                           niceness=40)
    with pytest.raises(ServerControlError) as refused:
        run(params)
    problems = refused.value.details["problems"]
    assert "niceness must be an integer from 0 to 19, got 40" in problems
    assert "servers[0] (gpu0).launch_script 'gpu0.sh' must be an absolute path" in problems
    assert not os.path.exists(os.path.join(host_args["state_dir"], "gpu0.json"))


def _state(host_args):
    return read_state(host_args, "gpu0")
