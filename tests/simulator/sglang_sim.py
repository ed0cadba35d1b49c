#!/usr/bin/env python3
"""Stand-in for ``python3 -m sglang.launch_server`` (stdlib, optional setproctitle, Python >= 3.9).

Takes SGLang's flags and reproduces what a launcher can observe of a real server: the log lines
of v0.5.9 ("classic") or v0.5.23 ("new"), the process tree (schedulers titled ``sglang::scheduler_TP<i>``
dying with their parent), GPU memory held through tests/simulator/fakegpu.py, the HTTP endpoints
and their phases (connection refused -> 503 -> 200), SIGTERM handling and the common failures.

Once ready it serves ``/generate``, ``/v1/completions`` and ``/v1/chat/completions`` (streaming too, and the
schedulers' live counts on ``/v1/loads``) through
one scheduler per DP rank that behaves like SGLang's under load (``Serving`` below):
  * a FIFO waiting queue; a request is admitted while fewer than ``max_running_requests`` run and its
    prompt + max_new_tokens fit in what the KV pool (``max_total_num_tokens``) has not reserved for others;
  * prefill is serial per rank at SGLANG_SIM_PREFILL_TOKENS_PER_S and yields the first token; every running
    request then decodes one token per 1/SGLANG_SIM_DECODE_TOKENS_PER_S seconds, on its own clock;
  * there is no EOS: every request generates exactly its max_new_tokens (``ignore_eos`` changes nothing);
    prompts count len(input_ids) tokens, or len(text) // 4 (at least 1);
  * ``/metrics`` gauges are published when SGLang publishes them: at each prefill batch (the state before the
    batch joins), every ``--decode-log-interval`` decode steps (with the ``Decode batch`` line; at most once a
    tick) and, after SGLANG_SIM_IDLE_REFRESH_S without a batch, as the idle refresh (which leaves mamba_usage
    stale); counters and histograms count requests as they finish;
  * a stream whose client went away is aborted (its slot freed); SIGTERM drains what is in flight.
So a saturated rank outputs max_running_requests x SGLANG_SIM_DECODE_TOKENS_PER_S tokens/s and a request's
time to first token is its queue wait + the prefills ahead of it + prompt_tokens / SGLANG_SIM_PREFILL_TOKENS_PER_S.

Multi-node tensor parallelism (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``, SGLang 0.5.10): node R runs
TP ranks [tp/N * R, tp/N * (R + 1)) on its local GPUs (``base_gpu_id + (rank mod tp/N) * gpu_id_step``), titled
with their global rank. World rank 0 (node 0's TP0) listens on the --dist-init-addr port (on every address, as
torch's TCPStore); every other rank connects to it over TCP, retrying, and all block after "Init torch distributed
begin." until the whole world joined, or fail after --dist-timeout (default 600 s, scaled by SGLANG_SIM_TIME_SCALE
unless that is 0) with libtorch's words. The ranks agree on the tightest GPU through these connections (the MIN of
free memory after init sizes every rank, and trips the imbalance check, and the MIN after loading sizes the pools),
and keep them open while serving: a rank that dies closes them, and its peers fail as SGLang's schedulers do when
gloo raises in a collective ("Connection closed by peer"), through "Scheduler hit an exception" and SIGQUIT to a
tree kill of their node. Node 0 serves the HTTP API; a node of rank >= 1 runs only its schedulers, then the dummy
health server on --host/--port (GET /ping, /health, /health_generate: always 200; /metrics with --enable-metrics,
no scheduler gauges) and waits on each scheduler, logging "Scheduler or DataParallelController <pid> terminated
with <code>".

Environment:
  GPUOPS_FAKE_GPU_DIR     fake GPU state dir (fakegpu.py init); without it no memory is accounted
  SGLANG_SIM_LOG_FORMAT   classic (default) | new
  SGLANG_SIM_TIME_SCALE   multiplies every startup phase duration (default 1: ready in about 3-5 s; 0: at once);
                          the serving rates below are not scaled
  SGLANG_SIM_DECODE_TOKENS_PER_S   tokens per second each running request generates (default 40)
  SGLANG_SIM_PREFILL_TOKENS_PER_S  prompt tokens per second a rank prefills (default 20000)
  SGLANG_SIM_TICK_S       shortest gap between two chunks of a stream, and the scheduler's tick (decode log
                          lines, idle refresh) (default 0.1: 64 streams took 7 % of a core here, 12 % at 0.05)
  SGLANG_SIM_IDLE_REFRESH_S  seconds without a batch before the idle gauge refresh (default 30, as SGLang)
  SGLANG_SIM_FAULT        comma list of: draft_crash, oom_load, nccl_error, hang_before_rendezvous,
                          hang_after_weights, hang_cuda_graph, crash_after_ready, orphan_scheduler, ignore_sigterm,
                          slow_release; ``<fault>@<R>`` applies only on node rank R (one environment for every node).
                          oom_load fails every rank loading weights; hang_before_rendezvous stops the schedulers
                          before "Init torch distributed begin." (stuck like a read from a hung mount), so the
                          other nodes wait in the rendezvous; crash_after_ready crashes the node's first rank after
                          "The server is fired up" (node 0) or the dummy health server's start (rank >= 1)
  SGLANG_SIM_FAULT_DELAY  seconds after ready before crash_after_ready fires (default 2)
  SGLANG_SIM_RELEASE_DELAY seconds GPU memory outlives the process with slow_release (default 3)

Model directories: ``sglang_sim.py --make-model DIR [--arch A] [--hybrid-mamba] [--shards N] [--weights-gib G]``.
"""

import argparse
import bisect
import collections
import ctypes
import datetime
import errno
import heapq
import http.server
import itertools
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

FAULTS = {"draft_crash", "oom_load", "nccl_error", "hang_before_rendezvous", "hang_after_weights", "hang_cuda_graph",
          "crash_after_ready", "orphan_scheduler", "ignore_sigterm", "slow_release"}
VERSIONS = {"classic": "0.5.9", "new": "0.5.23"}
PR_SET_PDEATHSIG = 1
GIB = 1024 ** 3
SITE = "/usr/local/lib/python3.12/dist-packages"
CONTEXT_MIB = 522  # a CUDA context plus cuBLAS workspace, as measured on the H200 (busy.txt)


def getenv_float(name, default):
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


def getenv_positive(name, default):
    value = getenv_float(name, default)
    if value <= 0:
        sys.exit(f"{name} must be a number above 0, not {os.environ[name]!r}; unset it for {default:g}")
    return value


class Sim:
    """Run-wide settings taken from the environment."""

    def __init__(self):
        self.log_format = os.environ.get("SGLANG_SIM_LOG_FORMAT", "classic")
        if self.log_format not in VERSIONS:
            sys.exit(f"SGLANG_SIM_LOG_FORMAT must be classic or new, not {self.log_format!r}")
        self.time_scale = getenv_float("SGLANG_SIM_TIME_SCALE", 1.0)
        self.node_faults = parse_faults(os.environ.get("SGLANG_SIM_FAULT", ""))
        self.fault_delay = getenv_float("SGLANG_SIM_FAULT_DELAY", 2.0)
        self.select_node(0)
        self.gpu_dir = os.environ.get("GPUOPS_FAKE_GPU_DIR") or None
        self.new = self.log_format == "new"
        self.decode_rate = getenv_positive("SGLANG_SIM_DECODE_TOKENS_PER_S", 40.0)
        self.prefill_rate = getenv_positive("SGLANG_SIM_PREFILL_TOKENS_PER_S", 20000.0)
        self.tick = getenv_positive("SGLANG_SIM_TICK_S", 0.1)
        self.idle_refresh = getenv_positive("SGLANG_SIM_IDLE_REFRESH_S", 30.0)

    def select_node(self, node_rank):
        """Keep the faults meant for this node (``fault@<node rank>``, or unqualified)."""
        self.faults = {name for name, node in self.node_faults if node in (None, node_rank)}
        self.release_delay = getenv_float("SGLANG_SIM_RELEASE_DELAY", 3.0) if "slow_release" in self.faults else None

    def sleep(self, seconds):
        if self.time_scale > 0:
            time.sleep(seconds * self.time_scale)

    def scaled(self, seconds):
        """A startup timeout on the simulated clock: scaled like the phases, whole at time scale 0."""
        return seconds * self.time_scale if self.time_scale > 0 else seconds


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
    add("--decode-log-interval", type=int, default=40)
    add("--stream-interval", type=int, default=1)
    add("--api-key")
    add("--admin-api-key")
    add("--ssl-keyfile-password")
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
    add("--disable-radix-cache", action="store_true")
    add("--disable-overlap-schedule", action="store_true")
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
    add("--nnodes", type=int, default=1)
    add("--node-rank", type=int, default=0)
    add("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr")
    add("--nccl-port", type=int)
    return parser


