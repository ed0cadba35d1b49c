#!/usr/bin/env python3
"""Stand-in for ``python3 -m sglang.launch_server`` (stdlib, optional setproctitle, Python >= 3.9).

Takes SGLang's flags and reproduces what a launcher can observe of a real server: the log lines
of v0.5.9 ("classic") or v0.5.23 ("new"), the process tree (schedulers titled ``sglang::scheduler_TP<i>``
dying with their parent), GPU memory held through tests/simulator/fakegpu.py, the HTTP endpoints
and their phases (connection refused -> 503 -> 200), SIGTERM handling and the common failures.

Environment:
  GPUOPS_FAKE_GPU_DIR     fake GPU state dir (fakegpu.py init); without it no memory is accounted
  SGLANG_SIM_LOG_FORMAT   classic (default) | new
  SGLANG_SIM_TIME_SCALE   multiplies every phase duration (default 1: ready in about 3-5 s; 0: at once)
  SGLANG_SIM_FAULT        comma list of: draft_crash, oom_load, nccl_error, hang_after_weights,
                          hang_cuda_graph, crash_after_ready, orphan_scheduler, ignore_sigterm, slow_release
  SGLANG_SIM_FAULT_DELAY  seconds after ready before crash_after_ready fires (default 2)
  SGLANG_SIM_RELEASE_DELAY seconds GPU memory outlives the process with slow_release (default 3)

Model directories: ``sglang_sim.py --make-model DIR [--arch A] [--hybrid-mamba] [--shards N] [--weights-gib G]``.
"""

import argparse
import ctypes
import http.server
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import urllib.request
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakegpu

try:
    from setproctitle import setproctitle
except ImportError:  # Degrade: only /proc/<pid>/comm changes (15 chars), cmdline stays the parent's.
    def setproctitle(title):
        ctypes.CDLL(None, use_errno=True).prctl(15, title.encode()[:15], 0, 0, 0)  # PR_SET_NAME

FAULTS = {"draft_crash", "oom_load", "nccl_error", "hang_after_weights", "hang_cuda_graph",
          "crash_after_ready", "orphan_scheduler", "ignore_sigterm", "slow_release"}
VERSIONS = {"classic": "0.5.9", "new": "0.5.23"}
PR_SET_PDEATHSIG = 1
GIB = 1024 ** 3
SITE = "/usr/local/lib/python3.12/dist-packages"
CONTEXT_MIB = 522  # a CUDA context plus cuBLAS workspace, as measured on the H200 (busy.txt)


def getenv_float(name, default):
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


class Sim:
    """Run-wide settings taken from the environment."""

    def __init__(self):
        self.log_format = os.environ.get("SGLANG_SIM_LOG_FORMAT", "classic")
        if self.log_format not in VERSIONS:
            sys.exit(f"SGLANG_SIM_LOG_FORMAT must be classic or new, not {self.log_format!r}")
        self.time_scale = getenv_float("SGLANG_SIM_TIME_SCALE", 1.0)
        self.faults = {f.strip() for f in os.environ.get("SGLANG_SIM_FAULT", "").split(",") if f.strip()}
        unknown = self.faults - FAULTS
        if unknown:
            sys.exit(f"SGLANG_SIM_FAULT: unknown fault(s) {', '.join(sorted(unknown))}; "
                     f"known: {', '.join(sorted(FAULTS))}")
        self.fault_delay = getenv_float("SGLANG_SIM_FAULT_DELAY", 2.0)
        self.release_delay = getenv_float("SGLANG_SIM_RELEASE_DELAY", 3.0) if "slow_release" in self.faults else None
        self.gpu_dir = os.environ.get("GPUOPS_FAKE_GPU_DIR") or None
        self.new = self.log_format == "new"

    def sleep(self, seconds):
        if self.time_scale > 0:
            time.sleep(seconds * self.time_scale)


SIM = None  # set in main()


# --- logging (SGLang's configure_logger and uvicorn formats) -------------------------------------


class Logger:
    def __init__(self, prefix=""):
        self.prefix = prefix
        self.quiet = False

    def info(self, message):
        if not self.quiet:
            self.error(message)

    def error(self, message):
        write_line(2, f"[{timestamp()}{self.prefix}] {message}\n")


def timestamp():
    return time.strftime("%Y-%m-%d %H:%M:%S")


def write_line(fd, text):
    # One write per record so lines of concurrent processes sharing the log never interleave.
    os.write(fd, text.encode())


def format_interval(seconds):
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class ProgressBar:
    """tqdm's output on a non-tty stderr: every refresh starts with \\r, close() ends with \\n."""

    BLOCKS = " " + "".join(chr(c) for c in range(0x258F, 0x2587, -1))

    def __init__(self, desc, total, bar_format=None):
        self.desc, self.total, self.bar_format = desc, total, bar_format
        self.start = time.time()
        self.last_len = 0
        self.n = 0

    def _render(self):
        elapsed = time.time() - self.start
        rate = self.n / elapsed if self.n and elapsed > 0 else None
        remaining = format_interval((self.total - self.n) / rate) if rate else "?"
        if rate is None:
            rate_fmt = "?it/s"
        elif rate >= 1:
            rate_fmt = f"{rate:5.2f}it/s"
        else:
            rate_fmt = "%5.2fs/it" % (1 / rate)
        frac = self.n / self.total if self.total else 1.0
        fields = {"desc": self.desc, "percentage": frac * 100, "n_fmt": self.n, "total_fmt": self.total,
                  "elapsed": format_interval(elapsed), "remaining": remaining, "rate_fmt": rate_fmt}
        if self.bar_format:
            return self.bar_format.format(**fields)
        full, partial = divmod(int(frac * 10 * 8), 8)
        blocks = self.BLOCKS[-1] * full
        if full < 10:
            blocks += self.BLOCKS[partial] + " " * (10 - full - 1)
        return "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]".format(
            bar=blocks, **fields)

    def refresh(self):
        text = self._render()
        write_line(2, "\r" + text + " " * max(self.last_len - len(text), 0))
        self.last_len = len(text)

    def update(self, desc=None):
        self.n += 1
        if desc:
            self.desc = desc
        self.refresh()

    def close(self):
        self.refresh()
        write_line(2, "\n")


