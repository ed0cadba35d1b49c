# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A relaunch decided, and with ``act`` done, in the hold's one call (gpuops.sglang.host_lock ``converge``).

The controller renders the host's scripts for each SGLang version the host may have (launch_script.py
``launch_script_candidates``). Once the host is held, the scripts for the SGLang it has are planned as
gpuops.sglang.server would plan them, read only (its check mode). When every server is to stay as it runs, no script
or unit file would be written and no interrupted run is left to report, the servers are looked at as gpuops.sglang.wait
would look at them - for real: its verdicts, last good copies, router and journal - and the answers of both calls are
the hold's. With ``act`` (a relaunch the role would do in one batch) a plan with something to do is carried out in the
same call - the server call's own job, then the wait for what it launched - unless a canary defers servers, which the
role's own calls then do batch by batch. Anything else (a server to change without ``act``, a host with an SGLang no
candidate was rendered for, a request either call would refuse) is left to the role's own server and wait calls,
which say why.
"""

import time

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.gpuops.sglang.plugins.module_utils import (
    argument_specs,
    host_job,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.job import (
    ServerControl,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.request import (
    SERVER_ARGUMENT_SPEC,
    ServerControlError,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.result import (
    scrub_failure_words,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness import (
    wait_slice,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.run_lock import (
    RunLockError,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.script_files import (
    secrets_of,
)

# The servers' keys the wait is given (as the role passes them from the server call's results).
_WAIT_SERVER_KEYS = ("name", "port", "log_path", "pid", "action")


def chosen_candidate(candidates, installed):
    """The candidate rendered for the SGLang the host has (``installed``: host_lock's ``sglang``, one entry per
    interpreter), or None. Versions match as the text the host reported: a render is only reused for exactly that."""
    have = {(entry.get("interpreter"), entry.get("version")) for entry in installed
            if entry.get("version") and not entry.get("problem")}
    for candidate in candidates:
        if candidate["sglang"] and {(entry.get("interpreter"), entry.get("version"))
                                    for entry in candidate["sglang"]} <= have:
            return candidate
    return None


def _validated(spec, values):
    """``values`` with the defaults and types of ``spec``; raises ValueError naming what is wrong."""
    validation = ArgumentSpecValidator(spec).validate(values)
    if validation.error_messages:
        raise ValueError("; ".join(validation.error_messages))
    return validation.validated_parameters


def _shared(params, spec):
    """The host_lock options the module of ``spec`` takes too (the module_defaults groups they share)."""
    return {key: params[key] for key in spec if key in params and params[key] is not None}


def wait_params(params, servers, run_id, acted):
    """The wait's options; after servers were relaunched (``acted``), a failure keeps the hold for the rollback when the
    role asks (its server call would pass hold_on_failure too)."""
    converge = params["converge"]
    return _validated(argument_specs.WAIT_ARGUMENT_SPEC, dict(
        _shared(params, argument_specs.WAIT_ARGUMENT_SPEC), servers=servers, run_id=run_id, release_run=True,
        hold_on_failure=acted and converge["hold_on_failure"], timeout=converge["timeout"],
        stall_timeout=converge["stall_timeout"], kill_stalled=converge["kill_stalled"]))


def settled(planned):
    """Why the server call would do something (or None): a server to launch, stop or change, a script or unit file to
    write, a removed server to stop, a process to kill."""
    busy = [server["name"] for server in planned["servers"] if server["action"] != "unchanged" or server["error"]]
    if busy:
        return "to change: " + ", ".join(busy)
    written = [name for name, script in (planned.get("scripts") or {}).items() if script.get("changed")]
    if written or planned.get("script_diffs"):
        return "files to write: " + ", ".join(written or ["systemd units"])
    if planned.get("removed") or planned.get("stale_killed") or planned.get("foreign_killed"):
        return "servers no longer requested, or processes in the way"
    return None


def deferred_by(planned):
    """Why the role's own calls must do the relaunch (None when one call may): a canary, or the batch size, defers
    servers."""
    deferred = [server["name"] for server in planned["servers"] if server["action"] == "deferred"]
    return f"servers deferred until others are up: {', '.join(deferred)}" if deferred else None


def look(params, held, run_id, slice_end):
    """``{"server": ..., "wait": ..., "candidate": ...}`` (the answers of both calls) for a host that runs what the run
    asks - or, with ``act``, once it was made to - with ``carry`` while either goes on (``follow``); else
    ``{"needed": why}`` and nothing was touched. ``held``: what the hold read (``sglang``; ``gpus``, the plan's GPUs
    when there); ``slice_end``: when this call answers at the latest (time.time())."""
    converge = params["converge"]
    candidate = chosen_candidate(converge["candidates"], held["sglang"])
    if candidate is None:
        return {"needed": "no script was rendered for the SGLang this host has"}
    index = converge["candidates"].index(candidate)
    try:
        server_params = _validated(SERVER_ARGUMENT_SPEC, dict(
            _shared(params, SERVER_ARGUMENT_SPEC), **converge["server"], servers=converge["servers"],
            scripts=candidate["scripts"], required_paths=converge["required_paths"],
            secrets=secrets_of(candidate["scripts"], converge["secrets"]), state=converge["state"], run_id=run_id))
        planned = ServerControl(server_params, check_mode=True, gpus=held.get("gpus")).apply(0)
    except (ServerControlError, ValueError) as exc:
        return {"needed": str(exc)}
    why = settled(planned) or ("an interrupted run to report" if host_job.unreported(params["state_dir"]) else None)
    if why is None:
        for key in ("diff", "script_diffs"):
            planned.pop(key, None)
        return _then_wait(params, planned, index, run_id, acted=False)
    deferred = deferred_by(planned)
    if not converge["act"] or deferred:
        return {"needed": deferred or why}
    try:
        done = ServerControl(server_params, gpus=held.get("gpus")).apply(max(0.0, slice_end - time.time()))
    except ServerControlError as exc:  # refused before anything was touched (the host lock, the run's lease)
        return {"needed": str(exc)}
    return _after_server(params, done, index, run_id, server_params["secrets"])


def follow(params, carry, run_id):
    """The next slice of what ``look`` began: the server call's job, or the wait."""
    if "job" in carry:
        done = host_job.follow_result(params["state_dir"], carry["job"]["job"],
                                      time.time() + params["progress_interval"], carry["job"].get("events_seen", 0),
                                      run_id)
        return _after_server(params, done, carry["candidate"], run_id,
                             secrets_of(params["converge"]["candidates"][carry["candidate"]]["scripts"],
                                        params["converge"]["secrets"]))
    acted = carry.get("acted", False)
    waited = wait_slice(wait_params(params, carry["servers"], run_id, acted), carry=carry["wait"])
    return _answer(carry["server"], waited, carry["servers"], carry["candidate"], acted)


