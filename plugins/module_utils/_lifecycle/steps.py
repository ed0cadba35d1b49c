# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each step one server goes through in the detached worker does (their names: naming.py).

A server that changes: (out of the router) -> drained -> SIGTERM -> SIGKILL -> its GPUs and port free ->
launched, or its state file removed when it stops. Each ``advance_*`` moves it on when its time has come; a
fault raises or fails that server alone (sequence.py runs them). Every function here that takes ``control``
takes the job's ServerControl (job.py): its parameters, process owner, router and event list; ``run`` is the
server's ServerRun (run.py): its plan is only read, what happens is recorded on the run.
"""

import os
import signal
import time

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    draining,
    launchers,
    naming,
    procfs,
    safe_files,
    shutdown_lines,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.request import (
    ServerControlError,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    STEP_DONE,
    STEP_DRAINING,
    STEP_KILLING,
    STEP_STOPPING,
    STEP_VERIFYING,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    remove_state,
    write_state,
)

# After SIGKILL a process normally disappears at once; one stuck in D state is reported instead.
SIGKILL_GRACE_SECONDS = 10
# How much of a server's log written since its SIGTERM is read for its own word on memory it did not free.
SHUTDOWN_LOG_BYTES = 1 << 20


class LaunchError(Exception):
    """One server could not be launched; the others go on."""


def record_event(control, run, event, now, **details):
    """What happened to whom, in order, for the progress lines."""
    control.events.append(dict(details, server=run.name, event=event, at_s=round(now - control.act_started, 1)))


def fail(control, run, now, error, down):
    run.fail(now, error, down)
    record_event(control, run, "failed", now, error=error)


def send_signal(run, sig, now):
    plan = run.plan
    if run.log_offset is None:
        run.log_offset = _log_size(plan)
    reached = plan.stop_launcher.stop(plan.name, run.targets(), run.group, force=sig == signal.SIGKILL)
    run.last_signal.update((pid, signal.Signals(sig).name) for pid in reached)
    run.enter(STEP_KILLING if sig == signal.SIGKILL else STEP_STOPPING, now)
    return reached


def _log_path(plan):
    return plan.spec.get("log_path") or (plan.recorded or {}).get("log_path")


def _log_size(plan):
    try:
        return os.path.getsize(_log_path(plan))
    except (OSError, TypeError):
        return 0


def shutdown_words(run):
    """What the server's log says since its SIGTERM of GPU memory it did not free (SGLang 0.5.23 names the pids):
    the entries of shutdown_lines, [] when it says nothing or cannot be read."""
    path = _log_path(run.plan)
    if run.log_offset is None or not path:
        return []
    try:
        with open(path, "rb") as handle:
            handle.seek(max(run.log_offset, os.fstat(handle.fileno()).st_size - SHUTDOWN_LOG_BYTES))
            text = handle.read(SHUTDOWN_LOG_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    return shutdown_lines.unreleased(text.splitlines())


def _said(entries):
    return "; its log says: " + "; ".join(
        f"{'pid' if len(entry['pids']) == 1 else 'pids'} {', '.join(map(str, entry['pids']))} {entry['why']}"
        for entry in entries) if entries else ""


def check_router(params, plans):
    """The router client (None without a router) and the plans; a router that cannot be used fails the call while
    every server still serves. Each server that stops gets the worker URL it is registered under (a new plan)."""
    router = draining.router_client(params)
    if router is None or not any(plan.kills for plan in plans):
        return router, plans
    try:
        router.check()
    except draining.RouterError as exc:
        raise ServerControlError(f"{exc}; nothing was touched")
    return router, [plan.updated(worker_url=draining.worker_url(params, plan.port)) if plan.kills and plan.port
                    else plan for plan in plans]


def begin_stop(control, run, now):
    """A running server: out of the router first (behind one), then drained (drain_timeout > 0) - before SIGTERM
    behind a router, after it without (SIGTERM starts SGLang's own drain)."""
    params, plan = control.params, run.plan
    if plan.worker_url:
        run.router_removed, error = draining.deregister(control.router, plan.worker_url)
        if error:
            # Still registered, maybe still routed to: stopping it now would fail requests.
            fail(control, run, now, f"{plan.name} was not stopped: taking it out of the router failed: {error}",
                 down=False)
            return
    drains = params["drain_timeout"] > 0
    if not (plan.worker_url and drains):
        send_signal(run, signal.SIGTERM, now)
    if drains:
        run.drain = draining.Drain(draining.server_url(params["host"], plan.port), params["drain_timeout"],
                                   params.get("api_key"), now,
                                   count_timeout=min(params["probe_timeout"], draining.COUNT_TIMEOUT_SECONDS))
        run.enter(STEP_DRAINING, now)


def advance_drain(control, run, now):
    if not control.owner.still_alive(run.targets()):
        run.drain.end(now, draining.EXITED)
    elif run.drain.poll(now) == draining.DRAINING:
        return
    record_event(control, run, "drain_end", now, **run.drain.report())
    if run.plan.worker_url:
        send_signal(run, signal.SIGTERM, now)
    else:
        run.enter(STEP_STOPPING, now)  # SIGTERM was sent when the drain began


def _rescan(run):
    """Children may have been spawned while the server was shutting down."""
    running = run.plan.stop_launcher.observe(run.name, run.plan.recorded)
    run.group = running.group  # no group once its leader is gone
    run.processes.update(running.processes)


def _state_of(pid):
    info = procfs.read_process(pid)
    return info.state if info else "gone"


def advance_stop(control, run, now):
    alive = run.processes_left = control.owner.still_alive(run.targets())
    in_step = now - run.step_since
    if run.step == STEP_STOPPING:
        if alive and in_step < control.params["stop_timeout"]:
            return
        _rescan(run)
        left = control.owner.still_alive(run.targets())
        if left:
            # After the whole stop_timeout it ignored SIGTERM; before it, children spawned while it shut down.
            record_event(control, run, "sigkill", now, after_s=round(in_step, 1), processes=len(left),
                         ignored_sigterm=bool(alive))
            send_signal(run, signal.SIGKILL, now)
            return
    elif alive:
        if in_step >= SIGKILL_GRACE_SECONDS:
            survivors = ", ".join(f"{pid} ({info.cmdline}, state {_state_of(pid)})"
                                  for pid, info in sorted(alive.items()))
            fail(control, run, now, f"{run.name} is down: its processes survived SIGKILL for {SIGKILL_GRACE_SECONDS} "
                                    f"s (uninterruptible, e.g. stuck in the driver): {survivors}"
                                    + _said(shutdown_words(run)), down=True)
        return
    run.timings["stop_s"] = round(now - run.stop_started, 3)
    record_event(control, run, "stopped", now, stop_s=run.timings["stop_s"])
    run.enter(STEP_VERIFYING, now)


def _process_text(owner, pid):
    """``pid 123 (python3 -m sglang.launch_server ...) of server 'gpu0'`` - command line scrubbed of keys."""
    info = procfs.read_process(pid)
    verdict = owner.owner(pid)
    whose = {"ours": f"of server {verdict.server!r}", "other_deployment": f"of server {verdict.server!r} of another "
             f"deployment ({verdict.deployment})"}.get(verdict.verdict, "foreign")
    return f"pid {pid} ({info.cmdline if info else 'gone'}) {whose}"


def advance_verify(control, run, used, query_error, now):
    """Its GPUs below the threshold (``used``: MiB per GPU index of the last query) and, before a launch, its port
    free: launched, or its state removed; failed once gpu_free_timeout has passed."""
    params, plan = control.params, run.plan
    run.gpu_used = {gpu: used[gpu] for gpu in plan.gpus if gpu in used}
    threshold = params["gpu_free_threshold_mib"]
    busy = sorted(gpu for gpu in plan.gpus if gpu not in used or used[gpu] > threshold)
    run.port_holders = procfs.port_listeners(plan.spec["port"]) if plan.launches and not busy else []
    if not busy and not run.port_holders:
        run.gpu_memory_after = run.gpu_used_mib
        run.timings["gpu_free_s"] = round(now - run.step_since, 3)
        if plan.launches:
            if plan.stop_launcher is not plan.launcher:
                plan.stop_launcher.stopped(plan.name)  # e.g. its systemd unit must not start it at boot too
            _launch(control, run)
            record_event(control, run, "launched", now, pid=run.launched["pid"])
        else:
            plan.stop_launcher.stopped(plan.name)
            remove_state(control.state_dir, plan.name)
        run.enter(STEP_DONE, now)
        return
    said = shutdown_words(run) if busy else []
    # SGLang's own word that a process of it is stuck holding memory (alive still): no use waiting for it.
    stuck = [entry for entry in said if not entry["freed"] and any(procfs.pid_alive(pid) for pid in entry["pids"])]
    if now - run.step_since < params["gpu_free_timeout"] and not stuck:
        return
    run.gpu_memory_after = run.gpu_used_mib
    down = "is down" if plan.kills else "was not launched"
    if busy:
        holders = procfs.gpu_holders(control.device_dir, {gpu: control.minors.get(gpu, gpu) for gpu in busy})
        described = []
        for gpu in busy:
            who = ("held by " + ", ".join(_process_text(control.owner, pid) for pid in holders[gpu])
                   if holders.get(gpu) else
                   "no process here holds the device (a process outside this container, or the driver)")
            memory = f"still uses {used[gpu]} MiB" if gpu in used else f"memory unknown ({query_error})"
            described.append(f"GPU {gpu} {memory}; {who}")
        waited = (f"GPU memory not freed after {now - run.step_since:.0f} s (its processes stuck)" if stuck else
                  f"GPU memory not freed within gpu_free_timeout={params['gpu_free_timeout']:g} s")
        fail(control, run, now, f"{plan.name} {down}: {waited} (threshold {threshold} MiB): "
                                + "; ".join(described) + _said(said), down=True)
        run.gpu_holders = {str(gpu): [procfs.describe(pid) for pid in holders.get(gpu, [])] for gpu in busy}
    else:
        fail(control, run, now, f"{plan.name} {down}: port {plan.spec['port']} still in use after gpu_free_timeout="
                                f"{params['gpu_free_timeout']:g} s by "
                                + ", ".join(_process_text(control.owner, pid) for pid in run.port_holders), down=True)


def _launch(control, run):
    plan, state_dir = run.plan, control.state_dir
    spec = plan.spec
    started = time.monotonic()
    log_path = spec["log_path"]
    try:
        safe_files.ensure_private_dir(os.path.dirname(log_path) or ".")
        run.rotated_log = safe_files.rotate_log(log_path, control.params["log_generations"])
        log_fd = safe_files.open_append_no_follow(log_path)
    except OSError as exc:
        raise LaunchError(f"{plan.name} was not launched: cannot prepare its log {log_path}: {exc}")
    env = dict(os.environ)
    # The launch script exports both too; setting them here covers scripts written by hand.
    env[naming.MARKER_VAR] = plan.name
    env[naming.DEPLOYMENT_VAR] = state_dir
    # SGLang names its children with setproctitle, which overwrites /proc/<pid>/environ - and with it
    # the marker - unless SPT_NOENV is set (the title then fits in the original command line).
    env.setdefault("SPT_NOENV", "1")
    try:
        pid = plan.launcher.start(plan, log_fd, env)
    except launchers.LauncherError as exc:
        raise LaunchError(f"{plan.name} was not launched: {exc}")
    finally:
        os.close(log_fd)
    info = procfs.read_process(pid)
    # The state file contract of docs/architecture.md.
    run.launched = dict(
        plan.desired, name=plan.name, pid=pid, pgid=info.pgid if info else pid, launched_at=time.time(),
        pid_starttime=info.starttime if info else None, run_id=control.params.get("run_id"),
        settings=plan.launch_settings,
        **{draining.ROUTER_ADD_KEY: draining.owes_router(
            control.router is not None, plan.action, run.router_removed, plan.recorded)})
    try:
        write_state(state_dir, plan.name, run.launched)
        if spec.get("pid_file"):
            safe_files.write_atomic(spec["pid_file"], f"{pid}\n", 0o644)
    except OSError as exc:
        # A server nobody recorded would be found only by its marker: stop it rather than leave it half-known.
        plan.launcher.kill(plan.name)
        run.launched = {}
        raise LaunchError(f"{plan.name} was not launched: cannot record its state in {state_dir}: {exc}")
    run.timings["launch_s"] = round(time.monotonic() - started, 3)
