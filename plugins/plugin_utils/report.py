# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side reports of the relaunch, status and stop jobs: per-host tables and user assertions."""

from __future__ import annotations

import time

from ansible_collections.gpuops.sglang.plugins.module_utils import capacity_rules
from ansible_collections.gpuops.sglang.plugins.module_utils.fact_table import (
    HISTORY_COLUMNS,
    SUMMARY_COLUMNS,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launch_settings import (
    change_text,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness_rules import (
    STATES,
    count_ready,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log import (
    phase_reached,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.words import counted
from ansible_collections.gpuops.sglang.plugins.plugin_utils.outcomes import (
    STARTED_ACTIONS,
    by_name,
    check_headline,
    headline,
    relaunch_outcomes,
    started_anew,
)


class ExpectationError(ValueError):
    """A malformed expectation (not a failed one)."""


def _table(header, rows):
    """Left-aligned columns, as lines (a list reads well in every stdout callback)."""
    cells = [header] + [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells]


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


def _row_status(outcome, waited, acted):
    """The outcome column: what the server ends as; a failed one names how (crashed, stalled, down, ...)."""
    if outcome.outcome != "failed":
        return outcome.outcome
    if acted.get("down"):
        return "down"
    return (waited or {}).get("status") or "failed"


def relaunch_summary(servers, server_results, wait_results, interrupted_runs=None, probe=None, rollbacks=None,
                     installed_sglang=None, check_mode=False, removed=None):
    """The headline (what serves at the end: outcomes.headline), then one line per server: GPUs, port, what the
    server module did, its outcome and what it configured (a rolled-back server: what it serves again); then what
    changed since each server's last good run and, with a throughput ``probe`` result, its figures. The SGLang the
    host has installed (``installed_sglang``, host_lock's ``sglang``) follows the first line. In ``check_mode``
    the headline says what would be done (outcomes.check_headline), and nothing about readiness. The servers
    ``removed`` from the topology (the server module's ``removed``) are named after the table."""
    actions, waits, rolled_back = by_name(server_results), by_name(wait_results), by_name(rollbacks)
    verdicts = relaunch_outcomes(servers, server_results, wait_results, rollbacks, check_mode)
    rows = []
    for server, outcome in zip(servers, verdicts):
        acted = actions.get(server["name"], {})
        # A rolled-back server is described by its rollback's wait: what serves now.
        waited = rolled_back.get(server["name"]) or waits.get(server["name"]) or {}
        facts = waited.get("facts") or {}
        started = acted.get("action") in STARTED_ACTIONS and not acted.get("down")
        phase = waited.get("phase") if outcome.outcome == "failed" else None
        rows.append([server["name"], _gpus(server), server["port"], acted.get("action", "not relaunched"),
                     _row_status(outcome, waits.get(server["name"]), acted), phase,
                     _seconds(waited.get("seconds_to_ready")) if started else None,
                     *(facts.get(fact) for fact in SUMMARY_COLUMNS)])
    header = ["server", "gpus", "port", "action", "outcome", "failed_in", "ready_s", *SUMMARY_COLUMNS]
    return ([check_headline(verdicts) if check_mode else headline(verdicts)] + interrupted_lines(interrupted_runs)
            + installed_lines(installed_sglang, problems=False)
            + older_sglang_lines(_running_and_installed(servers, waits, installed_sglang))
            + _table(header, rows) + removed_lines(removed, check_mode) + drain_and_router_lines(server_results, wait_results)
            + since_last_good_lines(servers, actions, waits, verdicts) + rollback_lines(rollbacks)
            + probe_lines(probe))


def canary_report(wait_results, canaries, following, probe_servers=None):
    """``canary passed: gpu0 (ready in 5.2 s, max_total_num_tokens 2.26M, max_running_requests 53) - now the other
    7 servers: gpu1, ...``: the canary's own figures (and its probed output), said before the ``following`` go."""
    waits, probed = by_name(wait_results), by_name(probe_servers)
    described = []
    for name in canaries:
        waited = waits.get(name) or {}
        facts = waited.get("facts") or {}
        figures = ([f"ready in {_duration(waited['seconds_to_ready'])} s"] if waited.get("seconds_to_ready") else [])
        figures += [f"{fact} {_amount(facts[fact])}" for fact in SUMMARY_COLUMNS if facts.get(fact) is not None]
        output = (probed.get(name) or {}).get("output_tok_s")
        figures += [f"output {output:.0f} tok/s"] if isinstance(output, (int, float)) else []
        described.append(f"{name} ({', '.join(figures)})" if figures else name)
    return (f"canary passed: {'; '.join(described)} - now the other {counted(len(following), 'server')}: "
            f"{', '.join(following)}")


def removed_lines(removed, check_mode=False):
    """The servers gone from the topology (renamed, or merged by a new tp_size) that were stopped, and the launch
    scripts they leave behind."""
    if not removed:
        return []
    names = ", ".join(entry["name"] for entry in removed)
    scripts = [entry["launch_script"] for entry in removed if entry.get("launch_script")]
    line = f"{'would stop' if check_mode else 'stopped'} {counted(len(removed), 'server')} no longer in the topology: {names}"
    errors = [f"{entry['name']}: {entry['error']}" for entry in removed if entry.get("error")]
    return ([line + (f"; their launch scripts stay: {', '.join(scripts)}" if scripts else "")]
            + ([f"could not disable what would start them again: {'; '.join(errors)}"] if errors else []))


def installed_lines(installed_sglang, problems=True):
    """``SGLang 0.5.23 (/opt/sglang/bin/python)`` per server interpreter, or why there is no version (unless
    ``problems`` is false: the relaunch said it before rendering, with the launch scripts' notes)."""
    return [f"SGLang {entry['version']} ({entry['interpreter']})" if entry.get("version") else entry.get("problem", "")
            for entry in installed_sglang or [] if isinstance(entry, dict) and (problems or entry.get("version"))]


def older_sglang_lines(running_and_installed):
    """Servers that run another SGLang than their interpreter has installed now (started before an upgrade), one line
    per pair of versions: ``running_and_installed`` is (name, version it reports, version installed)."""
    older = {}
    for name, running, installed in running_and_installed:
        if running and installed and running != installed:
            older.setdefault((running, installed), []).append(name)
    return [f"{', '.join(names)} {'runs' if len(names) == 1 else 'run'} SGLang {running}, not the {installed} installed "
            f"now: a restart starts {installed} (relaunch_state: restarted)" for (running, installed), names in older.items()]


def _running_and_installed(servers, waits, installed_sglang):
    """(name, version it reported - None when it did not answer -, version installed) of each server; installed is
    None unless the host has one version (with several interpreters, which server runs which is not known here)."""
    versions = {entry.get("version") for entry in installed_sglang or [] if isinstance(entry, dict)}
    installed = versions.pop() if len(versions) == 1 else None
    return [(server["name"], ((waits.get(server["name"]) or {}).get("facts") or {}).get("version"), installed)
            for server in servers]


def drain_and_router_lines(server_results, wait_results):
    """How the stopped servers drained (the longest, and those cut at drain_timeout), and whether the ready ones
    are back in the router."""
    lines = []
    # Not a server that gave no count (still starting, hung, a node after rank 0): nothing was drained there.
    drains = [(result["name"], result["drain"]) for result in server_results or []
              if (result.get("drain") or {}).get("outcome") in ("drained", "exited", "timed_out")]
    if drains:
        name, longest = max(drains, key=lambda item: item[1]["seconds"])
        line = f"drained before the stop: {counted(len(drains), 'server')}, the longest {longest['seconds']:.1f} s ({name})"
        cut = [f"{name} ({counted(drain['requests_left'], 'request')})" for name, drain in drains
               if drain["outcome"] == "timed_out"]
        if cut:
            line += "; stopped at drain_timeout with requests in flight, which failed: " + ", ".join(cut)
        lines.append(line)
    routed = [result for result in wait_results or [] if result.get("router") and not result["router"].get("left_out")]
    left_out = [result["name"] for result in wait_results or [] if (result.get("router") or {}).get("left_out")]
    if left_out:
        lines.append("router: left out as found (not in it, and not taken out by this deployment; add them back yourself): "
                     + ", ".join(left_out))
    if routed:
        back = [result for result in routed if result["router"]["healthy"]]
        line = f"router: {len(back)}/{len(routed)} ready servers back in it, healthy"
        lost = [f"{result['name']} ({result.get('router_error')})" for result in routed if result not in back]
        if lost:
            line += "; NOT back: " + "; ".join(lost)
        lines.append(line)
    return lines


# What a new configuration may fail with so that its server goes back to its last good one (not "replaced":
# another run owns the server then).
ROLLBACK_STATUSES = ("crashed", "stalled", "timeout")


def rollback_candidates(wait_results, server_results=None):
    """Names of the servers that did not come up with the configuration just launched; with ``server_results``
    (the server module's), only those this run launched or relaunched with a new configuration - one it left
    unchanged, or restarted as it was (a server killed from outside), has no other configuration to go back to.
    Nor is a stalled server the wait did not kill (relaunch_kill_stalled false, ...): it stays as found."""
    changed = None if server_results is None else {result["name"] for result in server_results if started_anew(result)}
    return [result["name"] for result in wait_results or []
            if result["status"] in ROLLBACK_STATUSES and (changed is None or result["name"] in changed)
            and not (result["status"] == "stalled" and not result.get("killed_pids"))]


def rollback_outcomes(server_results, wait_results, reasons=None):
    """One record per server of a rollback call: where it went back to and whether it came up there.

    ``reasons``: {name: why} for servers rolled back although they came up (a canary whose throughput regressed).
    """
    waits = by_name(wait_results)
    outcomes = []
    for result in server_results or []:
        rollback = result.get("rollback") or {}
        waited = waits.get(result["name"]) or {}
        outcomes.append({"name": result["name"], "to_run_id": rollback.get("to_run_id"),
                         "to_time": rollback.get("to_time"), "key_status": rollback.get("key_status"),
                         "error": rollback.get("error") or result.get("error"),
                         "status": waited.get("status") or ("down" if result.get("down") else "stopped"),
                         "msg": waited.get("msg"), "reason": (reasons or {}).get(result["name"]),
                         # what it serves with again (the summary's row), when it came up
                         "facts": waited.get("facts"), "seconds_to_ready": waited.get("seconds_to_ready")})
    return outcomes


# Which key a rolled-back server serves with (by name: never the value), from the server module's rollback.key_status.
ROLLBACK_KEY_WORDS = {
    "current": "with the current sglang_api_key",
    "rekeyed": "with the current sglang_api_key (put in place of the older key its last good script had)",
    "removed": "without an API key, as sglang_api_key is unset now (its last good script had one: removed)",
    "none": "without an API key (sglang_api_key is unset)",
}


def _rollback_words(outcome):
    if outcome["to_run_id"] is None:
        return outcome["error"] or "no last good configuration: left stopped"
    where = f"rolled back to the configuration of run {outcome['to_run_id'][:8]} of {_when(outcome['to_time'])}"
    if outcome.get("key_status"):
        where += " " + ROLLBACK_KEY_WORDS[outcome["key_status"]]
    if outcome["status"] == "ready":
        return f"{where}: ready again"
    return f"{where}, which failed too (not retried): {outcome['msg'] or outcome['error'] or outcome['status']}"


def rollback_lines(rollbacks):
    """``rolled back:`` then one line per server: why, to which run, and whether it serves again."""
    if not rollbacks:
        return []
    return ["rolled back:"] + [f"  {outcome['name']}: " + (f"{outcome['reason']}; " if outcome["reason"] else "")
                               + _rollback_words(outcome) for outcome in rollbacks]


def _drop_percent(before, after):
    """How many percent ``after`` fell below ``before``; None when it did not fall or there is nothing to compare."""
    if not before or after is None or after >= before:
        return None
    return 100.0 * (before - after) / before


def throughput_regressions(probe_results, max_drop_percent, canaries=()):
    """``{name: why}`` of the probed servers whose output tok/s fell more than ``max_drop_percent`` below their
    last good run's probe (no earlier probe: nothing to compare); and of the ``canaries`` the probe did not measure
    (not probed, refused, nothing generated): a canary judged on its throughput fails closed."""
    measured = {result["name"]: result for result in probe_results or []
                if result.get("status") == "probed" and result.get("output_tok_s")}
    regressed = {}
    for name in canaries:
        if name not in measured:
            result = next((result for result in probe_results or [] if result["name"] == name), None)
            why = (result.get("error") or f"it generated nothing ({counted(result.get('errors', 0), 'error')})") if result \
                else "the probe did not run"
            regressed[name] = f"its throughput was not measured ({why}): a canary stays only on a measured throughput"
    for result in probe_results or []:
        pair = ((result.get("since_last_good") or {}).get("probe") or {}).get("output_tok_s") or {}
        before, after = pair.get("before"), pair.get("after")
        drop = _drop_percent(before, after)
        if drop is not None and drop > float(max_drop_percent):
            regressed[result["name"]] = (f"output {after:.0f} tok/s is {drop:.0f} % below {before:.0f} of its last "
                                         f"good run (at most {max_drop_percent} %)")
    return regressed


def _pair(first, second):
    return None if first is None else f"{first:.2f}/{second:.2f}"


def _versus(result, figure="output_tok_s"):
    """``+65% vs 1280`` against the last good run's probe, or None."""
    pair = ((result.get("since_last_good") or {}).get("probe") or {}).get(figure) or {}
    before, after = pair.get("before"), pair.get("after")
    if not before or after is None:
        return None
    return f"{100.0 * (after - before) / before:+.0f}% vs {before:.0f}"


def probe_lines(probe):
    """The throughput probe: the host's figures, then a line per server with its capacity judgement."""
    if not probe or not probe.get("servers"):
        return []
    probed = [result for result in probe["servers"] if result.get("status") == "probed"]
    host = probe.get("host") or {}
    title = (f"throughput probe ({counted(len(probed), 'server')}, {host.get('concurrency')} requests in flight, "
             f"{host.get('window_s')} s): {host.get('output_tok_s')} output tok/s, {host.get('requests_s')} req/s, "
             f"TTFT p50/p90 {_pair(host.get('ttft_p50_s'), host.get('ttft_p90_s'))} s, e2e p50/p90 "
             f"{_pair(host.get('e2e_p50_s'), host.get('e2e_p90_s'))} s, {counted(host.get('errors'), 'error')}")
    lines = [title]
    rows = [[result["name"], result.get("output_tok_s"), _versus(result), result.get("requests_s"),
             _pair(result.get("ttft_p50_s"), result.get("ttft_p90_s")),
             _pair(result.get("e2e_p50_s"), result.get("e2e_p90_s")), result.get("errors"),
             capacity_rules.sentence(result["capacity"]) if result.get("capacity") else None]
            for result in probed]
    lines += _table(["server", "output_tok/s", "vs_last_good", "req/s", "ttft_p50/p90_s", "e2e_p50/p90_s", "errors",
                     "capacity"], rows)
    lines += [result["error"] for result in probe["servers"] if result.get("status") == "refused"]
    return lines


def _amount(value):
    """1.21M, 45.0k, 32: pool sizes read at a glance."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.1f}k"
    return str(_number(float(value)))


def _duration(seconds):
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.1f}"


def _when(epoch):
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch)) if epoch else "?"


def comparison_text(compared):
    """``SGLang 0.5.10 -> 0.5.23; --x a -> b; max_running_requests 32 -> 64, ready 212 s -> 95 s, output 1280 ->
    2120 tok/s`` (SGLang only when the host's version changed)."""
    changes = [change_text(change) for change in compared["changed"]]
    version = compared.get("sglang_version")
    if version:
        changes.insert(0, f"SGLang {version['before'] or '(unknown)'} -> {version['after']}")
    changed = "; ".join(changes) or "same settings"
    deltas = [f"{fact} {_amount(pair['before'])} -> {_amount(pair['after'])}"
              for fact, pair in compared["facts"].items() if pair["before"] != pair["after"]]
    ready = compared["timings"].get("ready_s")
    if ready and None not in (ready["before"], ready["after"]):
        deltas.append(f"ready {_duration(ready['before'])} s -> {_duration(ready['after'])} s")
    output = compared["probe"].get("output_tok_s")
    if output and None not in (output["before"], output["after"]):
        deltas.append(f"output {output['before']:.0f} -> {output['after']:.0f} tok/s")
    return f"{changed}; {', '.join(deltas) or 'same facts'}"


def since_last_good_lines(servers, actions, waits, verdicts=None):
    """For each relaunched server: the settings that changed and the deltas against the last run it came up in; a
    server whose new configuration does not serve (rolled back, failed) says so. Servers with nothing to compare
    share one line per reason (a first launch of 8 servers is one line, not 8)."""
    outcomes = {verdict.name: verdict.outcome for verdict in verdicts or []}
    lines = []
    nothing_to_compare = {}  # why -> the servers it applies to, in order
    for server in servers:
        waited = waits.get(server["name"]) or {}
        if (actions.get(server["name"]) or {}).get("action") not in STARTED_ACTIONS:
            continue
        compared = waited.get("since_last_good")
        outcome = outcomes.get(server["name"], "ready")
        label = server["name"] + (f" ({outcome}: not live)" if outcome in ("rolled back", "failed") else "")
        if compared:
            renamed = f"{compared['name']} (the same model on the same GPUs) in " if compared.get("name") else ""
            lines.append(f"{label} vs {renamed}run {(compared['run_id'] or '-')[:8]} of {_when(compared['time'])}: "
                         f"{comparison_text(compared)}")
        elif waited.get("model_came_up_as"):
            nothing_to_compare.setdefault(
                f"first run of this model under this name on these GPUs; it came up here before as "
                f"{', '.join(waited['model_came_up_as'])} (nothing to compare)", []).append(label)
        elif "since_last_good" in waited:
            nothing_to_compare.setdefault("no earlier run of this model came up on this host (nothing to compare)",
                                          []).append(label)
    lines += [f"{', '.join(labels)}: {why}" for why, labels in nothing_to_compare.items()]
    return (["since the last good run:"] + ["  " + line for line in lines]) if lines else []


# Lines of a crashed server's traceback carried into the failure message; the whole one is in the wait result.
TRACEBACK_TAIL_LINES = 12


def relaunch_failures(servers, wait_results, server_results=None, rollbacks=None):
    """Why each server is not ready (with the tail of its traceback); halted batches were never waited for. A
    server that was rolled back says where to and whether it serves again - the run fails all the same."""
    waits, actions, rolled_back = by_name(wait_results), by_name(server_results), by_name(rollbacks)
    failures = []
    for server in servers:
        waited = waits.get(server["name"])
        acted = actions.get(server["name"], {})
        rollback = rolled_back.get(server["name"])
        if acted.get("error"):
            failure = acted["error"]
        elif waited is None:
            failure = f"{server['name']}: not relaunched, an earlier batch failed"
        elif not STATES[waited["status"]].ready:
            failure = waited.get("msg") or f"{server['name']}: {waited['status']} in {waited.get('phase')}"
            traceback = ((waited.get("error") or {}).get("traceback") or "").rstrip()
            if traceback:
                failure += "\n" + "\n".join(traceback.splitlines()[-TRACEBACK_TAIL_LINES:])
        elif rollback and rollback["reason"]:
            failure = f"{server['name']}: {rollback['reason']}"
        else:
            continue
        if rollback:
            why = "" if rollback["reason"] else "the new configuration failed; "
            failure += f"\n{server['name']}: {why}{_rollback_words(rollback)}"
        failures.append(failure)
    return failures


EXPECTATION_KEYS = ("min", "max", "max_drop_percent")


def _bounds(fact, expectation):
    """``(min, max, max_drop_percent)`` of one expectation."""
    if isinstance(expectation, dict):
        unknown = set(expectation) - set(EXPECTATION_KEYS)
        if unknown or not expectation:
            raise ExpectationError(f"expectation for {fact} must be {{min: N}}, {{max: N}} and/or "
                                   f"{{max_drop_percent: P}} (against the last good run), got {expectation!r}")
        bounds = tuple(expectation.get(key) for key in EXPECTATION_KEYS)
    else:
        # A bare number is a minimum: "at least this many running requests".
        bounds = expectation, None, None
    try:
        bounds = tuple(None if bound is None else float(bound) for bound in bounds)
    except (TypeError, ValueError):
        raise ExpectationError(f"expectation for {fact} must be numbers, got {expectation!r}") from None
    if bounds[2] is not None and not 0 <= bounds[2] <= 100:
        raise ExpectationError(f"max_drop_percent for {fact} must be 0-100, got {expectation['max_drop_percent']!r}")
    return bounds


def expectation_problems(expect):
    """Why an expectation of ``relaunch_expect`` cannot be checked, one message each: said before the run, not after."""
    problems = []
    for fact, expectation in (expect or {}).items():
        try:
            _bounds(fact, expectation)
        except ExpectationError as exc:
            problems.append(f"relaunch_expect: {exc}")
    return problems


def _figure(result, probe, fact):
    """A configured fact of the server, or a figure of its throughput probe."""
    value = (result.get("facts") or {}).get(fact)
    return value if value is not None else (probe or {}).get(fact)


def _drop_failure(result, fact, value, max_drop, probes_before):
    """Relative to the last good run of the same model: ``fact`` may not fall by more than ``max_drop`` percent."""
    compared = result.get("since_last_good")
    if not compared:
        return None
    before = (compared["facts"].get(fact) or {}).get("before")
    if before is None:
        before = probes_before.get(result["name"], {}).get(fact)
    drop = _drop_percent(before, value)
    if drop is None or drop <= max_drop:
        return None
    return (f"{result['name']}: {fact}={_number(value)} dropped {drop:.1f} % against {_number(before)} in the last "
            f"good run {(compared['run_id'] or '-')[:8]} of {_when(compared['time'])} (at most {max_drop:g} % allowed)")


def expectation_failures(wait_results, expect, probe_results=None):
    """Check ready servers against ``{fact: {min: N, max: N, max_drop_percent: P}}``; returns the violations.

    A fact is what the server configured or, with ``probe_results``, a figure its throughput probe measured;
    ``max_drop_percent`` compares with the last good run of the same model (nothing to compare: no failure).
    """
    probes = by_name(probe_results)
    probes_before = {name: {key: pair["before"] for key, pair in ((probe.get("since_last_good") or {}).get("probe")
                                                                  or {}).items()}
                     for name, probe in probes.items()}
    failures = []
    for fact, expectation in (expect or {}).items():
        minimum, maximum, max_drop = _bounds(fact, expectation)
        for result in wait_results or []:
            if result["status"] != "ready":
                continue
            value = _figure(result, probes.get(result["name"]), fact)
            if value is None:
                failures.append(f"{result['name']}: {fact} was not reported")
            elif minimum is not None and value < minimum:
                failures.append(f"{result['name']}: {fact}={value} is below the expected minimum {minimum:g}")
            elif maximum is not None and value > maximum:
                failures.append(f"{result['name']}: {fact}={value} is above the expected maximum {maximum:g}")
            elif max_drop is not None:
                failure = _drop_failure(result, fact, value, max_drop, probes_before)
                if failure:
                    failures.append(failure)
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
    infos = by_name(info_results)
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
    running_and_installed = []
    for server in servers:
        info = infos.get(server["name"]) or {}
        running_and_installed.append((server["name"], (info.get("server_info") or {}).get("version"),
                                      (info.get("sglang") or {}).get("version")))
    return ([f"{ready}/{len(servers)} servers ready"] + _server_sglang_lines(servers, infos)
            + older_sglang_lines(running_and_installed) + _table(header, rows)
            + _launcher_lines(servers, infos) + capacity_lines(servers, infos))


def _server_sglang_lines(servers, infos):
    """What each server's interpreter has installed now, each answer once; where the servers' answers differ (two
    environments with an interpreter of the same name), each names where it was found and its servers."""
    by_answer = {}
    for server in servers:
        answer = (infos.get(server["name"]) or {}).get("sglang")
        if isinstance(answer, dict):
            key = tuple(answer.get(field) for field in ("interpreter", "version", "location", "problem"))
            by_answer.setdefault(key, (answer, []))[1].append(server["name"])
    if len(by_answer) < 2:
        return installed_lines([answer for answer, _names in by_answer.values()])
    return [f"{line}{' in ' + answer['location'] if answer.get('location') else ''}: {', '.join(names)}"
            for answer, names in by_answer.values() for line in installed_lines([answer])]


def capacity_lines(servers, infos):
    """The capacity verdict of each server from its live metrics, servers with the same words on one line."""
    by_sentence = {}
    for server in servers:
        verdict = (infos.get(server["name"]) or {}).get("capacity")
        if verdict:
            by_sentence.setdefault(capacity_rules.sentence(verdict), []).append(server["name"])
    return [f"{', '.join(names)}: {sentence}" for sentence, names in by_sentence.items()]


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


def _spread(entries, fact):
    """``32`` or ``32-53``: a configured fact over the servers of one run."""
    values = [entry["facts"][fact] for entry in entries if (entry.get("facts") or {}).get(fact) is not None]
    if not values:
        return None
    low, high = min(values), max(values)
    return _amount(low) if low == high else f"{_amount(low)}-{_amount(high)}"


# The journal outcomes of servers nobody waited for: launched by a run interrupted in (or still in) its wait, or by
# one whose server call's result nobody picked up (_lifecycle/result.py: journaled, journal_interrupted).
UNWAITED_OUTCOMES = ("unwaited", "interrupted", "lost")


def history_table(runs):
    """One line per journal run: when, job, run, who, outcome, settings changed, pool facts, slowest ready, probe."""
    rows = []
    for run in runs or []:
        entries = list((run.get("servers") or {}).values())
        outcomes = [entry.get("outcome") for entry in entries]
        ready = sum(outcome in ("ready", "unchanged") for outcome in outcomes)
        rolled_back = sorted(name for name, entry in run["servers"].items() if entry.get("rolled_back"))
        # Live changes; what a rollback undid is named as such, never as live.
        changed = sorted({change["setting"] for entry in entries for change in entry.get("changed") or []})
        changed += sorted({f"{change['setting']} (rolled back)" for entry in entries
                           for change in (entry.get("rolled_back") or {}).get("attempted") or []})
        slowest = max((entry["timings"]["ready_s"] for entry in entries
                       if (entry.get("timings") or {}).get("ready_s") is not None), default=None)
        output = [entry["probe"]["output_tok_s"] for entry in entries
                  if (entry.get("probe") or {}).get("output_tok_s") is not None]
        by = run.get("by") or {}
        who = by.get("user") or "-"
        if by.get("awx_job_id"):
            who += f" (AWX job {by['awx_job_id']})"
        elif by.get("controller"):
            who += f"@{by['controller']}"
        failed = sorted({outcome for outcome in outcomes if outcome not in ("ready", "unchanged", "stopped",
                                                                            "already_stopped")})
        unwaited = sum(outcome in UNWAITED_OUTCOMES for outcome in outcomes)
        if unwaited and unwaited == len(entries):
            # An interrupted run, journaled by the call that found it: nobody saw what came up.
            if "lost" in outcomes:
                outcome = f"interrupted: its worker died before it finished ({counted(unwaited, 'server')} planned)"
            elif "interrupted" in outcomes:
                outcome = f"interrupted: {counted(unwaited, 'server')} changed, not waited for"
            else:
                outcome = f"{counted(unwaited, 'server')} changed, not waited for (interrupted in its wait, or waiting)"
        elif run.get("job") in ("relaunch", "status"):
            outcome = (f"{ready}/{len(entries)} up" + (f" ({', '.join(failed)})" if failed else "")
                       + (f" ({', '.join(rolled_back)} rolled back)" if rolled_back else ""))
        else:
            outcome = f"{len(entries)} stopped"
        versions = sorted({entry["sglang_version"] for entry in entries if entry.get("sglang_version")})
        rows.append([_when(run.get("time")), run.get("job"), (run.get("run_id") or "-")[:8], who,
                     ",".join(versions) or None, outcome,
                     ",".join(changed) or None, *(_spread(entries, fact) for fact in HISTORY_COLUMNS),
                     _seconds(slowest), _seconds(sum(output)) if output else None])
    header = ["time", "job", "run", "by", "sglang", "outcome", "changed", *HISTORY_COLUMNS, "slowest_ready_s",
              "probe_tok/s"]
    return _table(header, rows)


def fleet_problems(info_results):
    """One message per server whose server_info status is failing (dead, crashed, orphaned, foreign_listener,
    misconfigured, ...: STATES), with its exception line."""
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
