"""_lifecycle's plans: decided from constructed snapshots, frozen once made, and the worker's record kept apart.

No processes, no host: a Snapshot is built here, as job.py would gather it from the host.
"""

import hashlib
import os
from types import SimpleNamespace

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.job import (
    ServerControl,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.plan import (
    ServerPlan,
    Snapshot,
    defer_beyond_max_changes,
    plan_server,
    requested_state,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.run import (
    ServerRun,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.steps import (
    advance_verify,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launchers import Running
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    STEP_FAILED,
    STEP_VERIFYING,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.procfs import ProcessInfo
from ansible_collections.gpuops.sglang.plugins.module_utils.server_plan import (
    desired_settings,
)

STATE_FILE = "/var/lib/gpuops-sglang/{name}.json"
SCRIPT = "#!/bin/sh\nexport SGLANG_API_KEY=sk-secret\nexec python3 -m sglang.launch_server --port 30000 --tp 2\n"
SHA = hashlib.sha256(SCRIPT.encode()).hexdigest()


class FakeLauncher:
    """The launcher seam as plan_server reads it: a name and its own compared settings (none)."""

    name = "detached"

    @staticmethod
    def desired(server):
        return {}


LAUNCHER = FakeLauncher()


def spec(name="gpu0", port=30000, gpus=(0, 1)):
    return {"name": name, "port": port, "gpus": list(gpus), "launch_script": f"/opt/s/{name}.sh",
            "log_path": f"/var/log/s/{name}.log"}


def process(pid):
    return ProcessInfo(pid, 1, pid, pid, "S", 99, "python3 -m sglang.launch_server", ["python3"], None)


def recorded_for(server, pid=4242, sha=SHA):
    return dict(desired_settings(server, sha), name=server["name"], pid=pid, pgid=pid, pid_starttime=99)


def running(pid=None):
    """What of a server runs: its main process ``pid`` (None: nothing runs)."""
    if pid is None:
        return Running({}, None, None)
    return Running({pid: process(pid)}, pid, process(pid))


def plan(server, state="started", recorded=None, pid=None, script=(SHA, SCRIPT), **rollback):
    snapshot = Snapshot(recorded, running(pid), script if state != "stopped" else None)
    return plan_server(server, state, snapshot, LAUNCHER, LAUNCHER, ["sk-secret"],
                       STATE_FILE.format(name=server["name"]), **rollback)


# ---- the planner's decisions on snapshots ------------------------------------------------------------------


def test_a_server_never_launched_is_launched_on_its_gpus_in_order():
    decided = plan(spec(gpus=(3, 1)))
    assert (decided.action, decided.reason) == ("launched", "no state recorded in /var/lib/gpuops-sglang/gpu0.json")
    assert decided.gpus == [1, 3]
    assert decided.launches and decided.changes and not decided.kills
    assert decided.desired["script_sha256"] == SHA
    assert decided.script_sha256 == SHA
    assert decided.launch_settings["env"]["SGLANG_API_KEY"] != "sk-secret", "keys hidden from the journal"
    assert (decided.blockers, decided.worker_url, decided.gpu_memory_before) == ({}, None, {})


def test_a_running_server_with_the_same_script_is_left_alone():
    server = spec()
    decided = plan(server, recorded=recorded_for(server), pid=4242)
    assert (decided.action, decided.reason) == ("unchanged", "running (pid 4242) with the same launch script")
    assert not decided.changes and not decided.restarted_since_recorded
    assert decided.main_pid == 4242 and decided.port == 30000


def test_a_changed_script_relaunches_a_running_server():
    server = spec()
    decided = plan(server, recorded=recorded_for(server, sha="old"), pid=4242)
    assert (decided.action, decided.reason) == ("relaunched", "changed: launch script content")
    assert decided.kills and decided.launches


def test_a_server_its_launcher_restarted_is_unchanged_but_seen_as_restarted():
    server = spec()
    decided = plan(server, recorded=recorded_for(server, pid=4242), pid=5151)
    assert decided.action == "unchanged" and decided.restarted_since_recorded


def test_a_stop_reads_no_script_and_takes_the_recorded_gpus_and_port():
    server = {"name": "gpu0"}  # stop.yml passes names only
    decided = plan(server, state="stopped", recorded=recorded_for(spec(gpus=(2, 0))), pid=4242, script=None)
    assert (decided.action, decided.reason) == ("stopped", "stop requested")
    assert (decided.gpus, decided.port) == ([0, 2], 30000)
    assert decided.desired is None and decided.script_sha256 is None and decided.launch_settings is None
    assert plan(server, state="stopped", recorded=None).action == "already_stopped"


def test_a_malformed_recorded_gpu_list_counts_as_none():
    decided = plan({"name": "gpu0"}, state="stopped", recorded={"pid": 1, "gpus": [0, "1", True]}, script=None)
    assert decided.gpus == []


def test_a_rollback_without_a_last_good_configuration_stops_the_server_and_says_why():
    no_last_good = {"gpu0": "gpu0 has no last good configuration"}
    assert requested_state("restarted", "gpu0", no_last_good) == "stopped"
    assert requested_state("restarted", "gpu1", no_last_good) == "restarted"
    server = spec()
    decided = plan(server, state="stopped", recorded=recorded_for(server), pid=4242, script=None,
                   no_last_good=no_last_good["gpu0"])
    assert (decided.action, decided.no_last_good, decided.rollback_to) == (
        "stopped", "gpu0 has no last good configuration", None)
    back = plan(server, state="restarted", recorded=recorded_for(server), pid=4242,
                rollback_to={"run_id": "r1", "script_sha256": SHA, "key_status": "none"})
    assert (back.action, back.rollback_to["run_id"], back.no_last_good) == ("relaunched", "r1", None)


# ---- planning never mutates ----------------------------------------------------------------------------------


def test_a_plan_cannot_be_assigned_to():
    decided = plan(spec())
    for field in ("action", "reason", "recorded", "blockers", "worker_url", "step", "killed"):
        with pytest.raises(AttributeError):
            setattr(decided, field, "changed")
    assert decided.action == "launched"
    assert isinstance(decided, ServerPlan) and not hasattr(decided, "__dict__")


def test_a_changed_plan_is_a_new_plan():
    decided = plan(spec())
    deferred = decided.with_action("deferred", "later")
    routed = decided.updated(worker_url="http://10.0.0.1:30000")
    assert (deferred.action, deferred.reason, deferred.changes) == ("deferred", "later", False)
    assert routed.worker_url == "http://10.0.0.1:30000"
    assert (decided.action, decided.worker_url) == ("launched", None)


def test_the_canary_deferral_returns_new_plans_and_leaves_its_input_untouched():
    servers = [spec(f"gpu{index}", 30000 + index, [index]) for index in range(4)]
    unchanged = plan(servers[1], recorded=recorded_for(servers[1]), pid=4242)
    plans = [plan(servers[0]), unchanged, plan(servers[2]), plan(servers[3])]
    before = [tuple(each) for each in plans]
    deferral = defer_beyond_max_changes(plans, 1)
    deferred = deferral.plans
    assert deferral.canary == ["gpu0"]
    assert deferred is not plans
    assert [tuple(each) for each in plans] == before
    assert [each.action for each in plans] == ["launched", "unchanged", "launched", "launched"]
    assert [each.action for each in deferred] == ["launched", "unchanged", "deferred", "deferred"]
    assert deferred[0] is plans[0] and deferred[1] is plans[1]
    assert deferred[2].reason == ("deferred: at most 1 server changes in this call (max_changes); would be "
                                  "no state recorded in /var/lib/gpuops-sglang/gpu2.json")
    assert not any(each.changes for each in deferred[2:])
    for limit in (None, 0, 3):
        assert [each.action for each in defer_beyond_max_changes(plans, limit).plans] == [
            "launched", "unchanged", "launched", "launched"]
    assert defer_beyond_max_changes(plans, None).canary == []
    assert defer_beyond_max_changes(plans, 3).canary == [], "no canary where nobody waits for it"
    assert defer_beyond_max_changes(plans, 2).canary == ["gpu0", "gpu2"]


def test_canary_auto_defers_the_serving_servers_only_for_a_configuration_that_never_came_up_here():
    new_script = SCRIPT.replace("--tp 2", "--tp 2 --max-running-requests 64")
    new = (hashlib.sha256(new_script.encode()).hexdigest(), new_script)
    servers = [spec(f"gpu{index}", 30000 + index, [index]) for index in range(4)]
    serving = [plan(server, recorded=recorded_for(server, pid=4000 + index), pid=4000 + index, script=new)
               for index, server in enumerate(servers[:3])]
    down = plan(servers[3], script=new)  # runs nothing: launched, nothing serves there to lose
    plans = serving + [down]
    assert [each.action for each in plans] == ["relaunched", "relaunched", "relaunched", "launched"]

    def never(_name, _sha):
        return False

    assert defer_beyond_max_changes([down], 1, came_up_with=never).canary == [], "alone: nobody waits for it"

    deferral = defer_beyond_max_changes(plans, 1, came_up_with=never)
    canary = deferral.plans
    assert deferral.canary == ["gpu0"]
    assert [each.action for each in canary] == ["relaunched", "deferred", "deferred", "launched"]
    assert canary[1].reason.startswith("deferred: the canary (gpu0) goes first with a configuration that never came "
                                       "up on this host; would be ")
    # Back to a configuration each server came up with: all at once, no canary.
    known = defer_beyond_max_changes(plans, 1, came_up_with=lambda _name, _sha: True)
    assert [each.action for each in known.plans] == ["relaunched", "relaunched", "relaunched", "launched"]
    assert known.canary == []
    # ... or a batch at a time (batch_size): still no canary.
    batch = defer_beyond_max_changes(plans, 1, came_up_with=lambda _name, _sha: True, batch_size=2)
    assert [each.action for each in batch.plans] == ["relaunched", "relaunched", "deferred", "deferred"]
    assert batch.plans[2].reason.startswith("deferred: at most 2 servers change in this call (batch_size); would be")
    assert batch.canary == []
    # Only gpu2 goes somewhere new: it is the canary, and the others that serve wait for it - also beyond a batch.
    only_gpu2 = defer_beyond_max_changes(plans, 1, came_up_with=lambda name, _sha: name != "gpu2", batch_size=2)
    assert [each.action for each in only_gpu2.plans] == ["deferred", "deferred", "relaunched", "launched"]
    assert only_gpu2.canary == ["gpu2"]
    # A first launch (nothing serves) goes batch by batch too, the canary first.
    first = [plan(server, script=new) for server in servers]
    batched = defer_beyond_max_changes(first, 1, came_up_with=never, batch_size=2)
    assert [each.action for each in batched.plans] == ["launched", "launched", "deferred", "deferred"]
    assert batched.canary == ["gpu0"]
    # max_changes and batch_size: the smaller one wins.
    assert [each.action for each in defer_beyond_max_changes(first, 3, batch_size=2).plans] == [
        "launched", "launched", "deferred", "deferred"]


def test_canary_auto_defers_a_renamed_server_that_would_stop_a_stale_one():
    """A topology change: the new names run nothing yet (launched), but each stops the old server in its way."""
    servers = [spec(f"new{index}", 30000 + index, [index]) for index in range(3)]
    plans = [plan(server) for server in servers]
    assert [each.action for each in plans] == ["launched"] * 3
    stale_in_the_way = {"new0", "new1"}  # new2's GPU is free

    deferral = defer_beyond_max_changes(plans, 1, came_up_with=lambda _name, _sha: False,
                                        stops_serving=lambda each: each.name in stale_in_the_way)
    assert [each.action for each in deferral.plans] == ["launched", "deferred", "launched"]
    assert deferral.canary == ["new0"]


# ---- what the worker records is kept on the run ------------------------------------------------------------


def test_a_run_records_what_happens_and_leaves_its_plan_as_decided():
    server = spec()
    decided = plan(server, recorded=recorded_for(server, sha="old"), pid=4242).updated(blockers={77: process(77)})
    run = ServerRun(decided)
    assert set(run.targets()) == {77, 4242}
    run.processes[4343] = process(4343)  # a child spawned while it shut down
    run.last_signal[4242] = "SIGTERM"
    run.gpu_used = {1: 300, 0: 20}
    run.fail(12.0, "gpu0 is down: ...", down=True)
    assert (run.step, run.error, run.down) == (STEP_FAILED, "gpu0 is down: ...", True)
    assert set(decided.processes) == {4242}, "the plan keeps what was seen when it was made"
    assert set(run.targets()) == {77, 4242, 4343}
    assert run.progress(13.04) == {
        "name": "gpu0", "step": STEP_FAILED, "seconds": 1.0, "action": "relaunched", "processes_left": 0,
        "requests_left": None, "signal": "SIGTERM", "gpu_used_mib": {"0": 20, "1": 300}, "port_holders": [],
        "error": "gpu0 is down: ..."}


def test_a_deferred_server_in_the_way_of_one_that_goes_goes_too():
    """Ports moved up by one: gpu1's process holds the canary's new port, gpu2's holds gpu1's - neither can wait."""
    servers = [spec(f"gpu{index}", 30000 + index, [index]) for index in range(4)]
    plans = [plan(server, recorded=recorded_for(server, pid=4000 + index), pid=4000 + index, script=("new", "x"))
             for index, server in enumerate(servers)]
    deferred = defer_beyond_max_changes(plans, 1, came_up_with=lambda _name, _sha: False).plans
    assert [each.action for each in deferred] == ["relaunched", "deferred", "deferred", "deferred"]
    chained = ServerControl._undefer_in_the_way(plans, deferred, {"gpu1": {"gpu0"}, "gpu2": {"gpu1"}})
    assert [each.action for each in chained] == ["relaunched", "relaunched", "relaunched", "deferred"]
    assert chained[1] is plans[1], "as planned before the deferral"
    assert ServerControl._undefer_in_the_way(plans, deferred, {"gpu3": {"gpu2"}}) == deferred, "gpu2 waits: so may gpu3"


# ---- what a stopping server's log says of memory it did not free ------------------------------------------------


def stopping_run(tmp_path, log_lines, state="stopped"):
    """A ServerRun of gpu0 being stopped, in its verify step, its log holding ``log_lines`` since its SIGTERM."""
    server = dict(spec(gpus=(0,)), log_path=str(tmp_path / "gpu0.log"))
    (tmp_path / "gpu0.log").write_text("[2026-12-03 10:00:00] Load weight begin.\n")
    run = ServerRun(plan(server, state=state, recorded=recorded_for(server), pid=4242))
    run.log_offset = os.path.getsize(server["log_path"])
    with open(server["log_path"], "a") as log:
        log.writelines(line + "\n" for line in log_lines)
    run.enter(STEP_VERIFYING, 100.0)
    control = SimpleNamespace(params={"gpu_free_threshold_mib": 1024, "gpu_free_timeout": 60}, device_dir=str(tmp_path),
                              minors={}, events=[], act_started=100.0)
    return control, run


def test_a_process_sglang_says_is_stuck_in_the_driver_fails_the_stop_at_once_naming_it(tmp_path):
    stuck = os.getpid()  # alive, like a process in D state
    killed = ("[2026-12-03 10:00:01] Schedulers still alive 15s after ShutdownReq, killing them before they released: "
              f"[{stuck}]")
    not_reaped = (f"[2026-12-03 10:01:01 TP0] kill_process_tree: 1 process(es) not reaped within 60s after SIGKILL; "
                  f"pids=[{stuck}]")
    control, run = stopping_run(tmp_path, [killed, not_reaped])
    advance_verify(control, run, {0: 71000}, None, 101.0)
    assert run.step == STEP_FAILED and run.down
    assert run.error.startswith("gpu0 is down: GPU memory not freed after 1 s (its processes stuck) (threshold 1024 "
                                "MiB): GPU 0 still uses 71000 MiB; ")
    assert run.error.endswith(
        f"its log says: pid {stuck} schedulers still alive 15 s after the shutdown request, SIGKILLed before they "
        f"released their GPU memory; pid {stuck} not reaped within 60 s of SIGKILL (stuck in the driver: their GPU "
        "memory is not freed)")


def test_schedulers_killed_before_they_released_are_waited_for_and_named_if_memory_stays(tmp_path):
    killed = ("[2026-12-03 10:00:01] Schedulers still alive 15s after ShutdownReq, killing them before they released: "
              "[5150]")
    control, run = stopping_run(tmp_path, [killed])
    advance_verify(control, run, {0: 71000}, None, 101.0)
    assert run.step == STEP_VERIFYING, "its memory may still come back: gpu_free_timeout applies"
    advance_verify(control, run, {0: 71000}, None, 161.0)
    assert run.step == STEP_FAILED and "within gpu_free_timeout=60 s" in run.error
    assert run.error.endswith("its log says: pid 5150 schedulers still alive 15 s after the shutdown request, "
                              "SIGKILLed before they released their GPU memory")
