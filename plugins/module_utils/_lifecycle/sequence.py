# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sequence in the detached worker: every server that changes goes through the steps (steps.py) at its own
pace, polled together; one server's fault fails that server alone, never the others.
``control`` is the job's ServerControl (job.py)."""

import signal
import time

from ansible_collections.gpuops.sglang.plugins.module_utils import naming
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle import (
    step_table,
    steps,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.result import (
    journaled,
    result,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_text
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    remove_state,
)

_POLL_SECONDS = 0.25


def guarded(control, plan, now, step, *args):
    """One server's step; whatever it raises fails that server alone, never the sequence of the others."""
    try:
        step(*args)
    except steps.LaunchError as exc:
        steps.fail(control, plan, now, str(exc), down=True)
    except Exception as exc:  # noqa: BLE001  # pylint: disable=broad-except
        stopped = "is down" if plan.kills else "was not launched"
        steps.fail(control, plan, now, scrub_text(f"{plan.name} {stopped}: {type(exc).__name__}: {exc}"), down=True)


def act(control, plans, progress):
    """The sequence, per server at its own pace; ``progress(snapshot)`` is called about once a second."""
    acting = [plan for plan in plans if plan.changes]
    started = control.act_started = time.monotonic()
    for plan in acting:
        plan.stop_started = started
        if not plan.targets():
            plan.enter(naming.STEP_VERIFYING, started)
        elif plan.main_pid is not None and plan.port:  # serving, or on its way: not killed unasked
            guarded(control, plan, started, steps.begin_stop, control, plan, started)
        else:
            steps.send_signal(plan, signal.SIGTERM, started)
    last_report = 0.0
    while True:
        now = time.monotonic()
        for plan in acting:
            if plan.step == naming.STEP_DRAINING:
                guarded(control, plan, now, steps.advance_drain, control, plan, now)
            if plan.step in step_table.SIGNALLED_STEPS:
                guarded(control, plan, now, steps.advance_stop, control, plan, now)
        verifying = [plan for plan in acting if plan.step == naming.STEP_VERIFYING]
        if verifying:
            used, query_error = control.memory_used(sorted({gpu for plan in verifying for gpu in plan.gpus}))
            for plan in verifying:
                guarded(control, plan, now, steps.advance_verify, control, plan, used, query_error, now)
        pending = [plan for plan in acting if plan.step not in step_table.FINISHED_STEPS]
        if not pending or now - last_report >= 1.0:
            last_report = now
            try:
                progress({"elapsed": round(now - started, 1), "servers": [plan.progress(now) for plan in acting],
                          "events": control.events})
            except OSError:
                pass  # progress is for the eyes only (a full disk): the sequence must go on
        if not pending:
            break
        time.sleep(_POLL_SECONDS)
    for plan in acting:
        plan.killed = [{"pid": pid, "cmdline": info.cmdline, "signal": plan.last_signal[pid]}
                       for pid, info in sorted(plan.targets().items()) if pid in plan.last_signal]
        for pid in plan.blockers:
            registry = control.stale if pid in control.stale else control.foreign
            if pid in registry:
                registry[pid]["signal"] = plan.last_signal.get(pid)
    if not any(plan.step == naming.STEP_FAILED for plan in acting):
        for owner in {entry["server"] for entry in control.stale.values()}:
            remove_state(control.state_dir, owner)
    control.timings["act_s"] = round(time.monotonic() - started, 3)
    return journaled(control, plans, result(control, plans))
