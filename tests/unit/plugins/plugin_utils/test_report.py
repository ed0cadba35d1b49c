"""Relaunch summary, failures and user expectations built from module results."""

import pytest
from ansible_collections.gpuops.sglang.plugins.plugin_utils.report import (
    ExpectationError,
    expectation_failures,
    fleet_problems,
    fleet_status,
    relaunch_failures,
    relaunch_summary,
    stop_summary,
)

SERVERS = [{"name": "gpu0", "port": 30000, "gpus": [0]}, {"name": "gpu1", "port": 30001, "gpus": [1]},
           {"name": "gpu2", "port": 30002, "gpus": [2]}]
WAITS = [
    {"name": "gpu0", "status": "ready", "phase": "ready", "seconds_to_ready": 61.26,
     "facts": {"max_total_num_tokens": 2264878, "max_running_requests": 323}},
    {"name": "gpu1", "status": "crashed", "phase": "loading_weights", "facts": {},
     "msg": "gpu1 crashed in loading_weights: torch.OutOfMemoryError"},
]


def test_summary_has_one_aligned_row_per_server():
    new = [{"setting": "--mem-fraction-static", "before": "0.8", "after": "0.9"}]
    acted = [{"name": "gpu0", "action": "relaunched"}, {"name": "gpu1", "action": "launched", "settings_changed": new}]
    lines = relaunch_summary(SERVERS, acted, WAITS)
    assert lines[0] == ("1/3 serving - gpu1 failed: new configuration crashed in loading_weights; gpu2 deferred (not "
                        "relaunched: an earlier batch failed)")
    # Started again as it was (killed from outside, relaunch_state restarted): no "new configuration".
    assert relaunch_summary(SERVERS, [acted[0], dict(acted[1], settings_changed=None)], WAITS)[0].startswith(
        "1/3 serving - gpu1 failed: crashed in loading_weights; ")
    assert lines[1].split()[3:7] == ["action", "outcome", "failed_in", "ready_s"]
    assert lines[2].split() == ["gpu0", "0", "30000", "relaunched", "ready", "-", "61.3", "2264878", "323"]
    assert lines[3].split() == ["gpu1", "1", "30001", "launched", "crashed", "loading_weights", "-", "-", "-"]
    assert lines[4].split()[:6] == ["gpu2", "2", "30002", "not", "relaunched", "deferred"]
    assert lines[1].index("port") == lines[2].index("30000") == lines[4].index("30002")


def test_summary_names_the_sglang_the_host_runs_after_its_first_line():
    installed = [{"interpreter": "/opt/sglang/bin/python", "version": "0.5.23", "location": "/opt/sglang/lib"},
                 {"interpreter": "python3", "version": None, "problem": "SGLang is not installed for python3 (...)"}]
    lines = relaunch_summary(SERVERS, [], WAITS, installed_sglang=installed)
    assert lines[0].startswith("1/3 serving - ")
    # Why python3 has no version was said once, with the launch scripts' notes before the run.
    assert lines[1] == "SGLang 0.5.23 (/opt/sglang/bin/python)"
    assert lines[2].split()[:2] == ["server", "gpus"]
    assert relaunch_summary(SERVERS, [], WAITS)[1].split()[:2] == ["server", "gpus"]


def test_servers_started_before_an_upgrade_are_said_to_run_the_older_sglang():
    installed = [{"interpreter": "python3", "version": "0.5.23"}]
    old = [dict(WAITS[0], facts=dict(WAITS[0]["facts"], version="0.5.10")),
           dict(WAITS[0], name="gpu2", facts={"version": "0.5.10"})]
    lines = relaunch_summary(SERVERS, [{"name": "gpu0", "action": "unchanged"}], old, installed_sglang=installed)
    assert lines[1:3] == ["SGLang 0.5.23 (python3)", ("gpu0, gpu2 run SGLang 0.5.10, not the 0.5.23 installed now: a "
                                                      "restart starts 0.5.23 (relaunch_state: restarted)")]
    # The same version, or which one a server's interpreter has unknown (two interpreters): nothing said.
    same = [dict(WAITS[0], facts={"version": "0.5.23"})]
    assert relaunch_summary(SERVERS, [], same, installed_sglang=installed)[2].split()[:2] == ["server", "gpus"]
    two = installed + [{"interpreter": "/opt/b/python", "version": "0.5.10"}]
    assert not [line for line in relaunch_summary(SERVERS, [], old, installed_sglang=two) if "not the" in line]


