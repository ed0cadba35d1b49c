"""Fail safe (issue: canary first, and roll back to the last configuration that came up), end to end on a
simulated host through ansible-playbook."""

import hashlib
import json
import os
import signal

EAGLE3 = {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}


def failures(result):
    return result.task("Check that every server is ready")[0]["msg"]


def summary(result):
    return result.task("Summary")[0]["msg"]


def state(sim_host, name):
    with open(sim_host.dir / "state" / f"{name}.json") as handle:
        return json.load(handle)


def test_a_crashing_new_configuration_is_rolled_back_and_the_run_fails_with_its_traceback(sim_host):
    # The seed case: TP=8, EAGLE3 added to a working configuration, the draft worker crashes while it starts. The
    # API key was rotated in the same run: the configuration rolled back to serves with the new key, never the old.
    settings = {"sglang_tp_size": 8, "sglang_api_key": "rotated-away-key"}
    assert sim_host.run("relaunch", settings).rc == 0
    good = state(sim_host, "gpu0-7")
    good_script = sim_host.script("gpu0-7").read_text()

    eagle = dict(settings, sglang_speculative=dict(EAGLE3, draft_model_path=sim_host.host_vars["sglang_model_path"]),
                 sglang_env=dict(sim_host.host_vars["sglang_env"], SGLANG_SIM_FAULT="draft_crash"),
                 sglang_api_key="current-key")
    failed = sim_host.run("relaunch", eagle)
    assert failed.rc != 0
    [message] = failures(failed)
    assert message.startswith("gpu0-7 crashed in loading_weights (draft model)")
    assert 'File "' in message and 'in load_weights' in message, "the traceback tail is in the failure"
    assert message.splitlines()[-1].startswith(
        f"gpu0-7: the new configuration failed; rolled back to the configuration of run {good['run_id'][:8]}")
    assert message.endswith(" with the current sglang_api_key (put in place of the older key its last good script "
                            "had): ready again")
    # What serves is counted and said: the server serves its last good configuration again.
    assert summary(failed)[0] == "1/1 serving - gpu0-7 rolled back: new configuration crashed in loading_weights"
    assert "rolled back:" in summary(failed)

    now = state(sim_host, "gpu0-7")
    restored = sim_host.script("gpu0-7").read_text()
    # The good script again, its --api-key now last and holding today's key (words compared: the order moved).
    assert sorted(restored.split()) == sorted(good_script.replace("rotated-away-key", "current-key").split())
    assert "rotated-away-key" not in restored and restored.endswith("    --api-key current-key\n")
    assert now["pid"] != good["pid"] and now["script_sha256"] == hashlib.sha256(restored.encode()).hexdigest()
    with open(f"/proc/{now['pid']}/cmdline", "rb") as handle:
        assert b"current-key" in handle.read(), "it serves with the current key"
    for kept in (sim_host.dir / "state" / "last-good").iterdir():
        assert "rotated-away-key" not in kept.read_text(), f"{kept} keeps the key rotated away"
    assert "--speculative-algorithm" not in good_script
    lines = [json.loads(line) for line in (sim_host.dir / "state" / "journal.jsonl").read_text().splitlines()]
    outcomes = [line["servers"]["gpu0-7"]["outcome"] for line in lines if line["job"] == "relaunch"]
    # Each launch is journaled before its wait (a run interrupted in the wait stays in the history), then how it came
    # up; the rollback's launch only by its wait, which keeps the failed attempt.
    assert outcomes == ["unwaited", "ready", "unwaited", "crashed", "ready"]
    # The history says the run's change is not live: the run serves the last good configuration again.
    history = sim_host.run("history")
    assert history.rc == 0, history.stdout
    [row] = [line for line in history.task("Run history")[0]["msg"] if failed_run_id(sim_host) in line]
    assert "1/1 up (gpu0-7 rolled back)" in row, row
    assert "--speculative-algorithm (rolled back)" in row and "--api-key" not in row, row
    served = history.task("Publish the runs")[0]["ansible_facts"]["relaunch_history"][-1]["servers"]["gpu0-7"]
    assert served["rolled_back"]["outcome"] == "crashed" and "changed" not in served
    assert "--speculative-algorithm" not in served["settings"]["flags"]

    # The desired state is the user's: check mode shows the relaunch it would try, the next run tries it again.
    check = sim_host.run("relaunch", eagle, args=["--check"])
    assert [task["action"] for task in check.task("Bring servers")[0]["servers"]] == ["relaunched"]
    again = sim_host.run("relaunch", eagle)
    assert again.rc != 0 and failures(again)[0].endswith(": ready again")


def failed_run_id(sim_host):
    """The run id (short) of the newest relaunch in the journal."""
    lines = [json.loads(line) for line in (sim_host.dir / "state" / "journal.jsonl").read_text().splitlines()]
    return [line for line in lines if line["job"] == "relaunch"][-1]["run_id"][:8]


