# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each step one server goes through in the detached worker does (their names: naming.py).

A server that changes: (out of the router) -> drained -> SIGTERM -> SIGKILL -> its GPUs and port free ->
launched, or its state file removed when it stops. Each ``advance_*`` moves it on when its time has come; a
fault raises or fails that server alone (sequence.py runs them). Every function here that takes ``control``
takes the job's ServerControl (job.py): its parameters, process owner, router and event list.
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


class LaunchError(Exception):
    """One server could not be launched; the others go on."""


def record_event(control, plan, event, now, **details):
    """What happened to whom, in order, for the progress lines."""
    control.events.append(dict(details, server=plan.name, event=event, at_s=round(now - control.act_started, 1)))


def fail(control, plan, now, error, down):
    plan.fail(now, error, down)
    record_event(control, plan, "failed", now, error=error)


def send_signal(plan, sig, now):
    reached = plan.stop_launcher.stop(plan.name, plan.targets(), plan.group, force=sig == signal.SIGKILL)
    plan.last_signal.update((pid, signal.Signals(sig).name) for pid in reached)
    plan.enter(STEP_KILLING if sig == signal.SIGKILL else STEP_STOPPING, now)
    return reached


def check_router(params, plans):
    """The router client (None without a router); a router that cannot be used fails the call while every server
    still serves. Each server that stops gets the worker URL it is registered under."""
    router = draining.router_client(params)
    if router is None or not any(plan.kills for plan in plans):
        return router
    try:
        router.check()
    except draining.RouterError as exc:
        raise ServerControlError(f"{exc}; nothing was touched")
    for plan in plans:
        if plan.kills and plan.port:
            plan.worker_url = draining.worker_url(params, plan.port)
    return router


def begin_stop(control, plan, now):
    """A running server: out of the router first (behind one), then drained (drain_timeout > 0) - before SIGTERM
    behind a router, after it without (SIGTERM starts SGLang's own drain)."""
    params = control.params
    if plan.worker_url:
        plan.router_removed, error = draining.deregister(control.router, plan.worker_url)
        if error:
            # Still registered, maybe still routed to: stopping it now would fail requests.
            fail(control, plan, now, f"{plan.name} was not stopped: taking it out of the router failed: {error}",
                 down=False)
            return
    drains = params["drain_timeout"] > 0
    if not (plan.worker_url and drains):
        send_signal(plan, signal.SIGTERM, now)
    if drains:
        plan.drain = draining.Drain(draining.server_url(params["host"], plan.port), params["drain_timeout"],
                                    params.get("api_key"), now,
                                    count_timeout=min(params["probe_timeout"], draining.COUNT_TIMEOUT_SECONDS))
        plan.enter(STEP_DRAINING, now)


def advance_drain(control, plan, now):
    if not control.owner.still_alive(plan.targets()):
        plan.drain.end(now, draining.EXITED)
    elif plan.drain.poll(now) == draining.DRAINING:
        return
    record_event(control, plan, "drain_end", now, **plan.drain.report())
    if plan.worker_url:
        send_signal(plan, signal.SIGTERM, now)
    else:
        plan.enter(STEP_STOPPING, now)  # SIGTERM was sent when the drain began


def _rescan(plan):
    """Children may have been spawned while the server was shutting down."""
    running = plan.stop_launcher.observe(plan.name, plan.recorded)
    plan.group = running.group  # no group once its leader is gone
    plan.processes.update(running.processes)


def _state_of(pid):
    info = procfs.read_process(pid)
    return info.state if info else "gone"


def advance_stop(control, plan, now):
    alive = plan.processes_left = control.owner.still_alive(plan.targets())
    in_step = now - plan.step_since
    if plan.step == STEP_STOPPING:
        if alive and in_step < control.params["stop_timeout"]:
            return
        _rescan(plan)
        left = control.owner.still_alive(plan.targets())
        if left:
            # After the whole stop_timeout it ignored SIGTERM; before it, children spawned while it shut down.
            record_event(control, plan, "sigkill", now, after_s=round(in_step, 1), processes=len(left),
                         ignored_sigterm=bool(alive))
            send_signal(plan, signal.SIGKILL, now)
            return
    elif alive:
        if in_step >= SIGKILL_GRACE_SECONDS:
            survivors = ", ".join(f"{pid} ({info.cmdline}, state {_state_of(pid)})"
                                  for pid, info in sorted(alive.items()))
            fail(control, plan, now, f"{plan.name} is down: its processes survived SIGKILL for {SIGKILL_GRACE_SECONDS} "
                                     f"s (uninterruptible, e.g. stuck in the driver): {survivors}", down=True)
        return
    plan.timings["stop_s"] = round(now - plan.stop_started, 3)
    record_event(control, plan, "stopped", now, stop_s=plan.timings["stop_s"])
    plan.enter(STEP_VERIFYING, now)