def test_failures_name_each_server_not_ready():
    assert relaunch_failures(SERVERS, WAITS) == ["gpu1 crashed in loading_weights: torch.OutOfMemoryError",
                                                 "gpu2: not relaunched, an earlier batch failed"]


def test_failure_of_a_crashed_server_carries_its_traceback_tail():
    traceback = "\n".join(["Traceback (most recent call last):"]
                          + [f'  File "frame{i}.py", line {i}, in f' for i in range(20)]
                          + ["RuntimeError: EAGLE3 draft worker failed"])
    crashed = [dict(WAITS[1], error={"summary": "RuntimeError: EAGLE3 draft worker failed", "traceback": traceback})]
    (failure,) = relaunch_failures(SERVERS[1:2], crashed)
    lines = failure.splitlines()
    assert lines[0] == "gpu1 crashed in loading_weights: torch.OutOfMemoryError"
    assert lines[1:] == traceback.splitlines()[-12:]


def test_expectations_check_ready_servers():
    assert expectation_failures(WAITS, {"max_running_requests": {"min": 256, "max": 512}}) == []
    assert expectation_failures(WAITS, {"max_running_requests": 400}) == [
        "gpu0: max_running_requests=323 is below the expected minimum 400"]
    assert expectation_failures(WAITS, {"max_total_num_tokens": {"max": 1000}}) == [
        "gpu0: max_total_num_tokens=2264878 is above the expected maximum 1000"]
    assert expectation_failures(WAITS, {"max_mamba_cache_size": 1}) == ["gpu0: max_mamba_cache_size was not reported"]
    with pytest.raises(ExpectationError, match="expectation for max_running_requests must be numbers, got 'many'"):
        expectation_failures(WAITS, {"max_running_requests": "many"})
    with pytest.raises(ExpectationError, match="must be {min: N}, {max: N} and/or {max_drop_percent: P}"):
        expectation_failures(WAITS, {"max_running_requests": {"atleast": 1}})


