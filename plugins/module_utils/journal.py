# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run journal of a host: what each relaunch, probe, stop and status run found, one JSON line per call.

``<state_dir>/journal.jsonl``. A line is ``{"v", "time", "run_id", "job", "by", "servers": {name: entry}}``;
the calls of one run share its ``run_id`` (the wait of each batch, the probe), and ``runs()`` merges them
into one run per id. Entries hold settings read from the launch scripts with credentials hidden
(launch_settings.py), configured facts, startup timings, the outcome and its error line, probe figures and
metrics - never a secret; lines are scrubbed once more when written and when read (a line written before a
name counted as a credential may hold its value; compacting rewrites the file scrubbed). Bounded: past
MAX_BYTES the oldest lines go, except each server's last good relaunch (what "the last run in which it came
up" compares with). Writing never fails the caller's job: ``append`` returns the error text instead.
"""

import fcntl
import json
import os
import time

from ansible_collections.gpuops.sglang.plugins.module_utils import run_lock
from ansible_collections.gpuops.sglang.plugins.module_utils.fact_table import (
    COMPARED_FACTS,
    POOL_FACTS,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launch_settings import (
    gpus_of,
    model_of,
    setting_changes,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    journal_file,
    journal_lock_file,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.safe_files import (
    open_append_no_follow,
    open_lock_file,
    read_no_follow,
    write_atomic,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_data

VERSION = 1
MAX_BYTES = 1024 * 1024
JOURNAL_MODE = 0o644
JOBS = ("relaunch", "probe", "stop", "status")
# The wait's action for a server relaunched with its last good configuration after the new one failed.
ROLLED_BACK = "rolled_back"


def run_header(state_dir, job, run_id=None, now=None):
    """The head of a line: when, which run, and who ran it (from the run's lease when it holds the host)."""
    lease = run_lock.read_lease(state_dir) if run_id else None
    by = {}
    if lease and lease.get("run_id") == run_id:
        by = {key: lease.get(key) for key in ("controller", "user", "awx_job_id") if lease.get(key)}
    return {"v": VERSION, "time": round(now or time.time(), 3), "run_id": run_id, "job": job, "by": by}


def append(state_dir, header, servers):
    """Append one line; returns None, or why it could not be written (the job goes on without it)."""
    line = json.dumps(scrub_data(dict(header, servers=servers)), sort_keys=True, separators=(",", ":")) + "\n"
    try:
        lock_fd = open_lock_file(journal_lock_file(state_dir))
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            fd = open_append_no_follow(journal_file(state_dir), JOURNAL_MODE, what="journal")
            try:
                os.write(fd, line.encode())
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if size > MAX_BYTES:
                _compact(state_dir)
        finally:
            os.close(lock_fd)
    except OSError as exc:
        return f"the run journal {journal_file(state_dir)} was not written: {exc}"
    return None


def read_records(state_dir):
    """Every readable line, oldest first and scrubbed (a torn or foreign line is skipped)."""
    try:
        data = read_no_follow(journal_file(state_dir))
    except OSError:
        return []
    records = []
    for raw in data.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("servers"), dict):
            records.append(scrub_data(record))
    return records


def _compact(state_dir):
    """Keep the newest lines within half of MAX_BYTES, and every line of each server's last good relaunch run."""
    records = read_records(state_dir)
    merged = runs(records)
    keep_runs = {good["run_id"] for good in (
        last_good(merged, name) for name in {name for run in merged for name in run["servers"]}) if good}
    kept, size = [], 0
    for record in reversed(records):
        line = json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
        size += len(line)
        if size <= MAX_BYTES // 2 or record.get("run_id") in keep_runs:
            kept.append(line)
    write_atomic(journal_file(state_dir), "".join(reversed(kept)), JOURNAL_MODE)


# ---- pure: runs, last good, comparisons --------------------------------------------------------------


