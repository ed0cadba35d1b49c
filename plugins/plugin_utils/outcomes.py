# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each server of a relaunch ends as - its outcome - from what the run's modules reported, and the headline
that counts what serves at the end. Pure: the summary, the failures and their tests read the same verdicts.

Outcomes: ``ready`` (started by this run, ready), ``unchanged`` (left as it was, ready), ``rolled back`` (the new
configuration failed or regressed; it serves its last good one again), ``failed`` (does not serve: crashed,
stalled, timed out, down, or its rollback failed too), ``unrouted`` (ready, but the router did not take it back),
``deferred`` (not relaunched: an earlier batch failed; it runs as it was, unchecked), ``stopped``. In check mode
nothing runs: ``would relaunch``, ``would launch``, ``would stop`` or ``unchanged``, and no readiness is counted.
"""

from __future__ import annotations

import collections

from ansible_collections.gpuops.sglang.plugins.module_utils.launch_settings import (
    change_text,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness_rules import (
    STATES,
)

Outcome = collections.namedtuple("Outcome", "name outcome serving why")

STARTED_ACTIONS = ("launched", "relaunched")


def by_name(results):
    """{name: result} of module results (server, wait, rollback records)."""
    return {result["name"]: result for result in results or []}


def started_anew(acted):
    """The server module launched the server with a new configuration: a launch script it wrote in this call, or
    one that never came up on this host (written by an earlier run that failed or was interrupted) - not a server
    started again as it ran before (killed from outside, restarted)."""
    return acted.get("action") in STARTED_ACTIONS and bool(
        acted.get("script_changed") or acted.get("settings_changed") or acted.get("came_up_before") is False)


def attempt_words(waited, new_configuration=True):
    """``new configuration crashed in loading_weights``: how the configuration a server was relaunched with failed
    (only ``crashed in ...`` when its configuration did not change: a restart, a server killed from outside)."""
    phase = waited.get("phase")
    return ("new configuration " if new_configuration else "") + waited["status"] + (f" in {phase}" if phase else "")


def server_outcome(server, acted, waited, rollback):
    """The Outcome of one server from its server module result, wait result and rollback record (each or None)."""
    name = server["name"]
    if rollback:
        why = rollback.get("reason") or attempt_words(waited or {"status": "failed"})
        if rollback.get("status") == "ready":
            return Outcome(name, "rolled back", True, why)
        gone_to = "no last good configuration" if rollback.get("to_run_id") is None else "its rollback failed too"
        return Outcome(name, "failed", False, f"{why}; {gone_to}")
    acted = acted or {}
    if acted.get("down"):
        return Outcome(name, "failed", False, "DOWN (stopped, and not started again)")
    if acted.get("action") in ("stopped", "already_stopped"):
        return Outcome(name, "stopped", False, None)
    if waited is None:
        return Outcome(name, "deferred", False, "not relaunched: an earlier batch failed")
    status = waited["status"]
    if STATES[status].ready:
        return Outcome(name, "ready" if acted.get("action") in STARTED_ACTIONS else "unchanged", True, None)
    if status == "unrouted":
        return Outcome(name, "unrouted", False, waited.get("router_error"))
    return Outcome(name, "failed", False, attempt_words(waited, new_configuration=started_anew(acted)))


def checked_outcome(server, acted):
    """The Outcome of one server in check mode: what the run would do (it serves as it does: not counted)."""
    action = (acted or {}).get("action")
    if action in ("unchanged", "already_stopped", None):
        return Outcome(server["name"], "unchanged" if action != "already_stopped" else "stopped", False, None)
    # What would change; a server that would be launched is not running, which its verb says.
    changes = "; ".join(change_text(change) for change in acted.get("settings_changed") or []) or (
        acted.get("reason") if action != "launched" else None)
    return Outcome(server["name"], "would " + {"launched": "launch", "relaunched": "relaunch",
                                               "stopped": "stop"}.get(action, action), False, changes)


def relaunch_outcomes(servers, server_results, wait_results, rollbacks=None, check_mode=False):
    """The Outcome of every server of the run, in the order of ``servers``."""
    actions, waits, rolled_back = by_name(server_results), by_name(wait_results), by_name(rollbacks)
    if check_mode:
        return [checked_outcome(server, actions.get(server["name"])) for server in servers]
    return [server_outcome(server, actions.get(server["name"]), waits.get(server["name"]),
                           rolled_back.get(server["name"])) for server in servers]


def _names(outcomes):
    return ", ".join(outcome.name for outcome in outcomes)


def check_headline(outcomes):
    """``check mode, nothing done: would relaunch 8 (gpu0, ...): --mamba-scheduler-strategy extra_buffer -> no_buffer``;
    servers that would change alike are said together."""
    groups = {}
    for outcome in outcomes:
        if outcome.outcome.startswith("would "):
            groups.setdefault((outcome.outcome, outcome.why), []).append(outcome)
    said = [f"{verb} {len(group)} ({_names(group)})" + (f": {why}" if why else "")
            for (verb, why), group in groups.items()]
    unchanged = sum(not outcome.outcome.startswith("would ") for outcome in outcomes)
    return "check mode, nothing done: " + "; ".join(said + [f"{unchanged} unchanged"] if said else
                                                    ["nothing would change"])


def headline(outcomes):
    """``8/8 serving - gpu3 rolled back: new configuration crashed in loading_weights``; the servers that do not
    serve (or were rolled back, or deferred) each say why, once."""
    serving = sum(outcome.serving for outcome in outcomes)
    title = f"{serving}/{len(outcomes)} serving"
    notes = [f"{outcome.name} {outcome.outcome}" + (f": {outcome.why}" if outcome.why else "")
             for outcome in outcomes if outcome.outcome in ("rolled back", "failed", "unrouted")]
    deferred = [outcome for outcome in outcomes if outcome.outcome == "deferred"]
    if deferred:
        notes.append(f"{_names(deferred)} deferred (not relaunched: an earlier batch failed)")
    stopped = [outcome for outcome in outcomes if outcome.outcome == "stopped"]
    if stopped:
        notes.append(f"{_names(stopped)} stopped")
    return title + (" - " + "; ".join(notes) if notes else "")
