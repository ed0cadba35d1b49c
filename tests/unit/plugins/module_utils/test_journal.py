"""The run journal: lines appended and merged into runs, last good runs, comparisons, bounds."""

import json
from types import SimpleNamespace

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    journal,
    naming,
    run_lock,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.result import (
    job_record,
    journal_interrupted,
)

SETTINGS_A = {"command": ["python3"], "flags": {"--model-path": "/m/a", "--mamba-scheduler-strategy": "extra_buffer"},
              "env": {}}
SETTINGS_B = {"command": ["python3"], "flags": {"--model-path": "/m/a", "--mamba-scheduler-strategy": "no_buffer"},
              "env": {}}


def entry(outcome="ready", settings=None, **facts):
    settings = settings or SETTINGS_A
    return {"outcome": outcome, "settings": settings, "model": settings["flags"]["--model-path"],
            "facts": facts, "timings": {"ready_s": facts.pop("ready_s", 10.0)}}


def line(run_id, servers, job="relaunch", time=1.0):
    return {"v": 1, "time": time, "run_id": run_id, "job": job, "by": {}, "servers": servers}


def test_append_read_and_merge_runs(tmp_path):
    state_dir = str(tmp_path)
    header = journal.run_header(state_dir, "relaunch", "run1", now=100.0)
    assert journal.append(state_dir, header, {"gpu0": entry(max_running_requests=32)}) is None
    assert journal.append(state_dir, dict(header, job="probe"), {"gpu0": {"probe": {"output_tok_s": 1280.0}}}) is None
    assert journal.append(state_dir, journal.run_header(state_dir, "status", None, now=200.0),
                          {"gpu0": {"outcome": "ready"}}) is None
    (tmp_path / naming.JOURNAL_NAME).open("a").write('{"torn": \n')
    runs = journal.runs(journal.read_records(state_dir))
    assert [(run["run_id"], run["job"]) for run in runs] == [("run1", "relaunch"), (None, "status")]
    merged = runs[0]["servers"]["gpu0"]
    assert merged["facts"] == {"max_running_requests": 32} and merged["probe"] == {"output_tok_s": 1280.0}


def test_credentials_never_reach_the_journal_and_old_lines_are_scrubbed_when_read(tmp_path):
    state_dir = str(tmp_path)
    raw = {"command": ["python3"], "flags": {"--model-path": "/m/a", "--hf-token": "hf_flag"},
           "env": {"HF_TOKEN": "hf_env"}}
    # A line of an older version, which did not count --hf-token as a credential.
    (tmp_path / naming.JOURNAL_NAME).write_text(json.dumps(line("old", {"gpu0": entry(settings=raw)})) + "\n")
    assert journal.append(state_dir, journal.run_header(state_dir, "relaunch", "new"),
                          {"gpu0": dict(entry(settings=raw), error="crashed: --hf-token hf_error")}) is None
    written = (tmp_path / naming.JOURNAL_NAME).read_text().splitlines()[1]
    read = journal.read_records(state_dir)
    assert "hf_" not in written + json.dumps(read)
    assert read[0]["servers"]["gpu0"]["settings"]["flags"] == {"--model-path": "/m/a", "--hf-token": "********"}


def test_header_names_who_ran_it_from_the_lease(tmp_path):
    state_dir = str(tmp_path)
    run = {"run_id": "r1", "controller": "laptop", "controller_pid": 1, "user": "ops", "awx_job_id": "42"}
    assert run_lock.try_claim(state_dir, run, 600)
    assert journal.run_header(state_dir, "relaunch", "r1")["by"] == {"controller": "laptop", "user": "ops",
                                                                     "awx_job_id": "42"}
    assert journal.run_header(state_dir, "relaunch", "other")["by"] == {}


def test_last_good_skips_failures_other_models_and_the_current_run():
    runs = journal.runs([
        line("r1", {"gpu0": entry(max_running_requests=32)}),
        line("r2", {"gpu0": entry("crashed", SETTINGS_B)}),
        line("r3", {"gpu0": entry(settings=dict(SETTINGS_A, flags={"--model-path": "/m/other"}))}),
        line("s1", {"gpu0": {"outcome": "ready"}}, job="status"),
        line("r4", {"gpu0": entry(settings=SETTINGS_B)}),
    ])
    assert journal.last_good(runs, "gpu0", "/m/a", before_run_id="r4")["run_id"] == "r1"
    assert journal.last_good(runs, "gpu0")["run_id"] == "r4"
    assert journal.last_good(runs, "gpu1") is None
    assert journal.previous_settings(runs, "gpu0") == SETTINGS_B


def on_gpus(settings, gpus):
    return dict(settings, env={"CUDA_VISIBLE_DEVICES": gpus})


