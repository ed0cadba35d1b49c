"""playbooks/relaunch.yml (and status.yml, stop.yml) against a simulated 8-GPU host, through ansible-playbook."""

import json
import os
import re
from datetime import datetime


def summary(result):
    return result.task("Summary")[0]["msg"]


def server_actions(result):
    """{name: action} of the servers the run's server calls acted on or left as they were (not those deferred to a
    later call)."""
    return {server["name"]: server["action"] for task in result.server_answers() for server in task.get("servers", [])
            if server["action"] != "deferred"}


def state_pid(sim_host, name):
    with open(sim_host.dir / "state" / f"{name}.json") as handle:
        return json.load(handle)["pid"]


def test_relaunch_converges_in_one_module_call_and_is_idempotent(sim_host):
    first = sim_host.run("relaunch")
    assert first.rc == 0, summary(first) if first.report else first.stdout
    # One host, 8 servers, one module call: the hold reports the GPUs, plans the servers, writes their scripts,
    # launches them as the server call would (its job), waits for them as the wait would and gives the host back.
    assert first.module_calls() == ["gpuops.sglang.host_lock"]
    [hold] = [task for task in first.task("Hold the host") if task.get("action") == "gpuops.sglang.host_lock"]
    assert len(hold["gpus"]) == 8, "the hold reported the host's GPUs"
    assert hold["changed"] and hold["converged"]["acted"] is True
    assert {server["action"] for server in hold["converged"]["server"]["servers"]} == {"launched"}
    assert all(script["changed"] for script in hold["converged"]["server"]["scripts"].values())
    assert hold["converged"]["wait"]["released"] is True
    assert not os.path.exists(sim_host.dir / "state" / "run.json"), "the host was given back"
    lines = summary(first)
    assert lines[0] == "8/8 serving"
    # The hold read which SGLang the server command's interpreter has: the simulated host's (its dist-info), named
    # in the summary; no note about it (a missing one is said with the launch scripts' notes: test_sglang_versions).
    interpreter = sim_host.host_vars["sglang_server_command"][0]
    assert lines[1] == f"SGLang {sim_host.sglang_version} ({interpreter})"
    assert not [note for note in first.task("Say what the operator should know") if "SGLang" in str(note.get("msg"))]
    assert lines[2].split()[:2] == ["server", "gpus"]
    assert lines[3].split()[:6] == ["gpu0", "0", str(sim_host.port(0)), "launched", "ready", "-"]
    assert all(sim_host.fake_gpus.used_mib(index) > 100000 for index in range(8))

    second = sim_host.run("relaunch")
    assert second.rc == 0 and second.stats["changed"] == 0
    # Nothing to change: the hold planned the servers as the server call would, waited for them as the wait would
    # and gave the host back - one module call (one pct exec through proxmox_pct_remote).
    assert second.module_calls() == ["gpuops.sglang.host_lock"]
    [hold] = [task for task in second.task("Hold the host") if task.get("action") == "gpuops.sglang.host_lock"]
    assert {server["action"] for server in hold["converged"]["server"]["servers"]} == {"unchanged"}
    assert hold["converged"]["wait"]["ready"] == [f"gpu{index}" for index in range(8)]
    assert hold["converged"]["wait"]["released"] is True
    assert not os.path.exists(sim_host.dir / "state" / "run.json"), "the host was given back"
    assert summary(second)[3].split()[:4] == ["gpu0", "0", str(sim_host.port(0)), "unchanged"]

    # What the operator reads of a no-op (the repository's callback settings): what the run says, the long steps'
    # banners - not every task (157 lines before, every ok, skipped and included task).
    quiet = sim_host.run("relaunch", json_output=False)
    assert quiet.rc == 0, quiet.stdout
    shown = quiet.stdout.splitlines()
    assert len(shown) <= 40, quiet.stdout
    assert not [line for line in shown if line.startswith(("skipping:", "included:", "ok: [simhost]"))
                and not line.startswith("ok: [simhost] =>")], quiet.stdout
    assert any(line.startswith("TASK [gpuops.sglang.relaunch : Hold the host for this run]")
               for line in shown), "a long step's banner comes before its progress lines"
    assert "simhost: 8/8 ready" in shown
    assert "    - 8/8 serving" in shown
    verbose = sim_host.run("relaunch", json_output=False, args=("-v",))
    assert "skipping: [simhost]" in verbose.stdout and "included: " in verbose.stdout, "-v shows every task"

    expect = sim_host.run("relaunch", {"relaunch_expect": {"max_running_requests": {"min": 100000}}})
    assert expect.rc != 0 and expect.stats["changed"] == 0
    failed = expect.task("relaunch_expect")[0]
    assert failed["failed"] and "gpu3: max_running_requests=" in " ".join(failed["msg"])
    assert "is below the expected minimum 100000" in failed["msg"][0]

    status = sim_host.run("status")
    assert status.rc == 0
    table = status.task("Fleet status")[0]["msg"]
    assert table[0] == "8/8 servers ready"
    # What the servers' interpreter has installed now, read on the host.
    assert table[1] == f"SGLang {sim_host.sglang_version} ({interpreter})"
    assert table[3].split()[:5] == ["gpu0", "0", str(sim_host.port(0)), "ready", "ready"]

    stop = sim_host.run("stop")
    assert stop.rc == 0 and stop.stats["changed"] == 1
    assert [sim_host.fake_gpus.used_mib(index) for index in range(8)] == [0] * 8


