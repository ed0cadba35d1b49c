"""The scheduler's model-runner half (mixed into Scheduler): loading the weights (tqdm's shard progress), sizing
and allocating the KV cache and mamba pools as SGLang's profile_max_num_token does, capturing the CUDA graphs, the
speculative draft worker, and the summary line and ready values."""

import time

from .config import read_model_config
from .faults import FAULTS
from .log import ProgressBar
from .multinode import POOL_MEMORY_FRAMES
from .processes import sleep_forever
from .tracebacks import SchedulerFailure

GIB = 1024 ** 3


def capture_batch_sizes(max_bs, speculative):
    if speculative:
        sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8)) \
            + list(range(272, max_bs + 1, 16))
    else:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) \
            + list(range(512, max_bs + 1, 32))
    return [bs for bs in sizes if bs <= max_bs]


class ModelRunner:
    """Scheduler methods of SGLang's ModelRunner side; they use the Scheduler's state (self.sim, self.log, ...)."""

    def load_weights(self, model, draft):
        sim = model.get("gpuops_sim", {})
        shards = max(int(sim.get("num_shards", 1)), 1)
        weights_gib = float(sim.get("weights_gib", 1.0)) / self.args.tp_size
        if not draft:
            self.weights_gib = weights_gib
        start = time.time()
        before = self.used_mib
        self.log.info(f"Load weight begin. avail mem={self.avail_gb():.2f} GB")
        if draft and "draft_crash" in self.sim.faults:
            self.sim.sleep(0.1)
            raise SchedulerFailure(FAULTS["draft_crash"].error)
        progress = None
        if self.rank0:
            progress = ProgressBar("Loading safetensors checkpoint shards", shards,
                                   "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} "
                                   "[{elapsed}<{remaining}, {rate_fmt}]" + ("" if self.sim.new else "\n"))
            progress.refresh()
        for shard in range(shards):
            if shard == 0 and not draft:
                self.sim.pass_weights_gate()
            self.sim.sleep((0.3 if draft else 1.2) / shards)
            if not draft and "oom_load" in self.sim.faults and shard == shards // 2:
                raise self.oom_error(weights_gib * 1024 / shards + self.avail_gb() * 1024)
            self.alloc(weights_gib * 1024 / shards)
            if progress:
                progress.update()
        if progress:
            progress.close()
        if not draft and "hang_after_weights" in self.sim.faults:
            sleep_forever()
        elapsed = time.time() - start
        arch = model.get("architectures", ["LlamaForCausalLM"])[0]
        dtype = "" if self.sim.new else f"dtype=torch.{model.get('torch_dtype', 'bfloat16')}, "
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
        self.sim.sleep(0.2)
        kv_dtype = "float8_e4m3fn" if dtype_bytes == 1 else "bfloat16"
        dtype_field = f"dtype: torch.{kv_dtype}, " if self.sim.new else ""
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
        if self.sim.new:
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
            if "hang_cuda_graph" in self.sim.faults and index == len(sizes) // 3:
                sleep_forever()
            self.sim.sleep(per_bs)
            self.alloc(total_mib / len(sizes))
            if progress:
                progress.update(self.capture_desc(bs))
        if progress:
            progress.close()
        elapsed = time.time() - start
        graph_mib = self.used_mib - before
        if self.sim.new:
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