def test_a_renamed_server_is_compared_with_the_old_name_on_the_same_model_and_gpus():
    runs = journal.runs([
        line("r1", {"gpu0": entry(settings=on_gpus(SETTINGS_A, "0")), "gpu1": entry(settings=on_gpus(SETTINGS_A, "1"))}),
        line("r2", {"gpu0-1": entry(settings=on_gpus(SETTINGS_A, "0,1"))}),
        line("r3", {"main": entry("crashed", on_gpus(SETTINGS_A, "0,1"))}),
    ])
    renamed = journal.last_good(runs, "main", "/m/a", gpus="0,1")
    assert (renamed["run_id"], renamed["name"]) == ("r2", "gpu0-1")
    assert journal.compare(renamed, entry(settings=on_gpus(SETTINGS_B, "0,1")))["name"] == "gpu0-1"
    assert journal.last_good(runs, "main", "/m/other", gpus="0,1") is None, "another model is no rename"
    assert journal.last_good(runs, "main", "/m/a", gpus="2") is None, "other GPUs are no rename"
    assert journal.last_good(runs, "main", "/m/a") is None, "without the GPUs: by name only"
    assert journal.last_good(runs, "gpu0", "/m/a", gpus="0,1")["run_id"] == "r1", "its own name first"
    assert "name" not in journal.compare(journal.last_good(runs, "gpu0", "/m/a"), entry())
    # A new topology (tp_size 1 -> 2): no rename, but the model is no stranger here.
    assert journal.last_good(runs, "gpu0-3", "/m/a", gpus="0,1,2,3") is None
    assert journal.model_came_up_as(runs, "/m/a") == ["gpu0", "gpu0-1", "gpu1"]
    assert journal.model_came_up_as(runs, "/m/a", before_run_id="r2") == ["gpu0", "gpu1"]
    assert journal.model_came_up_as(runs, "/m/other") == []


def test_compare_gives_changes_and_deltas():
    good = {"run_id": "r1", "time": 1.0, "entry": dict(entry(max_running_requests=32, max_total_num_tokens=1210000,
                                                             ready_s=212.0), probe={"output_tok_s": 1280.0})}
    now = dict(entry(settings=SETTINGS_B, max_running_requests=53, max_total_num_tokens=2260000, ready_s=95.0),
               probe={"output_tok_s": 2120.0})
    compared = journal.compare(good, now)
    assert compared["changed"] == [{"setting": "--mamba-scheduler-strategy", "before": "extra_buffer",
                                    "after": "no_buffer"}]
    assert compared["facts"]["max_running_requests"] == {"before": 32, "after": 53}
    assert compared["timings"] == {"ready_s": {"before": 212.0, "after": 95.0}}
    assert compared["probe"]["output_tok_s"] == {"before": 1280.0, "after": 2120.0}
    assert "sglang_version" not in compared


def test_compare_names_an_upgrade_of_sglang():
    good = {"run_id": "r1", "time": 1.0, "entry": dict(entry(), sglang_version="0.5.10")}
    assert journal.compare(good, dict(entry(), sglang_version="0.5.23"))["sglang_version"] == {
        "before": "0.5.10", "after": "0.5.23"}
    assert "sglang_version" not in journal.compare(good, dict(entry(), sglang_version="0.5.10"))
    # Not read this time: no claim that it changed.
    assert "sglang_version" not in journal.compare(good, entry())
    unread = {"run_id": "r1", "time": 1.0, "entry": entry()}
    assert journal.compare(unread, dict(entry(), sglang_version="0.5.23"))["sglang_version"] == {
        "before": None, "after": "0.5.23"}


def test_bounded_but_keeps_each_servers_last_good(tmp_path, monkeypatch):
    state_dir = str(tmp_path)
    monkeypatch.setattr(journal, "MAX_BYTES", 4000)
    journal.append(state_dir, journal.run_header(state_dir, "relaunch", "good", now=1.0),
                   {"gpu0": entry(max_running_requests=32)})
    for index in range(100):
        journal.append(state_dir, journal.run_header(state_dir, "relaunch", f"bad{index}", now=2.0 + index),
                       {"gpu0": entry("crashed")})
    assert (tmp_path / naming.JOURNAL_NAME).stat().st_size <= 4000
    records = journal.read_records(state_dir)
    assert records[0]["run_id"] == "good" and records[-1]["run_id"] == "bad99"
    assert journal.last_good(journal.runs(records), "gpu0")["run_id"] == "good"


def test_unwritable_journal_is_reported_not_raised(tmp_path):
    (tmp_path / naming.JOURNAL_NAME).symlink_to(tmp_path / "elsewhere")
    error = journal.append(str(tmp_path), journal.run_header(str(tmp_path), "stop"), {})
    assert "was not written" in error and not (tmp_path / "elsewhere").exists()


def test_relaunch_entry_and_timings():
    report = {"status": "ready", "pid": 7, "seconds_to_ready": 95.0, "facts": {"max_running_requests": 53},
              "timeline": [{"phase": "initializing", "timestamp": "2026-12-01 10:00:00"},
                           {"phase": "loading_weights", "timestamp": "2026-12-01 10:00:05"},
                           {"phase": "capturing_cuda_graph", "timestamp": "2026-12-01 10:00:50"},
                           {"phase": "warming_up", "timestamp": "2026-12-01 10:01:20"},
                           {"phase": "ready", "timestamp": "2026-12-01 10:01:35"}]}
    made = journal.relaunch_entry(report, {"weight_load_seconds": 41.5, "kv_cache_tokens": 2260000},
                                  {"script_sha256": "abc", "settings": SETTINGS_B, "launcher": "detached"},
                                  "relaunched", previous=SETTINGS_A)
    assert made["timings"] == {"weights_s": 41.5, "cuda_graph_s": 30, "warmup_s": 15, "ready_s": 95.0}
    assert made["facts"] == {"max_running_requests": 53, "kv_cache_tokens": 2260000}
    assert made["changed"][0]["setting"] == "--mamba-scheduler-strategy"
    assert made["model"] == "/m/a" and "error" not in made
    json.dumps(made)


