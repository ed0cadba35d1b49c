"""The planner's decisions on constructed snapshots: no processes, no files."""

import re

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import server_plan
from ansible_collections.gpuops.sglang.plugins.module_utils.server_plan import (
    Holder,
    Observed,
    compare,
    decide,
    describe,
    desired_settings,
    judge_holder,
    recorded_settings,
)

SPEC = {"name": "gpu0", "port": 30000, "gpus": [1, 0], "launch_script": "/opt/s/gpu0.sh", "log_path": "/var/log/s/gpu0.log"}
STATE_FILE = "/var/lib/gpuops-sglang/gpu0.json"


def recorded(**overrides):
    """A state file as the detached launcher wrote it before launcher/unit_sha256 existed."""
    state = {"name": "gpu0", "pid": 4242, "pgid": 4242, "port": 30000, "gpus": [0, 1], "launch_script": "/opt/s/gpu0.sh",
             "script_sha256": "aaa", "log_path": "/var/log/s/gpu0.log", "pid_starttime": 99}
    state.update(overrides)
    return state


def desired(**overrides):
    settings = desired_settings(SPEC, "aaa")
    settings.update(overrides)
    return settings


def test_a_running_server_with_the_same_settings_is_left_alone():
    decision = decide("started", desired(), Observed(recorded(), True, 4242), STATE_FILE)
    assert decision == ("unchanged", "running (pid 4242) with the same launch script", [])


def test_gpu_order_does_not_count_as_a_change():
    assert desired_settings(SPEC, "aaa")["gpus"] == [0, 1]
    assert decide("started", desired(), Observed(recorded(gpus=[0, 1]), True, 4242), STATE_FILE).action == "unchanged"


def test_a_state_file_from_before_launchers_counts_as_detached():
    assert recorded_settings(recorded())["launcher"] == "detached"
    assert compare(recorded_settings(recorded()), desired()) == []


def test_a_systemd_server_recorded_as_such_is_current_and_stops_through_systemd():
    systemd = recorded(launcher="systemd", unit_sha256="ccc")
    assert recorded_settings(systemd)["launcher"] == "systemd"  # the launcher that stops it
    assert decide("started", desired(launcher="systemd", unit_sha256="ccc"),
                  Observed(systemd, True, 4242), STATE_FILE).action == "unchanged"
    # Back to detached: the diff's "before" is the launcher that runs it (and must stop it).
    decision = decide("started", desired(), Observed(systemd, True, 4242), STATE_FILE)
    assert (decision.reason, decision.changes) == (
        "changed: launcher, systemd unit", [("launcher", "systemd", "detached"), ("unit_sha256", "ccc", None)])


@pytest.mark.parametrize("change, reason", [
    ({"script_sha256": "bbb"}, "changed: launch script content"),
    ({"port": 30001}, "changed: port"),
    ({"gpus": [2, 3]}, "changed: gpus"),
    ({"log_path": "/var/log/s/other.log"}, "changed: log_path"),
    ({"launcher": "systemd", "unit_sha256": "ccc"}, "changed: launcher, systemd unit"),
    ({"script_sha256": "bbb", "port": 30001}, "changed: launch script content, port"),
])
def test_the_reason_names_every_changed_setting_in_one_order(change, reason):
    decision = decide("started", desired(**change), Observed(recorded(), True, 4242), STATE_FILE)
    assert decision.action == "relaunched"
    assert decision.reason == reason
    # The diff's changes come from the same comparison as the reason.
    assert [key for key, _before, _after in decision.changes] == list(change)
    assert all(after == change[key] for key, _before, after in decision.changes)


def test_a_dead_recorded_process_is_launched_again_naming_its_pid():
    assert decide("started", desired(), Observed(recorded(), False, None), STATE_FILE) == (
        "launched", "recorded process 4242 is not running", [])


def test_processes_left_behind_by_a_dead_main_process_make_it_a_relaunch():
    # Its scheduler orphaned to PID 1 still holds the GPU: it must be stopped first.
    decision = decide("started", desired(), Observed(recorded(), True, None), STATE_FILE)
    assert decision.action == "relaunched"
    assert decision.reason == "recorded process 4242 is not running"