# --- process tree --------------------------------------------------------------------------------


def set_pdeathsig():
    """kill_itself_when_parent_died(): SIGKILL when the parent dies, as every SGLang child does."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    stat = handle.read()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_process_tree():
    """SGLang's kill_process_tree(os.getpid()): SIGKILL every descendant, then itself (exit 137)."""
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def fork_child(title, run, orphan=False):
    """Start a child running ``run()``; the child never returns into the caller's code."""
    pid = os.fork()
    if pid:
        return pid
    try:
        if orphan:
            os.setsid()  # escapes the launcher's process group, like schedulers in sglang #23627
        else:
            parent = os.getppid()
            set_pdeathsig()
            if os.getppid() != parent:
                os._exit(0)
        setproctitle(title)
        run()
    except KeyboardInterrupt:
        pass
    finally:
        os._exit(0)


def sleep_forever():
    while True:
        time.sleep(3600)


# --- server configuration ------------------------------------------------------------------------


def build_parser():
    parser = argparse.ArgumentParser(prog="launch_server.py")
    add = parser.add_argument
    add("--model-path", "--model", dest="model_path", required=True)
    add("--tokenizer-path")
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--tp-size", "--tensor-parallel-size", "--tp", dest="tp_size", type=int, default=1)
    add("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    add("--base-gpu-id", type=int, default=0)
    add("--gpu-id-step", type=int, default=1)
    add("--mem-fraction-static", type=float)
    add("--max-running-requests", type=int)
    add("--max-total-tokens", type=int)
    add("--chunked-prefill-size", type=int)
    add("--max-prefill-tokens", type=int, default=16384)
    add("--context-length", type=int)
    add("--enable-metrics", action="store_true")
    add("--api-key")
    add("--served-model-name")
    add("--log-level", default="info", choices=["debug", "info", "warning", "error", "critical"])
    add("--speculative-algorithm", choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"])
    add("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path")
    add("--speculative-num-steps", type=int)
    add("--speculative-eagle-topk", type=int)
    add("--speculative-num-draft-tokens", type=int)
    strategies = ["auto", "no_buffer", "extra_buffer"]
    if SIM.new:  # v0.5.23 renamed the flag; the old spelling is an unknown argument there
        add("--mamba-radix-cache-strategy", default="auto", choices=strategies + ["extra_buffer_lazy"])
    else:
        add("--mamba-scheduler-strategy", default="auto", choices=strategies)
    add("--max-mamba-cache-size", type=int)
    add("--mamba-full-memory-ratio", type=float, default=0.9)
    add("--disable-cuda-graph", action="store_true")
    add("--cuda-graph-max-bs", type=int)
    add("--trust-remote-code", action="store_true")
    add("--skip-server-warmup", action="store_true")
    add("--kv-cache-dtype", default="auto", choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"])
    add("--page-size", type=int, default=1)
    add("--attention-backend")
    add("--disable-custom-all-reduce", action="store_true")
    add("--enable-p2p-check", action="store_true")
    add("--watchdog-timeout", type=float, default=300)
    add("--dist-timeout", type=int)
    return parser


def capture_batch_sizes(max_bs, speculative):
    if speculative:
        sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8)) \
            + list(range(272, max_bs + 1, 16))
    else:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) \
            + list(range(512, max_bs + 1, 32))
    return [bs for bs in sizes if bs <= max_bs]


class ServerConfig:
    """ServerArgs after SGLang's defaulting (server_args.py, v0.5.9), plus the model's config.json."""

    def __init__(self, args):
        self.args = args
        self.total_mib = 143771
        if SIM.gpu_dir:
            self.total_mib = fakegpu.load_config(SIM.gpu_dir)["gpus"][0]["total_mib"]
        gpu_mem = self.total_mib
        if args.chunked_prefill_size is None:
            args.chunked_prefill_size = 2048 if gpu_mem < 35 * 1024 else 4096 if gpu_mem < 60 * 1024 \
                else 8192 if gpu_mem < 160 * 1024 else 16384
        if args.cuda_graph_max_bs is None:
            big_tp = args.tp_size >= 4
            args.cuda_graph_max_bs = 8 if gpu_mem < 20 * 1024 else (80 if big_tp else 24) if gpu_mem < 35 * 1024 \
                else (160 if big_tp else 32) if gpu_mem < 60 * 1024 else (512 if big_tp else 256) \
                if gpu_mem < 160 * 1024 else 512
        self.speculative = args.speculative_algorithm is not None
        if args.mem_fraction_static is None:
            reserved = 512 + max(args.chunked_prefill_size, 2048) * 1.5 + args.cuda_graph_max_bs * 2 \
                + args.tp_size / 8 * 1024 + (2048 if self.speculative else 0)
            if gpu_mem > 60 * 1024:
                reserved = max(reserved, 10240)
            args.mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3)
        if self.speculative and args.speculative_num_steps is None:
            args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = 5, 4, 8
        strategy_flag = "mamba_radix_cache_strategy" if SIM.new else "mamba_scheduler_strategy"
        if getattr(args, strategy_flag) == "auto":
            setattr(args, strategy_flag, "no_buffer")
        self.mamba_strategy = getattr(args, strategy_flag)
        args.tokenizer_path = args.tokenizer_path or args.model_path
        args.served_model_name = args.served_model_name or args.model_path

    def as_dict(self):
        return dict(vars(self.args))

    def repr_line(self):
        items = self.as_dict()
        if SIM.new:
            return f"server_args={items!r}"
        return "server_args=ServerArgs(" + ", ".join(f"{key}={value!r}" for key, value in items.items()) + ")"


