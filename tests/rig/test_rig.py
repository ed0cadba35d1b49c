"""The LXC rig end to end: real containers reached through community.proxmox.proxmox_pct_remote.

Adds one container to the session's rig (tests/rig/shared.py), drives it with the real `ansible` CLI
and the installed pct stand-in, and removes it. The first run on a machine builds the base container
(about 75 s); later runs take an overlay snapshot of it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import rig

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = Path(sys.executable).parent / "ansible"
# Generous hang guard, not a speed check: a pct exec blocked by a background child never returns.
COMMAND_TIMEOUT = 180


def skip_reason():
    if not ANSIBLE.exists():
        return f"ansible CLI not found next to {sys.executable}"
    return rig.unavailable_reason()


pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


@pytest.fixture(scope="module")
def ct(shared_rig, tmp_path_factory):
    """A 2-GPU container of the session's rig, with an inventory of its own."""
    with shared_rig.container(gpus=2, inventory=tmp_path_factory.mktemp("rig") / "inventory.yml") as (vmid, state):
        yield {"vmid": vmid, **state}


def ansible(ct, module, args=None):
    argv = [str(ANSIBLE), "-i", ct["inventory"], f"ct{ct['vmid']}", "-m", module]
    if args is not None:
        argv += ["-a", args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)


def pct_execs_during(ct, action):
    """Run action() and return the pct calls it made (argv lists), in order."""
    before = len(rig.read_call_log(ct["workdir"]))
    action()
    return [call["argv"] for call in rig.read_call_log(ct["workdir"])[before:]]


def pct(ct, *args, stdin=None):
    env = dict(os.environ, GPUOPS_RIG_PCT_LOG=ct["call_log"])
    return subprocess.run([str(rig.PCT_PATH), *args], input=stdin, capture_output=True, text=True,
                          env=env, timeout=COMMAND_TIMEOUT, check=False)


def test_ping_costs_six_pct_exec_round_trips(ct):
    results = []
    calls = pct_execs_during(ct, lambda: results.append(ansible(ct, "ansible.builtin.ping")))
    result = results[0]
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pong" in result.stdout
    # No pipelining in proxmox_pct_remote: home lookup, mkdir tmp, put module, chmod, run, rm tmp.
    assert [argv[:4] for argv in calls] == [["exec", str(ct["vmid"]), "--", "/bin/sh"]] * 6
    assert calls[0][-1] == "echo ~root"
    assert calls[2][-1].startswith("cat > ") and calls[2][-1].endswith("AnsiballZ_ping.py")
    assert calls[-1][-1].startswith("rm -f -r ")


def test_copy_streams_file_content_through_pct_stdin(ct):
    content = "first line\nsecond line with 'quotes' and $dollar\n"
    copy = ansible(ct, "ansible.builtin.copy", json.dumps({"dest": "/tmp/rig-copy.txt", "content": content}))
    assert copy.returncode == 0, copy.stdout + copy.stderr
    back = pct(ct, "exec", str(ct["vmid"]), "--", "cat", "/tmp/rig-copy.txt")
    assert back.returncode == 0 and back.stdout == content


def test_detached_launch_returns_and_survives_while_plain_background_child_dies(ct):
    # Each returns promptly (the subprocess timeout turns a hang into a failure) ...
    for command in ("sleep 301 &", "setsid nohup sleep 302 </dev/null >/dev/null 2>&1 &"):
        launch = ansible(ct, "ansible.builtin.shell", command)
        assert launch.returncode == 0, launch.stdout + launch.stderr
    # ... but the PTY proxmox_pct_remote requests for module runs hangs up when pct exec ends:
    # only a detached process outlives it.
    sleeping = pct(ct, "exec", str(ct["vmid"]), "--", "pgrep", "-a", "-x", "sleep")
    assert "sleep 302" in sleeping.stdout
    assert "sleep 301" not in sleeping.stdout


def test_fake_gpus_are_on_the_path_pct_exec_provides(ct):
    query = ansible(ct, "ansible.builtin.command", "nvidia-smi --query-gpu=index,name --format=csv,noheader")
    assert query.returncode == 0, query.stdout + query.stderr
    assert query.stdout.count("NVIDIA H200") == 2


def test_pct_exec_passes_stdin_exit_code_and_pve_path(ct):
    vmid = str(ct["vmid"])
    result = pct(ct, "exec", vmid, "--", "/bin/sh", "-c", 'cat; echo "PATH=$PATH"; exit 7', stdin="payload\n")
    assert result.returncode == 7
    assert result.stdout == "payload\nPATH=/sbin:/bin:/usr/sbin:/usr/bin\n"
    cleared = pct(ct, "exec", vmid, "--keep-env", "0", "--", "/usr/bin/env")
    assert cleared.returncode == 0 and "GPUOPS_RIG_PCT_LOG" not in cleared.stdout


def test_pct_push_pull_status_and_list(ct, tmp_path):
    vmid = str(ct["vmid"])
    source = tmp_path / "pushed"
    source.write_bytes(bytes(range(256)))
    assert pct(ct, "push", vmid, str(source), "/tmp/pushed", "--perms", "0600").returncode == 0
    assert pct(ct, "pull", vmid, "/tmp/pushed", str(tmp_path / "pulled")).returncode == 0
    assert (tmp_path / "pulled").read_bytes() == source.read_bytes()
    assert pct(ct, "status", vmid).stdout == "status: running\n"
    listing = pct(ct, "list").stdout.splitlines()
    assert listing[0].split() == ["VMID", "Status", "Lock", "Name"]
    assert any(line.split()[:2] == [vmid, "running"] for line in listing[1:])


def test_pct_errors_match_proxmox(ct):
    unknown = pct(ct, "exec", "99999", "--", "true")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("Configuration file 'nodes/") and "/lxc/99999.conf' does not exist" in unknown.stderr
    vmid = str(ct["vmid"])
    assert pct(ct, "stop", vmid).returncode == 0
    try:
        stopped = pct(ct, "exec", vmid, "--", "true")
        assert (stopped.returncode, stopped.stderr) == (2, f"container '{vmid}' not running!\n")
        assert pct(ct, "status", vmid).stdout == "status: stopped\n"
    finally:
        assert pct(ct, "start", vmid).returncode == 0
    assert pct(ct, "exec", vmid, "--", "true").returncode == 0


def test_rig_cli_status_reports_the_running_rig(ct):
    result = subprocess.run([sys.executable, str(Path(rig.__file__)), "status", "--json", "--workdir", ct["workdir"]],
                            capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout)
    assert facts["up"] and facts["pct_stand_in_installed"] and facts["base_cached"]
    assert facts["containers"] == {str(ct["vmid"]): "running"}
    assert facts["pct_calls_logged"] > 0


def test_sglang_is_installed_for_python3_and_each_simulated_version_has_a_site(ct):
    vmid = str(ct["vmid"])
    read = ["python3", "-c", "import importlib.metadata as m; print(m.version('sglang'))"]
    # The simulator's default, the newest: what the collection reads as the container's SGLang, and what it runs.
    installed = pct(ct, "exec", vmid, "--", *read)
    assert (installed.returncode, installed.stdout) == (0, "0.5.23\n"), installed.stderr
    # Another version's site, first on the PYTHONPATH (a host's sglang_env), comes before it.
    other = pct(ct, "exec", vmid, "--", "env", f"PYTHONPATH={rig.SGLANG_SITES_IN_CT}/0.5.10", *read)
    assert (other.returncode, other.stdout) == (0, "0.5.10\n"), other.stderr