def test_a_main_process_that_outlived_its_crash_is_relaunched_with_the_crash_named():
    crash = "RuntimeError: NCCL error: unhandled system error"
    decision = decide("started", desired(), Observed(recorded(), True, 4242, crash), STATE_FILE)
    assert decision == ("relaunched", f"its process 4242 still runs but its log shows a crash: {crash}", [])
    # Changed settings too: the crash is the reason given (it would be relaunched either way).
    assert decide("started", desired(port=31000), Observed(recorded(), True, 4242, crash),
                  STATE_FILE).reason.startswith("its process 4242 still runs but its log shows a crash")


def test_a_server_without_state_is_launched_naming_the_state_file():
    assert decide("started", desired(), Observed(None, False, None), STATE_FILE) == (
        "launched", f"no state recorded in {STATE_FILE}", [])


def test_restarted_relaunches_an_unchanged_server():
    assert decide("restarted", desired(), Observed(recorded(), True, 4242), STATE_FILE)[:2] == (
        "relaunched", "restart requested")


@pytest.mark.parametrize("running, action", [(True, "stopped"), (False, "already_stopped")])
def test_stopped(running, action):
    assert decide("stopped", None, Observed(recorded(), running, None), STATE_FILE).action == action


def test_describe_shows_every_compared_setting():
    described = describe(True, 4242, desired())
    assert set(described) == {"running", "pid"} | {key for key, _words in server_plan.compared_settings()}
    assert describe(False, None, {})["port"] is None


# ---- processes in the way --------------------------------------------------------------------------------

def holder(**overrides):
    fields = {"pid": 777, "cmdline": "python3 -m sglang.launch_server", "verdict": "ours", "server": "old0",
              "deployment": "/var/lib/gpuops-sglang", "protected": False, "stale_recorded": True}
    fields.update(overrides)
    return Holder(**fields)


def judge(held, what="GPU 0", planned=("gpu0",), stopping=(), ignored=(), force=False):
    return judge_holder(held, what, set(planned), set(stopping), [re.compile(pattern) for pattern in ignored], force,
                        "/var/lib/gpuops-sglang")


def test_a_renamed_server_of_ours_with_a_state_file_is_stale_and_goes():
    assert judge(holder()) == ("stale", None)


def test_a_server_of_ours_without_state_file_is_refused():
    kind, problem = judge(holder(stale_recorded=False))
    assert kind == "refuse"
    assert "of server 'old0', which has no state file in /var/lib/gpuops-sglang" in problem


def test_a_server_this_run_leaves_running_is_refused():
    kind, problem = judge(holder(server="gpu0"))
    assert kind == "refuse" and "which this run leaves running" in problem


def test_a_process_a_server_spawned_after_it_was_observed_goes_with_its_stop():
    # Stopped (or relaunched) while still starting: a scheduler appeared between the look at it and the GPU check.
    assert judge(holder(server="gpu0"), stopping=("gpu0",)) == ("ignore", None)
    assert judge(holder(server="gpu0", protected=True), stopping=("gpu0",)).kind == "refuse"


def test_the_modules_own_ancestor_is_never_in_the_stale_set():
    kind, problem = judge(holder(protected=True))
    assert kind == "refuse" and "an ancestor of it" in problem


def test_another_deployment_is_refused_naming_its_state_dir():
    kind, problem = judge(holder(verdict="other_deployment", deployment="/srv/other"))
    assert kind == "refuse" and "another deployment (state_dir /srv/other)" in problem


def test_a_foreign_gpu_holder_is_refused_unless_forced():
    kind, problem = judge(holder(verdict="foreign", server=None))
    assert kind == "refuse"
    assert "no GPUOPS_SGLANG_SERVER marker" in problem and "force_kill_gpu_holders: true" in problem
    assert judge(holder(verdict="foreign", server=None), force=True) == ("force", None)


def test_force_never_reaches_the_modules_own_lineage():
    assert judge(holder(verdict="foreign", protected=True), force=True).kind == "refuse"


def test_a_marker_without_deployment_is_named_as_such():
    _kind, problem = judge(holder(verdict="foreign", server="gpu5", deployment=None))
    assert "GPUOPS_SGLANG_SERVER=gpu5 but no GPUOPS_SGLANG_STATE_DIR" in problem


def test_ignored_daemons_are_not_in_the_way_of_gpus_but_ports_are_never_forced():
    daemon = holder(verdict="foreign", server=None, cmdline="/usr/bin/nvidia-persistenced --user x")
    assert judge(daemon, ignored=[r"nvidia-persistenced"]).kind == "ignore"
    kind, problem = judge(holder(verdict="foreign", server=None), what="port 30000 of server 'gpu0'", force=True)
    assert kind == "refuse" and "free the port or choose another one" in problem