def read_model_config(path):
    """What ModelConfig reads; raises like transformers' AutoConfig for a missing model."""
    config_file = os.path.join(path, "config.json")
    if os.path.isfile(config_file):
        with open(config_file) as handle:
            return json.load(handle)
    if path.startswith(("/", ".", "~")) or path.count("/") > 1:
        raise OSError(f"Incorrect path_or_model_id: '{path}'. Please provide either the path to a local folder "
                      "or the repo_id of a model on the Hub.")
    raise OSError(f"{path} is not a local folder and is not a valid model identifier listed on "
                  "'https://huggingface.co/models'\nIf this is a private repository, make sure to pass a token "
                  "having permission to this repo either by logging in with `hf auth login` or by passing "
                  "`token=<your_token>`")


def make_model(argv):
    parser = argparse.ArgumentParser(prog="sglang_sim.py --make-model", description="create a simulated model dir")
    parser.add_argument("--make-model", dest="directory", required=True)
    parser.add_argument("--arch", default="Qwen3ForCausalLM")
    parser.add_argument("--hybrid-mamba", action="store_true", help="Qwen3-Next style linear-attention layers")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--weights-gib", type=float, default=20.0)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--context-length", type=int, default=262144)
    args = parser.parse_args(argv)
    os.makedirs(args.directory, exist_ok=True)
    config = {
        "architectures": [args.arch],
        "model_type": args.arch.replace("ForCausalLM", "").lower(),
        "torch_dtype": "bfloat16",
        "num_hidden_layers": args.layers,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 2 if args.hybrid_mamba else 4,
        "head_dim": 256 if args.hybrid_mamba else 128,
        "max_position_embeddings": args.context_length,
        "gpuops_sim": {"weights_gib": args.weights_gib, "num_shards": args.shards,
                       "hybrid_mamba": args.hybrid_mamba},
    }
    if args.hybrid_mamba:
        config.update({"full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                       "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4})
    with open(os.path.join(args.directory, "config.json"), "w") as handle:
        json.dump(config, handle, indent=2)
    for shard in range(1, args.shards + 1):
        open(os.path.join(args.directory, f"model-{shard:05d}-of-{args.shards:05d}.safetensors"), "a").close()
    return 0


# --- scheduler -----------------------------------------------------------------------------------


def fake_traceback(frames, error):
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{SITE}/sglang/srt/{path}", line {line}, in {func}')
        lines.append("    " + code)
    return "\n".join(lines) + "\n" + error


SCHEDULER_FRAMES = [
    ("managers/scheduler.py", 2914, "run_scheduler_process", "scheduler = Scheduler("),
    ("managers/scheduler.py", 351, "__init__", "self.tp_worker = TpModelWorker("),
    ("managers/tp_worker.py", 95, "__init__", "self.model_runner = ModelRunner("),
]


class SchedulerFailure(Exception):
    """Carries the traceback text the scheduler logs as 'Scheduler hit an exception'."""


