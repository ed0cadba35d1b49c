# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sequence in the detached worker: every server that changes goes through the steps (steps.py) at its own
pace, polled together; one server's fault fails that server alone, never the others.
``control`` is the job's ServerControl (job.py); each server's plan is acted on through its ServerRun (run.py)."""

import signal
import time

from ansible_collections.gpuops.sglang.plugins.module_utils import naming
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle import (
    step_table,
    steps,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.plan import (
    stop_launcher_of,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.result import (
    journaled,
    result,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.run import (
    ServerRun,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launchers import (
    LauncherError,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_text
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    remove_state,
)

# A stopping server's processes are looked at this often (a few /proc reads), so its exit is seen within it; its GPUs
# at most every _GPU_QUERY_SECONDS (nvidia-smi takes tens of milliseconds on a real host), but at once when a server
# begins its verification.
_POLL_SECONDS = 0.05
_GPU_QUERY_SECONDS = 0.25


def guarded(control, run, now, step, *args):
    """One server's step; whatever it raises fails that server alone, never the sequence of the others."""
    try:
        step(*args)
    except steps.LaunchError as exc:
        steps.fail(control, run, now, str(exc), down=True)
    except Exception as exc:  # noqa: BLE001  # pylint: disable=broad-except
        stopped = "is down" if run.plan.kills else "was not launched"
        steps.fail(control, run, now, scrub_text(f"{run.name} {stopped}: {type(exc).__name__}: {exc}"), down=True)


def release_removed(control):
    """Servers gone from the topology: each launcher lets its server go before the processes are stopped in the way
    of the others (a systemd unit is deactivated and disabled); why one could not is kept for the result."""
    for name, recorded in control.removed.items():
        try:
            stop_launcher_of(recorded, control.launchers).release(name)
        except LauncherError as exc:
            control.release_errors[name] = str(exc)


def act(control, plans, progress):
    """The sequence, per server at its own pace; ``progress(snapshot)`` is called about once a second. Returns the
    result of the ServerRun of every plan."""
    runs = [ServerRun(plan) for plan in plans]
    acting = [run for run in runs if run.plan.changes]
    started = control.act_started = time.monotonic()
    release_removed(control)
    for run in acting:
        run.stop_started = started
        if not run.targets():
            run.enter(naming.STEP_VERIFYING, started)
        elif run.plan.main_pid is not None and run.plan.port:  # serving, or on its way: not killed unasked
            guarded(control, run, started, steps.begin_stop, control, run, started)
        else:
            steps.send_signal(run, signal.SIGTERM, started)
    last_report = queried_at = 0.0
    queried = set()
    while True:
        now = time.monotonic()
        for run in acting:
            if run.step == naming.STEP_DRAINING:
                guarded(control, run, now, steps.advance_drain, control, run, now)
            if run.step in step_table.SIGNALLED_STEPS:
                guarded(control, run, now, steps.advance_stop, control, run, now)
        verifying = [run for run in acting if run.step == naming.STEP_VERIFYING]
        if verifying and (now - queried_at >= _GPU_QUERY_SECONDS or {run.name for run in verifying} - queried):
            queried_at = now
            queried.update(run.name for run in verifying)
            used, query_error = control.memory_used(sorted({gpu for run in verifying for gpu in run.plan.gpus}))
            for run in verifying:
                guarded(control, run, now, steps.advance_verify, control, run, used, query_error, now)
        pending = [run for run in acting if run.step not in step_table.FINISHED_STEPS]
        if not pending or now - last_report >= 1.0:
            last_report = now
            try:
                progress({"elapsed": round(now - started, 1), "servers": [run.progress(now) for run in acting],
                          "events": control.events})
            except OSError:
                pass  # progress is for the eyes only (a full disk): the sequence must go on
        if not pending:
            break
        time.sleep(_POLL_SECONDS)
    for run in acting:
        run.killed = [{"pid": pid, "cmdline": info.cmdline, "signal": run.last_signal[pid]}
                      for pid, info in sorted(run.targets().items()) if pid in run.last_signal]
        for pid in run.plan.blockers:
            registry = control.stale if pid in control.stale else control.foreign
            if pid in registry:
                registry[pid]["signal"] = run.last_signal.get(pid)
    if not any(run.step == naming.STEP_FAILED for run in acting):
        for owner in {entry["server"] for entry in control.stale.values()}:
            remove_state(control.state_dir, owner)
    control.timings["act_s"] = round(time.monotonic() - started, 3)
    return journaled(control, runs, result(control, runs))
