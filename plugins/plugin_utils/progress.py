# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Progress lines the action plugins print on the controller while the host side works."""

from __future__ import annotations

from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.step_table import (
    FINISHED_STEPS,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    STEP_DONE,
    STEP_DRAINING,
    STEP_KILLING,
    STEP_STOPPING,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness_rules import (
    STATES,
    count_ready,
    progress_suffix,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.words import counted

_PHASE_WORDS = {"capturing_cuda_graph": "capturing cuda graph", "loading_weights": "loading weights",
                "allocating_memory": "allocating memory", "warming_up": "warming up"}
# A server whose log has not moved for this long says so: "gpu3 loading weights 12/64, silent for 40 s".
SILENT_AFTER_SECONDS = 30


def phase_words(phase, component=None):
    words = _PHASE_WORDS.get(phase, (phase or "").replace("_", " "))
    return f"{words} (draft model)" if component == "draft" else words


def format_wait_progress(host, reports):
    """One line per host: ``ct200: 5/8 ready | gpu3 loading weights 37/64 | gpu7 crashed in loading weights``; a
    node of a multi-node group says its rank: ``ct402: 0/1 ready | qwen-tp8 rank1 init distributed (waiting for
    rank 0)``.

    Each server not ready says its part in the words of its state (``readiness_rules.STATES``).
    """
    parts = [f"{host}: {count_ready(reports)}/{len(reports)} ready"]
    for report in reports:
        state, phase = STATES[report["status"]], report["phase"]
        if report.get("confirming_s") is not None:
            # Ready earlier; the wait's last look at it has had no answer yet (a hung process, or one under load).
            parts.append(f"{report['name']} not answering the last check for {report['confirming_s']:.0f} s")
            continue
        if state.progress is None:
            continue
        words = phase_words(phase, report.get("component"))
        if not state.decided and phase == "ready":
            words = "up, health pending"  # its log says ready, its health has not answered 200 yet
        rank = report.get("node_rank")
        if rank is not None and not state.decided and _in_rendezvous(report):
            words = "init distributed (waiting for " + ("rank 0)" if rank else "the other nodes)")
        name = report["name"] if rank is None else f"{report['name']} rank{rank}"
        text = state.progress.format(name=name, phase=words, counter=progress_suffix(phase, report["progress"]),
                                     killed=" (killed)" if report.get("killed_pids") else "")
        silent = report.get("silent_s")
        if not state.decided and silent is not None and silent >= SILENT_AFTER_SECONDS:
            text += f", silent for {silent:.0f} s"
        parts.append(text)
    return " | ".join(parts)


def _in_rendezvous(report):
    """Its last line is the start of torch distributed init (v0.5.23: "Init parallel begin."): it waits for every
    rank of the group to join."""
    last = report.get("last_log_line") or ""
    return report["phase"] == "initializing" and ("Init torch distributed begin" in last or "Init parallel begin" in last)


def _server_step_words(server):
    step, seconds = server["step"], server["seconds"]
    if step == STEP_DRAINING:
        left = server.get("requests_left")
        return "draining" + (f", {counted(left, 'request')} left" if left is not None else "") + f" ({seconds:.0f} s)"
    if step == STEP_STOPPING:
        return f"stopping {seconds:.0f} s after SIGTERM ({server['processes_left']} processes left)"
    if step == STEP_KILLING:
        return f"SIGKILL sent {seconds:.0f} s ago ({server['processes_left']} processes left)"
    busy = {gpu: mib for gpu, mib in (server.get("gpu_used_mib") or {}).items() if mib}
    if server.get("port_holders"):
        return f"waiting {seconds:.0f} s for its port to be released"
    if busy:
        held = ", ".join(f"GPU {gpu} {mib} MiB" for gpu, mib in sorted(busy.items()))
        return f"waiting {seconds:.0f} s for GPU memory to be freed ({held})"
    return "verifying its GPUs are free"


def _event_words(event):
    kind = event["event"]
    if kind == "sigkill":
        why = ("it ignored SIGTERM for the whole stop_timeout" if event.get("ignored_sigterm")
               else "processes it spawned while shutting down")
        return f"SIGKILL sent {event['after_s']:.0f} s after SIGTERM: {why} ({event['processes']} processes)"
    if kind == "drain_end":
        return (f"drain_timeout reached after {event['seconds']:.0f} s with {counted(event['requests_left'], 'request')} in "
                "flight: stopping it anyway (those requests fail)")
    if kind == "stopped":
        return f"stopped in {event['stop_s']:.1f} s"
    if kind == "launched":
        return f"launched (pid {event['pid']})"
    return f"FAILED: {event['error']}"


def format_server_progress(host, progress):
    """What happened since the last line, one line each, then where every unfinished server stands:

    ``ct200: gpu5 SIGKILL sent 30 s after SIGTERM: it ignored SIGTERM ...`` and
    ``ct200: 6/8 stopped or launched after 31 s | gpu3 draining, 12 requests left (8 s) | gpu5 stopping 2 s after
    SIGTERM (2 processes left)``.
    """
    if not progress or not progress.get("servers"):
        return None
    lines = [f"{host}: {event['server']} {_event_words(event)}" for event in progress.get("events") or []
             if event["event"] in ("sigkill", "failed") or event.get("outcome") == "timed_out"]
    servers = progress["servers"]
    pending = [server for server in servers if server["step"] not in FINISHED_STEPS]
    if pending:
        done = len([server for server in servers if server["step"] == STEP_DONE])
        lines.append(" | ".join([f"{host}: {done}/{len(servers)} stopped or launched after {progress['elapsed']:.0f} s"]
                                + [f"{server['name']} {_server_step_words(server)}" for server in pending]))
    return "\n".join(lines) or None


def format_probe_progress(host, progress):
    """``ct200: probing 8 servers 12/30 s | 10240 output tok/s so far | 512 requests, 0 errors``."""
    if not progress or not progress.get("servers"):
        return None
    servers, elapsed = progress["servers"], progress["elapsed"]
    tokens = sum(server["output_tokens"] for server in servers)
    requests = sum(server["requests"] for server in servers)
    errors = sum(server["errors"] for server in servers)
    rate = f"{tokens / elapsed:.0f} output tok/s so far" if elapsed > 0 else "starting"
    line = (f"{host}: probing {counted(len(servers), 'server')} {elapsed:.0f}/{progress['duration']:.0f} s | {rate} | "
            f"{counted(requests, 'request')}, {counted(errors, 'error')}")
    failing = [server["name"] for server in servers if server["errors"]]
    return line + (f" (errors on {', '.join(failing)})" if failing else "")