def runs(records):
    """One run per run id (a line without one is a run of its own), oldest first, entries merged per server."""
    merged, order = {}, []
    for index, record in enumerate(records):
        key = record.get("run_id") or f"line-{index}"
        run = merged.get(key)
        if run is None:
            run = merged[key] = {"run_id": record.get("run_id"), "time": record.get("time"),
                                 "job": record.get("job"), "by": record.get("by") or {}, "servers": {}}
            order.append(key)
        elif run["job"] == "probe":
            run["job"] = record.get("job")
        for name, entry in record["servers"].items():
            if isinstance(entry, dict):
                # A rollback's entry is what serves now: it replaces the failed attempt (which it records).
                earlier = {} if entry.get("action") == ROLLED_BACK else run["servers"].get(name) or {}
                run["servers"][name] = dict(earlier, **entry)
    return [merged[key] for key in order]


def _before(merged_runs, run_id):
    """The runs before ``run_id`` (all when it is None or not among them)."""
    ids = [run["run_id"] for run in merged_runs]
    return merged_runs[:ids.index(run_id)] if run_id and run_id in ids else merged_runs


def _came_up(run, entry, model):
    return (run["job"] == "relaunch" and bool(entry) and entry.get("outcome") == "ready"
            and (model is None or model_of(entry.get("settings")) == model))


def last_good(merged_runs, name, model=None, before_run_id=None, gpus=None):
    """The newest relaunch in which server ``name`` came up (of ``model`` when given), as
    ``{"run_id", "time", "entry"}``; runs from ``before_run_id`` on are not looked at.

    A server that never came up under its name but was renamed (the same ``model`` on the same ``gpus``, its
    CUDA_VISIBLE_DEVICES) is compared with what came up under the old name: the result then names it
    (``"name"``)."""
    candidates = _before(merged_runs, before_run_id)
    for run in reversed(candidates):
        entry = run["servers"].get(name)
        if _came_up(run, entry, model):
            return {"run_id": run["run_id"], "time": run["time"], "entry": entry}
    if model is None or gpus is None:
        return None
    for run in reversed(candidates):
        for other, entry in sorted(run["servers"].items()):
            if other != name and _came_up(run, entry, model) and gpus_of(entry.get("settings")) == gpus:
                return {"run_id": run["run_id"], "time": run["time"], "entry": entry, "name": other}
    return None


def model_came_up_as(merged_runs, model, before_run_id=None):
    """The names under which ``model`` came up on this host (when a server has no last good run of its own)."""
    return sorted({name for run in _before(merged_runs, before_run_id) for name, entry in run["servers"].items()
                   if model is not None and _came_up(run, entry, model)})


def previous_settings(merged_runs, name, before_run_id=None):
    """The settings of the newest relaunch entry of ``name`` that recorded them (whatever its outcome); runs from
    ``before_run_id`` on are not looked at."""
    for run in reversed(_before(merged_runs, before_run_id)):
        entry = run["servers"].get(name) or {}
        if run["job"] == "relaunch" and entry.get("settings"):
            return entry["settings"]
    return None


def _pairs(before, after, keys):
    return {key: {"before": before.get(key), "after": after.get(key)} for key in keys
            if before.get(key) is not None or after.get(key) is not None}


def compare(good, entry):
    """``entry`` against a last good run: what settings changed, and the facts, timings and probe side by side."""
    previous = good["entry"]
    probe_before, probe_after = previous.get("probe") or {}, entry.get("probe") or {}
    compared = {
        "run_id": good["run_id"],
        "time": good["time"],
        "changed": setting_changes(previous.get("settings"), entry.get("settings")),
        "facts": _pairs(previous.get("facts") or {}, entry.get("facts") or {}, COMPARED_FACTS),
        "timings": _pairs(previous.get("timings") or {}, entry.get("timings") or {}, ("ready_s",)),
        "probe": _pairs(probe_before, probe_after, ("output_tok_s", "ttft_p50_s", "e2e_p50_s")),
    }
    if good.get("name"):
        compared["name"] = good["name"]
    # An upgrade of SGLang on the host changes what serves as much as a setting does (and renames flags).
    if entry.get("sglang_version") and previous.get("sglang_version") != entry["sglang_version"]:
        compared["sglang_version"] = {"before": previous.get("sglang_version"), "after": entry["sglang_version"]}
    return compared