def test_fleet_status_shows_usage_and_nccl_mismatches():
    infos = [{"name": "gpu0", "status": "ready", "log": {"phase": "ready"},
              "metrics": {"token_usage": 0.42, "mamba_usage": 0.1, "num_running_reqs": 12.0, "num_queue_reqs": 0.0,
                          "gen_throughput": 1234.56},
              "launch_script": {"drift": False},
              "nccl": {"expected": {"NCCL_PROTO": "LL"}, "ok": False,
                       "mismatches": [{"pid": 5, "variable": "NCCL_PROTO", "expected": "LL", "actual": "Simple"}],
                       "missing": []}}]
    gpus = [{"index": 0, "memory_used_mib": 120000, "memory_total_mib": 143771}]
    lines = fleet_status(SERVERS[:1], infos, gpus)
    assert lines[0] == "1/1 servers ready"
    assert lines[2].split()[:12] == ["gpu0", "0", "30000", "ready", "ready", "42%", "10%", "12", "0", "1234.6",
                                     "120000/143771", "no"]
    assert lines[2].endswith("MISMATCH NCCL_PROTO=Simple (want LL)")
    # The SGLang each server's interpreter has installed now, each interpreter once, after the first line.
    installed = {"interpreter": "/opt/sglang/bin/python", "version": "0.5.23"}
    two = [dict(infos[0], sglang=installed), dict(infos[0], name="gpu1", sglang=installed)]
    lines = fleet_status(SERVERS[:2], two, gpus)
    assert lines[:3] == ["2/2 servers ready", "SGLang 0.5.23 (/opt/sglang/bin/python)", lines[2]]
    assert lines[2].split()[:2] == ["server", "gpus"]
    # Two environments with an interpreter of the same name: each answer, where it was found, and its servers.
    venv_a = {"interpreter": "python3", "version": "0.5.23", "location": "/opt/a/lib/python3.11/site-packages"}
    venv_b = {"interpreter": "python3", "version": "0.5.10", "location": "/opt/b/lib/python3.11/site-packages"}
    apart = [dict(infos[0], sglang=venv_a), dict(infos[0], name="gpu1", sglang=venv_b),
             dict(infos[0], name="gpu2", sglang=venv_a)]
    lines = fleet_status(SERVERS[:3], apart, gpus)
    assert lines[1:3] == ["SGLang 0.5.23 (python3) in /opt/a/lib/python3.11/site-packages: gpu0, gpu2",
                          "SGLang 0.5.10 (python3) in /opt/b/lib/python3.11/site-packages: gpu1"]
    # A server whose answer names another version than its interpreter has installed now: started before an upgrade.
    running = [dict(apart[0], server_info={"version": "0.5.10"}), dict(apart[1], server_info={"version": "0.5.10"})]
    assert fleet_status(SERVERS[:2], running, gpus)[3] == (
        "gpu0 runs SGLang 0.5.10, not the 0.5.23 installed now: a restart starts 0.5.23 (relaunch_state: restarted)")


def test_fleet_status_says_what_systemd_did():
    infos = [{"name": "gpu0", "status": "ready", "log": {"phase": "ready"},
              "launcher": {"launcher": "systemd", "unit": "gpuops-sglang-gpu0.service", "active_state": "active",
                           "restarts": 2}},
             {"name": "gpu1", "status": "ready", "log": {"phase": "ready"},
              "launcher": {"launcher": "systemd", "error": "systemctl did not answer within 60 s"}}]
    lines = fleet_status(SERVERS[:2], infos, [])
    assert lines[-2:] == ["gpu0 restarted by systemd 2 times (unit gpuops-sglang-gpu0.service, now active)",
                          "gpu1: systemctl did not answer within 60 s"]
    assert fleet_status(SERVERS[:1], [dict(infos[0], launcher={"launcher": "detached"})], [])[-1].startswith("gpu0 ")


def test_stop_summary_lists_memory_left_per_gpu():
    lines = stop_summary([{"name": "gpu0-1", "gpus": [0, 1], "action": "stopped",
                           "gpu_memory_after_mib": {"1": 3, "0": 0}}])
    assert lines[1].split() == ["gpu0-1", "0,1", "stopped", "0,3"]


DOWN = {"name": "gpu2", "action": "relaunched", "down": True,
        "error": "gpu2 is down: GPU memory not freed within gpu_free_timeout=60 s (threshold 1024 MiB): GPU 2 ..."}


def test_a_server_left_down_is_named_in_the_title_its_row_and_the_failures():
    lines = relaunch_summary(SERVERS, [{"name": "gpu0", "action": "relaunched"}, DOWN], WAITS[:1])
    assert lines[0] == ("1/3 serving - gpu2 failed: DOWN (stopped, and not started again); gpu1 deferred (not "
                        "relaunched: an earlier batch failed)")
    assert lines[4].split()[:5] == ["gpu2", "2", "30002", "relaunched", "down"], \
        "never 'relaunched' with no pid and nothing else said"
    assert relaunch_failures(SERVERS, WAITS[:1], [DOWN])[-1] == DOWN["error"]


ROLLED_BACK = {"name": "gpu1", "to_run_id": "0a1b2c3d4e", "to_time": 1764700000, "key_status": None, "error": None,
               "status": "ready", "msg": "gpu1 ready after 12.0 s", "reason": None,
               "facts": {"max_total_num_tokens": 1000, "max_running_requests": 48}, "seconds_to_ready": 12.0}