SERVER_ARGS_CHECK_FRAMES = [
    ("sglang/launch_server.py", 29, "<module>", "run_server(server_args)"),
    ("sglang/launch_server.py", 21, "run_server", "launch_server(server_args)"),
    ("entrypoints/http_server.py", 1862, "launch_server", "_launch_subprocesses("),
    ("entrypoints/engine.py", 1034, "_launch_subprocesses", "server_args.check_server_args()"),
]


def check_server_args(args):
    """ServerArgs.check_server_args, as far as multi-node goes: an AssertionError that ends the launch (exit 1)."""
    checks = [
        (args.tp_size % args.nnodes == 0, 6065, "tp_size must be divisible by number of nodes"),  # tp * pp, pp 1
        (not (args.dp_size > 1 and args.nnodes != 1), 6076,
         "multi-node data parallel is not supported unless dp attention!"),
    ]
    for passed, line, message in checks:
        if not passed:
            write_line(2, fake_traceback(SERVER_ARGS_CHECK_FRAMES + [
                ("server_args.py", line, "check_server_args", "assert (")], f"AssertionError: {message}") + "\n")
            sys.exit(1)


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
        # Mamba cache slots per running request (model_runner_kv_cache_mixin._calculate_mamba_ratio, 0.5.10):
        # 3 with the radix cache (no_buffer turns the overlap schedule off), 5 with extra_buffer's ping-pong
        # track buffer (4 without the overlap schedule), 1 without a radix cache. extra_buffer_lazy (v0.5.23)
        # is taken as extra_buffer.
        if args.disable_radix_cache:
            self.mamba_slots_per_request = 1
        elif self.mamba_strategy.startswith("extra_buffer"):
            self.mamba_slots_per_request = 4 if args.disable_overlap_schedule else 5
        else:
            self.mamba_slots_per_request = 3
        args.tokenizer_path = args.tokenizer_path or args.model_path
        args.served_model_name = args.served_model_name or args.model_path
        # This node's TP ranks (engine.py, pp_size 1): node r runs [tp_per_node * r, tp_per_node * (r + 1)).
        self.tp_per_node = args.tp_size // args.nnodes
        self.local_tp_ranks = range(self.tp_per_node * args.node_rank, self.tp_per_node * (args.node_rank + 1))
        self.dist_address = dist_init_address(args) if args.nnodes > 1 else None

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
    """A traceback of frames (path, line, function, code); paths are under sglang/srt/ unless they name their
    package (``sglang/...``, ``torch/...``)."""
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        package = "" if path.startswith(("sglang/", "torch/")) else "sglang/srt/"
        lines.append(f'  File "{SITE}/{package}{path}", line {line}, in {func}')
        lines.append("    " + code)
    return "\n".join(lines) + "\n" + error


SCHEDULER_FRAMES = [
    ("managers/scheduler.py", 2914, "run_scheduler_process", "scheduler = Scheduler("),
    ("managers/scheduler.py", 351, "__init__", "self.tp_worker = TpModelWorker("),
    ("managers/tp_worker.py", 95, "__init__", "self.model_runner = ModelRunner("),
]


def scheduler_prefix(args, dp_rank, tp_rank):
    """The scheduler's log prefix (DP, then TP), also the tail of its process title."""
    return (f" DP{dp_rank}" if args.dp_size > 1 else "") + \
        (f" TP{tp_rank}" if args.tp_size > 1 or args.dp_size > 1 else "")


class SchedulerFailure(Exception):
    """Carries the traceback text the scheduler logs as 'Scheduler hit an exception'."""


# --- multi-node tensor parallelism: torch.distributed's TCPStore rendezvous and the gloo CPU group -----

DEFAULT_DIST_TIMEOUT_S = 600  # torch's NCCL default when --dist-timeout is not given
CONNECT_RETRY_S = 0.1
C10D_WRAPPER_FRAME = ("torch/distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)")
TORCH_ALL_REDUCE_FRAMES = [C10D_WRAPPER_FRAME, ("torch/distributed/distributed_c10d.py", 2815, "all_reduce", "work.wait()")]
MODEL_RUNNER_FRAME = ("model_executor/model_runner.py", 378, "__init__",
                      "min_per_gpu_memory = self.init_torch_distributed()")
RENDEZVOUS_FRAMES = SCHEDULER_FRAMES + [
    MODEL_RUNNER_FRAME,
    ("model_executor/model_runner.py", 953, "init_torch_distributed", "init_distributed_environment("),
    ("distributed/parallel_state.py", 1676, "init_distributed_environment", "torch.distributed.init_process_group("),
    C10D_WRAPPER_FRAME,
    ("torch/distributed/c10d_logger.py", 95, "wrapper", "func_return = func(*args, **kwargs)"),
    ("torch/distributed/distributed_c10d.py", 1710, "init_process_group",
     "store, rank, world_size = next(rendezvous_iterator)"),
    ("torch/distributed/rendezvous.py", 279, "_tcp_rendezvous_handler", "store = _create_c10d_store("),
    ("torch/distributed/rendezvous.py", 197, "_create_c10d_store", "return TCPStore("),
]
MEMORY_FRAME = ("utils/common.py", 501, "get_available_gpu_memory", "torch.distributed.all_reduce(")
PRE_MODEL_LOAD_MEMORY_FRAMES = SCHEDULER_FRAMES + [
    MODEL_RUNNER_FRAME,
    ("model_executor/model_runner.py", 1005, "init_torch_distributed",
     "pre_model_load_memory = get_available_gpu_memory("),
    MEMORY_FRAME,
] + TORCH_ALL_REDUCE_FRAMES
POOL_MEMORY_FRAMES = SCHEDULER_FRAMES + [
    ("model_executor/model_runner.py", 381, "__init__", "self.initialize(min_per_gpu_memory)"),
    ("model_executor/model_runner.py", 547, "initialize", "self.init_memory_pool(pre_model_load_memory)"),
    ("model_executor/model_runner_kv_cache_mixin.py", 907, "init_memory_pool",
     "self.max_total_num_tokens = self.profile_max_num_token(total_gpu_memory)"),
    ("model_executor/model_runner_kv_cache_mixin.py", 148, "profile_max_num_token",
     "available_gpu_memory = get_available_gpu_memory("),
    MEMORY_FRAME,
] + TORCH_ALL_REDUCE_FRAMES
# Every event-loop turn broadcasts the received requests from TP0 over the gloo CPU group (recv_requests), so a
# peer that died is noticed at once there, also while idle.
EVENT_LOOP_FRAMES = [
    ("managers/scheduler.py", 2931, "run_scheduler_process", "scheduler.event_loop_overlap()"),
    ("managers/scheduler.py", 1019, "event_loop_overlap", "recv_reqs = self.recv_requests()"),
    ("managers/scheduler.py", 1275, "recv_requests", "recv_reqs = broadcast_pyobj("),
    ("utils/common.py", 1211, "broadcast_pyobj", "dist.broadcast(tensor_size, src=src, group=dist_group)"),
    C10D_WRAPPER_FRAME,
    ("torch/distributed/distributed_c10d.py", 2772, "broadcast", "work.wait()"),
]


