"""The server configuration: ServerArgs.check_server_args as far as multi-node goes, ServerArgs after SGLang's
defaulting (ServerConfig, over the command line flags.py parsed), the model's config.json as ModelConfig reads it,
and the simulated model directories:
``sglang_sim.py --make-model DIR [--arch A] [--hybrid-mamba] [--shards N] [--weights-gib G]``."""

import argparse
import json
import os
import sys

import fakegpu

from .log import write_line
from .multinode import dist_init_address
from .tracebacks import fake_traceback

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
            _end_launch(SERVER_ARGS_CHECK_FRAMES + [("server_args.py", line, "check_server_args", "assert (")],
                        f"AssertionError: {message}")


# Where SGLang 0.5.23 resolves and validates the mamba radix cache strategy: launch_server.run_server's
# resolve_once, before any process starts (arg_groups/model_hook.py, mamba_hook.py).
MAMBA_RESOLUTION_FRAMES = [
    ("sglang/launch_server.py", 84, "<module>", "run_server(server_args)"),
    ("sglang/launch_server.py", 29, "run_server", "server_args.resolve_once()"),
    ("arg_groups/pipeline.py", 225, "run_resolution_pipeline",
     "run_hook(handle_model_specific_adjustments, server_args)"),
    ("arg_groups/model_hook.py", 225, "handle_model_specific_adjustments",
     "handle_mamba_radix_cache(server_args, hf_config)"),
]


def resolve_mamba_strategy(args, model):
    """SGLang 0.5.23's --mamba-radix-cache-strategy for a known model (handle_mamba_radix_cache): ``auto`` becomes
    extra_buffer with the overlap schedule, else no_buffer with the overlap schedule off; no_buffer with the overlap
    schedule on is an AssertionError, extra_buffer on a model without mamba state a ValueError - each ends the
    launch (exit 1) before any process starts. Earlier versions resolve in ServerConfig."""
    strategy = getattr(args, "mamba_radix_cache_strategy", None)
    if strategy is None or not model:
        return
    if not model.get("gpuops_sim", {}).get("hybrid_mamba"):
        if strategy.startswith("extra_buffer"):
            architecture = (model.get("architectures") or ["?"])[0]
            _end_launch(MAMBA_RESOLUTION_FRAMES + [
                ("arg_groups/model_hook.py", 1063, "handle_mamba_radix_cache", "raise ValueError(")],
                f"ValueError: --mamba-radix-cache-strategy {strategy} needs mamba state, got {architecture}.")
        return
    if args.disable_radix_cache:
        return
    if strategy == "auto":  # no_buffer only where the overlap schedule is off already
        strategy = args.mamba_radix_cache_strategy = "no_buffer" if args.disable_overlap_schedule else "extra_buffer"
    if strategy == "no_buffer" and not args.disable_overlap_schedule:
        _end_launch(MAMBA_RESOLUTION_FRAMES + [
            ("arg_groups/model_hook.py", 1076, "handle_mamba_radix_cache",
             "validate_mamba_no_buffer(view, hf_config.architectures[0])"),
            ("arg_groups/mamba_hook.py", 158, "validate_mamba_no_buffer", "assert view.disable_overlap_schedule, ("),
        ], "AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.")


def _end_launch(frames, error):
    """A check of the arguments failed: its traceback on stderr, exit 1 before any process starts."""
    write_line(2, fake_traceback(frames, error) + "\n")
    sys.exit(1)


class ServerConfig:
    """ServerArgs after SGLang's defaulting (server_args.py, v0.5.9), plus the model's config.json."""

    def __init__(self, args, sim, own_dests=None):
        self.args, self.sim = args, sim
        # The options the simulator reads (flags.OWN_OPTIONS) make its ServerArgs; the rest of the version's
        # options are parsed and ignored.
        self.own_dests = own_dests
        self.total_mib = 143771
        if self.sim.gpu_dir:
            self.total_mib = fakegpu.load_config(self.sim.gpu_dir)["gpus"][0]["total_mib"]
        gpu_mem = self.total_mib
        if args.chunked_prefill_size is None:
            args.chunked_prefill_size = 2048 if gpu_mem < 35 * 1024 else 4096 if gpu_mem < 60 * 1024 \
                else 8192 if gpu_mem < 160 * 1024 else 16384
        if getattr(args, "cuda_graph_max_bs", None) is None:
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
        strategy_flag = "mamba_radix_cache_strategy" if hasattr(args, "mamba_radix_cache_strategy") \
            else "mamba_scheduler_strategy"
        if getattr(args, strategy_flag) == "auto":  # up to 0.5.10 (0.5.23: resolve_mamba_strategy)
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
        items = vars(self.args)
        if self.own_dests is None:
            return dict(items)
        return {key: value for key, value in items.items() if key in self.own_dests}

    def repr_line(self):
        items = self.as_dict()
        if self.sim.new:
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