def test_a_changed_setting_relaunches_only_the_affected_server(sim_host):
    servers = [{"name": f"s{index}", "port": sim_host.port(index), "gpus": [index]} for index in range(3)]
    assert sim_host.run("relaunch", {"sglang_servers": servers}).rc == 0
    pids = {server["name"]: state_pid(sim_host, server["name"]) for server in servers}

    servers[1]["max_running_requests"] = 32
    changed = sim_host.run("relaunch", {"sglang_servers": servers})
    assert changed.rc == 0, summary(changed)
    scripts = changed.server_answers()[0]["scripts"]
    assert [name for name, script in sorted(scripts.items()) if script["changed"]] == ["s1"]
    assert server_actions(changed) == {"s0": "unchanged", "s1": "relaunched", "s2": "unchanged"}
    assert state_pid(sim_host, "s0") == pids["s0"] and state_pid(sim_host, "s2") == pids["s2"]
    assert state_pid(sim_host, "s1") != pids["s1"]
    rows = {line.split()[0]: line.split() for line in summary(changed) if line.startswith("s")}
    assert rows["s1"][-1] == "32", "the summary reports the new max_running_requests"


def test_batches_relaunch_the_next_servers_only_after_the_previous_are_ready(sim_host):
    result = sim_host.run("relaunch", {"sglang_gpu_count": 4, "relaunch_batch_size": 2, "relaunch_state": "restarted"})
    assert result.rc == 0, summary(result)
    steps = [(name, host, duration) for name, host, duration in result.tasks()
             if name.split(" : ")[-1].startswith(("Bring servers", "Wait until"))]
    # The first call is handed every server and defers those beyond the batch (batch_size).
    assert [[server["name"] for server in host["servers"] if server.get("action") != "deferred"]
            for _name, host, _duration in steps] == [["gpu0", "gpu1"], ["gpu0", "gpu1"], ["gpu2", "gpu3"], ["gpu2", "gpu3"]]
    first_wait_end = datetime.fromisoformat(steps[1][2]["end"].replace("Z", "+00:00"))
    second_launch_start = datetime.fromisoformat(steps[2][2]["start"].replace("Z", "+00:00"))
    assert second_launch_start >= first_wait_end
    assert summary(result)[0] == "4/4 serving"


def test_a_crashing_server_is_reported_while_the_others_become_ready(sim_host):
    servers = [{"name": f"s{index}", "port": sim_host.port(index), "gpus": [index]} for index in range(3)]
    servers[1]["env"] = {"SGLANG_SIM_FAULT": "oom_load"}
    result = sim_host.run("relaunch", {"sglang_servers": servers})
    assert result.rc != 0
    # The table's rows (the lines after it are indented or say what they are).
    rows = {line.split()[0]: line.split() for line in summary(result)[2:] if line.startswith("s")}
    assert rows["s0"][4] == "ready" and rows["s2"][4] == "ready"
    assert rows["s1"][4] == "crashed"
    failure = result.task("every server is ready")[0]
    assert failure["failed"] and failure["msg"][0].startswith("s1 crashed")
    assert "OutOfMemoryError" in failure["msg"][0]


def test_halted_batches_keep_the_remaining_servers_untouched(sim_host):
    servers = [{"name": f"s{index}", "port": sim_host.port(index), "gpus": [index]} for index in range(4)]
    servers[0]["env"] = {"SGLANG_SIM_FAULT": "oom_load"}
    result = sim_host.run("relaunch", {"sglang_servers": servers, "relaunch_batch_size": 2})
    assert result.rc != 0
    assert set(server_actions(result)) == {"s0", "s1"}
    assert result.task("every server is ready")[0]["msg"][1:] == [
        "s2: not relaunched, an earlier batch failed", "s3: not relaunched, an earlier batch failed"]
    assert not os.path.exists(sim_host.dir / "state" / "s2.json")