def test_a_rollback_entry_replaces_the_failed_attempt_and_records_it_as_not_live():
    # run "good" came up with A; run "bad" tried B, which crashed, and went back to A: the run's entry is A serving
    # again, no live change, the attempt kept under rolled_back.
    good = line("good", {"gpu0": entry()})
    crashed = dict(entry("crashed", SETTINGS_B), action="relaunched", error="RuntimeError: draft worker failed",
                   changed=journal.setting_changes(SETTINGS_A, SETTINGS_B))
    earlier = journal.runs([good, line("bad", {"gpu0": crashed}, time=2.0)])
    report = {"status": "ready", "pid": 9, "seconds_to_ready": 12.0, "facts": {"max_running_requests": 32}}
    rollback = journal.relaunch_entry(report, {}, {"settings": SETTINGS_A}, journal.ROLLED_BACK,
                                      journal.previous_settings(earlier, "gpu0", before_run_id="bad"),
                                      earlier[1]["servers"]["gpu0"])
    assert "changed" not in rollback, "nothing changed against what ran before the run"
    assert rollback["rolled_back"] == {"outcome": "crashed", "error": "RuntimeError: draft worker failed",
                                       "attempted": crashed["changed"]}
    merged = journal.runs([good, line("bad", {"gpu0": crashed}, time=2.0), line("bad", {"gpu0": rollback}, time=3.0)])
    served = merged[1]["servers"]["gpu0"]
    assert served["outcome"] == "ready" and served["settings"] == SETTINGS_A
    assert "error" not in served and "changed" not in served, "nothing of the failed attempt but its record"
    # Without before_run_id the newest settings would be the failed attempt's (B): "changed" would claim B -> A.
    assert journal.previous_settings(earlier, "gpu0") == SETTINGS_B


def test_an_unchanged_server_records_no_startup_timings():
    report = {"status": "ready", "pid": 7, "seconds_to_ready": 0.4, "facts": {"max_running_requests": 53}}
    assert "timings" not in journal.relaunch_entry(report, {"weight_load_seconds": 41.5}, {"settings": SETTINGS_A},
                                                   "unchanged")


def test_runs_nobody_picked_up_are_journaled_under_their_own_run_and_time(tmp_path):
    control = SimpleNamespace(state_dir=str(tmp_path), params={"journal": True})
    done = {"job_id": "j1", "run_id": "r-ctrl-c", "status": "done", "started": 1000.0, "servers": ["gpu0", "gpu1"],
            "result": {"servers": [{"name": "gpu0", "action": "relaunched", "changed": True},
                                   {"name": "gpu1", "action": "relaunched", "changed": True, "down": True},
                                   {"name": "gpu2", "action": "unchanged", "changed": False}]}}
    # A lost worker: the servers it was to change, with their actions (an unchanged gpu2 is not among them).

    def plan(name, action):
        return SimpleNamespace(name=name, action=action, changes=action not in ("unchanged", "deferred"))

    lost = dict(job_record("r-lost", [plan("gpu0", "relaunched"), plan("gpu2", "unchanged"), plan("gpu3", "deferred")]),
                job_id="j2", status="lost", started=2000.0, result=None)
    lost_stop = dict(job_record("r-lost-stop", [plan("gpu0", "stopped")]), job_id="j3", status="lost",
                     started=2000.0, result=None)
    stop = dict(done, run_id="r-stop", result={"servers": [{"name": "gpu0", "action": "stopped", "changed": True}]})
    assert journal_interrupted(control, [done, lost, stop, lost_stop]) is None
    runs = journal.runs(journal.read_records(str(tmp_path)))
    assert [(run["run_id"], run["job"], run["time"]) for run in runs] == [
        ("r-ctrl-c", "relaunch", 1000.0), ("r-lost", "relaunch", 2000.0), ("r-stop", "stop", 1000.0),
        ("r-lost-stop", "stop", 2000.0)]
    assert runs[0]["servers"] == {"gpu0": {"action": "relaunched", "outcome": "interrupted"},
                                  "gpu1": {"action": "relaunched", "outcome": "down"}}
    assert runs[1]["servers"] == {"gpu0": {"action": "relaunched", "outcome": "lost"}}
    assert runs[3]["servers"] == {"gpu0": {"action": "stopped", "outcome": "lost"}}
    control.params["journal"] = False
    assert journal_interrupted(control, [done]) is None
    assert len(journal.read_records(str(tmp_path))) == 4, "journal: false writes nothing"
