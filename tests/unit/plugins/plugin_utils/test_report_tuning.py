"""Reports of the tuning loop: the since-last-good lines, relative expectations, the probe table, the history."""

import pytest
from ansible_collections.gpuops.sglang.plugins.plugin_utils.report import (
    ExpectationError,
    canary_report,
    comparison_text,
    expectation_failures,
    history_table,
    probe_lines,
    relaunch_summary,
    rollback_candidates,
    throughput_regressions,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.role_options import (
    option_problems,
)

COMPARED = {
    "run_id": "3f2a9c0112", "time": 1764583320.0,
    "changed": [{"setting": "--mamba-scheduler-strategy", "before": "extra_buffer", "after": "no_buffer"}],
    "facts": {"max_running_requests": {"before": 32, "after": 64},
              "max_total_num_tokens": {"before": 1210000, "after": 2260000},
              "context_len": {"before": 262144, "after": 262144}},
    "timings": {"ready_s": {"before": 212.0, "after": 95.0}},
    "probe": {},
}
SERVER = {"name": "gpu0", "gpus": [0], "port": 30000}


def test_the_issues_side_by_side_line():
    assert comparison_text(COMPARED) == ("--mamba-scheduler-strategy extra_buffer -> no_buffer; "
                                         "max_running_requests 32 -> 64, max_total_num_tokens 1.21M -> 2.26M, "
                                         "ready 212 s -> 95 s")
    same = dict(COMPARED, changed=[], facts={}, timings={"ready_s": {"before": 5.04, "after": 4.96}})
    assert comparison_text(same) == "same settings; ready 5.0 s -> 5.0 s"
    upgraded = dict(COMPARED, sglang_version={"before": "0.5.10", "after": "0.5.23"}, changed=[
        {"setting": "--mamba-radix-cache-strategy", "before": None, "after": "extra_buffer"},
        {"setting": "--mamba-scheduler-strategy", "before": "extra_buffer", "after": None}])
    assert comparison_text(upgraded).startswith(
        "SGLang 0.5.10 -> 0.5.23; --mamba-radix-cache-strategy (unset) -> extra_buffer; --mamba-scheduler-strategy "
        "extra_buffer -> (unset); max_running_requests 32 -> 64")
    unread = dict(COMPARED, sglang_version={"before": None, "after": "0.5.23"}, changed=[])
    assert comparison_text(unread).startswith("SGLang (unknown) -> 0.5.23; max_running_requests")


def test_summary_compares_only_relaunched_servers():
    waits = [{"name": "gpu0", "status": "ready", "phase": "ready", "seconds_to_ready": 95.0, "facts": {},
              "since_last_good": COMPARED}]
    lines = relaunch_summary([SERVER], [{"name": "gpu0", "action": "relaunched"}], waits)
    assert lines[-2] == "since the last good run:"
    assert lines[-1].startswith("  gpu0 vs run 3f2a9c01 of ") and "32 -> 64" in lines[-1]
    unchanged = relaunch_summary([SERVER], [{"name": "gpu0", "action": "unchanged"}], waits)
    assert "since the last good run:" not in unchanged
    first = relaunch_summary([SERVER], [{"name": "gpu0", "action": "launched"}],
                             [dict(waits[0], since_last_good=None)])
    assert first[-1] == "  gpu0: no earlier run of this model came up on this host (nothing to compare)"
    two = [SERVER, dict(SERVER, name="gpu1", gpus=[1], port=30001)]
    both = relaunch_summary(two, [{"name": name, "action": "launched"} for name in ("gpu0", "gpu1")],
                            [dict(waits[0], name=name, since_last_good=None) for name in ("gpu0", "gpu1")])
    assert both[-2:] == ["since the last good run:",
                         "  gpu0, gpu1: no earlier run of this model came up on this host (nothing to compare)"]


def test_a_new_topology_names_the_servers_it_removed_and_where_the_model_ran_before():
    merged = {"name": "gpu0-1", "gpus": [0, 1], "port": 30000}
    waits = [{"name": "gpu0-1", "status": "ready", "facts": {}, "since_last_good": None,
              "model_came_up_as": ["gpu0", "gpu1"]}]
    removed = [{"name": "gpu0", "launch_script": "/s/gpu0.sh"}, {"name": "gpu1", "launch_script": "/s/gpu1.sh"}]
    lines = relaunch_summary([merged], [{"name": "gpu0-1", "action": "launched"}], waits, removed=removed)
    assert "stopped 2 servers no longer in the topology: gpu0, gpu1; their launch scripts stay: /s/gpu0.sh, " \
           "/s/gpu1.sh" in lines
    assert lines[-1] == ("  gpu0-1: first run of this model under this name on these GPUs; it came up here before as "
                         "gpu0, gpu1 (nothing to compare)")
    checked = relaunch_summary([merged], [{"name": "gpu0-1", "action": "launched"}], [], check_mode=True,
                               removed=removed[:1])
    assert "would stop 1 server no longer in the topology: gpu0; their launch scripts stay: /s/gpu0.sh" in checked
    renamed = [dict(waits[0], since_last_good=dict(COMPARED, name="gpu0-1"))]
    main = dict(merged, name="main")
    lines = relaunch_summary([main], [{"name": "main", "action": "launched"}], [dict(renamed[0], name="main")])
    assert lines[-1].startswith("  main vs gpu0-1 (the same model on the same GPUs) in run 3f2a9c01 of ")


def waited(value, before):
    compared = dict(COMPARED, facts={"max_total_num_tokens": {"before": before, "after": value}})
    return {"name": "gpu0", "status": "ready", "facts": {"max_total_num_tokens": value}, "since_last_good": compared}


def test_relative_expectation_names_both_numbers():
    expect = {"max_total_num_tokens": {"max_drop_percent": 10}}
    assert expectation_failures([waited(1100000, 1210000)], expect) == []
    [failure] = expectation_failures([waited(6050, 1210000)], expect)
    assert failure.startswith("gpu0: max_total_num_tokens=6050 dropped 99.5 % against 1210000 in the last good run "
                              "3f2a9c01 of ")
    assert failure.endswith("(at most 10 % allowed)")
    assert expectation_failures([dict(waited(6050, 1), since_last_good=None)], expect) == [], "nothing to compare"
    with pytest.raises(ExpectationError, match="max_drop_percent for max_total_num_tokens must be 0-100"):
        expectation_failures([waited(1, 2)], {"max_total_num_tokens": {"max_drop_percent": 150}})


def test_expectations_read_the_probes_figures():
    probe = {"name": "gpu0", "status": "probed", "output_tok_s": 900.0,
             "since_last_good": {"probe": {"output_tok_s": {"before": 1280.0, "after": 900.0}}}}
    wait = {"name": "gpu0", "status": "ready", "facts": {}, "since_last_good": dict(COMPARED, facts={})}
    [failure] = expectation_failures([wait], {"output_tok_s": {"max_drop_percent": 5}}, [probe])
    assert "output_tok_s=900 dropped 29.7 % against 1280" in failure
    assert expectation_failures([wait], {"errors": {"max": 0}}, [dict(probe, errors=0)]) == []


def test_probe_table_with_capacity_and_delta():
    capacity = {"bound": "mamba", "evidence": "32 running = max_running_requests", "advice": "try no_buffer",
                "figures": {}}
    probe = {"host": {"concurrency": 96, "window_s": 30.0, "output_tok_s": 2560.0, "requests_s": 40.0,
                      "ttft_p50_s": 0.2, "ttft_p90_s": 0.9, "e2e_p50_s": 1.4, "e2e_p90_s": 2.1, "errors": 0},
             "servers": [{"name": "gpu0", "status": "probed", "output_tok_s": 1920.0, "requests_s": 20.0,
                          "ttft_p50_s": 0.1, "ttft_p90_s": 0.2, "e2e_p50_s": 1.3, "e2e_p90_s": 1.4, "errors": 0,
                          "capacity": capacity,
                          "since_last_good": {"probe": {"output_tok_s": {"before": 1280.0, "after": 1920.0}}}},
                         {"name": "x", "status": "refused", "error": "x not probed: no state file"}]}
    lines = probe_lines(probe)
    assert lines[0].startswith("throughput probe (1 server, 96 requests in flight, 30.0 s): 2560.0 output tok/s")
    assert lines[2].split()[:5] == ["gpu0", "1920.0", "+50%", "vs", "1280"]
    assert lines[2].endswith("mamba pool bound: 32 running = max_running_requests: try no_buffer")
    assert lines[-1] == "x not probed: no state file"
    assert probe_lines({}) == []


def test_history_table():
    entry = {"outcome": "ready", "changed": COMPARED["changed"], "facts": {"max_running_requests": 53},
             "timings": {"ready_s": 95.0}, "probe": {"output_tok_s": 1920.0}, "sglang_version": "0.5.23"}
    runs = [{"run_id": "r1", "time": 1764583320.0, "job": "relaunch", "by": {"user": "ops", "awx_job_id": "42"},
             "servers": {"gpu0": entry, "gpu1": dict(entry, outcome="crashed", facts={"max_running_requests": 32},
                                                     probe={})}},
            {"run_id": "r2", "time": 1764583400.0, "job": "stop", "by": {"user": "ops", "controller": "laptop"},
             "servers": {"gpu0": {"outcome": "stopped"}}}]
    header, first, second = history_table(runs)
    assert header.split() == ["time", "job", "run", "by", "sglang", "outcome", "changed", "max_running_requests",
                              "max_total_num_tokens", "slowest_ready_s", "probe_tok/s"]
    assert first.split()[2:] == ["relaunch", "r1", "ops", "(AWX", "job", "42)", "0.5.23", "1/2", "up", "(crashed)",
                                 "--mamba-scheduler-strategy", "32-53", "-", "95.0", "1920.0"]
    assert second.split()[2:7] == ["stop", "r2", "ops@laptop", "-", "1"]


def test_history_shows_a_rolled_back_change_as_not_live():
    ready = {"outcome": "ready", "facts": {"max_running_requests": 53}, "timings": {"ready_s": 12.0}}
    rolled_back = dict(ready, action="rolled_back",
                       rolled_back={"outcome": "crashed", "attempted": COMPARED["changed"]})
    runs = [{"run_id": "r3", "time": 1764583320.0, "job": "relaunch", "by": {},
             "servers": {"gpu0": ready, "gpu1": rolled_back}}]
    row = history_table(runs)[1].split()
    assert row[6:12] == ["2/2", "up", "(gpu1", "rolled", "back)", "--mamba-scheduler-strategy"]
    assert row[12:14] == ["(rolled", "back)"]


def test_history_shows_an_interrupted_run_as_not_waited_for():
    runs = [{"run_id": "r4", "time": 1764583320.0, "job": "relaunch", "by": {},
             "servers": {f"gpu{index}": {"action": "relaunched", "outcome": "interrupted"} for index in range(8)}},
            {"run_id": "r5", "time": 1764583320.0, "job": "relaunch", "by": {},
             "servers": {"gpu0": {"outcome": "lost"}, "gpu1": {"outcome": "lost"}}}]
    _header, interrupted, lost = history_table(runs)
    assert "interrupted: 8 servers changed, not waited for" in interrupted
    assert "interrupted: its worker died before it finished (2 servers planned)" in lost


def test_probe_settings_are_checked_before_anything_is_touched():
    assert option_problems({"relaunch_probe": {"concurrency": 64, "duration_s": "30"}}) == []
    problems = option_problems({"relaunch_probe": {"duration_s": -5, "route": "chat", "threads": 3}})
    assert problems == [("relaunch_probe: unknown key 'threads' (known: concurrency, duration_s, input_len, "
                        "max_requests, output_len, route)"),
                        problems[1], "relaunch_probe.route must be one of completions, generate, got 'chat'"]
    assert problems[1].startswith("relaunch_probe.duration_s")
    assert option_problems({"relaunch_probe": "yes"})[0].startswith("relaunch_probe must be a dict")


def test_rollback_candidates_and_throughput_regressions():
    waits = [{"name": name, "status": status, "killed_pids": [7]} for name, status in
             (("a", "ready"), ("b", "crashed"), ("c", "stalled"), ("d", "timeout"), ("e", "replaced"))]
    assert rollback_candidates(waits) == ["b", "c", "d"], "a server another run replaced is not ours to roll back"
    left_running = dict(waits[2], killed_pids=[], not_killed="kill_stalled is false")
    assert rollback_candidates(waits[:2] + [left_running]) == ["b"], "a stalled server the wait did not kill stays"
    new = [{"setting": "--mem-fraction-static", "before": "0.8", "after": "0.9"}]
    actions = [{"name": name, "action": action, "settings_changed": new} for name, action in
               (("a", "relaunched"), ("b", "relaunched"), ("c", "unchanged"), ("d", "launched"), ("e", "relaunched"))]
    assert rollback_candidates(waits, actions) == ["b", "d"], "a server this run left unchanged is not rolled back"
    restarted = [dict(action, settings_changed=None) if action["name"] == "b" else action for action in actions]
    assert rollback_candidates(waits, [dict(action, settings_changed=None, script_changed=True)
                                       for action in actions]) == ["b", "d"], "a new script is a new configuration"
    never_up = [dict(action, settings_changed=None, came_up_before=action["name"] != "b") for action in actions]
    assert rollback_candidates(waits, never_up) == ["b"], "a script that never came up is a new configuration"
    assert rollback_candidates(waits, restarted) == ["d"], "restarted as it was: no other configuration to go back to"
    probes = [{"name": "a", "since_last_good": {"probe": {"output_tok_s": {"before": 1280.0, "after": 1200.0}}}},
              {"name": "b", "since_last_good": {"probe": {"output_tok_s": {"before": 1280.0, "after": 320.0}}}},
              {"name": "c", "since_last_good": None}]
    assert throughput_regressions(probes, 10) == {
        "b": "output 320 tok/s is 75 % below 1280 of its last good run (at most 10 %)"}
    assert throughput_regressions(probes, 80) == {}
    # A canary judged on its throughput fails closed: measured ones are judged, the others do not stay.
    measured = [dict(probe, status="probed", output_tok_s=1000.0) for probe in probes]
    canaries = measured + [{"name": "d", "status": "refused", "error": "d not probed: its recorded process 7 does not "
                                                                       "run"},
                           {"name": "e", "status": "probed", "output_tok_s": 0.0, "errors": 64}]
    assert throughput_regressions(canaries, 80, canaries=["a", "c", "d", "e", "f"]) == {
        "d": ("its throughput was not measured (d not probed: its recorded process 7 does not run): a canary stays only "
              "on a measured throughput"),
        "e": "its throughput was not measured (it generated nothing (64 errors)): a canary stays only on a measured "
             "throughput",
        "f": "its throughput was not measured (the probe did not run): a canary stays only on a measured throughput"}


def test_a_canary_that_passes_says_so_with_its_figures():
    waits = [{"name": "gpu0", "status": "ready", "seconds_to_ready": 52.4,
              "facts": {"max_total_num_tokens": 2264878, "max_running_requests": 53}}]
    assert canary_report(waits, ["gpu0"], ["gpu1", "gpu2"], [{"name": "gpu0", "output_tok_s": 2120.4}]) == (
        "canary passed: gpu0 (ready in 52 s, max_total_num_tokens 2.26M, max_running_requests 53, output 2120 tok/s)"
        " - now the other 2 servers: gpu1, gpu2")
    assert canary_report([], ["gpu0"], ["gpu1"]) == "canary passed: gpu0 - now the other 1 server: gpu1"