def test_gpu_index_beyond_the_hosts_count_fails_in_preflight(sim_host):
    result = sim_host.run("relaunch", {"sglang_gpu_count": 16})
    assert result.rc != 0
    failed = result.task("GPU indexes against the host")[-1]
    assert "GPU index 8 is beyond the host's GPU count 8" in failed["msg"]
    assert result.module_calls() == ["gpuops.sglang.host_lock", "gpuops.sglang.host_lock"]
    assert not sim_host.script_dir.exists()


def test_check_mode_judges_the_new_scripts_and_touches_nothing(sim_host):
    assert sim_host.run("relaunch", {"sglang_gpu_count": 2}).rc == 0
    pids = {name: state_pid(sim_host, name) for name in ("gpu0", "gpu1")}
    servers = [{"name": "gpu0", "port": sim_host.port(0), "gpus": [0]},
               {"name": "gpu1", "port": sim_host.port(1), "gpus": [1], "max_running_requests": 32},
               {"name": "gpu2", "port": sim_host.port(2), "gpus": [2]}]
    result = sim_host.run("relaunch", {"sglang_servers": servers}, args=["--check", "--diff"])
    assert result.rc == 0, summary(result)
    [check] = result.task("Bring servers to state")
    assert {server["name"]: server["action"] for server in check["servers"]} == {
        "gpu0": "unchanged", "gpu1": "relaunched", "gpu2": "launched"}
    assert sorted(name for name, script in check["scripts"].items() if script["changed"]) == ["gpu1", "gpu2"]
    # --diff leads with the flag that changes; the state of the two servers that would change comes last.
    assert [diff["after_header"] for diff in check["diff"]] == [
        str(sim_host.script("gpu1")), str(sim_host.script("gpu2")), "servers (state)"]
    assert "--max-running-requests 32" in check["diff"][0]["after"]
    assert sorted(check["diff"][2]["after"]) == ["gpu1", "gpu2"]
    assert all(task.get("skipped") for task in result.task("Wait until")), "nothing was launched to wait for"
    assert {name: state_pid(sim_host, name) for name in ("gpu0", "gpu1")} == pids
    assert not (sim_host.dir / "state" / "gpu2.json").exists()
    assert not (sim_host.script_dir / "gpu2.sh").exists()
    assert "--max-running-requests" not in (sim_host.script_dir / "gpu1.sh").read_text()
    # The summary says what would be done, not how many servers are ready.
    assert summary(result)[0] == ("check mode, nothing done: would relaunch 1 (gpu1): --max-running-requests "
                                  "(unset) -> 32; would launch 1 (gpu2); 1 unchanged")


def test_only_the_named_servers_are_relaunched_and_survey_minimums_are_checked(sim_host):
    assert sim_host.run("relaunch", {"sglang_gpu_count": 3}).rc == 0
    pids = {name: state_pid(sim_host, name) for name in ("gpu0", "gpu1", "gpu2")}
    # As an AWX survey passes them: one comma-separated string, numbers as strings.
    result = sim_host.run("relaunch", {"sglang_gpu_count": 3, "relaunch_state": "restarted",
                                       "relaunch_only_servers": "gpu1, gpu2",
                                       "relaunch_expect_min_running_requests": "100000"})
    assert result.rc != 0
    assert set(server_actions(result)) == {"gpu1", "gpu2"}
    assert state_pid(sim_host, "gpu0") == pids["gpu0"], "a server not named is left alone"
    assert all(state_pid(sim_host, name) != pids[name] for name in ("gpu1", "gpu2"))
    lines = summary(result)
    # The table, then how the stopped servers drained, then what changed since their last good run. A server counts
    # as drained when it told its requests in flight within 2 s (draining.COUNT_TIMEOUT_SECONDS): on a loaded 2-core
    # machine one of the two simulated servers once did not, so the count may be 1.
    drained = next(index for index, line in enumerate(lines) if re.match(r"drained before the stop: [12] servers", line))
    header = next(index for index, line in enumerate(lines) if line.startswith("server "))
    assert [line.split()[0] for line in lines[header + 1:drained]] == ["gpu1", "gpu2"]
    assert lines[drained + 1] == "since the last good run:"
    [failed] = result.task("configured against relaunch_expect")
    assert "is below the expected minimum 100000" in failed["msg"][0]

    unknown = sim_host.run("relaunch", {"sglang_gpu_count": 3, "relaunch_only_servers": ["gpu1", "gpu9"]})
    assert unknown.rc != 0 and "gpuops.sglang.host_lock" not in unknown.module_calls()
    assert ("relaunch_only_servers names servers this host does not have: gpu9 (its servers: gpu0, gpu1, gpu2)"
            in unknown.task("Check that relaunch_only_servers")[0]["msg"])
