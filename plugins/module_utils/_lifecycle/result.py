# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server module's result: per server, the diff, the failure message, what the run journal gets, and what
an earlier run whose result nobody picked up did. ``control`` is the job's ServerControl (job.py)."""

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    journal,
    server_plan,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    STEP_DONE,
    STEP_FAILED,
    state_file,
)


def _describe_before(plan):
    running = bool(plan.processes)
    return server_plan.describe(running, (plan.recorded or {}).get("pid") if running else None,
                                server_plan.recorded_settings(plan.recorded))


def _describe_after(plan):
    if not plan.changes:
        return _describe_before(plan)
    if plan.action == "stopped" or plan.down:
        return server_plan.describe(False, None, {})
    return server_plan.describe(True, plan.launched.get("pid"), plan.desired)


def _rollback_result(plan, rollback_to, no_last_good):
    """With rollback: the run whose configuration the server went back to, or that it had none."""
    if plan.name in rollback_to:
        to = rollback_to[plan.name]
        return {"rollback": {"to_run_id": to.get("run_id"), "to_time": to.get("time"),
                             "script_sha256": to["script_sha256"], "key_status": to["key_status"]}}
    if plan.name in no_last_good:
        return {"rollback": {"error": f"{no_last_good[plan.name]}: left stopped"}}
    return {}


def _server_result(control, plan):
    current = plan.launched or (plan.recorded if plan.action == "unchanged" else {}) or {}
    return {
        "name": plan.name,
        "action": plan.action,
        "reason": plan.reason,
        "changed": plan.changes,
        "error": plan.error,
        "down": plan.down,
        "pid": current.get("pid"),
        "pgid": current.get("pgid"),
        "port": plan.spec.get("port"),
        "gpus": plan.gpus,
        "log_path": plan.spec.get("log_path"),
        "rotated_log": plan.rotated_log,
        "state_file": state_file(control.state_dir, plan.name),
        "killed": plan.killed,
        "killed_pids": [entry["pid"] for entry in plan.killed],
        "gpu_memory_before_mib": plan.gpu_memory_before,
        "gpu_memory_after_mib": plan.gpu_memory_after,
        "gpu_holders": plan.gpu_holders,
        "timings": plan.timings,
        "drain": plan.drain.report() if plan.drain else None,
        "router": {"worker_url": plan.worker_url, "removed_ids": plan.router_removed} if plan.worker_url else None,
        **_rollback_result(plan, control.rollback_to, control.no_last_good),
    }


def result(control, plans):
    failed = [plan for plan in plans if plan.step == STEP_FAILED]
    built = {
        "changed": any(plan.changes for plan in plans),
        "servers": [_server_result(control, plan) for plan in plans],
        "down": [plan.name for plan in failed if plan.down],
        "stale_killed": [control.stale[pid] for pid in sorted(control.stale)],
        "foreign_killed": [control.foreign[pid] for pid in sorted(control.foreign)],
        "timings": control.timings,
        "diff": {
            "before": {plan.name: _describe_before(plan) for plan in plans},
            "after": {plan.name: _describe_after(plan) for plan in plans}},
    }
    if failed:
        others = [plan.name for plan in plans if plan.changes and plan.step == STEP_DONE]
        built["failed"] = True
        built["msg"] = "; ".join(plan.error for plan in failed) + (
            f". Now down: {', '.join(built['down'])}" if built["down"] else "") + (
            f". The others were handled: {', '.join(others)}" if others else "")
    return built


def journaled(control, plans, built):
    """The result ``built``, after the run journal got what only this call knows: every server a stop handled,
    and the servers left down (the wait journals the others)."""
    params = control.params
    if not params["journal"]:
        return built
    stopping = params["state"] == "stopped"
    entries = {plan.name: {key: value for key, value in (
        ("action", plan.action), ("outcome", "down" if plan.down else plan.action),
        ("error", plan.error), ("gpu_memory_after_mib", plan.gpu_memory_after or None)) if value is not None}
        for plan in plans if stopping or plan.down or plan.name in control.no_last_good}
    if entries:
        header = journal.run_header(control.state_dir, "stop" if stopping else "relaunch", params.get("run_id"))
        built["journal_error"] = journal.append(control.state_dir, header, entries)
    return built


def interrupted_summary(record):
    """What a run whose result nobody picked up (Ctrl-C, dropped connection) did on this host."""
    outcome = record.get("result") or {}
    servers = [f"{server['name']} {'down' if server.get('down') else server['action']}"
               for server in outcome.get("servers") or [] if server.get("changed")]
    return {"job_id": record["job_id"], "run_id": record.get("run_id"), "status": record["status"],
            "started": record.get("started"), "finished": record.get("finished"),
            "down": outcome.get("down") or [], "servers": servers, "msg": outcome.get("msg")}