def test_a_rolled_back_server_counts_as_serving_and_its_row_is_what_serves_again():
    # gpu1's new configuration crashed; its rollback came up: 2 of 3 serve (gpu2 was deferred), the row shows the
    # rolled-back configuration's facts, and the run still fails naming the crash.
    actions = [{"name": "gpu0", "action": "unchanged"}, {"name": "gpu1", "action": "relaunched"}]
    lines = relaunch_summary(SERVERS, actions, WAITS, rollbacks=[ROLLED_BACK])
    assert lines[0] == ("2/3 serving - gpu1 rolled back: new configuration crashed in loading_weights; gpu2 deferred "
                        "(not relaunched: an earlier batch failed)")
    assert lines[2].split() == ["gpu0", "0", "30000", "unchanged", "unchanged", "-", "-", "2264878", "323"], \
        "no ready_s for a server this run did not start"
    assert lines[3].split() == ["gpu1", "1", "30001", "relaunched", "rolled", "back", "-", "12.0", "1000", "48"]
    assert relaunch_failures(SERVERS[:2], WAITS, actions, [ROLLED_BACK])[0].startswith(
        "gpu1 crashed in loading_weights")
    compared = [WAITS[0], dict(WAITS[1], since_last_good=None)]
    assert relaunch_summary(SERVERS, actions, compared, rollbacks=[ROLLED_BACK])[-4:-2] == [
        "since the last good run:",
        "  gpu1 (rolled back: not live): no earlier run of this model came up on this host (nothing to compare)"]


def test_a_canary_rolled_back_for_its_throughput_and_a_rollback_that_failed_say_why():
    regressed = dict(ROLLED_BACK, name="gpu0", reason="output 900 tok/s is 30 % below 1280 of its last good run")
    failed_too = dict(ROLLED_BACK, status="crashed", msg="gpu1 crashed in loading_weights")
    actions = [{"name": "gpu0", "action": "relaunched"}, {"name": "gpu1", "action": "relaunched"}]
    lines = relaunch_summary(SERVERS[:2], actions, WAITS, rollbacks=[regressed, failed_too])
    assert lines[0] == ("1/2 serving - gpu0 rolled back: output 900 tok/s is 30 % below 1280 of its last good run; "
                        "gpu1 failed: new configuration crashed in loading_weights; its rollback failed too")
    no_last_good = dict(failed_too, to_run_id=None, status="stopped")
    assert relaunch_summary(SERVERS[1:2], actions[1:], WAITS[1:], rollbacks=[no_last_good])[0] == (
        "0/1 serving - gpu1 failed: new configuration crashed in loading_weights; no last good configuration")


def test_an_interrupted_earlier_run_is_reported_first():
    interrupted = [{"job_id": "20261201T100000-ab12cd34", "run_id": "r1", "servers": ["gpu0 relaunched"],
                    "down": ["gpu1"]}]
    lines = relaunch_summary(SERVERS, [], [], interrupted)
    assert lines[1] == ("an earlier run was interrupted (job 20261201T100000-ab12cd34, run r1); its host-side "
                        "sequence finished on its own: gpu0 relaunched; DOWN: gpu1")
    assert stop_summary([], interrupted)[0] == lines[1]


