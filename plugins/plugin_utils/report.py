# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side reports of the relaunch, status and stop jobs: per-host tables and user assertions."""

from __future__ import annotations

from ansible_collections.gpuops.sglang.plugins.module_utils.readiness_rules import (
    STATES,
    count_ready,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log import (
    phase_reached,
)


class ExpectationError(ValueError):
    """A malformed expectation (not a failed one)."""


def _table(header, rows):
    """Left-aligned columns, as lines (a list reads well in every stdout callback)."""
    cells = [header] + [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells]


def _by_name(results):
    return {result["name"]: result for result in results or []}


def _gpus(server):
    return ",".join(str(gpu) for gpu in server["gpus"])


def _seconds(value):
    return None if value is None else f"{value:.1f}"


def _number(value):
    """Gauges arrive as floats; counts read better without a trailing .0."""
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() else f"{value:.1f}"
    return value


def _percent(value):
    return None if value is None else f"{100 * value:.0f}%"


def interrupted_lines(interrupted_runs):
    """What earlier runs did that nobody saw finish (Ctrl-C, a dropped connection), one line each."""
    return [f"an earlier run was interrupted (job {run['job_id']}, run {run.get('run_id') or '-'}); its host-side "
            f"sequence finished on its own: {', '.join(run['servers']) or 'nothing changed'}"
            + (f"; DOWN: {', '.join(run['down'])}" if run.get("down") else "")
            for run in interrupted_runs or []]


def relaunch_summary(servers, server_results, wait_results, interrupted_runs=None):
    """One line per server: GPUs, port, what the server module did, readiness and what it configured."""
    actions, waits = _by_name(server_results), _by_name(wait_results)
    rows = []
    for server in servers:
        acted = actions.get(server["name"], {})
        action = acted.get("action", "not relaunched")
        waited = waits.get(server["name"])
        if acted.get("down"):
            rows.append([server["name"], _gpus(server), server["port"], f"{action}: FAILED", "down", None, None,
                         None, None])
            continue
        if waited is None:
            rows.append([server["name"], _gpus(server), server["port"], action, "skipped", None, None, None, None])
            continue
        facts = waited.get("facts") or {}
        rows.append([server["name"], _gpus(server), server["port"], action, waited["status"],
                     waited.get("phase"), _seconds(waited.get("seconds_to_ready")),
                     facts.get("max_total_num_tokens"), facts.get("max_running_requests")])
    ready = count_ready(wait_results or [])
    header = ["server", "gpus", "port", "action", "status", "phase", "ready_s", "max_total_num_tokens",
              "max_running_requests"]
    down = [result["name"] for result in server_results or [] if result.get("down")]
    title = f"{ready}/{len(servers)} servers ready" + (f", DOWN: {', '.join(down)}" if down else "")
    return [title] + interrupted_lines(interrupted_runs) + _table(header, rows)


# Lines of a crashed server's traceback carried into the failure message; the whole one is in the wait result.
TRACEBACK_TAIL_LINES = 12


def relaunch_failures(servers, wait_results, server_results=None):
    """Why each server is not ready (with the tail of its traceback); halted batches were never waited for."""
    waits, actions = _by_name(wait_results), _by_name(server_results)
    failures = []
    for server in servers:
        waited = waits.get(server["name"])
        acted = actions.get(server["name"], {})
        if acted.get("error"):
            failures.append(acted["error"])
        elif waited is None:
            failures.append(f"{server['name']}: not relaunched, an earlier batch failed")
        elif not STATES[waited["status"]].ready:
            failure = waited.get("msg") or f"{server['name']}: {waited['status']} in {waited.get('phase')}"
            traceback = ((waited.get("error") or {}).get("traceback") or "").rstrip()
            if traceback:
                failure += "\n" + "\n".join(traceback.splitlines()[-TRACEBACK_TAIL_LINES:])
            failures.append(failure)
    return failures


def _bounds(fact, expectation):
    if isinstance(expectation, dict):
        unknown = set(expectation) - {"min", "max"}
        if unknown or not expectation:
            raise ExpectationError(f"expectation for {fact} must be {{min: N}} and/or {{max: N}}, got {expectation!r}")
        bounds = expectation.get("min"), expectation.get("max")
    else:
        # A bare number is a minimum: "at least this many running requests".
        bounds = expectation, None
    try:
        return tuple(None if bound is None else float(bound) for bound in bounds)
    except (TypeError, ValueError):
        raise ExpectationError(f"expectation for {fact} must be numbers, got {expectation!r}") from None


def expectation_failures(wait_results, expect):
    """Check what ready servers configured against ``{fact: {min: N, max: N}}``; returns the violations."""
    failures = []
    for fact, expectation in (expect or {}).items():
        minimum, maximum = _bounds(fact, expectation)
        for result in wait_results or []:
            if result["status"] != "ready":
                continue
            value = (result.get("facts") or {}).get(fact)
            if value is None:
                failures.append(f"{result['name']}: {fact} was not reported")
            elif minimum is not None and value < minimum:
                failures.append(f"{result['name']}: {fact}={value} is below the expected minimum {minimum:g}")
            elif maximum is not None and value > maximum:
                failures.append(f"{result['name']}: {fact}={value} is above the expected maximum {maximum:g}")
    return failures


def _nccl_state(nccl):
    if not nccl or not nccl.get("expected"):
        return "none"
    if nccl.get("ok"):
        return "ok"
    problems = [f"{item['variable']}={item['actual']} (want {item['expected']})"
                for item in nccl.get("mismatches") or []]
    problems += [f"missing {','.join(item['variables'])}" for item in nccl.get("missing") or []]
    return "MISMATCH " + "; ".join(sorted(set(problems)))


def fleet_status(servers, info_results, gpus):
    """Status table of one host: health, phase, usage, throughput, NCCL check, GPU memory per server."""
    infos = _by_name(info_results)
    memory = {gpu["index"]: gpu for gpu in gpus or []}
    rows = []
    for server in servers:
        info = infos.get(server["name"], {})
        metrics = info.get("metrics") or {}
        used = sum(memory[gpu]["memory_used_mib"] for gpu in server["gpus"] if gpu in memory)
        total = sum(memory[gpu]["memory_total_mib"] for gpu in server["gpus"] if gpu in memory)
        rows.append([
            server["name"], _gpus(server), server["port"], info.get("status"),
            (info.get("log") or {}).get("phase"), _percent(metrics.get("token_usage")),
            _percent(metrics.get("mamba_usage")), _number(metrics.get("num_running_reqs")),
            _number(metrics.get("num_queue_reqs")), _number(metrics.get("gen_throughput")),
            f"{used}/{total}" if total else None,
            "yes" if (info.get("launch_script") or {}).get("drift") else "no",
            _nccl_state(info.get("nccl")),
        ])
    header = ["server", "gpus", "port", "health", "phase", "tokens", "mamba", "running", "queued", "gen_tok/s",
              "gpu_mem_mib", "script_drift", "nccl"]
    ready = count_ready(infos[server["name"]] for server in servers if server["name"] in infos)
    return [f"{ready}/{len(servers)} servers ready"] + _table(header, rows) + _launcher_lines(servers, infos)


def _launcher_lines(servers, infos):
    """What systemd did behind our back: restarts of crashed servers, and units it could not tell about."""
    lines = []
    for server in servers:
        launcher = (infos.get(server["name"]) or {}).get("launcher") or {}
        if launcher.get("restarts"):
            times = "time" if launcher["restarts"] == 1 else "times"
            lines.append(f"{server['name']} restarted by systemd {launcher['restarts']} {times} "
                         f"(unit {launcher['unit']}, now {launcher['active_state']})")
        if launcher.get("error"):
            lines.append(f"{server['name']}: {launcher['error']}")
    return lines


def stop_summary(server_results, interrupted_runs=None):
    """One line per stopped server with the memory left on each of its GPUs."""
    rows = []
    for result in server_results:
        after = result.get("gpu_memory_after_mib") or {}
        action = f"{result['action']}: FAILED" if result.get("error") else result["action"]
        rows.append([result["name"], _gpus(result) if result.get("gpus") else None, action,
                     ",".join(str(after[gpu]) for gpu in sorted(after, key=int)) or None])
    return interrupted_lines(interrupted_runs) + _table(["server", "gpus", "action", "gpu_mem_after_mib"], rows)


def fleet_problems(info_results):
    """One message per server whose server_info status is failing (dead, crashed, orphaned), with its exception line."""
    problems = []
    for info in info_results or []:
        state = STATES.get(info.get("status"))
        if state is None or not state.failing:
            continue
        log = info.get("log") or {}
        phase, component = (phase_reached(log.get("timeline"), log.get("phase")) if state.names_phase_reached
                            else (log.get("phase"), log.get("component")))
        problems.append(state.sentence(dict(info, phase=phase, component=component, error=log.get("error"))))
    return problems
