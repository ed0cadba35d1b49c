"""The hold's decision that a relaunch has nothing to change (module_utils/converge.py), on plain answers."""

import time

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.request import (
    ServerControlError,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.converge import (
    chosen_candidate,
    deferred_by,
    settled,
)

PY = "/opt/sglang/bin/python"
CANDIDATES = [{"sglang": [{"interpreter": PY, "version": version}], "scripts": [{"name": version}]}
              for version in ("0.5.9", "0.5.10", "0.5.23")]


def _installed(version, problem=None):
    entry = {"interpreter": PY, "version": version, "location": "/opt/sglang/lib/python3.12/site-packages"}
    return [dict(entry, problem=problem) if problem else entry]


def test_the_candidate_rendered_for_exactly_the_version_the_host_reports_is_chosen():
    assert chosen_candidate(CANDIDATES, _installed("0.5.10")) is CANDIDATES[1]


@pytest.mark.parametrize("installed", [
    _installed("0.5.23.post1"),  # parses as 0.5.23, but its notes and journal name the text: rendered by the run
    _installed("0.5.11"),  # no flag table here: the run's render says so
    _installed(None, problem="no sglang in /opt/sglang/bin/python"),
    [{"interpreter": "/usr/bin/python3", "version": "0.5.23"}],  # another interpreter's
    [],
], ids=["post release", "no table", "not installed", "other interpreter", "nothing read"])
def test_no_candidate_for_anything_else(installed):
    assert chosen_candidate(CANDIDATES, installed) is None


def test_every_interpreter_of_a_candidate_must_match():
    both = [{"sglang": [{"interpreter": PY, "version": "0.5.23"}, {"interpreter": "python3", "version": "0.5.23"}],
             "scripts": []}]
    assert chosen_candidate(both, _installed("0.5.23")) is None
    assert chosen_candidate(both, _installed("0.5.23") + [{"interpreter": "python3", "version": "0.5.23"}]) is both[0]


def _planned(**changes):
    planned = {"servers": [{"name": "gpu0", "action": "unchanged", "error": None},
                           {"name": "gpu1", "action": "unchanged", "error": None}],
               "scripts": {"gpu0": {"changed": False}, "gpu1": {"changed": False}},
               "script_diffs": [], "removed": [], "stale_killed": [], "foreign_killed": []}
    planned.update(changes)
    return planned


def test_a_plan_with_every_server_unchanged_and_nothing_to_write_is_settled():
    assert settled(_planned()) is None


@pytest.mark.parametrize("changes, why", [
    ({"servers": [{"name": "gpu0", "action": "relaunched", "error": None}]}, "to change: gpu0"),
    ({"servers": [{"name": "gpu0", "action": "launched", "error": None}]}, "to change: gpu0"),
    ({"servers": [{"name": "gpu0", "action": "unchanged", "error": "GPU 0 held by pid 7"}]}, "to change: gpu0"),
    ({"scripts": {"gpu0": {"changed": True}}}, "files to write: gpu0"),
    ({"script_diffs": [{"before_header": "unit"}]}, "files to write: systemd units"),
    ({"removed": [{"name": "gpu9"}]}, "servers no longer requested"),
    ({"stale_killed": [{"pid": 7}]}, "processes in the way"),
], ids=["relaunch", "launch", "error", "script", "unit", "removed", "stale"])
def test_anything_the_server_call_would_do_is_not_settled(changes, why):
    assert why in settled(_planned(**changes))


def test_one_call_may_relaunch_unless_a_canary_or_the_batch_size_defers_servers():
    relaunching = _planned(servers=[{"name": "gpu0", "action": "relaunched", "error": None},
                                    {"name": "gpu1", "action": "launched", "error": None}])
    assert deferred_by(relaunching) is None and deferred_by(_planned()) is None
    canary = _planned(servers=[{"name": "gpu0", "action": "relaunched", "error": None},
                               {"name": "gpu1", "action": "deferred", "error": None},
                               {"name": "gpu2", "action": "deferred", "error": None}])
    assert deferred_by(canary) == "servers deferred until others are up: gpu1, gpu2"


# ---- the relaunch in the hold's one call (act): what is waited for, what is kept, what is answered --------------------
# ServerControl and the wait stand in for the host (the host's side is exercised end to end in
# tests/integration/test_relaunch_playbook.py and test_rollback.py); here: what converge does with their answers.

SECRET = "sk-test-0123456789abcdef"


def _server(name, action, error=None):
    return {"name": name, "port": 30000 + int(name[-1]), "log_path": f"/var/log/{name}.log", "pid": 100,
            "action": action, "error": error}


class _Host:
    """ServerControl's answers: ``planned`` in check mode, then ``done`` (or ``raises``) for the real call."""

    def __init__(self, planned, done=None, raises=None):
        self.planned, self.done, self.raises, self.real_calls, self.waits = planned, done, raises, 0, []
        host = self

        class FakeControl:
            def __init__(self, params, check_mode=False, gpus=None):
                self.check_mode = check_mode

            def apply(self, _slice_seconds):
                if self.check_mode:
                    return dict(host.planned)
                host.real_calls += 1
                if host.raises:
                    raise host.raises
                return dict(host.done)

        self.control = FakeControl

    def wait_slice(self, params, carry=None):
        self.waits.append(params)
        return {"servers": [{"name": server["name"], "status": "ready"} for server in params["servers"]],
                "released": params["release_run"], "changed": False}


def _look(monkeypatch, host, tmp_path, hold_on_failure=True):
    from ansible_collections.gpuops.sglang.plugins.module_utils import converge
    monkeypatch.setattr(converge, "ServerControl", host.control)
    monkeypatch.setattr(converge, "wait_slice", host.wait_slice)
    monkeypatch.setattr(converge.host_job, "unreported", lambda state_dir: [])
    servers = [{"name": f"gpu{index}", "port": 30000 + index, "gpus": [index], "launch_script": f"/opt/gpu{index}.sh",
                "log_path": f"/var/log/gpu{index}.log"} for index in range(2)]
    scripts = [{"name": server["name"], "path": server["launch_script"], "content": f"exec sglang --api-key {SECRET}"}
               for server in servers]
    params = {"state_dir": str(tmp_path), "progress_interval": 10.0, "host": "127.0.0.1", "converge": {
        "servers": servers, "candidates": [{"sglang": [{"interpreter": PY, "version": "0.5.23"}], "scripts": scripts}],
        "required_paths": [], "secrets": [SECRET], "server": {}, "timeout": 60.0, "stall_timeout": 30.0,
        "kill_stalled": True, "state": "restarted", "act": True, "hold_on_failure": hold_on_failure}}
    return converge.look(params, {"sglang": _installed("0.5.23")}, "run-1", time.time() + 10)


def test_one_call_waits_for_what_it_launched_also_when_another_server_failed(monkeypatch, tmp_path):
    host = _Host(_planned(servers=[_server("gpu0", "relaunched"), _server("gpu1", "relaunched")]),
                 done={"failed": True, "changed": True, "msg": "gpu1: GPU memory not freed",
                       "servers": [_server("gpu0", "relaunched"), _server("gpu1", "relaunched", error="not freed")]})
    answer = _look(monkeypatch, host, tmp_path)
    assert answer["acted"] and host.real_calls == 1
    [wait] = host.waits
    assert [server["name"] for server in wait["servers"]] == ["gpu0"], "the server that relaunched is waited for"
    assert wait["release_run"] is True and wait["hold_on_failure"] is True
    assert [server["name"] for server in answer["wait"]["servers"]] == ["gpu0"]


def test_a_canary_the_plan_of_the_locked_host_defers_keeps_the_hold_for_the_roles_batches(monkeypatch, tmp_path):
    host = _Host(_planned(servers=[_server("gpu0", "relaunched"), _server("gpu1", "relaunched")]),
                 done={"changed": True, "canary": ["gpu0"],
                       "servers": [_server("gpu0", "relaunched"), _server("gpu1", "deferred")]})
    answer = _look(monkeypatch, host, tmp_path)
    [wait] = host.waits
    assert [server["name"] for server in wait["servers"]] == ["gpu0"] and wait["release_run"] is False
    assert answer["wait"]["released"] is False


def test_a_plan_a_canary_defers_is_left_to_the_roles_calls_untouched(monkeypatch, tmp_path):
    host = _Host(_planned(servers=[_server("gpu0", "relaunched"), _server("gpu1", "deferred")]))
    assert _look(monkeypatch, host, tmp_path) == {"needed": "servers deferred until others are up: gpu1"}
    assert host.real_calls == 0 and host.waits == []


@pytest.mark.parametrize("error, said", [
    (ServerControlError(f"host lock held by pid 7 (sglang --api-key {SECRET})", lock_holder=7), "host lock held"),
    (RuntimeError(f"boom in sglang --api-key {SECRET}"), "unexpected RuntimeError: boom"),
], ids=["refusal", "crash"])
def test_a_relaunch_that_fails_in_the_call_answers_as_the_server_call_would_and_shows_no_secret(
        monkeypatch, tmp_path, error, said):
    host = _Host(_planned(servers=[_server("gpu0", "relaunched"), _server("gpu1", "relaunched")]), raises=error)
    answer = _look(monkeypatch, host, tmp_path)
    assert answer["acted"] and "wait" not in answer and host.waits == []
    assert said in answer["server"]["msg"] and SECRET not in answer["server"]["msg"]
    assert "servers" not in answer["server"], "the role fails the run with the message, inside its release"