def _after_server(params, done, candidate, run_id, secrets):
    """The server call's job ended (then its launches are waited for), or goes on (``carry``)."""
    if "carry" in done:
        return {"server": done, "candidate": candidate, "acted": True,
                "carry": {"job": done.pop("carry"), "candidate": candidate}}
    for key in ("diff", "script_diffs", "progress"):
        done.pop(key, None)
    scrub_failure_words(done, secrets)
    launched = [server for server in done.get("servers") or []
                if not server.get("error") and server["action"] != "deferred"]
    if done.get("failed") or not launched:
        return {"server": done, "candidate": candidate, "acted": True}
    return _then_wait(params, done, candidate, run_id, acted=True, servers=launched)


def _then_wait(params, planned, candidate, run_id, acted, servers=None):
    servers = [{key: server[key] for key in _WAIT_SERVER_KEYS} for server in servers or planned["servers"]]
    try:
        waited = wait_slice(wait_params(params, servers, run_id, acted))
    except (ValueError, RunLockError) as exc:
        if not acted:
            return {"needed": str(exc)}
        waited = {"msg": str(exc)}  # the servers were relaunched: the role fails the run with this, as its wait would
    return _answer(planned, waited, servers, candidate, acted)


def _answer(planned, waited, servers, candidate, acted):
    """``candidate``: the index of the scripts the host runs, among the request's candidates."""
    # A server that is not ready fails the wait's task only through the role (after the summary), as in its own call.
    waited.pop("failed", None)
    carry = waited.pop("carry", None)
    answer = {"server": planned, "wait": waited, "candidate": candidate, "acted": acted}
    if carry is not None:
        answer["carry"] = {"wait": carry, "servers": servers, "server": planned, "candidate": candidate,
                           "acted": acted}
    return answer