def dist_init_address(args):
    """(host, port) of the TCPStore: --dist-init-addr, else --host (or 127.0.0.1) with --nccl-port or a port free
    on this node (server_args.py), so nodes launched without --dist-init-addr never meet."""
    if args.dist_init_addr:
        host, _colon, port = args.dist_init_addr.rpartition(":")
        return host.strip("[]"), int(port)
    if args.nccl_port:
        return args.host or "127.0.0.1", args.nccl_port
    with socket.socket() as probe:
        probe.bind(("", 0))
        return args.host or "127.0.0.1", probe.getsockname()[1]


class Channel:
    """One TCP connection between two ranks, carrying newline-terminated JSON messages."""

    def __init__(self, sock, peer):
        self.sock, self.peer = sock, peer
        self.buffer = b""

    def fileno(self):
        return self.sock.fileno()

    def send(self, message):
        """Send a message; a connection the peer closed shows at the next receive."""
        try:
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            pass

    def fill(self):
        """Read what arrived; False when the peer closed the connection (or reset it)."""
        try:
            data = self.sock.recv(4096)
        except OSError:
            return False
        self.buffer += data
        return bool(data)

    def message(self):
        """The next complete message received, or None."""
        line, newline, rest = self.buffer.partition(b"\n")
        if not newline:
            return None
        self.buffer = rest
        return json.loads(line)

    def recv(self):
        """The next message, waiting for it; None when the peer closed the connection."""
        while True:
            message = self.message()
            if message is not None:
                return message
            if not self.fill():
                return None


class LocalGroup:
    """The ranks of a single-node launch: no connection between them, each sized by its own GPU."""

    channels = ()
    spans_nodes = False

    def rendezvous(self):
        pass

    def all_reduce_min(self, value, frames):
        return value


class NodesGroup:
    """The world group of a multi-node launch, as torch.distributed forms it over TCP.

    World rank 0 hosts the TCPStore: it listens on the --dist-init-addr port and waits until every other rank has
    connected and joined; the others connect to it, retrying. The connections stay open for the collectives
    (all_reduce MIN of free memory) and while serving, so the death of any rank closes one and its peers fail."""

    spans_nodes = True

    def __init__(self, config, rank):
        self.rank, self.world_size = rank, config.args.tp_size
        self.host, self.port = config.dist_address
        self.timeout_s = config.args.dist_timeout or DEFAULT_DIST_TIMEOUT_S
        self.channels = []  # rank 0: one per other rank; any other rank: the one to rank 0
        self.listener = None

    def rendezvous(self):
        """Block until all world_size ranks joined (TCPStore(..., wait_for_workers=True))."""
        deadline = time.monotonic() + SIM.scaled(self.timeout_s)
        if self.rank == 0:
            self.host_store(deadline)
        else:
            self.join_store(deadline)

    def host_store(self, deadline):
        family, dualstack = (socket.AF_INET6, True) if socket.has_dualstack_ipv6() else (socket.AF_INET, False)
        try:  # on every address, as torch's server socket
            self.listener = socket.create_server(("", self.port), family=family, dualstack_ipv6=dualstack)
        except OSError as exc:
            raise self.store_failure(
                "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                f"address. port: {self.port}, useIpv6: false, code: -{exc.errno}, "
                f"name: {errno.errorcode.get(exc.errno, 'UNKNOWN')}, message: {os.strerror(exc.errno).lower()}")
        connecting, joined = [], {}
        while len(joined) < self.world_size - 1:
            remaining = deadline - time.monotonic()
            if remaining <= 0:  # torch counts itself among the clients, and reports whole seconds past the limit
                raise self.store_failure(
                    f"torch.distributed.DistStoreError: Timed out after {self.timeout_s + 1} seconds waiting for "
                    f"clients. {len(joined) + 1}/{self.world_size} clients joined.")
            for ready in select.select([self.listener] + connecting, [], [], remaining)[0]:
                if ready is self.listener:
                    sock, address = self.listener.accept()
                    connecting.append(Channel(sock, address))
                elif not ready.fill():  # gone before it joined
                    connecting.remove(ready)
                    ready.sock.close()
                else:
                    message = ready.message()
                    if message is not None:
                        connecting.remove(ready)
                        joined[message["rank"]] = ready
        # The store keeps listening, but a rank that connects later waits forever (never seen in practice: the
        # group dies with any of its ranks).
        self.channels = list(joined.values())
        for channel in self.channels:
            channel.send({"joined": self.world_size})

    def join_store(self, deadline):
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=max(deadline - time.monotonic(), 0.1))
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise self.store_failure(
                        "torch.distributed.DistNetworkError: The client socket has timed out after "
                        f"{self.timeout_s * 1000}ms while trying to connect to ({self.host}, {self.port}).")
                time.sleep(min(CONNECT_RETRY_S, max(deadline - time.monotonic(), 0)))
        sock.settimeout(None)
        channel = Channel(sock, sock.getpeername())
        channel.send({"rank": self.rank})
        if channel.recv() is None:  # rank 0 went away while this rank waited for the others
            raise self.store_failure("torch.distributed.DistNetworkError: failed to recv, got 0 bytes")
        self.channels = [channel]

    def all_reduce_min(self, value, frames):
        """torch.distributed.all_reduce(MIN) over the CPU group, through rank 0; blocks while a peer is busy
        elsewhere (hung), fails when one is gone (frames: where the caller is)."""
        if self.rank == 0:
            values = [value]
            for channel in self.channels:
                message = channel.recv()
                if message is None:
                    raise self.peer_failure(channel, frames)
                values.append(message["value"])
            for channel in self.channels:
                channel.send({"value": min(values)})
            return min(values)
        channel = self.channels[0]
        channel.send({"value": value})
        message = channel.recv()
        if message is None:
            raise self.peer_failure(channel, frames)
        return message["value"]

    def check(self, readable):
        """Connections select() found readable while serving: a closed one fails the event loop."""
        for channel in readable:
            if not channel.fill():
                raise self.peer_failure(channel, EVENT_LOOP_FRAMES)

    @staticmethod
    def store_failure(error):
        return SchedulerFailure(fake_traceback(RENDEZVOUS_FRAMES, error))

    @staticmethod
    def peer_failure(channel, frames):
        host, port = channel.peer[:2]
        return SchedulerFailure(fake_traceback(frames, (
            f"RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
            f"[{host.removeprefix('::ffff:')}]:{port}")))


def process_group(config, rank):
    return NodesGroup(config, rank) if config.args.nnodes > 1 else LocalGroup()