def test_fleet_problems_name_dead_crashed_and_orphaned_servers_with_their_error():
    infos = [
        {"name": "gpu0", "status": "ready", "log": {"phase": "ready"}},
        # As server_info returns it: the phase is "crashed", the timeline says what the crash interrupted.
        {"name": "gpu1", "status": "crashed", "log": {
            "phase": "crashed", "timeline": [{"phase": "initializing"}, {"phase": "loading_weights"}, {"phase": "crashed"}],
            "error": {"summary": "torch.OutOfMemoryError: CUDA out of memory"}}},
        {"name": "gpu2", "status": "orphaned", "processes": [{"pid": 41}, {"pid": 42}], "log": {"phase": "ready"}},
        {"name": "gpu3", "status": "dead", "log": {"phase": "ready"}},
        {"name": "gpu4", "status": "stopped", "log": {}},
    ]
    assert fleet_problems(infos) == [
        "gpu1 crashed in loading_weights: torch.OutOfMemoryError: CUDA out of memory",
        "gpu2 orphaned: its main process is gone but pids 41, 42 still run",
        "gpu3 dead: launched, but no process of it is left (its log ends in phase ready)",
    ]


def test_summary_says_how_servers_drained_and_whether_the_router_took_them_back():
    drained = {"outcome": "drained", "seconds": 2.4, "requests_left": 0, "error": None}
    server_results = [
        {"name": "gpu0", "action": "relaunched", "drain": drained},
        {"name": "gpu1", "action": "relaunched", "drain": dict(drained, seconds=3.1)},
        {"name": "gpu2", "action": "relaunched",
         "drain": {"outcome": "timed_out", "seconds": 60.0, "requests_left": 3, "error": None}},
    ]
    routed = {"worker_url": "http://10.0.0.5:30000", "worker_id": "4b1e", "healthy": True}
    waits = [dict(WAITS[0], router=routed),
             {"name": "gpu1", "status": "unrouted", "phase": "ready", "facts": {}, "router_error": "still pending",
              "router": dict(routed, healthy=False)},
             dict(WAITS[0], name="gpu2", router=routed)]
    lines = relaunch_summary(SERVERS, server_results, waits)
    assert lines[5:] == [
        ("drained before the stop: 3 servers, the longest 60.0 s (gpu2); stopped at drain_timeout with requests in "
         "flight, which failed: gpu2 (3 requests)"),
        "router: 2/3 ready servers back in it, healthy; NOT back: gpu1 (still pending)",
    ]
    # A server found outside the router (an operator took it out) is named, not counted among those back.
    left_out = dict(WAITS[0], name="gpu2", router=dict(routed, worker_id=None, healthy=False, left_out=True))
    assert relaunch_summary(SERVERS, server_results, waits[:2] + [left_out])[6:] == [
        "router: left out as found (not in it, and not taken out by this deployment; add them back yourself): gpu2",
        "router: 1/2 ready servers back in it, healthy; NOT back: gpu1 (still pending)",
    ]
    # Without a drain or a router, nothing is said.
    assert not any(line.startswith(("drained", "router")) for line in relaunch_summary(
        SERVERS, [{"name": "gpu0", "action": "relaunched"}], WAITS))


def test_check_mode_says_what_would_be_done_and_counts_no_readiness():
    change = [{"setting": "--mamba-scheduler-strategy", "before": "extra_buffer", "after": "no_buffer"}]
    actions = [{"name": "gpu0", "action": "relaunched", "settings_changed": change},
               {"name": "gpu1", "action": "relaunched", "settings_changed": change},
               {"name": "gpu2", "action": "unchanged"}]
    lines = relaunch_summary(SERVERS, actions, [], check_mode=True)
    assert lines[0] == ("check mode, nothing done: would relaunch 2 (gpu0, gpu1): --mamba-scheduler-strategy "
                        "extra_buffer -> no_buffer; 1 unchanged")
    assert [line.split()[4:6] for line in lines[2:5]] == [["would", "relaunch"], ["would", "relaunch"],
                                                          ["unchanged", "-"]]
    launched = [{"name": "gpu0", "action": "launched", "reason": "not running"}]
    assert relaunch_summary(SERVERS[:1], launched, [], check_mode=True)[0] == (
        "check mode, nothing done: would launch 1 (gpu0); 0 unchanged")
    assert relaunch_summary(SERVERS[:1], actions[2:], [], check_mode=True)[0] == (
        "check mode, nothing done: nothing would change")