def test_a_canary_of_one_leaves_the_others_untouched_and_is_rolled_back(sim_host):
    assert sim_host.run("relaunch").rc == 0
    pids = {f"gpu{index}": state(sim_host, f"gpu{index}")["pid"] for index in range(8)}
    scripts = {name: sim_host.script(name).read_text() for name in pids}

    # A flag the host's SGLang lacks, the check off (as for a fork): the server itself refuses it when it starts.
    bad = sim_host.run("relaunch", {"relaunch_canary": 1, "sglang_extra_args": {"no_such_flag": True},
                                    "sglang_flag_check": False})
    assert bad.rc != 0
    canary = [server for task in bad.task("Bring servers") for server in task.get("servers", [])
              if server["action"] != "deferred"]
    assert [server["name"] for server in canary if server.get("rollback") is None] == ["gpu0"]
    for name in list(pids)[1:]:
        assert state(sim_host, name)["pid"] == pids[name], f"{name} kept its process"
        assert sim_host.script(name).read_text() == scripts[name], f"{name} kept its script"
    assert sim_host.script("gpu0").read_text() == scripts["gpu0"], "the canary is back on its old script"
    assert state(sim_host, "gpu0")["pid"] != pids["gpu0"]
    messages = failures(bad)
    assert messages[0].startswith("gpu0 crashed") and "unrecognized arguments: --no-such-flag" in messages[0]
    assert messages[0].endswith(": ready again")
    assert all(message.endswith("not relaunched, an earlier batch failed") for message in messages[1:])
    assert len(messages) == 8


def server_actions(result):
    """{name: action} of each server module call of a run, one dict per call."""
    return [{server["name"]: server["action"] for server in task["servers"]} for task in result.server_answers()
            if task.get("servers")]


def test_a_configuration_new_to_the_host_goes_to_one_server_first_and_a_known_one_at_full_speed(sim_host):
    # relaunch_canary is left at its default, auto. Nothing serves yet: nothing to lose, both at once.
    first = sim_host.run("relaunch", {"sglang_gpu_count": 2})
    assert first.rc == 0, first.stdout
    assert server_actions(first) == [{"gpu0": "launched", "gpu1": "launched"}]

    # A configuration neither server came up with: gpu0 first, gpu1 keeps serving until gpu0 is up.
    new = sim_host.run("relaunch", {"sglang_gpu_count": 2, "sglang_max_running_requests": 32})
    assert new.rc == 0, new.stdout
    assert server_actions(new) == [{"gpu0": "relaunched", "gpu1": "deferred"}, {"gpu1": "relaunched"}]
    [passed] = [task["msg"] for task in new.task("Say that the canary passed") if not task.get("skipped")]
    assert passed.startswith("canary passed: gpu0 (ready in ") and "max_running_requests 32" in passed, passed
    assert passed.endswith(" - now the other 1 server: gpu1")
    assert "--max-running-requests 32" in sim_host.script("gpu1").read_text()
    assert new.module_calls().count("gpuops.sglang.wait") == 2

    # Back to the configuration both came up with before: at full speed, in one call.
    back = sim_host.run("relaunch", {"sglang_gpu_count": 2})
    assert back.rc == 0, back.stdout
    assert server_actions(back) == [{"gpu0": "relaunched", "gpu1": "relaunched"}]
    assert not [task for task in back.task("Say that the canary passed") if not task.get("skipped")]

    # relaunch_canary 0: a new configuration at full speed too.
    off = sim_host.run("relaunch", {"sglang_gpu_count": 2, "sglang_max_running_requests": 16, "relaunch_canary": 0})
    assert off.rc == 0, off.stdout
    assert server_actions(off) == [{"gpu0": "relaunched", "gpu1": "relaunched"}]