class Scheduler:
    def __init__(self, config, dp_rank, tp_rank, ready_fd, control_fd, main_pid):
        self.config, self.args = config, config.args
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
        if "hang_before_rendezvous" in SIM.faults:  # like a read of the model from a hung mount: no GPU touched yet
            sleep_forever()
        self.gpu = self.select_gpu()
        if SIM.gpu_dir:
            self.device = fakegpu.open_device(SIM.gpu_dir, self.gpu)
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
        self.group.rendezvous()
        if self.group.spans_nodes and not self.args.disable_custom_all_reduce:
            self.log.info("Custom allreduce is disabled because this process group spans across nodes.")
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
        local_gb = self.avail_gb()
        # pre_model_load_memory, the MIN over every rank, sizes every rank (model_runner.init_torch_distributed)
        self.total_gpu_gb = self.group.all_reduce_min(local_gb, PRE_MODEL_LOAD_MEMORY_FRAMES)
        self.check_memory_balance(local_gb)
        elapsed = time.time() - start
        if SIM.new:
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
        # rest_memory = available - total * (1 - mem_fraction_static), as model_runner.profile_max_num_token,
        # with the available memory of the tightest rank
        available_gb = self.group.all_reduce_min(self.avail_gb(), POOL_MEMORY_FRAMES)
        rest_gb = available_gb - self.total_gpu_gb * (1 - args.mem_fraction_static)
        max_running = args.max_running_requests
        mamba_slots = 0
        if hybrid:
            k_heads, v_heads = int(model.get("linear_num_key_heads", 16)), int(model.get("linear_num_value_heads", 32))
            k_dim, v_dim = int(model.get("linear_key_head_dim", 128)), int(model.get("linear_value_head_dim", 128))
            conv_dim = (2 * k_heads * k_dim + v_heads * v_dim) // tp
            mamba_layers = layers - attn_layers
            ssm_bytes = mamba_layers * (v_heads // tp) * k_dim * v_dim * 4  # float32 SSM state
            conv_bytes = mamba_layers * conv_dim * (int(model.get("linear_conv_kernel_dim", 4)) - 1) * 2
            # handle_max_mamba_cache: an explicit size, else one slot per request without a radix cache,
            # else mamba_full_memory_ratio : 1 between mamba states and the KV pool
            mamba_slots = args.max_mamba_cache_size
            if mamba_slots is None and args.disable_radix_cache and args.max_running_requests:
                mamba_slots = args.max_running_requests
            if mamba_slots is None:
                ratio = args.mamba_full_memory_ratio
                mamba_slots = int(rest_gb * ratio / (1 + ratio) * GIB // (ssm_bytes + conv_bytes))
            mamba_gb = mamba_slots * (ssm_bytes + conv_bytes) / GIB
            rest_gb -= mamba_gb
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
        if hybrid:
            max_running = min(max_running, mamba_slots // self.config.mamba_slots_per_request)
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
            readable = select.select([self.control_fd, *self.group.channels], [], [], timeout)[0]
            peers = [ready for ready in readable if isinstance(ready, Channel)]
            if peers:  # nothing comes over them while serving but their end
                self.group.check(peers)
            if not readable:
                raise SchedulerFailure(fake_traceback(
                    [SCHEDULER_FRAMES[0],
                     ("managers/scheduler.py", 1040, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
                     ("managers/scheduler.py", 2010, "run_batch",
                      "logits_output, next_token_ids = self.tp_worker.forward_batch_generation(")],
                    "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might "
                    "be asynchronously reported at some other API call, so the stacktrace below might be "
                    "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"))
            if self.control_fd not in readable:
                continue
            message = os.read(self.control_fd, 64)
            if not message:  # parent gone: an orphan keeps holding its GPU memory until killed
                sleep_forever()
            if b"up" in message and "crash_after_ready" in SIM.faults and self.first_local:
                crash_at = time.time() + SIM.fault_delay


def run_detokenizer():
    sleep_forever()


# --- serving: requests, scheduling, metrics ------------------------------------------------------

# The warmup's answer (" Paris. It is the capital of France"), repeated for longer generations.
OUTPUT_VOCAB = [(12095, " Paris"), (13, "."), (1084, " It"), (374, " is"), (279, " the"), (6722, " capital"),
                (315, " of"), (9625, " France")]
OUTPUT_CYCLE = "".join(text for _id, text in OUTPUT_VOCAB)
DEFAULT_MAX_NEW_TOKENS = 128  # SamplingParams default; also used where SGLang would run until EOS
# TokenizerMetricsCollector's default buckets (s)
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = TTFT_BUCKETS + (600, 1200, 1800, 2400)


def estimate_tokens(text):
    return max(1, len(text) // 4)


def output_ids(count):
    return [OUTPUT_VOCAB[i % len(OUTPUT_VOCAB)][0] for i in range(count)]


def output_text(count):
    cycles, rest = divmod(count, len(OUTPUT_VOCAB))
    return OUTPUT_CYCLE * cycles + "".join(text for _id, text in OUTPUT_VOCAB[:rest])


class RequestError(Exception):
    """A request refused with 400, in SGLang's words where it has them."""


class Request:
    """One sequence. Once admitted its whole timeline is fixed (time.monotonic() seconds): the first token
    comes when its prefill ends, then one every 1 / SGLANG_SIM_DECODE_TOKENS_PER_S seconds."""

    def __init__(self, prompt_tokens, max_new_tokens):
        self.rid = uuid.uuid4().hex
        self.prompt_tokens, self.max_new_tokens = prompt_tokens, max_new_tokens
        self.arrival = time.monotonic()
        self.admitted = threading.Event()
        self.first_token_at = self.finished_at = None
        self.released = False

    @property
    def kv_reservation(self):
        return self.prompt_tokens + self.max_new_tokens

    def schedule(self, prefill_start):
        self.first_token_at = prefill_start + self.prompt_tokens / SIM.prefill_rate
        self.finished_at = self.token_time(self.max_new_tokens)

    def token_time(self, count):
        """When the count-th output token exists (the 0th: when the prefill ends)."""
        return self.first_token_at + max(count - 1, 0) / SIM.decode_rate

    def generated(self, now):
        end = None if self.first_token_at is None else min(now, self.finished_at)  # an abort moves finished_at
        if end is None or end < self.first_token_at:
            return 0
        # The tolerance covers rounding in token_time's sum: on a clock hours past boot, first_token_at + k / rate
        # - first_token_at can come out a few 1e-8 tokens short of k, and the last token would never exist.
        return min(self.max_new_tokens, 1 + int((end - self.first_token_at) * SIM.decode_rate + 1e-6))

    def decoded(self, now):
        """Tokens from decode steps (the first one comes from the prefill): what gen_throughput counts."""
        return max(self.generated(now) - 1, 0)


class TokenizerStats:
    """The tokenizer's counters and histograms, observed when a request finishes."""

    def __init__(self):
        self.prompt_tokens = self.generation_tokens = self.requests = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)

    def finished(self, request):
        self.prompt_tokens += request.prompt_tokens
        self.generation_tokens += request.max_new_tokens
        self.requests += 1
        self.ttft.observe(request.first_token_at - request.arrival)
        self.e2e.observe(request.finished_at - request.arrival)


class Histogram:
    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value):
        self.sum += value
        self.counts[bisect.bisect_left(self.buckets, value)] += 1  # the first bucket with value <= bound


class RankScheduler:
    """One DP rank's scheduler; every method runs under Serving.lock."""

    def __init__(self, config, ready, dp_rank, stats):
        args = config.args
        self.stats = stats
        self.max_running = ready["max_running_requests"]
        self.pool_tokens = ready["max_total_num_tokens"]
        self.mamba_slots = ready.get("max_mamba_cache_size")
        self.mamba_per_request = config.mamba_slots_per_request
        self.cuda_graph_max_bs = 0 if args.disable_cuda_graph else args.cuda_graph_max_bs
        self.decode_log_s = args.decode_log_interval / SIM.decode_rate  # decode steps at the decode rate
        self.log = Logger(scheduler_prefix(args, dp_rank, 0))
        self.log.quiet = args.log_level in ("warning", "error", "critical")
        self.waiting = collections.deque()
        self.running = {}
        self.finishing = []  # heap of (finished_at, rid, request)
        self.reserved_tokens = 0
        self.prefill_free_at = 0.0
        self.released_decoded = 0  # decode tokens of requests no longer running
        now = time.monotonic()
        self.busy_until = self.last_decode_log = self.last_publish = now
        self.decode_busy_s = 0.0  # time with requests running since the last decode log: decode steps / rate
        self.decoded_at_last_log = 0
        self.gauges = {"num_running_reqs": 0, "num_used_tokens": 0, "token_usage": 0.0, "full_token_usage": 0.0,
                       "mamba_usage": 0.0, "gen_throughput": 0.0, "num_queue_reqs": 0}

    # state ------------------------------------------------------------------------------------
    def usage(self, now, running):
        """(KV tokens held, KV usage, mamba usage) of the given running requests."""
        used = sum(request.prompt_tokens + request.generated(now) for request in running)
        mamba = len(running) * self.mamba_per_request / self.mamba_slots if self.mamba_slots else 0.0
        return used, used / self.pool_tokens, mamba

    def publish(self, now, running, used, kv_usage, mamba_usage=None, **extra):
        """Set the gauges as SGLang's log_stats does; mamba_usage None leaves it as it was."""
        # A hybrid model's token_usage is the fuller of its two pools from v0.5.10 on; v0.5.9 (the classic format)
        # publishes the KV pool alone there (scheduler_metrics_mixin.py; see docs/capacity.md).
        token_usage = max(kv_usage, mamba_usage or 0.0) if SIM.new else kv_usage
        self.gauges.update(num_running_reqs=running, num_used_tokens=used, full_token_usage=kv_usage,
                           token_usage=token_usage, num_queue_reqs=len(self.waiting), **extra)
        if self.mamba_slots and mamba_usage is not None:
            self.gauges["mamba_usage"] = mamba_usage
        self.last_publish = now

    def account(self, at):
        """Count the time up to ``at`` (never earlier than the last call) as decoding if requests run."""
        if self.running:
            self.decode_busy_s += max(at - self.busy_until, 0.0)
        self.busy_until = max(at, self.busy_until)

    # scheduling -------------------------------------------------------------------------------
    def submit(self, request, now):
        self.advance(now)
        self.waiting.append(request)
        self.admit(now)

    def abort(self, request, now):
        if request in self.waiting:
            self.waiting.remove(request)
        elif request.rid in self.running:
            request.finished_at = min(request.finished_at, now)
            self.release(request)
            self.admit(now)

    def advance(self, now):
        """Retire every request finished by now, admitting waiting ones at the moment each slot frees."""
        while self.finishing and self.finishing[0][0] <= now:
            finished_at, _rid, request = heapq.heappop(self.finishing)
            if not request.released:
                self.release(request)
                self.stats.finished(request)
                self.admit(finished_at)

    def release(self, request):
        self.account(request.finished_at)
        request.released = True
        del self.running[request.rid]
        self.reserved_tokens -= request.kv_reservation
        self.released_decoded += request.decoded(request.finished_at)

    def admit(self, at):
        """One prefill batch of the waiting requests that fit, first come first served."""
        self.account(at)
        before = list(self.running.values())
        batch = []
        while self.waiting and len(self.running) < self.max_running \
                and self.reserved_tokens + self.waiting[0].kv_reservation <= self.pool_tokens:
            request = self.waiting.popleft()
            request.schedule(max(at, request.arrival, self.prefill_free_at))
            self.prefill_free_at = request.first_token_at
            self.running[request.rid] = request
            self.reserved_tokens += request.kv_reservation
            heapq.heappush(self.finishing, (request.finished_at, request.rid, request))
            batch.append(request)
        if not batch:
            return
        # log_prefill_stats sees the pools before the batch is allocated
        used, kv_usage, mamba_usage = self.usage(at, before)
        self.log.info(f"Prefill batch. #new-seq: {len(batch)}, #new-token: {sum(r.prompt_tokens for r in batch)}, "
                      f"#cached-token: 0, token usage: {kv_usage:.2f}, #running-req: {len(before)}, "
                      f"#queue-req: {len(self.waiting)}, ")
        self.publish(time.monotonic(), len(before), used, kv_usage, mamba_usage)
        for request in batch:
            request.admitted.set()

    def tick(self, now):
        self.advance(now)
        self.account(now)
        if self.running:
            if self.decode_busy_s >= self.decode_log_s:  # at most once a tick
                self.decode_busy_s %= self.decode_log_s
                self.log_decode(now)
        elif not self.waiting and now - self.last_publish >= SIM.idle_refresh:
            # the idle refresh looks at the KV pool only: mamba_usage keeps its last busy value
            self.publish(now, 0, 0, 0.0, gen_throughput=0.0)

    def log_decode(self, now):
        running = list(self.running.values())
        used, kv_usage, mamba_usage = self.usage(now, running)
        decoded = self.released_decoded + sum(request.decoded(now) for request in running)
        throughput = (decoded - self.decoded_at_last_log) / max(now - self.last_decode_log, 1e-9)
        self.decoded_at_last_log, self.last_decode_log = decoded, now
        graph = len(running) <= self.cuda_graph_max_bs
        if SIM.new:
            usage = f"#token: {used}, token usage: {kv_usage:.2f}, "
            if self.mamba_slots:
                usage = (f"#full token: {used}, full token usage: {kv_usage:.2f}, "
                         f"mamba num: {len(running) * self.mamba_per_request}, mamba usage: {mamba_usage:.2f}, ")
        else:
            usage = f"#token: {used}, token usage: {kv_usage:.2f}, " + \
                (f"mamba usage: {mamba_usage:.2f}, " if self.mamba_slots else "")
        self.log.info(f"Decode batch, #running-req: {len(running)}, {usage}cuda graph: {graph}, "
                      f"gen throughput (token/s): {throughput:.2f}, #queue-req: {len(self.waiting)}, ")
        self.publish(now, len(running), used, kv_usage, mamba_usage, gen_throughput=throughput)


class Streamer:
    """Writes the chunks of every stream of the server from one thread, each when it is due (every
    --stream-interval tokens, at most once per tick, the last when the request is finished), as SGLang's
    detokenizer pushes outputs; waking each handler's thread per chunk cost half as much CPU again."""

    def __init__(self, stream_interval):
        self.stream_interval = stream_interval
        self.condition = threading.Condition()
        self.due = []  # heap of (due time, sequence, state)
        self.sequence = itertools.count()
        threading.Thread(target=self.write_forever, daemon=True).start()

    def stream(self, request, render, write):
        """Block until an admitted request is streamed: render(sent, count, finished) gives the events of a
        chunk, write(events, finished) sends them. False when a write failed."""
        state = {"request": request, "render": render, "write": write, "sent": 0, "last": 0.0,
                 "done": threading.Event(), "ok": True}
        self.schedule(state)
        state["done"].wait()
        return state["ok"]

    def schedule(self, state):
        request = state["request"]
        due = request.token_time(min(state["sent"] + self.stream_interval, request.max_new_tokens))
        with self.condition:
            heapq.heappush(self.due, (max(due, state["last"] + SIM.tick), next(self.sequence), state))
            self.condition.notify()

    def write_forever(self):
        while True:
            with self.condition:
                while not self.due or self.due[0][0] > time.monotonic():
                    self.condition.wait(self.due[0][0] - time.monotonic() if self.due else None)
                state = heapq.heappop(self.due)[2]
            self.write(state)

    def write(self, state):
        request, now = state["request"], time.monotonic()
        count = request.generated(now)
        finished = now >= request.first_token_at and count >= request.max_new_tokens
        state["last"] = now
        try:
            if count > state["sent"] or finished:
                state["write"](state["render"](state["sent"], count, finished), finished)
                state["sent"] = count
        except OSError:  # the client went away
            state["ok"], finished = False, True
        if finished:
            state["done"].set()
        else:
            self.schedule(state)


class Serving:
    """The tokenizer side: checks a request like SGLang, hands it to a DP rank (round robin), and lets the
    HTTP handler follow it; one thread ticks every rank's scheduler."""

    def __init__(self, config, ready_infos):
        self.args = config.args
        self.lock = threading.Lock()
        self.stats = TokenizerStats()
        self.ranks = [RankScheduler(config, ready, dp_rank, self.stats)
                      for dp_rank, ready in enumerate(ready_infos[::self.args.tp_size])]
        self.context_len = ready_infos[0]["context_len"]
        self.max_req_len = ready_infos[0]["max_req_input_len"]
        self.pending = {}  # rid -> rank, until the handler has answered (SGLang's rid_to_state)
        self.next_rank = 0
        self.streamer = Streamer(self.args.stream_interval)
        self.wakeup = threading.Event()
        self.wake_at = 0.0
        threading.Thread(target=self.tick_forever, daemon=True).start()

    def tick_forever(self):
        """Tick every rank, and wake up when a request finishes too: the next waiting one is told at once."""
        while True:
            with self.lock:
                now = time.monotonic()
                for rank in self.ranks:
                    rank.tick(now)
                finishes = [rank.finishing[0][0] for rank in self.ranks if rank.finishing]
                self.wake_at = min([now + SIM.tick] + finishes)
                self.wakeup.clear()
            self.wakeup.wait(max(self.wake_at - time.monotonic(), 0))

    def submit(self, prompt_tokens, max_new_tokens):
        """One Request per prompt; every prompt is checked before any is queued."""
        for prompt in prompt_tokens:
            self.check(prompt, max_new_tokens)
        requests = []
        with self.lock:
            for prompt in prompt_tokens:
                # the scheduler trims max_new_tokens to what the context and the KV pool can hold
                request = Request(prompt, min(max_new_tokens, self.max_req_len - prompt - 1))
                rank = self.ranks[self.next_rank]
                self.next_rank = (self.next_rank + 1) % len(self.ranks)
                self.pending[request.rid] = rank
                rank.submit(request, request.arrival)
                if request.finished_at is not None and request.finished_at < self.wake_at:
                    self.wakeup.set()
                requests.append(request)
        return requests

    def check(self, prompt, max_new_tokens):
        if prompt >= self.context_len:
            raise RequestError(f"The input ({prompt} tokens) is longer than the model's context length "
                               f"({self.context_len} tokens).")
        if prompt + max_new_tokens >= self.context_len:
            raise RequestError(f"Requested token count exceeds the model's maximum context length of "
                               f"{self.context_len} tokens. You requested a total of {prompt + max_new_tokens} "
                               f"tokens: {prompt} tokens from the input messages and {max_new_tokens} tokens for "
                               "the completion. Please reduce the number of tokens in the input messages or the "
                               "completion to fit within the limit.")
        if prompt >= self.max_req_len:
            raise RequestError(f"Input length ({prompt}) exceeds the maximum allowed length ({self.max_req_len}). "
                               "Use a shorter input or enable --allow-auto-truncate.")

    def stream(self, request, render, write):
        """Stream a request (see Streamer.stream); False when the client went away, and it was aborted."""
        request.admitted.wait()
        if self.streamer.stream(request, render, write):
            return True
        with self.lock:
            self.pending[request.rid].abort(request, time.monotonic())
        return False

    def wait(self, request):
        request.admitted.wait()
        delay = request.finished_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def answered(self, request):
        with self.lock:
            self.pending.pop(request.rid, None)

    def in_flight(self):
        with self.lock:
            return list(self.pending)

    def last_gen_throughput(self, dp_rank):
        with self.lock:
            return self.ranks[dp_rank].gauges["gen_throughput"]

    def loads(self):
        with self.lock:
            now = time.monotonic()
            loads = []
            for dp_rank, rank in enumerate(self.ranks):
                rank.advance(now)
                used, kv_usage, _mamba = rank.usage(now, list(rank.running.values()))
                loads.append({"dp_rank": dp_rank, "num_running_reqs": len(rank.running),
                              "num_waiting_reqs": len(rank.waiting), "num_used_tokens": used,
                              "max_total_num_tokens": rank.pool_tokens, "token_usage": round(kv_usage, 4),
                              "gen_throughput": rank.gauges["gen_throughput"], "max_running_requests": rank.max_running})
            return loads

    def metrics(self, labels):
        """The Prometheus text: per-rank scheduler gauges, then the tokenizer's counters and histograms."""
        hybrid = self.ranks[0].mamba_slots is not None
        gauges = [
            ("num_running_reqs", "The number of running requests."),
            ("num_used_tokens", "The number of used tokens."),
            ("token_usage", "The token usage."),
            ("gen_throughput", "The generation throughput (token/s)."),
            ("num_queue_reqs", "The number of requests in the waiting queue."),
            ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
            ("cache_hit_rate", "The prefix cache hit rate."),
            ("spec_accept_length", "The average acceptance length of speculative decoding."),
            ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
        ]
        if SIM.new:
            gauges.append(("full_token_usage", "The token usage for full attention layers."))
        if hybrid:
            gauges.append(("mamba_usage", "The token usage for Mamba layers."))
        with self.lock:
            per_rank = []
            now = time.monotonic()
            for dp_rank, rank in enumerate(self.ranks):
                rank.advance(now)  # requests finished since the last tick count as served
                values = dict(rank.gauges, max_total_num_tokens=rank.pool_tokens)
                rank_labels = dict(labels, dp_rank=str(dp_rank)) if len(self.ranks) > 1 else labels
                per_rank.append((rank_labels, values))
            stats = self.stats
            counters = [("prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens),
                        ("generation_tokens", "Number of generation tokens processed.", stats.generation_tokens),
                        ("num_requests", "Number of requests processed.", stats.requests)]
            histograms = [("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                           stats.ttft),
                          ("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                           stats.e2e)]
            lines = []
            for name, help_text in gauges:
                lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} gauge"]
                lines += [f"sglang:{name}{render_labels(rank_labels)} {float(values.get(name, 0))}"
                          for rank_labels, values in per_rank]
            for name, help_text, value in counters:
                lines += [f"# HELP sglang:{name}_total {help_text}", f"# TYPE sglang:{name}_total counter",
                          f"sglang:{name}_total{render_labels(labels)} {float(value)}"]
            for name, help_text, histogram in histograms:
                lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} histogram",
                          f"sglang:{name}_sum{render_labels(labels)} {histogram.sum}"]
                cumulative = 0
                for bound, count in zip(histogram.buckets + (float("inf"),), histogram.counts):
                    cumulative += count
                    le = "+Inf" if bound == float("inf") else repr(float(bound))
                    lines.append(f"sglang:{name}_bucket{render_labels(dict(labels, le=le))} {float(cumulative)}")
                lines.append(f"sglang:{name}_count{render_labels(labels)} {float(cumulative)}")
        return "\n".join(lines) + "\n"


def render_labels(labels):
    return "{" + ",".join(f'{name}="{value}"' for name, value in sorted(labels.items())) + "}"


# --- request and response shapes (SGLang's http_server.py and entrypoints/openai) ------------------


def max_new_tokens(value, default=DEFAULT_MAX_NEW_TOKENS):
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"max_new_tokens must be an integer, got {value!r}.")
    if value < 0:
        raise RequestError(f"max_new_tokens must be at least 0, got {value}.")
    return value


def is_token_ids(value):
    return isinstance(value, list) and bool(value) and all(isinstance(i, int) for i in value)


def prompt_tokens(prompt):
    """Token counts of a prompt: a text, token ids, or a list of either (a batch)."""
    if isinstance(prompt, str):
        return [estimate_tokens(prompt)]
    if is_token_ids(prompt):
        return [len(prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) or is_token_ids(p) for p in prompt):
        return [count for p in prompt for count in prompt_tokens(p)]
    raise RequestError(f"The prompt must be a text, token ids or a list of either, not {prompt!r:.100}.")


def parse_generate(body):
    """(prompt token counts, max_new_tokens) of a /generate body."""
    prompt = body.get("text") if body.get("text") is not None else body.get("input_ids")
    if prompt is None:
        raise RequestError("Either text, input_ids or input_embeds should be provided.")
    params = body.get("sampling_params") or {}
    if isinstance(params, list):  # one per prompt in a batch: the simulator takes the first
        params = params[0] if params else {}
    return prompt_tokens(prompt), max_new_tokens(params.get("max_new_tokens"))


def parse_completion(body):
    return prompt_tokens(body.get("prompt")), max_new_tokens(body.get("max_tokens"), 16)


def parse_chat(body):
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise RequestError("messages must be a non-empty list of {'role': ..., 'content': ...} objects.")
    rendered = ""
    for message in messages:  # a ChatML-like template, then the generation prompt
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        rendered += f"<|im_start|>{message.get('role', 'user')}\n{content}<|im_end|>\n"
    limit = body.get("max_completion_tokens")
    return [estimate_tokens(rendered + "<|im_start|>assistant\n")], \
        max_new_tokens(body.get("max_tokens") if limit is None else limit)


def generate_output(request, count, finished):
    meta = {"id": request.rid, "finish_reason": {"type": "length", "length": count} if finished else None,
            "prompt_tokens": request.prompt_tokens, "completion_tokens": count, "cached_tokens": 0,
            "weight_version": "default"}
    if finished:
        meta["e2e_latency"] = request.finished_at - request.arrival
    return {"text": output_text(count), "output_ids": output_ids(count), "meta_info": meta}


def usage_of(requests, completion=None):
    """OpenAI usage of finished requests, or of one request with ``completion`` tokens so far."""
    prompt = sum(request.prompt_tokens for request in requests)
    if completion is None:
        completion = sum(request.max_new_tokens for request in requests)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "reasoning_tokens": 0}


def completion_choice(index, text, finish_reason):
    return {"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason, "matched_stop": None}


def chat_choice(index, text, finish_reason, delta=True):
    content = {"content": text} if delta else {
        "role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}
    return {"index": index, "delta" if delta else "message": content, "logprobs": None,
            "finish_reason": finish_reason, "matched_stop": None}


GENERATION_ROUTES = {  # path: (parse, object of a reply, object of a stream chunk)
    "/generate": (parse_generate, None, None),
    "/v1/completions": (parse_completion, "text_completion", "text_completion"),
    "/v1/chat/completions": (parse_chat, "chat.completion", "chat.completion.chunk"),
}


def generation_reply(path, body, requests):
    """The JSON body of a finished (not streamed) generation."""
    if path == "/generate":
        outputs = [generate_output(request, request.max_new_tokens, True) for request in requests]
        text = body.get("text")
        batch = isinstance(text, list) if text is not None else not is_token_ids(body.get("input_ids"))
        return outputs if batch else outputs[0]
    head = openai_head(body, requests[0], GENERATION_ROUTES[path][1])
    if path == "/v1/completions":
        choices = [completion_choice(index, output_text(request.max_new_tokens), "length")
                   for index, request in enumerate(requests)]
    else:
        choices = [chat_choice(0, output_text(requests[0].max_new_tokens), "length", delta=False)]
    return dict(head, choices=choices, usage=usage_of(requests))


def stream_renderer(path, body, request):
    """render(sent, count, finished) -> the events of one chunk of a stream."""
    if path == "/generate":  # cumulative text and output_ids
        return lambda sent, count, finished: [generate_output(request, count, finished)]
    head = openai_head(body, request, GENERATION_ROUTES[path][2])
    options = body.get("stream_options") or {}
    include_usage, continuous_usage = bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))
    chat = path == "/v1/chat/completions"

    def render(sent, count, finished):
        """Text deltas (with the usage so far if continuous_usage_stats), the last with its finish_reason, then
        (if include_usage) the usage alone."""
        choice = chat_choice if chat else completion_choice
        events = [dict(head, choices=[choice(0, output_text(count)[len(output_text(sent)):],
                                             "length" if finished else None)],
                       usage=usage_of([request], count) if continuous_usage else None)]
        if chat and sent == 0:  # the first chunk announces the role
            events.insert(0, dict(head, choices=[dict(chat_choice(0, "", None),
                                                      delta={"role": "assistant", "content": ""})], usage=None))
        if finished and include_usage:
            events.append(dict(head, choices=[], usage=usage_of([request])))
        return events

    return render


def openai_head(body, request, object_name):
    return {"id": request.rid, "object": object_name, "created": int(time.time()),
            "model": body.get("model") or "default"}


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
        self.scheduler_pids = []
        self.serving = None
        self.start_time = time.time()

    # process tree -----------------------------------------------------------------------------
    def launch_subprocesses(self):
        args = self.args
        main_pid = os.getpid()
        orphan = "orphan_scheduler" in SIM.faults
        ready_readers = []
        ranks = [(d, t) for d in range(args.dp_size) for t in self.config.local_tp_ranks]
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
                self.scheduler_pids.append(
                    fork_child(scheduler.title, lambda s=scheduler: self.child_main(s, pipes), orphan=orphan))
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
        if args.node_rank == 0:  # a node of rank >= 1 runs neither tokenizer nor detokenizer
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
        # sigterm_watchdog: requests in flight (new ones are still accepted) are served to the end
        time.sleep(0.3)
        while True:
            remaining = self.serving.in_flight()
            self.log.info(f"Gracefully exiting... Remaining number of requests {len(remaining)}. "
                          f"Remaining requests remaining_rids={remaining!r}.")
            if not remaining:
                break
            time.sleep(5)
        kill_process_tree()  # as SGLang 0.5.10 does after the drain: the shell sees 137

    # lifecycle --------------------------------------------------------------------------------
    def run(self):
        signal.signal(signal.SIGQUIT, self.on_sigquit)
        if "ignore_sigterm" in SIM.faults:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.log.info(self.config.repr_line())
        readers = self.launch_subprocesses()
        self.wait_for_ready(readers)
        if self.args.node_rank >= 1:
            self.serve_dummy_health()
        self.serving = Serving(self.config, self.ready_infos)
        if SIM.new:
            timings = self.scheduler_info["timings"]
            graphs = ", ".join(f"{phase}={seconds:.2f}" for phase, seconds in timings["cuda_graph"].items())
            elapsed = time.time() - self.start_time
            self.log.info(f"Engine startup timings (s): load_weight={timings['load_weight']:.2f}, "
                          f"kv_cache_allocation={timings['kv_cache_allocation']:.2f}, scheduler_e2e={elapsed:.2f}, "
                          f"cuda_graph={{{graphs}}}, tokenizer_e2e={elapsed:.2f}")
        self.serve_http()

    def http_server(self, handler):
        """A uvicorn-like server bound to --host/--port; OSError (with uvicorn's log line) when it cannot bind."""
        # uvicorn's backlog (2048), not socketserver's 5: a burst of clients must not be refused
        server_class = type("SimHTTPServer", (http.server.ThreadingHTTPServer,),
                            {"daemon_threads": True, "request_queue_size": 2048, "handle_error": handle_http_error})
        if ":" in self.args.host:
            server_class.address_family = socket.AF_INET6
        try:
            return server_class((self.args.host, self.args.port), handler)
        except OSError as exc:
            self.log.error(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                           f"({self.args.host!r}, {self.args.port}): {exc.strerror.lower()}")
            raise

    def serve_http(self):
        self.log.info(f"INFO:     Started server process [{os.getpid()}]")
        self.log.info("INFO:     Waiting for application startup.")
        self.log.info("INFO:     Application startup complete.")
        try:
            httpd = self.http_server(make_handler(self))
        except OSError:
            for pid in descendants(os.getpid()):
                os.kill(pid, signal.SIGKILL)
            sys.exit(1)
        self.log.info(f"INFO:     Uvicorn running on http://{self.args.host}:{self.args.port} (Press CTRL+C to quit)")
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        threading.Thread(target=self.warmup, daemon=True).start()
        # As asyncio's loop.add_signal_handler: the kernel hands a process's signal to any thread that does not
        # block it (one just starting for a connection takes it as easily as the main thread), while Python runs
        # the handler only in the main thread, once that thread wakes up. In signal.pause() it never did (the
        # handler waited for the SIGKILL); the wakeup fd, written wherever the signal lands, wakes it.
        wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(wakeup_w, False)
        signal.set_wakeup_fd(wakeup_w)
        if "ignore_sigterm" not in SIM.faults:
            signal.signal(signal.SIGTERM, self.on_sigterm)
        while True:
            os.read(wakeup_r, 512)  # Python runs pending handlers when it returns

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
        self.tell_schedulers_up()

    def tell_schedulers_up(self):
        for fd in self.control_fds:
            try:
                os.write(fd, b"up\n")
            except OSError:
                pass

    def serve_dummy_health(self):
        """What a node of rank >= 1 does once its schedulers are ready (engine.py): a health server that says 200
        whatever the group does, then a wait on each scheduler in turn; never returns."""
        address = f"{self.args.host}:{self.args.port}"
        try:
            httpd = self.http_server(make_dummy_health_handler(self.args.enable_metrics))
        except OSError:
            httpd = None
        self.log.info(f"Dummy health check server started in background thread at {address}")
        if httpd:
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
        else:  # uvicorn ended its thread; the main thread goes on waiting for the schedulers
            self.log.info(f"Dummy health check server stopped at {address}")
        self.tell_schedulers_up()
        for pid in self.scheduler_pids:
            status = os.waitpid(pid, 0)[1]
            self.log.error(f"Scheduler or DataParallelController {pid} terminated with "
                           f"{os.waitstatus_to_exitcode(status)}")
        # Then launch_server goes on into its HTTP server with no tokenizer manager (as 0.5.18 logs show).
        self.log.info(f"INFO:     Started server process [{os.getpid()}]")
        self.log.info("INFO:     Waiting for application startup.")
        self.log.error("ERROR:    " + fake_traceback(
            [("entrypoints/http_server.py", 280, "lifespan", "server_args = tokenizer_manager.server_args")],
            "AttributeError: 'NoneType' object has no attribute 'server_args'"))
        self.log.error("ERROR:    Application startup failed. Exiting.")
        sys.exit(3)

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
            dict(self.config.as_dict(), last_gen_throughput=self.serving.last_gen_throughput(dp_rank),
                 memory_usage=ready["memory_usage"], effective_max_running_requests_per_dp=ready["max_running_requests"])
            for dp_rank, ready in enumerate(self.ready_infos[::self.args.tp_size])]
        info["version"] = VERSIONS[SIM.log_format]
        if SIM.new:
            info["frontend"] = "python"
            info["startup_time"] = self.scheduler_info["timings"]
        return info

    def loads(self):
        """GET /v1/loads (SGLang's v1_loads.py): the schedulers' live counts per DP rank, metrics enabled or not."""
        return {"timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(), "version": VERSIONS[SIM.log_format],
                "loads": self.serving.loads()}

    def metrics(self):
        labels = {"engine_type": "unified", "model_name": self.args.served_model_name, "pp_rank": "0", "tp_rank": "0"}
        return self.serving.metrics(labels)


def handle_http_error(httpd, request, client_address):
    # A client that went away is not the server's error: uvicorn logs no traceback for it (and a traceback in
    # the log reads as a crash).
    if not isinstance(sys.exc_info()[1], OSError):
        http.server.ThreadingHTTPServer.handle_error(httpd, request, client_address)


METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class UvicornHandler(http.server.BaseHTTPRequestHandler):
    """What a FastAPI app behind uvicorn looks like on the wire: HTTP/1.1, its Server header, JSON replies."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, fmt, *args):
        pass  # uvicorn's access lines, where it writes them, come from send_response

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


def make_dummy_health_handler(enable_metrics):
    """launch_dummy_health_check_server's app (utils/common.py): GET /ping, /health and /health_generate answer
    200 always, /metrics only with --enable-metrics (empty: no scheduler of this node exports), FastAPI's 404 and
    405 otherwise; uvicorn runs it at log level warning, so no access lines."""
    routes = {"/ping", "/health", "/health_generate"} | ({"/metrics"} if enable_metrics else set())

    class DummyHealthHandler(UvicornHandler):
        def route(self):
            path = self.path.split("?")[0]
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if path not in routes:
                return self.reply(404, {"detail": "Not Found"})
            if self.command != "GET":
                return self.reply(405, {"detail": "Method Not Allowed"})
            if path == "/metrics":
                return self.reply(200, "", METRICS_CONTENT_TYPE)
            return self.reply(200)

        do_GET = do_POST = do_PUT = do_DELETE = route

    return DummyHealthHandler


def make_handler(server):
    class Handler(UvicornHandler):
        def parse_request(self):
            # The router's connection detection opens two gRPC (HTTP/2) connections to the HTTP port beside its
            # GET /health. uvicorn (h11) takes their "PRI * HTTP/2.0" line for a request (a 404 and its access
            # line) and the HTTP/2 frames after it for an invalid request.
            if self.raw_requestline.startswith(b"PRI * HTTP/2.0"):
                self.requestline = self.raw_requestline.decode("latin-1").rstrip("\r\n")
                self.command, self.path, self.request_version = "PRI", "%2A", "HTTP/2.0"
                self.close_connection = True
                self.reply(404, {"detail": "Not Found"})
                server.log.info("WARNING:  Invalid HTTP request received.")
                return False
            return super().parse_request()

        def send_response(self, code, message=None):
            super().send_response(code, message)
            phrase = http.server.BaseHTTPRequestHandler.responses.get(code, ("",))[0]
            if server.log.quiet:
                return
            if not hasattr(self, "path"):  # a request line that does not parse: uvicorn logs no access line for it
                server.log.info("WARNING:  Invalid HTTP request received.")
                return
            host, port = self.client_address[:2]
            write_line(1, f'[{timestamp()}] INFO:     {host}:{port} - "{self.command} {self.path} {self.request_version}" '
                          f"{code} {phrase}\n")

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
            if path == "/v1/loads" and self.command == "GET":  # SGLang PR #16976 (January 2026), before 0.5.9
                return self.reply(200, server.loads())
            if path == "/metrics" and server.args.enable_metrics and self.command == "GET":
                return self.reply(200, server.metrics(), METRICS_CONTENT_TYPE)
            if path in GENERATION_ROUTES and self.command == "POST":
                return self.generation(path, body)
            return self.reply(404, {"detail": "Not Found"})

        def generation(self, path, raw):
            parse = GENERATION_ROUTES[path][0]
            try:
                body = json.loads(raw or b"{}")
            except ValueError as exc:
                return self.reply_error(path, f"invalid JSON body: {exc}")
            if server.status == "Starting":
                SIM.sleep(1.0)  # the warmup request compiles kernels first
            try:
                if not isinstance(body, dict):
                    raise RequestError("The request body must be a JSON object.")
                prompts, limit = parse(body)
                if body.get("stream") and len(prompts) > 1:
                    raise RequestError("The simulator streams one prompt per request, not a batch.")
                requests = server.serving.submit(prompts, limit)
            except RequestError as exc:
                return self.reply_error(path, str(exc))
            try:
                if body.get("stream"):
                    self.stream(requests[0], stream_renderer(path, body, requests[0]))
                else:
                    for request in requests:
                        server.serving.wait(request)
                    self.reply(200, generation_reply(path, body, requests))
            finally:
                for request in requests:
                    server.serving.answered(request)

        def reply_error(self, path, message):
            if path == "/generate":
                return self.reply(400, {"error": {"message": message}})
            return self.reply(400, {"object": "error", "message": message, "type": "BadRequestError", "param": None,
                                    "code": 400})

        def stream(self, request, render):
            """Server-sent events in chunked transfer encoding (so the connection stays open), then [DONE]."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.connection.settimeout(2)  # a client that stops reading must not stall the other streams
            if server.serving.stream(request, render, self.write_events):
                self.connection.settimeout(None)
            else:  # the client went away: SGLang aborts the request
                self.close_connection = True

        def write_events(self, events, finished):
            """One HTTP chunk per event, as uvicorn sends them, in one write."""
            messages = [b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n" for event in events]
            if finished:
                messages += [b"data: [DONE]\n\n", b""]  # the empty chunk ends the body
            self.wfile.write(b"".join(b"%x\r\n%s\r\n" % (len(message), message) for message in messages))

    return Handler


def main(argv=None):
    global SIM
    argv = sys.argv[1:] if argv is None else argv
    if "--make-model" in argv:
        return make_model(argv)
    SIM = Sim()
    args = build_parser().parse_args(argv)
    SIM.select_node(args.node_rank)
    check_server_args(args)
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