def _process_text(owner, pid):
    """``pid 123 (python3 -m sglang.launch_server ...) of server 'gpu0'`` - command line scrubbed of keys."""
    info = procfs.read_process(pid)
    verdict = owner.owner(pid)
    whose = {"ours": f"of server {verdict.server!r}", "other_deployment": f"of server {verdict.server!r} of another "
             f"deployment ({verdict.deployment})"}.get(verdict.verdict, "foreign")
    return f"pid {pid} ({info.cmdline if info else 'gone'}) {whose}"


def advance_verify(control, plan, used, query_error, now):
    """Its GPUs below the threshold (``used``: MiB per GPU index of the last query) and, before a launch, its port
    free: launched, or its state removed; failed once gpu_free_timeout has passed."""
    params = control.params
    plan.gpu_used = {gpu: used[gpu] for gpu in plan.gpus if gpu in used}
    threshold = params["gpu_free_threshold_mib"]
    busy = sorted(gpu for gpu in plan.gpus if gpu not in used or used[gpu] > threshold)
    plan.port_holders = procfs.port_listeners(plan.spec["port"]) if plan.launches and not busy else []
    if not busy and not plan.port_holders:
        plan.gpu_memory_after = plan.gpu_used_mib
        plan.timings["gpu_free_s"] = round(now - plan.step_since, 3)
        if plan.launches:
            if plan.stop_launcher is not plan.launcher:
                plan.stop_launcher.stopped(plan.name)  # e.g. its systemd unit must not start it at boot too
            _launch(control, plan)
            record_event(control, plan, "launched", now, pid=plan.launched["pid"])
        else:
            plan.stop_launcher.stopped(plan.name)
            remove_state(control.state_dir, plan.name)
        plan.enter(STEP_DONE, now)
        return
    if now - plan.step_since < params["gpu_free_timeout"]:
        return
    plan.gpu_memory_after = plan.gpu_used_mib
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
        fail(control, plan, now, f"{plan.name} {down}: GPU memory not freed within gpu_free_timeout="
                                 f"{params['gpu_free_timeout']:g} s (threshold {threshold} MiB): "
                                 + "; ".join(described), down=True)
        plan.gpu_holders = {str(gpu): [procfs.describe(pid) for pid in holders.get(gpu, [])] for gpu in busy}
    else:
        fail(control, plan, now, f"{plan.name} {down}: port {plan.spec['port']} still in use after gpu_free_timeout="
                                 f"{params['gpu_free_timeout']:g} s by "
                                 + ", ".join(_process_text(control.owner, pid) for pid in plan.port_holders), down=True)


def _launch(control, plan):
    spec, state_dir = plan.spec, control.state_dir
    started = time.monotonic()
    log_path = spec["log_path"]
    try:
        safe_files.ensure_private_dir(os.path.dirname(log_path) or ".")
        plan.rotated_log = safe_files.rotate_log(log_path, control.params["log_generations"])
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
    plan.launched = dict(
        plan.desired, name=plan.name, pid=pid, pgid=info.pgid if info else pid, launched_at=time.time(),
        pid_starttime=info.starttime if info else None, run_id=control.params.get("run_id"),
        settings=plan.launch_settings,
        **{draining.ROUTER_ADD_KEY: draining.owes_router(
            control.router is not None, plan.action, plan.router_removed, plan.recorded)})
    try:
        write_state(state_dir, plan.name, plan.launched)
        if spec.get("pid_file"):
            safe_files.write_atomic(spec["pid_file"], f"{pid}\n", 0o644)
    except OSError as exc:
        # A server nobody recorded would be found only by its marker: stop it rather than leave it half-known.
        plan.launcher.kill(plan.name)
        plan.launched = {}
        raise LaunchError(f"{plan.name} was not launched: cannot record its state in {state_dir}: {exc}")
    plan.timings["launch_s"] = round(time.monotonic() - started, 3)
