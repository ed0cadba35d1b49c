# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server module's result: per server, the diff, the failure message, what the run journal gets, and what
an earlier run whose result nobody picked up did. ``control`` is the job's ServerControl (job.py); ``runs`` are
the ServerRuns (run.py) of every server of the call, in request order."""

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    journal,
    last_good,
    server_plan,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    STEP_DONE,
    STEP_FAILED,
    state_file,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_text


def _describe_before(run):
    running = bool(run.processes)
    recorded = run.plan.recorded
    return server_plan.describe(running, (recorded or {}).get("pid") if running else None,
                                server_plan.recorded_settings(recorded))


def _describe_after(run):
    plan = run.plan
    if not plan.changes:
        return _describe_before(run)
    if plan.action == "stopped" or run.down:
        return server_plan.describe(False, None, {})
    return server_plan.describe(True, run.launched.get("pid"), plan.desired)


def _rollback_result(plan):
    """With rollback: the run whose configuration the server went back to, or that it had none."""
    if plan.rollback_to is not None:
        to = plan.rollback_to
        return {"rollback": {"to_run_id": to.get("run_id"), "to_time": to.get("time"),
                             "script_sha256": to["script_sha256"], "key_status": to["key_status"]}}
    if plan.no_last_good is not None:
        return {"rollback": {"error": f"{plan.no_last_good}: left stopped"}}
    return {}


def _server_result(control, run):
    plan = run.plan
    current = run.launched or (plan.recorded if plan.action == "unchanged" else {}) or {}
    return {
        "name": plan.name,
        "action": plan.action,
        "reason": plan.reason,
        "changed": plan.changes,
        "error": run.error,
        "down": run.down,
        "pid": current.get("pid"),
        "pgid": current.get("pgid"),
        "port": plan.spec.get("port"),
        "gpus": plan.gpus,
        "log_path": plan.spec.get("log_path"),
        "rotated_log": run.rotated_log,
        "state_file": state_file(control.state_dir, plan.name),
        "killed": run.killed,
        "killed_pids": [entry["pid"] for entry in run.killed],
        "gpu_memory_before_mib": plan.gpu_memory_before,
        "gpu_memory_after_mib": run.gpu_memory_after,
        "gpu_holders": run.gpu_holders,
        "timings": run.timings,
        "drain": run.drain.report() if run.drain else None,
        "router": {"worker_url": plan.worker_url, "removed_ids": run.router_removed} if plan.worker_url else None,
        **_rollback_result(plan),
        # Whether the configuration it is launched with came up on this host before (one of its last good scripts).
        **({"came_up_before": last_good.came_up_with(control.state_dir, plan.name, plan.script_sha256)}
           if plan.launches else {}),
    }


def with_settings_changed(module_result, scripts):
    """Each server whose launch script changes says so (``script_changed``) and names the launch settings it
    changes (``settings_changed``, from the script results: credentials hidden)."""
    for server in module_result.get("servers") or []:
        script = scripts.get(server["name"]) or {}
        if script.get("changed"):
            server["script_changed"] = True
        if script.get("settings_changed"):
            server["settings_changed"] = script["settings_changed"]
    return module_result


def result(control, runs):
    failed = [run for run in runs if run.step == STEP_FAILED]
    built = {
        "changed": any(run.plan.changes for run in runs),
        "servers": [_server_result(control, run) for run in runs],
        "canary": list(control.canary),
        "down": [run.name for run in failed if run.down],
        "stale_killed": [control.stale[pid] for pid in sorted(control.stale)],
        "removed": [dict({"name": name, "launch_script": state.get("launch_script")},
                         **({"error": control.release_errors[name]} if name in control.release_errors else {}))
                    for name, state in sorted(control.removed.items())],
        "foreign_killed": [control.foreign[pid] for pid in sorted(control.foreign)],
        "timings": control.timings,
        # The servers that change, after their scripts' diffs (server.py orders them): what runs, not the flags.
        "diff": {
            "before_header": "servers (state)", "after_header": "servers (state)",
            "before": {run.name: _describe_before(run) for run in runs if run.plan.changes},
            "after": {run.name: _describe_after(run) for run in runs if run.plan.changes}},
    }
    if failed:
        others = [run.name for run in runs if run.plan.changes and run.step == STEP_DONE]
        built["failed"] = True
        built["msg"] = "; ".join(run.error for run in failed) + (
            f". Now down: {', '.join(built['down'])}" if built["down"] else "") + (
            f". The others were handled: {', '.join(others)}" if others else "")
    return built


def journaled(control, runs, built):
    """The result ``built``, after the run journal got what only this call knows: every server a stop handled, the
    servers left down, and - until the wait journals how they came up - the servers it launched (outcome
    ``unwaited``: a run interrupted during its wait stays in the history as such)."""
    params = control.params
    if not params["journal"]:
        return built
    stopping = params["state"] == "stopped"
    entries = {run.name: {key: value for key, value in (
        ("action", run.plan.action), ("outcome", "down" if run.down else run.plan.action),
        ("error", run.error), ("gpu_memory_after_mib", run.gpu_memory_after or None)) if value is not None}
        for run in runs if stopping or run.down or run.plan.no_last_good is not None}
    # Not a rollback's launch: the wait that follows records it over this run's failed attempt, which it keeps.
    if not stopping and not params.get("rollback"):
        entries.update((run.name, {"action": run.plan.action, "outcome": UNWAITED}) for run in runs
                       if run.plan.launches and not run.down and not run.error and run.name not in entries)
    if entries:
        header = journal.run_header(control.state_dir, "stop" if stopping else "relaunch", params.get("run_id"))
        built["journal_error"] = journal.append(control.state_dir, header, entries)
    return built


# The journal outcome of a server launched by a run whose wait has not (or never) journaled how it came up.
UNWAITED = "unwaited"


def job_record(run_id, plans):
    """What the host's job record keeps of a call besides its result: the run, and the servers it is to change with
    their actions - what a run whose worker was lost is journaled as (journal_interrupted)."""
    changing = [plan for plan in plans if plan.changes]
    return {"run_id": run_id, "servers": [plan.name for plan in changing],
            "actions": {plan.name: plan.action for plan in changing}}


def journal_interrupted(control, records):
    """Runs whose result nobody picked up (Ctrl-C, a dropped connection) go to the run journal when a later call
    finds them, under their own run id and start time: what their host-side sequence did, never waited for
    (outcome ``interrupted``; ``down`` for a server it left down, ``lost`` for each server of a run whose worker
    died before it finished). Returns why one could not be written, or None."""
    if not control.params["journal"]:
        return None
    problems = []
    for record in records:
        outcome = record.get("result") or {}
        servers = [server for server in outcome.get("servers") or [] if server.get("changed")]
        entries = {server["name"]: {"action": server["action"], "outcome": "down" if server.get("down")
                                    else "interrupted"} for server in servers}
        if record["status"] == "lost":
            actions = record.get("actions") or {}
            entries = {name: dict({"action": actions[name]} if name in actions else {}, outcome="lost")
                       for name in record.get("servers") or []}
        if not entries:
            continue
        stopping = all(entry.get("action") in ("stopped", "already_stopped") for entry in entries.values())
        header = journal.run_header(control.state_dir, "stop" if stopping else "relaunch", record.get("run_id"),
                                    now=record.get("started"))
        problems.append(journal.append(control.state_dir, header, entries))
    return "; ".join(problem for problem in problems if problem) or None


def interrupted_summary(record):
    """What a run whose result nobody picked up (Ctrl-C, dropped connection) did on this host."""
    outcome = record.get("result") or {}
    servers = [f"{server['name']} {'down' if server.get('down') else server['action']}"
               for server in outcome.get("servers") or [] if server.get("changed")]
    return {"job_id": record["job_id"], "run_id": record.get("run_id"), "status": record["status"],
            "started": record.get("started"), "finished": record.get("finished"),
            "down": outcome.get("down") or [], "servers": servers, "msg": outcome.get("msg")}


def scrub_failure_words(module_result, secrets):
    """The one place the words of a failure leave the host (the worker's own included): scrubbed here, in place."""
    for key in ("msg", "traceback"):
        if module_result.get(key):
            module_result[key] = scrub_text(module_result[key], secrets)
    return module_result