# ---- pure: the entries a job writes --------------------------------------------------------------


def _epoch(timestamp):
    try:
        return time.mktime(time.strptime(timestamp, "%Y-%m-%d %H:%M:%S"))
    except (TypeError, ValueError):
        return None


def phase_seconds(timeline):
    """Seconds spent in each startup phase, from the log timestamps (whole seconds) of the timeline."""
    seconds = {}
    for entry, following in zip(timeline or [], (timeline or [])[1:]):
        start, end = _epoch(entry.get("timestamp")), _epoch(following.get("timestamp"))
        if start is not None and end is not None and end >= start:
            seconds[entry["phase"]] = seconds.get(entry["phase"], 0) + end - start
    return seconds


def startup_timings(timeline, log_facts, seconds_to_ready):
    """Weights, graph capture, warm-up and total seconds to ready; the log's own figures where it has them."""
    phases = phase_seconds(timeline)

    def measured(fact, phase):
        own = [log_facts.get(key) for key in (fact, "draft_" + fact) if log_facts.get(key) is not None]
        return round(sum(own), 2) if own else phases.get(phase)

    timings = {"weights_s": measured("weight_load_seconds", "loading_weights"),
               "cuda_graph_s": measured("cuda_graph_seconds", "capturing_cuda_graph"),
               "warmup_s": phases.get("warming_up"), "ready_s": seconds_to_ready}
    return {key: value for key, value in timings.items() if value is not None}


def relaunch_entry(report, log_facts, state, action=None, previous=None, attempt=None):
    """The journal entry of one waited-for server: ``report`` is its wait result, ``state`` its state file.

    ``previous``: the settings it ran with before (``changed`` is against them); ``attempt``: for a rollback
    (``action`` rolled_back), this run's entry of the configuration that failed - kept as ``rolled_back``, so the
    entry says what serves (the last good configuration again) and what was tried and not kept. Startup timings
    only for a server this run started: an unchanged one's would be its uptime.
    """
    state = state or {}
    settings = state.get("settings")
    facts = dict(report.get("facts") or {})
    facts.update((key, log_facts[key]) for key in POOL_FACTS if log_facts.get(key) is not None)
    entry = {
        "action": action,
        "outcome": report["status"],
        "pid": report.get("pid"),
        "script_sha256": state.get("script_sha256"),
        "launcher": state.get("launcher"),
        "model": model_of(settings),
        "settings": settings,
        "changed": setting_changes(previous, settings) if previous and settings else [],
        "facts": facts,
        "timings": startup_timings(report.get("timeline"), log_facts, report.get("seconds_to_ready"))
        if action != "unchanged" else None,
        "error": (report.get("error") or {}).get("summary"),
    }
    if action == ROLLED_BACK:
        attempt = attempt or {}
        entry["rolled_back"] = {key: value for key, value in (
            ("outcome", attempt.get("outcome")), ("error", attempt.get("error")),
            ("attempted", attempt.get("changed"))) if value not in (None, [])}
    return {key: value for key, value in entry.items() if value not in (None, [], {})}


def select_runs(merged_runs, jobs, servers, last):
    """The newest ``last`` runs of ``jobs``, with only ``servers`` (all when None), oldest first."""
    chosen = []
    for run in merged_runs:
        if run["job"] not in jobs:
            continue
        if servers is not None:
            run = dict(run, servers={name: entry for name, entry in run["servers"].items() if name in servers})
            if not run["servers"]:
                continue
        chosen.append(run)
    return chosen[-last:]