def test_a_new_topology_goes_to_one_server_first_and_batch_by_batch(sim_host, model_dir):
    # relaunch_canary auto. A first launch in batches of one: the canary first (nothing serves yet, but the batch
    # size is a limit on concurrent startups too).
    batched = sim_host.run("relaunch", {"sglang_gpu_count": 2, "relaunch_batch_size": 1})
    assert batched.rc == 0, batched.stdout
    assert server_actions(batched) == [{"gpu0": "launched", "gpu1": "deferred"}, {"gpu1": "launched"}]

    # Renamed: the new names run nothing yet, but each stops an old server in its way - the first goes alone, the
    # other old server keeps serving until it is up, and only the old server in the canary's way is stopped.
    renamed = [{"name": f"a{index}", "port": sim_host.port(index), "gpus": [index]} for index in range(2)]
    rename = sim_host.run("relaunch", {"sglang_servers": renamed})
    assert rename.rc == 0, rename.stdout
    assert server_actions(rename) == [{"a0": "launched", "a1": "deferred"}, {"a1": "launched"}]
    calls = [task for task in rename.task("Bring servers") if task.get("servers")]
    assert [entry["name"] for entry in calls[0]["removed"]] == ["gpu0"]
    assert calls[0]["canary"] == ["a0"]
    assert [entry["name"] for entry in calls[1]["removed"]] == ["gpu1"]
    [passed] = [task["msg"] for task in rename.task("Say that the canary passed") if not task.get("skipped")]
    assert passed.startswith("canary passed: a0 (ready in ") and passed.endswith(" - now the other 1 server: a1")

    # A configuration both came up with, in batches of one: no canary, batch by batch as asked.
    known = sim_host.run("relaunch", {"sglang_servers": renamed, "relaunch_batch_size": 1,
                                      "relaunch_state": "restarted"})
    assert known.rc == 0, known.stdout
    assert server_actions(known) == [{"a0": "relaunched", "a1": "deferred"}, {"a1": "relaunched"}]
    assert not [task for task in known.task("Say that the canary passed") if not task.get("skipped")]

    # A known configuration that fails (its model went away): no canary failed, so with relaunch_halt_on_failure
    # false the next batch goes all the same.
    os.rename(os.path.join(model_dir, "config.json"), os.path.join(model_dir, "config.json.away"))
    failing = sim_host.run("relaunch", {"sglang_servers": renamed, "relaunch_batch_size": 1,
                                        "relaunch_state": "restarted", "relaunch_halt_on_failure": False})
    assert failing.rc != 0
    assert server_actions(failing) == [{"a0": "relaunched", "a1": "deferred"}, {"a1": "relaunched"}]
    os.rename(os.path.join(model_dir, "config.json.away"), os.path.join(model_dir, "config.json"))
    again = sim_host.run("relaunch", {"sglang_servers": renamed})
    assert again.rc == 0, again.stdout

    # The ports move up by one: a1's process holds the canary's new port, so a1 cannot wait - both go at once.
    moved = [dict(server, port=sim_host.port(index + 1)) for index, server in enumerate(renamed)]
    move = sim_host.run("relaunch", {"sglang_servers": moved})
    assert move.rc == 0, move.stdout
    assert server_actions(move) == [{"a0": "relaunched", "a1": "relaunched"}]
    assert [task["canary"] for task in move.server_answers() if task.get("servers")] == [[]]


def test_a_rollback_that_fails_too_is_reported_not_retried_and_a_server_without_one_is_left_stopped(
        sim_host, model_dir):
    assert sim_host.run("relaunch", {"sglang_gpu_count": 2}).rc == 0
    # What broke the new configuration breaks the old one too: the model's config is gone.
    os.rename(os.path.join(model_dir, "config.json"), os.path.join(model_dir, "config.json.away"))
    # Both at once (no canary): each fails and each rollback fails.
    both = sim_host.run("relaunch", {"sglang_gpu_count": 2, "sglang_mem_fraction_static": 0.8, "relaunch_canary": 0})
    assert both.rc != 0
    rollback_calls = both.task("Relaunch them with their last good configuration")
    assert len(rollback_calls) == 1, "one rollback, no loop"
    for message in failures(both):
        assert "which failed too (not retried)" in message.splitlines()[-1]

    # A server that never came up here has no last good configuration: it is left stopped.
    fresh = sim_host.run("relaunch", {"sglang_gpu_count": 3, "sglang_mem_fraction_static": 0.8})
    assert fresh.rc != 0
    [gpu2] = [message for message in failures(fresh) if message.startswith("gpu2")]
    assert gpu2.splitlines()[-1] == ("gpu2: the new configuration failed; gpu2 has no last good configuration (it "
                                     "never came up with another one on this host): left stopped")
    assert sim_host.fake_gpus.used_mib(2) == 0


def test_a_server_killed_from_outside_that_fails_to_start_again_is_no_failed_new_configuration(sim_host, model_dir):
    assert sim_host.run("relaunch", {"sglang_gpu_count": 1}).rc == 0
    os.killpg(state(sim_host, "gpu0")["pgid"], signal.SIGKILL)  # from outside: the OOM killer, an operator
    os.rename(os.path.join(model_dir, "config.json"), os.path.join(model_dir, "config.json.away"))
    again = sim_host.run("relaunch", {"sglang_gpu_count": 1})
    assert again.rc != 0
    [acted] = again.server_answers()[0]["servers"]
    assert acted["action"] == "launched" and "script_changed" not in acted, "started again as it was"
    headline = summary(again)[0]
    assert headline.startswith("0/1 serving - gpu0 failed: crashed in ") and "new configuration" not in headline
    assert not [task for task in again.task("Relaunch them with their last good configuration")
                if not task.get("skipped")], "nothing to roll back to: it ran this configuration"