class Scheduler:
    def __init__(self, config, dp_rank, tp_rank, ready_fd, control_fd, main_pid):
        self.config, self.args = config, config.args
        self.dp_rank, self.tp_rank = dp_rank, tp_rank
        self.ready_fd, self.control_fd, self.main_pid = ready_fd, control_fd, main_pid
        tp, dp = self.args.tp_size, self.args.dp_size
        prefix = (f" DP{dp_rank}" if dp > 1 else "") + (f" TP{tp_rank}" if tp > 1 or dp > 1 else "")
        self.title = "sglang::scheduler" + prefix.replace(" ", "_")
        self.log = Logger(prefix)
        self.log.quiet = self.args.log_level in ("warning", "error", "critical")
        self.rank0 = dp_rank == 0 and tp_rank == 0
        self.gpu = None
        self.device = None
        self.used_mib = 0.0
        self.total_gpu_gb = 0.0  # free memory after distributed init: SGLang's total_gpu_memory
        self.weights_gib = 0.0

    # memory as the scheduler sees it through torch.cuda.mem_get_info
    def avail_gb(self):
        if SIM.gpu_dir:
            return fakegpu.free_mib(SIM.gpu_dir, self.gpu) / 1024
        return (self.config.total_mib - 615 - self.used_mib) / 1024

    def alloc(self, mib):
        if SIM.gpu_dir and mib > fakegpu.free_mib(SIM.gpu_dir, self.gpu):
            raise self.oom_error(mib)
        self.used_mib += mib
        if SIM.gpu_dir:
            fakegpu.allocate(SIM.gpu_dir, os.getpid(), self.gpu, mib, self.title, SIM.release_delay)

    def oom_error(self, mib):
        total, free, used = self.config.total_mib / 1024, self.avail_gb(), self.used_mib / 1024
        return SchedulerFailure(fake_traceback(
            SCHEDULER_FRAMES + [("model_executor/model_runner.py", 811, "load_model",
                                 "self.model = get_model("),
                                ("model_loader/loader.py", 597, "load_weights_and_postprocess",
                                 "model.load_weights(weights)")],
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {mib / 1024:.2f} GiB. GPU {self.tp_rank} "
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
        position = args.base_gpu_id + (self.dp_rank * args.tp_size + self.tp_rank) * args.gpu_id_step
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        if "CUDA_VISIBLE_DEVICES" in os.environ and position >= len(visible):
            raise RuntimeError("CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously "
                               "reported at some other API call, so the stacktrace below might be incorrect.")
        if not SIM.gpu_dir:
            return position
        gpus = fakegpu.load_config(SIM.gpu_dir)["gpus"]
        physical = visible[position] if visible else str(position)
        for gpu in gpus:
            if physical in (str(gpu["index"]), gpu["uuid"]):
                return gpu["index"]
        raise RuntimeError("CUDA error: invalid device ordinal")

    def start(self):
        args, model = self.args, read_model_config(self.args.model_path)
        self.gpu = self.select_gpu()
        if SIM.gpu_dir:
            self.device = fakegpu.open_device(SIM.gpu_dir, self.gpu)
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
        if SIM.new:
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
        self.log.info("Init parallel begin." if SIM.new else "Init torch distributed begin.")
        SIM.sleep(0.3)
        if "nccl_error" in SIM.faults:
            raise SchedulerFailure(fake_traceback(
                SCHEDULER_FRAMES + [
                    ("model_executor/model_runner.py", 562, "init_torch_distributed",
                     "initialize_model_parallel("),
                    ("distributed/parallel_state.py", 1461, "initialize_model_parallel",
                     "_TP = init_model_parallel_group("),
                    ("distributed/device_communicators/pynccl.py", 110, "__init__",
                     "self.comm: ncclComm_t = self.nccl.ncclCommInitRank("),
                    ("distributed/device_communicators/pynccl_wrapper.py", 407, "NCCL_CHECK",
                     "raise RuntimeError(f\"NCCL error: {error_str}\")")],
                "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"))
        self.alloc(CONTEXT_MIB + (512 if self.args.tp_size > 1 else 0))
        elapsed = time.time() - start
        self.total_gpu_gb = self.avail_gb()
        if SIM.new:
            self.log.info(f"Init parallel ends. elapsed={elapsed:.2f} s")
            self.log.info("Memory baseline taken. mem usage=%.2f GB" % (self.used_mib / 1024))
        else:
            self.log.info(f"Init torch distributed ends. elapsed={elapsed:.2f} s, "
                          f"mem usage={self.used_mib / 1024:.2f} GB")

    def load_weights(self, model, draft):
        sim = model.get("gpuops_sim", {})
        shards = max(int(sim.get("num_shards", 1)), 1)
        weights_gib = float(sim.get("weights_gib", 1.0)) / self.args.tp_size
        if not draft:
            self.weights_gib = weights_gib
        start = time.time()
        before = self.used_mib
        self.log.info(f"Load weight begin. avail mem={self.avail_gb():.2f} GB")
        if draft and "draft_crash" in SIM.faults:
            SIM.sleep(0.1)
            raise SchedulerFailure(fake_traceback(
                [SCHEDULER_FRAMES[0],
                 ("managers/scheduler.py", 371, "__init__", "self.draft_worker = EAGLEWorker("),
                 ("speculative/eagle_worker.py", 143, "__init__", "super().__init__("),
                 ("managers/tp_worker.py", 95, "__init__", "self.model_runner = ModelRunner("),
                 ("model_executor/model_runner.py", 811, "load_model", "self.model = get_model("),
                 ("models/llama_eagle3.py", 255, "load_weights", "weight_loader(param, loaded_weight)"),
                 ("model_loader/weight_utils.py", 752, "default_weight_loader",
                  "assert param.size() == loaded_weight.size(), (")],
                "AssertionError: Attempted to load weight (torch.Size([4096, 12288])) into parameter "
                "(torch.Size([2048, 6144]))"))
        progress = None
        if self.rank0:
            progress = ProgressBar("Loading safetensors checkpoint shards", shards,
                                   "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} "
                                   "[{elapsed}<{remaining}, {rate_fmt}]" + ("" if SIM.new else "\n"))
            progress.refresh()
        for shard in range(shards):
            SIM.sleep((0.3 if draft else 1.2) / shards)
            if not draft and "oom_load" in SIM.faults and shard == shards // 2:
                raise self.oom_error(weights_gib * 1024 / shards + self.avail_gb() * 1024)
            self.alloc(weights_gib * 1024 / shards)
            if progress:
                progress.update()
        if progress:
            progress.close()
        if not draft and "hang_after_weights" in SIM.faults:
            sleep_forever()
        elapsed = time.time() - start
        arch = model.get("architectures", ["LlamaForCausalLM"])[0]
        dtype = "" if SIM.new else f"dtype=torch.{model.get('torch_dtype', 'bfloat16')}, "
        self.log.info(f"Load weight end. elapsed={elapsed:.2f} s, type={arch}, {dtype}"
                      f"avail mem={self.avail_gb():.2f} GB, mem usage={(self.used_mib - before) / 1024:.2f} GB.")
        return elapsed

    def init_memory_pool(self, model):
        args = self.args
        tp = args.tp_size
        dtype_bytes = 1 if args.kv_cache_dtype.startswith("fp8") else 2
        layers = int(model.get("num_hidden_layers", 32))
        hybrid = bool(model.get("gpuops_sim", {}).get("hybrid_mamba"))
        attn_layers = layers // int(model.get("full_attention_interval", 4)) if hybrid else layers
        kv_heads = max(int(model.get("num_key_value_heads", 8)) // tp, 1)
        head_dim = int(model.get("head_dim", 128))
        # rest_memory = available - total * (1 - mem_fraction_static), as model_runner.profile_max_num_token
        rest_gb = self.avail_gb() - self.total_gpu_gb * (1 - args.mem_fraction_static)
        max_running = args.max_running_requests
        mamba_slots = 0
        if hybrid:
            k_heads, v_heads = int(model.get("linear_num_key_heads", 16)), int(model.get("linear_num_value_heads", 32))
            k_dim, v_dim = int(model.get("linear_key_head_dim", 128)), int(model.get("linear_value_head_dim", 128))
            conv_dim = (2 * k_heads * k_dim + v_heads * v_dim) // tp
            mamba_layers = layers - attn_layers
            ssm_bytes = mamba_layers * (v_heads // tp) * k_dim * v_dim * 4  # float32 SSM state
            conv_bytes = mamba_layers * conv_dim * (int(model.get("linear_conv_kernel_dim", 4)) - 1) * 2
            mamba_slots = args.max_mamba_cache_size
            if mamba_slots is None:
                ratio = args.mamba_full_memory_ratio
                mamba_slots = int(rest_gb * ratio / (1 + ratio) * GIB // (ssm_bytes + conv_bytes))
            mamba_gb = mamba_slots * (ssm_bytes + conv_bytes) / GIB
            rest_gb -= mamba_gb
            # extra_buffer keeps a ping-pong copy of each running request's state: half the slots run
            per_request = 2 if self.config.mamba_strategy.startswith("extra_buffer") else 1
            effective = mamba_slots // per_request
            max_running = min(max_running, effective) if max_running else effective
            self.log.info(f"Mamba Cache is allocated. max_mamba_cache_size: {mamba_slots}, "
                          f"conv_state size: {mamba_slots * conv_bytes / GIB:.2f}GB, "
                          f"ssm_state size: {mamba_slots * ssm_bytes / GIB:.2f}GB ")
            self.alloc(mamba_gb * 1024)
        cell_bytes = 2 * attn_layers * kv_heads * head_dim * dtype_bytes
        tokens = int(rest_gb * GIB // cell_bytes)
        if args.max_total_tokens:
            tokens = min(tokens, args.max_total_tokens)
        if tokens <= 0:
            raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")
        tokens = tokens // args.page_size * args.page_size
        context_len = args.context_length or int(model.get("max_position_embeddings", 32768))
        if not max_running:
            max_running = min(max(int(tokens / context_len * 512), 2048), 4096)
        half_gb = tokens * cell_bytes / 2 / GIB
        SIM.sleep(0.2)
        kv_dtype = "float8_e4m3fn" if dtype_bytes == 1 else "bfloat16"
        dtype_field = f"dtype: torch.{kv_dtype}, " if SIM.new else ""
        self.log.info(f"KV Cache is allocated. {dtype_field}#tokens: {tokens}, K size: {half_gb:.2f} GB, "
                      f"V size: {half_gb:.2f} GB")
        self.alloc(half_gb * 2 * 1024)
        self.log.info(f"Memory pool end. avail mem={self.avail_gb():.2f} GB")
        return {"tokens": tokens, "kv_gb": half_gb * 2, "hybrid": hybrid, "mamba_slots": mamba_slots,
                "max_running_requests": max_running, "context_len": context_len}

    def capture(self, role, phase, num_tokens_per_req):
        """One graph capture; returns (elapsed seconds, MiB used by the graphs)."""
        args = self.args
        sizes = capture_batch_sizes(args.cuda_graph_max_bs, self.config.speculative)
        start = time.time()
        before = self.used_mib
        classic_name = "cuda graph" if role == "target" else "draft extend cuda graph" if phase == "extend" \
            else "draft cuda graph"
        if SIM.new:
            self.log.info(f"Capture {role} {phase} CUDA graph begin. backend=full, "
                          f"num_tokens_per_req={num_tokens_per_req}, avail mem={self.avail_gb():.2f} GB")
        else:
            self.log.info(f"Capture {classic_name} begin. This can take up to several minutes. "
                          f"avail mem={self.avail_gb():.2f} GB")
            if role == "target" and self.rank0:
                self.log.info(f"Capture cuda graph bs {sizes}")
        total_mib = (512 + 4 * args.cuda_graph_max_bs) * (0.3 if role == "draft" else 1.0)
        progress = None
        if self.rank0:
            progress = ProgressBar(self.capture_desc(sizes[-1]), len(sizes))
            progress.refresh()
        per_bs = (1.0 if role == "target" else 0.15) / len(sizes)
        for index, bs in enumerate(reversed(sizes)):
            if "hang_cuda_graph" in SIM.faults and index == len(sizes) // 3:
                sleep_forever()
            SIM.sleep(per_bs)
            self.alloc(total_mib / len(sizes))
            if progress:
                progress.update(self.capture_desc(bs))
        if progress:
            progress.close()
        elapsed = time.time() - start
        graph_mib = self.used_mib - before
        if SIM.new:
            self.log.info(f"Capture {role} {phase} CUDA graph end. bs={sizes}, elapsed={elapsed:.2f} s, "
                          f"mem usage={graph_mib / 1024:.2f} GB, avail mem={self.avail_gb():.2f} GB.")
        else:
            self.log.info(f"Capture {classic_name} end. Time elapsed: {elapsed:.2f} s. "
                          f"mem usage={graph_mib / 1024:.2f} GB. avail mem={self.avail_gb():.2f} GB.")
        return elapsed, graph_mib

    def capture_desc(self, bs):
        return f"Capturing batches (bs={bs} avail_mem={self.avail_gb():.2f} GB)"

    def init_draft_worker(self, timings):
        args = self.args
        if args.speculative_draft_model_path:
            draft_model = read_model_config(args.speculative_draft_model_path)
        else:
            draft_model = {"architectures": ["LlamaForCausalLMEagle3"], "gpuops_sim": {"weights_gib": 0.8}}
        self.load_weights(draft_model, draft=True)
        if not args.disable_cuda_graph:
            timings["cuda_graph"]["draft_decode"] = self.capture("draft", "decode", args.speculative_eagle_topk)[0]
            timings["cuda_graph"]["draft_extend"] = self.capture("draft", "extend", args.speculative_num_steps + 1)[0]

    def summary(self, pool):
        args = self.args
        values = {
            "max_total_num_tokens": pool["tokens"],
            "chunked_prefill_size": args.chunked_prefill_size,
            "max_prefill_tokens": args.max_prefill_tokens,
            "max_running_requests": pool["max_running_requests"],
            "context_len": pool["context_len"],
            "available_gpu_mem": round(self.avail_gb(), 2),
        }
        if self.rank0:
            self.log.info(f"max_total_num_tokens={pool['tokens']}, chunked_prefill_size={args.chunked_prefill_size}, "
                          f"max_prefill_tokens={args.max_prefill_tokens}, "
                          f"max_running_requests={pool['max_running_requests']}, context_len={pool['context_len']}, "
                          f"available_gpu_mem={values['available_gpu_mem']:.2f} GB")
        values["max_req_input_len"] = min(pool["context_len"] - 1, pool["tokens"] - 1)
        if pool["hybrid"]:
            values["max_mamba_cache_size"] = pool["mamba_slots"]
        return values

    def serve(self):
        """The event loop: wait for the server to be up, then run (and maybe crash) until killed."""
        crash_at = None
        while True:
            timeout = None if crash_at is None else max(crash_at - time.time(), 0)
            readable = select.select([self.control_fd], [], [], timeout)[0]
            if not readable:
                raise SchedulerFailure(fake_traceback(
                    [SCHEDULER_FRAMES[0],
                     ("managers/scheduler.py", 1040, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
                     ("managers/scheduler.py", 2010, "run_batch",
                      "logits_output, next_token_ids = self.tp_worker.forward_batch_generation(")],
                    "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might "
                    "be asynchronously reported at some other API call, so the stacktrace below might be "
                    "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"))
            message = os.read(self.control_fd, 64)
            if not message:  # parent gone: an orphan keeps holding its GPU memory until killed
                sleep_forever()
            if b"up" in message and "crash_after_ready" in SIM.faults and self.rank0:
                crash_at = time.time() + SIM.fault_delay


def run_detokenizer():
    sleep_forever()


# --- main process: HTTP server, warmup, signals --------------------------------------------------


class Server:
    def __init__(self, config, model):
        self.config, self.args, self.model = config, config.args, model
        self.log = Logger()
        self.log.quiet = self.args.log_level in ("warning", "error", "critical")
        self.status = "Starting"
        self.gracefully_exit = False
        self.scheduler_info = {}
        self.ready_infos = []
        self.control_fds = []
        self.requests = 0
        self.start_time = time.time()

    # process tree -----------------------------------------------------------------------------
    def launch_subprocesses(self):
        args = self.args
        main_pid = os.getpid()
        orphan = "orphan_scheduler" in SIM.faults
        ready_readers = []
        ranks = [(d, t) for d in range(args.dp_size) for t in range(args.tp_size)]
        pipes = []
        for _rank in ranks:
            ready_r, ready_w = os.pipe()
            control_r, control_w = os.pipe()
            pipes.append((ready_r, ready_w, control_r, control_w))
            ready_readers.append(ready_r)
            self.control_fds.append(control_w)

        def start_schedulers():
            for (dp_rank, tp_rank), (ready_r, ready_w, control_r, control_w) in zip(ranks, pipes):
                scheduler = Scheduler(self.config, dp_rank, tp_rank, ready_w, control_r, main_pid)
                fork_child(scheduler.title, lambda s=scheduler: self.child_main(s, pipes), orphan=orphan)
            # Only the schedulers keep their ends, so a dead scheduler reads as EOF in the main process.
            for ready_r, ready_w, control_r, control_w in pipes:
                os.close(ready_w)
                os.close(control_r)

        if args.dp_size > 1:
            fork_child("sglang::data_parallel_controller", lambda: (start_schedulers(), sleep_forever()))
            for ready_r, ready_w, control_r, control_w in pipes:
                os.close(ready_w)
                os.close(control_r)
        else:
            start_schedulers()
        fork_child("sglang::detokenizer", run_detokenizer)
        return ready_readers

    @staticmethod
    def child_main(scheduler, pipes):
        # Keep only this scheduler's pipe ends, so EOFs mean what they say.
        mine = {scheduler.ready_fd, scheduler.control_fd}
        for fds in pipes:
            for fd in fds:
                if fd not in mine:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
        scheduler.run()

    def wait_for_ready(self, readers):
        for rank, fd in enumerate(readers):
            data = b""
            while not data.endswith(b"\n"):
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.scheduler_died(rank)
                data += chunk
            self.ready_infos.append(json.loads(data))
        self.scheduler_info = self.ready_infos[0]

    def scheduler_died(self, rank):
        if SIM.new:
            self.log.error(f"Rank {rank} scheduler died during initialization (exit code: -9). If exit code is -9 "
                           "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.")
        else:
            self.log.error(f"Rank {rank} scheduler is dead. Please check if there are relevant logs.")
        kill_process_tree()

    def on_sigquit(self, signum, frame):
        if self.status == "Starting" or not SIM.new:
            self.log.error("Received sigquit from a child process. It usually means the child failed.")
        else:
            self.log.error(f"SIGQUIT received. signum={signum!r}, frame={frame!r}. It usually means one child failed.")
        kill_process_tree()

    def on_sigterm(self, signum, frame):
        # Installed once serving, via loop.add_signal_handler: SGLang's handler sees no signum/frame.
        self.gracefully_exit = True
        self.log.info("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        threading.Thread(target=self.drain_and_exit, daemon=True).start()

    def drain_and_exit(self):
        time.sleep(0.3)
        self.log.info("Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[].")
        for pid in descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(0)

    # lifecycle --------------------------------------------------------------------------------
    def run(self):
        signal.signal(signal.SIGQUIT, self.on_sigquit)
        if "ignore_sigterm" in SIM.faults:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.log.info(self.config.repr_line())
        readers = self.launch_subprocesses()
        self.wait_for_ready(readers)
        if SIM.new:
            timings = self.scheduler_info["timings"]
            graphs = ", ".join(f"{phase}={seconds:.2f}" for phase, seconds in timings["cuda_graph"].items())
            elapsed = time.time() - self.start_time
            self.log.info(f"Engine startup timings (s): load_weight={timings['load_weight']:.2f}, "
                          f"kv_cache_allocation={timings['kv_cache_allocation']:.2f}, scheduler_e2e={elapsed:.2f}, "
                          f"cuda_graph={{{graphs}}}, tokenizer_e2e={elapsed:.2f}")
        self.serve_http()

    def serve_http(self):
        server_class = type("SimHTTPServer", (http.server.ThreadingHTTPServer,), {"daemon_threads": True})
        if ":" in self.args.host:
            server_class.address_family = socket.AF_INET6
        self.log.info(f"INFO:     Started server process [{os.getpid()}]")
        self.log.info("INFO:     Waiting for application startup.")
        self.log.info("INFO:     Application startup complete.")
        try:
            httpd = server_class((self.args.host, self.args.port), make_handler(self))
        except OSError as exc:
            self.log.error(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                           f"({self.args.host!r}, {self.args.port}): {exc.strerror.lower()}")
            for pid in descendants(os.getpid()):
                os.kill(pid, signal.SIGKILL)
            sys.exit(1)
        self.log.info(f"INFO:     Uvicorn running on http://{self.args.host}:{self.args.port} (Press CTRL+C to quit)")
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        threading.Thread(target=self.warmup, daemon=True).start()
        if "ignore_sigterm" not in SIM.faults:
            signal.signal(signal.SIGTERM, self.on_sigterm)
        while True:
            signal.pause()

    def warmup(self):
        try:
            self.run_warmup()
        except Exception as exc:  # noqa: BLE001 - _execute_server_warmup: any failure kills the server
            self.log.error(f"Initialization failed. warmup error: {type(exc).__name__}: {exc}")
            kill_process_tree()

    def run_warmup(self):
        base = f"http://{self.local_host()}:{self.args.port}"
        headers = {"Authorization": "Bearer " + self.args.api_key} if self.args.api_key else {}
        if not self.args.skip_server_warmup:
            urllib.request.urlopen(urllib.request.Request(base + "/model_info", headers=headers), timeout=5).read()
            payload = {"text": "The capital city of France is",
                       "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
            request = urllib.request.Request(base + "/generate", data=json.dumps(payload).encode(),
                                             headers=dict(headers, **{"Content-Type": "application/json"}))
            urllib.request.urlopen(request, timeout=600).read()
        self.status = "Up"
        self.log.info("The server is fired up and ready to roll!")
        for fd in self.control_fds:
            try:
                os.write(fd, b"up\n")
            except OSError:
                pass

    def local_host(self):
        host = self.args.host
        if host in ("0.0.0.0", ""):
            return "127.0.0.1"
        if host == "::":
            return "[::1]"
        return f"[{host}]" if ":" in host else host

    # endpoints --------------------------------------------------------------------------------
    def model_info(self):
        info = {"model_path": self.args.model_path, "tokenizer_path": self.args.tokenizer_path,
                "is_generation": True, "preferred_sampling_params": None, "weight_version": "default"}
        if SIM.new:
            info.update({"served_model_name": self.args.served_model_name, "load_format": "auto",
                         "reasoning_parser": None, "tool_call_parser": None, "disaggregation_mode": "null",
                         "has_image_understanding": False, "has_audio_understanding": False,
                         "model_type": self.model.get("model_type"),
                         "architectures": self.model.get("architectures")})
        return info

    def server_info(self):
        info = self.config.as_dict()
        scheduler = {k: v for k, v in self.scheduler_info.items() if k not in ("timings", "memory_usage", "pid")}
        info.update(scheduler)
        # One internal state per DP rank, from that rank's TP0 scheduler.
        info["internal_states"] = [
            dict(self.config.as_dict(), last_gen_throughput=0.0, memory_usage=ready["memory_usage"],
                 effective_max_running_requests_per_dp=ready["max_running_requests"])
            for ready in self.ready_infos[::self.args.tp_size]]
        info["version"] = VERSIONS[SIM.log_format]
        if SIM.new:
            info["frontend"] = "python"
            info["startup_time"] = self.scheduler_info["timings"]
        return info

    def metrics(self):
        labels = f'engine_type="unified",model_name="{self.args.served_model_name}",pp_rank="0",tp_rank="0"'
        gauges = [
            ("num_running_reqs", "The number of running requests.", 0),
            ("num_used_tokens", "The number of used tokens.", 0),
            ("token_usage", "The token usage.", 0.0),
            ("gen_throughput", "The generation throughput (token/s).", 0.0),
            ("num_queue_reqs", "The number of requests in the waiting queue.", 0),
            ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0),
            ("cache_hit_rate", "The prefix cache hit rate.", 0.0),
            ("spec_accept_length", "The average acceptance length of speculative decoding.", 0.0),
            ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
             self.scheduler_info["max_total_num_tokens"]),
        ]
        if "max_mamba_cache_size" in self.scheduler_info:
            gauges.append(("mamba_usage", "The token usage for Mamba layers.", 0.0))
        counters = [
            ("prompt_tokens", "Number of prefill tokens processed.", 7 * self.requests),
            ("generation_tokens", "Number of generation tokens processed.", 8 * self.requests),
            ("num_requests", "Number of requests processed.", self.requests),
        ]
        lines = []
        for name, help_text, value in gauges:
            lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} gauge",
                      f"sglang:{name}{{{labels}}} {float(value)}"]
        for name, help_text, value in counters:
            lines += [f"# HELP sglang:{name}_total {help_text}", f"# TYPE sglang:{name}_total counter",
                      f"sglang:{name}_total{{{labels}}} {float(value)}"]
        return "\n".join(lines) + "\n"

    def generate(self):
        SIM.sleep(1.0 if self.status == "Starting" else 0.1)  # the warmup request compiles kernels first
        self.requests += 1
        prefix = " TP0" if self.args.tp_size > 1 else ""
        Logger(prefix).info("Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
                            "#running-req: 0, #queue-req: 0, ")
        return {"text": " Paris. It is the capital of France",
                "output_ids": [12095, 13, 1084, 374, 279, 6722, 315, 9625],
                "meta_info": {"id": uuid.uuid4().hex, "finish_reason": {"type": "length", "length": 8},
                              "prompt_tokens": 7, "completion_tokens": 8, "cached_tokens": 0,
                              "e2e_latency": 0.05 * max(SIM.time_scale, 0.1)}}


def make_handler(server):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, fmt, *args):
            pass  # uvicorn's access line is written in send_response instead

        def send_response(self, code, message=None):
            super().send_response(code, message)
            phrase = http.server.BaseHTTPRequestHandler.responses.get(code, ("",))[0]
            if not server.log.quiet:
                host, port = self.client_address[:2]
                write_line(1, f'[{timestamp()}] INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" '
                              f"{code} {phrase}\n")

        def reply(self, code, body=b"", content_type="application/json"):
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            elif isinstance(body, str):
                body = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def authorized(self):
            if not server.args.api_key or self.path.startswith(("/health", "/metrics")):
                return True
            return self.headers.get("Authorization") == "Bearer " + server.args.api_key

        def do_GET(self):
            self.route()

        def do_POST(self):
            self.route()

        def route(self):
            path = self.path.split("?")[0]
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if not self.authorized():
                return self.reply(401, {"error": "Unauthorized"})
            if path in ("/health", "/health_generate"):
                if server.gracefully_exit:
                    server.log.info("Health check request received during shutdown. Returning 503.")
                    return self.reply(503)
                return self.reply(200 if server.status == "Up" else 503)
            if path in ("/model_info", "/get_model_info") and self.command == "GET":
                if path == "/get_model_info" and SIM.new:
                    server.log.info("Endpoint '/get_model_info' is deprecated and will be removed in a future "
                                    "version. Please use '/model_info' instead.")
                return self.reply(200, server.model_info())
            if path in ("/server_info", "/get_server_info") and self.command == "GET":
                return self.reply(200, server.server_info())
            if path == "/v1/models" and self.command == "GET":
                name = server.args.served_model_name
                return self.reply(200, {"object": "list", "data": [{
                    "id": name, "object": "model", "created": int(server.start_time), "owned_by": "sglang",
                    "root": name, "max_model_len": server.scheduler_info["context_len"]}]})
            if path == "/metrics" and server.args.enable_metrics and self.command == "GET":
                return self.reply(200, server.metrics(), "text/plain; version=0.0.4; charset=utf-8")
            if path == "/generate" and self.command == "POST":
                try:
                    json.loads(body or b"{}")
                except ValueError:
                    return self.reply(400, {"error": {"message": "invalid JSON body"}})
                return self.reply(200, server.generate())
            return self.reply(404, {"detail": "Not Found"})

    return Handler


def main(argv=None):
    global SIM
    argv = sys.argv[1:] if argv is None else argv
    if "--make-model" in argv:
        return make_model(argv)
    SIM = Sim()
    args = build_parser().parse_args(argv)
    config = ServerConfig(args)
    # The main process reads config.json too (TokenizerManager); a missing model fails in the schedulers.
    try:
        model = read_model_config(args.model_path)
    except OSError:
        model = {}
    Server(config, model).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
