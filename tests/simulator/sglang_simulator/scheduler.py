"""A scheduler process (one per TP rank of this node and DP rank, titled ``sglang::scheduler_TP<i>``): its GPU
(through fakegpu.py: memory held while it lives), the distributed init and memory checks, the startup phases
(model_runner.py), the ready report to the main process, then its event loop until killed or, on v0.5.23's
ShutdownReq (``shutdown`` on its control pipe), until it released its GPU and exited; any failure is logged as
"Scheduler hit an exception" and SIGQUITs the main process, which kills the tree."""

import json
import os
import select
import signal
import time

import fakegpu

from .config import read_model_config
from .faults import FAULTS
from .log import Logger, scheduler_prefix
from .model_runner import ModelRunner
from .multinode import (
    MODEL_RUNNER_FRAME,
    PRE_MODEL_LOAD_MEMORY_FRAMES,
    Channel,
    process_group,
)
from .processes import detach, sleep_forever
from .tracebacks import SCHEDULER_FRAMES, SchedulerFailure, fake_traceback

CONTEXT_MIB = 522  # a CUDA context plus cuBLAS workspace, as measured on the H200 (busy.txt)


class Scheduler(ModelRunner):
    def __init__(self, config, dp_rank, tp_rank, ready_fd, control_fd, main_pid):
        self.config, self.args, self.sim = config, config.args, config.sim
        self.dp_rank, self.tp_rank = dp_rank, tp_rank
        self.ready_fd, self.control_fd, self.main_pid = ready_fd, control_fd, main_pid
        prefix = scheduler_prefix(self.args, dp_rank, tp_rank)
        self.title = "sglang::scheduler" + prefix.replace(" ", "_")
        self.log = Logger(prefix)
        self.log.quiet = self.args.log_level in ("warning", "error", "critical")
        self.rank0 = dp_rank == 0 and tp_rank == 0  # world rank 0: progress bars and the summary line
        self.local_index = tp_rank % config.tp_per_node  # the TP rank's place among this node's GPUs
        self.first_local = dp_rank == 0 and tp_rank == config.local_tp_ranks[0]
        self.group = None
        self.gpu = None
        self.device = None
        self.used_mib = 0.0
        self.total_gpu_gb = 0.0  # free memory after distributed init: SGLang's total_gpu_memory
        self.weights_gib = 0.0

    # memory as the scheduler sees it through torch.cuda.mem_get_info
    def avail_gb(self):
        if self.sim.gpu_dir:
            return fakegpu.free_mib(self.sim.gpu_dir, self.gpu) / 1024
        return (self.config.total_mib - 615 - self.used_mib) / 1024

    def alloc(self, mib):
        if self.sim.gpu_dir and mib > fakegpu.free_mib(self.sim.gpu_dir, self.gpu):
            raise self.oom_error(mib)
        self.used_mib += mib
        if self.sim.gpu_dir:
            fakegpu.allocate(self.sim.gpu_dir, os.getpid(), self.gpu, mib, self.title, self.sim.release_delay)

    def oom_error(self, mib):
        total, free, used = self.config.total_mib / 1024, self.avail_gb(), self.used_mib / 1024
        return SchedulerFailure(fake_traceback(
            SCHEDULER_FRAMES + [("model_executor/model_runner.py", 811, "load_model",
                                 "self.model = get_model("),
                                ("model_loader/loader.py", 597, "load_weights_and_postprocess",
                                 "model.load_weights(weights)")],
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {mib / 1024:.2f} GiB. GPU {self.local_index} "
            f"has a total capacity of {total:.2f} GiB of which {free:.2f} GiB is free. Including non-PyTorch memory, "
            f"this process has {used:.2f} GiB memory in use. Of the allocated memory {max(used - 0.98, 0):.2f} GiB "
            "is allocated by PyTorch, and 0.98 GiB is reserved by PyTorch but unallocated. If reserved but "
            "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"))

    def run(self):
        try:
            self.start()
        except SchedulerFailure as failure:
            self.fail(str(failure))
        except Exception as exc:  # noqa: BLE001 - run_scheduler_process reports any exception this way
            self.fail(fake_traceback(SCHEDULER_FRAMES, f"{type(exc).__name__}: {exc}"))

    def fail(self, traceback_text):
        self.log.error("Scheduler hit an exception: " + traceback_text)
        os.kill(self.main_pid, signal.SIGQUIT)
        sleep_forever()  # the parent's kill_process_tree ends it

    def select_gpu(self):
        args = self.args
        position = args.base_gpu_id + (self.dp_rank * self.config.tp_per_node + self.local_index) * args.gpu_id_step
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        if "CUDA_VISIBLE_DEVICES" in os.environ and position >= len(visible):
            raise RuntimeError("CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously "
                               "reported at some other API call, so the stacktrace below might be incorrect.")
        if not self.sim.gpu_dir:
            return position
        gpus = fakegpu.load_config(self.sim.gpu_dir)["gpus"]
        physical = visible[position] if visible else str(position)
        for gpu in gpus:
            if physical in (str(gpu["index"]), gpu["uuid"]):
                return gpu["index"]
        raise RuntimeError("CUDA error: invalid device ordinal")

    def start(self):
        args, model = self.args, read_model_config(self.args.model_path)
        if "hang_before_rendezvous" in self.sim.faults:  # like a read of the model from a hung mount: no GPU touched yet
            sleep_forever()
        self.gpu = self.select_gpu()
        if self.sim.gpu_dir:
            self.device = fakegpu.open_device(self.sim.gpu_dir, self.gpu)
        self.group = process_group(self.config, self.tp_rank)
        timings = {}
        self.init_distributed()
        timings["load_weight"] = self.load_weights(model, draft=False)
        kv_start = time.time()
        pool = self.init_memory_pool(model)
        timings["kv_cache_allocation"] = time.time() - kv_start
        graph_mib = 0.0
        timings["cuda_graph"] = {}
        if not args.disable_cuda_graph:
            phase = "verify" if self.config.speculative else "decode"
            elapsed, graph_mib = self.capture("target", phase, num_tokens_per_req=(
                args.speculative_num_draft_tokens if self.config.speculative else 1))
            timings["cuda_graph"]["target_" + phase] = elapsed
        if self.config.speculative:
            self.init_draft_worker(timings)
        summary = self.summary(pool)
        if self.sim.new:
            impl = "MambaRadixCache" if pool["hybrid"] else "RadixCache"
            self.log.info(f"Tree cache initialized: source=default impl={impl} hybrid_swa=False "
                          f"hybrid_ssm={pool['hybrid']} hicache_attached=False streaming_wrapped=False")
        ready = dict(summary, status="ready", pid=os.getpid(), gpu=self.gpu, timings=timings,
                     memory_usage={"weight": round(self.weights_gib, 2), "kvcache": round(pool["kv_gb"], 2),
                                   "token_capacity": pool["tokens"], "graph": round(graph_mib / 1024, 2)})
        os.write(self.ready_fd, (json.dumps(ready) + "\n").encode())
        self.serve()

    def init_distributed(self):
        start = time.time()
        self.log.info("Init parallel begin." if self.sim.new else "Init torch distributed begin.")
        self.sim.sleep(0.3)
        self.group.rendezvous()
        if self.group.spans_nodes and not self.args.disable_custom_all_reduce:
            self.log.info("Custom allreduce is disabled because this process group spans across nodes.")
        if "nccl_error" in self.sim.faults:
            raise SchedulerFailure(FAULTS["nccl_error"].error)
        self.alloc(CONTEXT_MIB + (512 if self.args.tp_size > 1 else 0))
        local_gb = self.avail_gb()
        # pre_model_load_memory, the MIN over every rank, sizes every rank (model_runner.init_torch_distributed)
        self.total_gpu_gb = self.group.all_reduce_min(local_gb, PRE_MODEL_LOAD_MEMORY_FRAMES)
        self.check_memory_balance(local_gb)
        elapsed = time.time() - start
        if self.sim.new:
            self.log.info(f"Init parallel ends. elapsed={elapsed:.2f} s")
            self.log.info("Memory baseline taken. mem usage=%.2f GB" % (self.used_mib / 1024))
        else:
            self.log.info(f"Init torch distributed ends. elapsed={elapsed:.2f} s, "
                          f"mem usage={self.used_mib / 1024:.2f} GB")

    def check_memory_balance(self, local_gb):
        if self.total_gpu_gb >= local_gb * 0.9:
            return
        message = ("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                   f"pre_model_load_memory={self.total_gpu_gb!r}, local_gpu_memory={local_gb!r}, "
                   f"local_gpu_memory * 0.9={local_gb * 0.9!r}")
        # SGLang copies SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK's value into the ENABLE variable (environ.py)
        enabled = os.environ.get("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK",
                                 os.environ.get("SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK", "true"))
        if enabled.lower() in ("true", "1"):
            raise SchedulerFailure(fake_traceback(SCHEDULER_FRAMES + [
                MODEL_RUNNER_FRAME, ("model_executor/model_runner.py", 1016, "init_torch_distributed",
                                     "raise RuntimeError(msg)")], "RuntimeError: " + message))
        self.log.info(message)

    def serve(self):
        """The event loop: wait for the server to be up, then run (and maybe crash) until killed, or until a
        ShutdownReq the faults do not make it ignore (the node's first scheduler ignores it with
        scheduler_ignores_shutdown and unreaped_child; with the latter the main process then tells it to detach)."""
        stuck = self.first_local and bool({"scheduler_ignores_shutdown", "unreaped_child"} & self.sim.faults)
        crash_at = None
        while True:
            timeout = None if crash_at is None else max(crash_at - time.time(), 0)
            readable = select.select([self.control_fd, *self.group.channels], [], [], timeout)[0]
            peers = [ready for ready in readable if isinstance(ready, Channel)]
            if peers:  # nothing comes over them while serving but their end
                self.group.check(peers)
            if not readable:
                raise SchedulerFailure(FAULTS["crash_after_ready"].error)
            if self.control_fd not in readable:
                continue
            message = os.read(self.control_fd, 64)
            if not message:  # parent gone: an orphan keeps holding its GPU memory until killed
                sleep_forever()
            if b"up" in message and "crash_after_ready" in self.sim.faults and self.first_local:
                crash_at = time.time() + self.sim.fault_delay
            if b"shutdown" in message and not stuck:
                return  # released: the process exits, and its GPU memory with it
            if b"detach" in message:  # stuck for good: it notices nothing more, its peers' ends included
                detach()
                sleep_forever()