def test_rollback_off_leaves_the_failed_server_as_it_failed(sim_host):
    assert sim_host.run("relaunch", {"sglang_gpu_count": 1}).rc == 0
    # A flag the server refuses when it starts (the check that would refuse it first is off, as for a fork).
    off = sim_host.run("relaunch", {"sglang_gpu_count": 1, "relaunch_rollback": False,
                                    "sglang_extra_args": {"no_such_flag": True}, "sglang_flag_check": False})
    assert off.rc != 0 and not off.task("Relaunch them with their last good configuration")
    assert "rolled back" not in "\n".join(failures(off))

    # relaunch_kill_stalled false: a stalled server is reported and left as found, never killed by a rollback.
    hung = sim_host.run("relaunch", {"sglang_gpu_count": 1, "relaunch_kill_stalled": False, "relaunch_stall_timeout": 2,
                                     "sglang_env": dict(sim_host.host_vars["sglang_env"],
                                                        SGLANG_SIM_FAULT="hang_after_weights")})
    assert hung.rc != 0
    [message] = failures(hung)
    assert message.startswith("gpu0 stalled in loading_weights") and "not killed: kill_stalled is false" in message
    assert "rolled back" not in message and not hung.task("Relaunch them with their last good configuration")
    assert os.path.exists(f"/proc/{state(sim_host, 'gpu0')['pid']}"), "still running, as it stalled"


def test_a_canary_whose_throughput_regresses_is_rolled_back_before_the_others_are_touched(sim_host):
    probe = {"concurrency": 16, "duration_s": 3, "input_len": 16, "output_len": 16}
    settings = {"sglang_gpu_count": 2, "sglang_enable_metrics": True, "relaunch_probe": probe}
    assert sim_host.run("relaunch", settings).rc == 0
    pids = {name: state(sim_host, name)["pid"] for name in ("gpu0", "gpu1")}

    # 4 requests at a time instead of 16: a quarter of the throughput.
    slower = sim_host.run("relaunch", dict(settings, relaunch_canary=1, sglang_max_running_requests=4))
    assert slower.rc != 0
    [message] = [line for line in failures(slower) if line.startswith("gpu0")]
    assert message.startswith("gpu0: output ") and "below" in message and "of its last good run (at most 10 %)" in message
    assert message.endswith(": ready again")
    assert state(sim_host, "gpu1")["pid"] == pids["gpu1"], "the other server was not touched"
    assert "--max-running-requests" not in sim_host.script("gpu0").read_text(), "the canary is back on its old script"


def test_booleans_given_as_strings_mean_what_they_say(sim_host):
    # `-e name=false` hands the roles the string "false": a run without rollback must not roll back, and the
    # summary must still come (it once failed with "no longer holds the host" and skipped the summary).
    assert sim_host.run("relaunch", {"sglang_gpu_count": 1}).rc == 0
    # A flag the server refuses when it starts (the check that would refuse it first is off, as for a fork).
    bad = {"sglang_gpu_count": 1, "sglang_extra_args": {"no_such_flag": True}, "sglang_flag_check": False}
    strings = ["-e", "relaunch_rollback=false", "-e", "sglang_enable_metrics=no", "-e", "relaunch_halt_on_failure=0"]
    failed = sim_host.run("relaunch", bad, args=strings)
    assert failed.rc != 0
    [message] = failures(failed)
    assert message.startswith("gpu0 crashed") and "rolled back" not in message, message
    assert "rolled back" not in summary(failed)
    assert "--enable-metrics" not in sim_host.script("gpu0").read_text()
    rollback = failed.task("Roll back")
    assert rollback and all(task.get("skipped") for task in rollback), "no rollback ran"


def test_a_boolean_that_is_no_boolean_is_refused_before_anything_is_touched(sim_host):
    # The role's argument spec names a top-level typo; a server's own setting is checked with its topology.
    typo = sim_host.run("relaunch", {"sglang_gpu_count": 1}, args=["-e", "relaunch_rollback=flase"])
    assert typo.rc != 0 and "argument 'relaunch_rollback'" in repr(typo) and "'flase' is not a valid boolean" in repr(
        typo)
    servers = [{"name": "gpu0", "port": sim_host.port(0), "gpus": [0], "enable_metrics": "flase"}]
    result = sim_host.run("relaunch", {"sglang_servers": servers})
    assert result.rc != 0
    [check] = result.task("Expand and validate the server topology")
    assert "server 'gpu0': enable_metrics must be true or false (also yes/no, 1/0), got 'flase'" in check["msg"]
    assert not sim_host.script("gpu0").exists(), "nothing was touched"
