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

import copy
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
    """``values`` with the defaults and types of ``spec``; raises ValueError naming what is wrong. The validator
    writes defaults into the spec it is given (a sub-option's dict): a copy, so the module's shared specs (and their
    doc fragments) stay as written."""
    validation = ArgumentSpecValidator(copy.deepcopy(spec)).validate(values)
    if validation.error_messages:
        raise ValueError("; ".join(validation.error_messages))
    return validation.validated_parameters


def _shared(params, spec):
    """The host_lock options the module of ``spec`` takes too (the module_defaults groups they share)."""
    return {key: params[key] for key in spec if key in params and params[key] is not None}


def wait_params(params, servers, run_id, acted, release, slice_end):
    """The wait's options. After servers were relaunched (``acted``), a failure keeps the hold for the rollback when
    the role asks (its server call would pass hold_on_failure too); ``release`` False keeps it for the role's next
    batches; ``slice_end``: what is left of this call's slice is the wait's."""
    converge = params["converge"]
    interval = max(0.1, slice_end - time.time())
    return _validated(argument_specs.WAIT_ARGUMENT_SPEC, dict(
        _shared(params, argument_specs.WAIT_ARGUMENT_SPEC), servers=servers, run_id=run_id, release_run=release,
        hold_on_failure=acted and converge["hold_on_failure"], timeout=converge["timeout"],
        stall_timeout=converge["stall_timeout"], kill_stalled=converge["kill_stalled"], progress_interval=interval))


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
    """``{"server": ..., "wait": ..., "candidate": ..., "acted": ...}`` (the answers of both calls) for a host that
    runs what the run asks - or, with ``act``, once it was made to - with ``carry`` while either goes on (``follow``);
    else ``{"needed": why}`` and nothing was touched. ``held``: what the hold read (``sglang``; ``gpus``, the plan's
    GPUs when there); ``slice_end``: when this call answers at the latest (time.time())."""
    converge = params["converge"]
    candidate = chosen_candidate(converge["candidates"], held["sglang"])
    if candidate is None:
        return {"needed": "no script was rendered for the SGLang this host has"}
    index = converge["candidates"].index(candidate)
    try:
        server_params = _validated(SERVER_ARGUMENT_SPEC, dict(
            _shared(params, SERVER_ARGUMENT_SPEC), **converge["server"], servers=converge["servers"],
            scripts=candidate["scripts"], required_paths=converge["required_paths"],
            secrets=_secrets(params, index), state=converge["state"], run_id=run_id))
        planned = ServerControl(server_params, check_mode=True, gpus=held.get("gpus")).apply(0)
    except (ServerControlError, ValueError) as exc:
        return {"needed": str(exc)}
    why = settled(planned) or ("an interrupted run to report" if host_job.unreported(params["state_dir"]) else None)
    secrets = server_params["secrets"]
    if why is None:
        for key in ("diff", "script_diffs"):
            planned.pop(key, None)
        return _then_wait(params, planned, index, run_id, secrets, slice_end, acted=False)
    deferred = deferred_by(planned)
    if not converge["act"] or deferred:
        return {"needed": deferred or why}
    return _acting(index, secrets, lambda: _after_server(
        params, ServerControl(server_params, gpus=held.get("gpus")).apply(max(0.0, slice_end - time.time())), index,
        run_id, secrets, slice_end))


def follow(params, carry, run_id):
    """The next slice of what ``look`` began: the server call's job, or the wait."""
    slice_end = time.time() + params["progress_interval"]
    candidate = carry["candidate"]
    secrets = _secrets(params, candidate)
    if "job" in carry:
        return _acting(candidate, secrets, lambda: _after_server(
            params, host_job.follow_result(params["state_dir"], carry["job"]["job"], slice_end,
                                           carry["job"].get("events_seen", 0), run_id),
            candidate, run_id, secrets, slice_end))
    waited = _wait(params, carry["servers"], run_id, carry["acted"], carry["release"], slice_end, secrets,
                   carry["wait"])
    return _answer(carry["server"], waited, carry["servers"], candidate, carry["acted"], carry["release"])


