"""The faults SGLANG_SIM_FAULT injects, as one table: a row per fault with its name, the phase where it strikes
and what it does (and, where it fails a scheduler, the traceback it logs as "Scheduler hit an exception").

A fault strikes on every node, or with ``<fault>@<R>`` on node rank R only (Sim.select_node keeps this node's).
The code of each phase asks ``"<name>" in sim.faults`` where the row says; parse_faults refuses a name that is
not in the table."""

import collections
import sys

from .tracebacks import SCHEDULER_FRAMES, fake_traceback

Fault = collections.namedtuple("Fault", "name phase effect error")

_ROWS = [
    Fault("draft_crash", "loading the draft model's weights (Scheduler.load_weights, draft)",
          "0.1 s (scaled) after 'Load weight begin.', every rank fails as an EAGLE3 draft of the wrong shape does",
          fake_traceback(
              [SCHEDULER_FRAMES[0],
               ("managers/scheduler.py", 371, "__init__", "self.draft_worker = EAGLEWorker("),
               ("speculative/eagle_worker.py", 143, "__init__", "super().__init__("),
               ("managers/tp_worker.py", 95, "__init__", "self.model_runner = ModelRunner("),
               ("model_executor/model_runner.py", 811, "load_model", "self.model = get_model("),
               ("models/llama_eagle3.py", 255, "load_weights", "weight_loader(param, loaded_weight)"),
               ("model_loader/weight_utils.py", 752, "default_weight_loader",
                "assert param.size() == loaded_weight.size(), (")],
              "AssertionError: Attempted to load weight (torch.Size([4096, 12288])) into parameter "
              "(torch.Size([2048, 6144]))")),
    Fault("oom_load", "loading the target model's weights (Scheduler.load_weights), at the middle shard",
          "every rank fails with torch.OutOfMemoryError for more than its GPU has free (Scheduler.oom_error)", None),
    Fault("nccl_error", "distributed init, after the rendezvous (Scheduler.init_distributed)",
          "every rank fails creating its NCCL communicator",
          fake_traceback(
              SCHEDULER_FRAMES + [
                  ("model_executor/model_runner.py", 562, "init_torch_distributed",
                   "initialize_model_parallel("),
                  ("distributed/parallel_state.py", 1461, "initialize_model_parallel",
                   "_TP = init_model_parallel_group("),
                  ("distributed/device_communicators/pynccl.py", 110, "__init__",
                   "self.comm: ncclComm_t = self.nccl.ncclCommInitRank("),
                  ("distributed/device_communicators/pynccl_wrapper.py", 407, "NCCL_CHECK",
                   "raise RuntimeError(f\"NCCL error: {error_str}\")")],
              "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)")),
    Fault("hang_before_rendezvous", "scheduler start, before any GPU is touched (Scheduler.start)",
          "the schedulers stop before \"Init torch distributed begin.\" (stuck like a read from a hung mount), "
          "so the other nodes wait in the rendezvous", None),
    Fault("hang_after_weights", "after the target weights loaded (Scheduler.load_weights)",
          "the schedulers stop after the last shard, before \"Load weight end.\"", None),
    Fault("hang_cuda_graph", "CUDA graph capture, a third of the batch sizes in (ModelRunner.capture)",
          "the schedulers stop in the capture", None),
    Fault("crash_after_ready", "serving: SGLANG_SIM_FAULT_DELAY after ready (Scheduler.serve)",
          "the node's first rank crashes, that delay after \"The server is fired up\" (node 0) or the dummy health "
          "server's start (rank >= 1)",
          fake_traceback(
              [SCHEDULER_FRAMES[0],
               ("managers/scheduler.py", 1040, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
               ("managers/scheduler.py", 2010, "run_batch",
                "logits_output, next_token_ids = self.tp_worker.forward_batch_generation(")],
              "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might "
              "be asynchronously reported at some other API call, so the stacktrace below might be "
              "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1")),
    Fault("orphan_scheduler", "launch: forking the schedulers (Server.launch_subprocesses)",
          "the schedulers start their own session, without the parent-death signal, and outlive the launcher "
          "(as in sglang #23627)", None),
    Fault("stuck_after_crash", "a child's failure (Server.on_sigquit)",
          "the main process logs the sigquit line but never kills its tree (stuck, as in an uninterruptible driver "
          "call): it and its schedulers live on, holding their GPU memory, until killed", None),
    Fault("ignore_sigterm", "the whole life of the main process (Server.run, Server.serve_http)",
          "SIGTERM is ignored from the start (no drain): only SIGKILL or a failing child ends the server", None),
    Fault("scheduler_ignores_shutdown", "v0.5.23's shutdown after the drain (Server.shutdown_v0_5_23)",
          "the node's first scheduler ignores the ShutdownReq: 15 s (scaled) later the main process logs "
          "'Schedulers still alive 15s after ShutdownReq, killing them before they released: [<its pid>]' and "
          "SIGKILLs the tree; up to v0.5.10 it changes nothing (the tree is SIGKILLed at once)", None),
    Fault("unreaped_child", "v0.5.23's shutdown after the drain (Server.shutdown_v0_5_23)",
          "the node's first scheduler is stuck as in the driver: it ignores the ShutdownReq (so the 15 s line names "
          "it too), and since no process really ignores SIGKILL the main process spares it instead, has it leave "
          "(no parent-death signal, a session of its own) and 60 s (scaled) later logs 'kill_process_tree: 1 "
          "process(es) not reaped within 60s after SIGKILL; pids=[<its pid>]'; it lives on, holding its GPU memory, "
          "until killed; up to v0.5.10 it changes nothing", None),
    Fault("slow_release", "process exit (Sim.release_delay, handed to fakegpu.allocate)",
          "the GPU memory of every scheduler outlives it by SGLANG_SIM_RELEASE_DELAY seconds", None),
]
FAULTS = {fault.name: fault for fault in _ROWS}


def parse_faults(value):
    """SGLANG_SIM_FAULT as (fault, node rank or None) pairs: ``oom_load,crash_after_ready@1``."""
    faults = set()
    for entry in filter(None, (part.strip() for part in value.split(","))):
        name, _at, node = entry.partition("@")
        if name not in FAULTS:
            sys.exit(f"SGLANG_SIM_FAULT: unknown fault {name!r} in {value!r}; known: {', '.join(sorted(FAULTS))}")
        if _at and not node.isdigit():
            sys.exit(f"SGLANG_SIM_FAULT: {entry!r} names no node rank after '@'; write {name}@1 for node rank 1")
        faults.add((name, int(node) if node else None))
    return faults