def _secrets(params, candidate):
    """What the scripts of ``candidate`` hide, as gpuops.sglang.server reckons it from its scripts."""
    converge = params["converge"]
    return secrets_of(converge["candidates"][candidate]["scripts"], converge["secrets"])


def _acting(candidate, secrets, step):
    """``step()`` of a relaunch this call began. Its errors are the server call's answer, as that module gives them
    (scrubbed: never a raw traceback, which could quote a command line); the role fails the run with it inside the
    block that gives the host back."""
    try:
        return step()
    except ServerControlError as exc:
        server = dict(exc.details, msg=str(exc))
    except host_job.JobError as exc:
        server = {"msg": str(exc)}
    except Exception as exc:  # noqa: BLE001  # pylint: disable=broad-except
        server = {"msg": f"unexpected {type(exc).__name__}: {exc}"}
    return {"server": scrub_failure_words(server, secrets), "candidate": candidate, "acted": True}


def _after_server(params, done, candidate, run_id, secrets, slice_end):
    """The server call's job ended (then what it launched is waited for, as the role waits for a batch, also when
    another server of it failed), or goes on (``carry``)."""
    progress = done.pop("progress", None)
    if "carry" in done:
        return {"server": done, "candidate": candidate, "acted": True, "progress": progress,
                "carry": {"job": done.pop("carry"), "candidate": candidate}}
    for key in ("diff", "script_diffs"):
        done.pop(key, None)
    scrub_failure_words(done, secrets)
    launched = [server for server in done.get("servers") or []
                if not server.get("error") and server["action"] != "deferred"]
    if not launched:
        return {"server": done, "candidate": candidate, "acted": True, "progress": progress}
    # The plan of the locked host deferred servers (a canary) where the read-only one had not (an earlier run's job
    # ended in between): the hold stays for the role's next batches.
    answer = _then_wait(params, done, candidate, run_id, secrets, slice_end, acted=True, servers=launched,
                        release=deferred_by(done) is None)
    return dict(answer, progress=progress)


def _then_wait(params, planned, candidate, run_id, secrets, slice_end, acted, servers=None, release=True):
    """The wait's first slice, for ``servers`` (else every server of the plan: a host left as it runs)."""
    servers = [{key: server[key] for key in _WAIT_SERVER_KEYS} for server in servers or planned["servers"]]
    waited = _wait(params, servers, run_id, acted, release, slice_end, secrets)
    if not acted and "servers" not in waited:  # nothing was touched: the role's own calls say it
        return {"needed": waited["msg"]}
    return _answer(planned, waited, servers, candidate, acted, release)


def _wait(params, servers, run_id, acted, release, slice_end, secrets, carry=None):
    """A slice of the wait. Its errors are its answer (``msg``, scrubbed): after a relaunch, the role fails the run
    with it, as its wait task would."""
    try:
        return wait_slice(wait_params(params, servers, run_id, acted, release, slice_end), carry=carry)
    except (ValueError, RunLockError) as exc:
        return {"msg": str(exc)}
    except Exception as exc:  # noqa: BLE001  # pylint: disable=broad-except
        return scrub_failure_words({"msg": f"unexpected {type(exc).__name__}: {exc}"}, secrets)


def _answer(planned, waited, servers, candidate, acted, release):
    """``candidate``: the index of the scripts the host runs, among the request's candidates."""
    # A server that is not ready fails the wait's task only through the role (after the summary), as in its own call.
    waited.pop("failed", None)
    carry = waited.pop("carry", None)
    answer = {"server": planned, "wait": waited, "candidate": candidate, "acted": acted}
    if carry is not None:
        answer["carry"] = {"wait": carry, "servers": servers, "server": planned, "candidate": candidate,
                           "acted": acted, "release": release}
    return answer
