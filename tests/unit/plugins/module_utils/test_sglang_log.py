"""SGLang log parsing on logs in the real line formats of both dialects (fixtures/logs)."""

import os
import re
from pathlib import Path

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log import (
    PHASES,
    LogFollower,
    LogState,
    parse_log,
    parse_record,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log_rules import (
    RULES,
    _on_crash_marker,
    may_announce_crash,
)

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
FIXTURES = sorted(path.name for path in LOGS.glob("*.log"))


def read_fixture(name):
    return (LOGS / name).read_text(encoding="utf-8")


def state_after(*lines):
    state = LogState()
    for line in lines:
        state.feed_line(line)
    return state


def timeline_step(entry):
    """"phase", or "draft:phase" for a step of the draft model."""
    return entry["phase"] if entry["component"] == "target" else f"{entry['component']}:{entry['phase']}"


# fixture -> what the parse must report (facts: a subset; timeline: the phases in order)
EXPECTED = {
    "classic_tp1_mamba.log": {
        "phase": "ready",
        "log_format": "classic",
        "progress": {"weights": {"done": 9, "total": 9}, "cuda_graph": {"done": 36, "total": 36}},
        "facts": {
            "max_total_num_tokens": 1539264, "chunked_prefill_size": 8192, "max_prefill_tokens": 16384,
            "max_running_requests": 236, "context_len": 262144, "available_gpu_mem": 13.66,
            "max_mamba_cache_size": 236, "mamba_conv_state_gb": 0.29, "mamba_ssm_state_gb": 13.68,
            "kv_cache_tokens": 1539264, "kv_cache_size_gb": 35.24, "weight_load_seconds": 43.12,
            "weight_load_type": "Qwen3NextForCausalLM", "weight_load_mem_usage": 74.72, "cuda_graph_seconds": 36.21,
        },
        "timeline": ["initializing", "loading_weights", "allocating_memory", "capturing_cuda_graph", "warming_up",
                     "ready"],
        "error": None,
    },
    "classic_tp8_eagle3.log": {
        "phase": "ready",
        "log_format": "classic",
        "progress": {"weights": {"done": 1, "total": 1}, "cuda_graph": {"done": 20, "total": 20}},
        "facts": {
            "weight_load_type": "LlamaForCausalLM", "weight_load_seconds": 52.07,
            "draft_weight_load_type": "LlamaForCausalLMEagle3", "draft_weight_load_mem_usage": 0.62,
            "cuda_graph_seconds": 17.92, "draft_cuda_graph_seconds": 15.95, "kv_cache_tokens": 2321804,
            "max_running_requests": 48, "available_gpu_mem": 35.54,
        },
        # The draft model loads and captures after the target's graph capture.
        "timeline": ["initializing", "loading_weights", "allocating_memory", "capturing_cuda_graph",
                     "draft:loading_weights", "draft:capturing_cuda_graph", "warming_up", "ready"],
        "error": None,
    },
    "new_tp2.log": {
        "phase": "ready",
        "log_format": "new",
        "progress": {"weights": {"done": 4, "total": 4}, "cuda_graph": {"done": 52, "total": 52}},
        "facts": {
            # TP0's report wins over TP1's, which came first.
            "weight_load_seconds": 12.02, "weight_load_quant": "fp8", "weight_load_mem_usage": 15.67,
            "kv_cache_dtype": "torch.bfloat16", "kv_cache_tokens": 2076544, "cuda_graph_seconds": 28.74,
            "max_total_num_tokens": 2076544, "context_len": 40960,
            "startup_timings": {"load_weight": 12.02, "kv_cache_allocation": 0.88, "scheduler_e2e": 49.37,
                                "cuda_graph": {"decode": 28.74}, "tokenizer_e2e": 54.16},
        },
        "timeline": ["initializing", "loading_weights", "allocating_memory", "capturing_cuda_graph", "warming_up",
                     "ready"],
        "error": None,
    },
    "docker_compose_prefixed.log": {
        "phase": "ready",
        "log_format": "classic",
        "progress": {"weights": {"done": 12, "total": 12}, "cuda_graph": {"done": 20, "total": 20}},
        "facts": {"weight_load_type": "Gemma3ForConditionalGeneration", "weight_load_mem_usage": 8.13,
                  "draft_weight_load_type": "LlamaForCausalLMEagle3", "max_total_num_tokens": 1089760},
        # This release loaded the draft right after the target, before the KV cache and the capture.
        "timeline": ["initializing", "loading_weights", "draft:loading_weights", "allocating_memory",
                     "capturing_cuda_graph", "warming_up", "ready"],
        "last_line": "[2025-07-18 09:21:16] The server is fired up and ready to roll!",
        "error": None,
    },
    "dp_attention_npu.log": {
        "phase": "warming_up",
        "log_format": "classic",
        "progress": {"weights": {"done": 4, "total": 4}, "cuda_graph": {"done": 6, "total": 6}},
        # DP1 TP1 EP1 reported first; the DP0 TP0 EP0 values win and only they count for capture totals.
        "facts": {"weight_load_seconds": 10.52, "kv_cache_size_gb": 6.48, "cuda_graph_seconds": 22.43,
                  "max_total_num_tokens": 389632},
        "timeline": ["initializing", "loading_weights", "allocating_memory", "capturing_cuda_graph", "warming_up"],
        "error": None,
    },
    "zombie_after_weights.log": {
        "phase": "loading_weights",
        "log_format": "classic",
        "progress": {"weights": {"done": 9, "total": 9}, "cuda_graph": None},
        "facts": {},
        "timeline": ["initializing", "loading_weights"],
        "last_line": "Loading safetensors checkpoint shards: 100% Completed | 9/9 [00:41<00:00,  4.62s/it]",
        "error": None,
    },
    "sigterm_drain.log": {
        "phase": "stopping",
        "log_format": "classic",
        "progress": {"weights": {"done": 9, "total": 9}, "cuda_graph": {"done": 36, "total": 36}},
        "facts": {"max_total_num_tokens": 1539264},
        "timeline": ["initializing", "loading_weights", "allocating_memory", "capturing_cuda_graph", "warming_up",
                     "ready", "stopping"],
        "error": None,
    },
    "crash_draft_worker.log": {
        "phase": "crashed",
        "log_format": "classic",
        "progress": {"weights": {"done": 1, "total": 1}, "cuda_graph": {"done": 27, "total": 27}},
        "facts": {"weight_load_type": "LlamaForCausalLM", "cuda_graph_seconds": 12.93},
        # The draft worker failed loading its weights, after the target's capture had ended.
        "timeline": ["initializing", "loading_weights", "allocating_memory", "capturing_cuda_graph",
                     "draft:loading_weights", "draft:crashed"],
        "error": {"summary": "RuntimeError: Error(s) in loading state_dict for LlamaForCausalLMEagle3:",
                  "traceback_has": ["self.draft_worker = EAGLEWorker(", "\tsize mismatch for fc.weight"]},
    },
    "crash_oom_load.log": {
        "phase": "crashed",
        "log_format": "classic",
        "progress": {"weights": {"done": 7, "total": 9}, "cuda_graph": None},
        "facts": {},
        "timeline": ["initializing", "loading_weights", "crashed"],
        "error": {"summary_starts": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB.",
                  "traceback_has": ["in weight_loader"]},
    },
    "crash_nccl_init.log": {
        "phase": "crashed",
        "log_format": "classic",
        "progress": {"weights": None, "cuda_graph": None},
        "facts": {},
        "timeline": ["initializing", "crashed"],
        "error": {"summary": "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
                  "traceback_has": ["in NCCL_CHECK"]},
    },
    "crash_capture_failed.log": {
        "phase": "crashed",
        "log_format": "classic",
        "progress": {"weights": {"done": 12, "total": 12}, "cuda_graph": {"done": 9, "total": 52}},
        "facts": {"kv_cache_tokens": 2662620},
        "timeline": ["initializing", "loading_weights", "allocating_memory", "capturing_cuda_graph", "crashed"],
        # Chained traceback: the final exception is reported, the "Possible solutions" block is kept.
        "error": {"summary": "Exception: Capture cuda graph failed: CUDA error: out of memory",
                  "traceback_has": ["RuntimeError: CUDA error: out of memory",
                                    "During handling of the above exception, another exception occurred:",
                                    "Possible solutions:\n1. set --mem-fraction-static to a smaller value",
                                    "Open an issue on GitHub"]},
    },
    "crash_new_scheduler_died.log": {
        "phase": "crashed",
        "log_format": "new",
        "progress": {"weights": {"done": 1, "total": 4}, "cuda_graph": None},
        "facts": {},
        "timeline": ["initializing", "loading_weights", "crashed"],
        "error": {"summary_starts": "RuntimeError: Rank 1 scheduler died during initialization (exit code: -9).",
                  "traceback_has": ["in _wait_for_scheduler_ready"]},
    },
}


def test_every_fixture_has_expectations():
    assert sorted(EXPECTED) == FIXTURES


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture(name):
    expected = EXPECTED[name]
    result = parse_log(read_fixture(name))

    assert result["phase"] == expected["phase"]
    assert result["log_format"] == expected["log_format"]
    assert result["progress"] == expected["progress"]
    assert {key: result["facts"].get(key) for key in expected["facts"]} == expected["facts"]
    assert [timeline_step(entry) for entry in result["timeline"]] == expected["timeline"]
    if "last_line" in expected:
        assert result["last_line"] == expected["last_line"]

    error = result["error"]
    if expected["error"] is None:
        assert error is None
    else:
        if "summary" in expected["error"]:
            assert error["summary"] == expected["error"]["summary"]
        else:
            assert error["summary"].startswith(expected["error"]["summary_starts"])
        assert error["traceback"].startswith("Traceback (most recent call last):")
        for part in expected["error"]["traceback_has"]:
            assert part in error["traceback"]


def test_sigquit_before_traceback_keeps_crash_time_and_real_exception():
    result = parse_log(read_fixture("crash_oom_load.log"))
    crashed = result["timeline"][-1]
    assert crashed["timestamp"] == "2026-03-02 22:05:47"
    assert "Received sigquit from a child process" in crashed["line"]
    assert "Received sigquit" not in result["error"]["summary"]


def test_first_traceback_explains_the_crash():
    # TP3's traceback comes first; TP0's identical one and the shell's "Killed" do not replace it.
    result = parse_log(read_fixture("crash_draft_worker.log"))
    traceback = result["error"]["traceback"]
    assert traceback.count("Traceback (most recent call last):") == 1
    assert "Killed" not in traceback
    assert result["last_line"] == "Killed"


def test_timeline_keeps_timestamps_with_milliseconds():
    timeline = parse_log(read_fixture("dp_attention_npu.log"))["timeline"]
    assert timeline[1] == {
        "phase": "loading_weights",
        "component": "target",
        "timestamp": "2026-01-12 10:31:54.003",
        "line": "[2026-01-12 10:31:54.003 DP0 TP0 EP0] Load weight begin. avail mem=60.25 GB",
    }


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("chunk_size", [1, 7, 4096])
def test_incremental_feeding_matches_whole_text(name, chunk_size):
    text = read_fixture(name)
    state = LogState()
    for start in range(0, len(text), chunk_size):
        state.feed_text(text[start:start + chunk_size])
    state.flush()
    assert state.as_dict() == parse_log(text)


@pytest.mark.parametrize("name", FIXTURES)
def test_following_a_growing_file_matches_whole_text(tmp_path, name):
    data = (LOGS / name).read_bytes()
    log_path = tmp_path / "server.log"
    log_path.write_bytes(b"")
    follower = LogFollower(str(log_path))
    state = LogState()
    # Odd-sized appends split lines, "\r\n" pairs and the multi-byte characters of tqdm bars.
    for start in range(0, len(data), 997):
        with open(log_path, "ab") as handle:
            handle.write(data[start:start + 997])
        for line in follower.read_new():
            state.feed_line(line)
    assert state.as_dict() == parse_log(data.decode("utf-8"))


@pytest.mark.parametrize("line, timestamp, ranks, message", [
    ("[2026-02-14 09:12:16] Load weight begin. avail mem=139.27 GB", "2026-02-14 09:12:16", {},
     "Load weight begin. avail mem=139.27 GB"),
    ("[2026-09-11 23:46:44 TP0 EP0] Init torch distributed begin.", "2026-09-11 23:46:44", {"TP": 0, "EP": 0},
     "Init torch distributed begin."),
    ("[2026-01-12 10:31:54.006 DP1 TP1 EP1] Load weight begin.", "2026-01-12 10:31:54.006",
     {"DP": 1, "TP": 1, "EP": 1}, "Load weight begin."),
    ("[2026-05-01 08:00:00 DP0 PP1 ATTN_CP0 MOE_DP0 TP3 EP3] Memory pool end. avail mem=10.00 GB",
     "2026-05-01 08:00:00", {"DP": 0, "PP": 1, "ATTN_CP": 0, "MOE_DP": 0, "TP": 3, "EP": 3},
     "Memory pool end. avail mem=10.00 GB"),
    ('[2026-08-27 03:46:31] INFO:     127.0.0.1:50386 - "GET /health HTTP/1.1" 503 Service Unavailable',
     "2026-08-27 03:46:31", {}, 'INFO:     127.0.0.1:50386 - "GET /health HTTP/1.1" 503 Service Unavailable'),
    ("llm0-1  | [2025-07-18 09:20:19 TP0] Init torch distributed begin.", "2025-07-18 09:20:19", {"TP": 0},
     "Init torch distributed begin."),
    ("\x1b[36mllm0-1  |\x1b[0m [2025-07-18 09:20:19] Init torch distributed begin.\n", "2025-07-18 09:20:19", {},
     "Init torch distributed begin."),
    ("Loading safetensors checkpoint shards:  50% Completed | 4/8 [00:02<00:02,  1.77it/s]", None, {},
     "Loading safetensors checkpoint shards:  50% Completed | 4/8 [00:02<00:02,  1.77it/s]"),
    ("  File \"/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py\", line 2555, in run_scheduler_process",
     None, {}, ("  File \"/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py\", line 2555, in "
                "run_scheduler_process")),
])
def test_parse_record(line, timestamp, ranks, message):
    record = parse_record(line)
    assert (record.timestamp, record.ranks, record.message) == (timestamp, ranks, message)


# One line per rule (at least), with the phase it sets.
LINE_PHASES = [
    ("[2026-02-14 09:12:03] server_args=ServerArgs(model_path='m', tp_size=1)", "initializing"),
    ("[2026-10-20 14:02:11] server_args={'model_path': 'm', 'tp_size': 2}", "initializing"),
    ("[2026-10-20 14:02:19 TP0] Init parallel begin.", "initializing"),
    ("[2026-10-20 14:02:20 TP0] Load weight begin. avail mem=138.61 GB", "loading_weights"),
    ("Multi-thread loading pt checkpoint shards:  25% Completed | 1/4 [00:02<00:08,  2.72s/it]", "loading_weights"),
    ("[2025-01-01 00:00:00] The available memory for KV cache is 40.51 GB.", "allocating_memory"),
    ("[2025-01-01 00:00:00] SWAKVPool mem usage: 36.69 GB, swa size: 171008, full size: 213761", "allocating_memory"),
    ("[2025-01-01 00:00:00] Memory pool end. avail mem=10.00 GB", "allocating_memory"),
    ("[2025-01-01 00:00:00] Capture cuda graph begin. This can take up to several minutes. avail mem=9.1 GB",
     "capturing_cuda_graph"),
    ("[2025-01-01 00:00:00] Capture cpu graph begin. This can take up to several minutes. avail mem=9.1 GB",
     "capturing_cuda_graph"),
    ("[2025-01-01 00:00:00 DP0 TP0 EP0] Capture npu graph begin. This can take up to several minutes.",
     "capturing_cuda_graph"),
    ("[2025-01-01 00:00:00] Capture piecewise CUDA graph begin. avail mem=9.1 GB", "capturing_cuda_graph"),
    ("[2025-01-01 00:00:00] Capture draft extend cuda graph begin. This can take up to several minutes.",
     "capturing_cuda_graph"),
    (("[2026-10-20 14:02:34 TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_bs=6, "
     "bs=[1, 2, 3, 4, 5, 6], avail mem=7.77 GB"), "capturing_cuda_graph"),
    ("Capturing num tokens (num_tokens=8192 avail_mem=30.12 GB):   4%|▍         | 2/52 [00:01<00:40,  1.22it/s]",
     "capturing_cuda_graph"),
    ("[2025-01-01 00:00:00] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)", "warming_up"),
    ("[2025-01-01 00:00:00] INFO:     Application startup complete.", "warming_up"),
    ("[2025-01-01 00:00:00] The server is fired up and ready to roll!", "ready"),
    # A node after rank 0 of a multi-node group (SGLang 0.5.10 common.py, engine.py).
    ("[2026-12-01 10:00:00] Dummy health check server started in background thread at 0.0.0.0:30000", "ready"),
    ("[2026-12-01 10:00:00] Scheduler or DataParallelController 4242 terminated with -9", "crashed"),
    ("[2025-02-20 10:00:00] Received sigquit from a child proces. It usually means the child failed.", "crashed"),
    (("[2026-10-20 14:00:00] Subprocess detokenizer (pid=4242) crashed with exit code -11. Triggering SIGQUIT for "
     "cleanup..."), "crashed"),
    ("[2026-10-20 14:00:00] TokenizerManager hit an exception: Traceback (most recent call last):", "crashed"),
    ("[2025-06-01 00:00:00] Rank 3 scheduler is dead. Please check if there are relevant logs.", "crashed"),
    ("[2025-06-01 00:00:00] Initialization failed. Please see the error messages above.", "crashed"),
    ("Killed", "crashed"),
    ("launch_server.py: error: unrecognized arguments: --tp-szie 2", "crashed"),
    ("[2025-06-01 00:00:00] SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
     "stopping"),
    ("[2025-06-01 00:00:00] Gracefully exiting... remaining number of requests 3", "stopping"),
    ("[2025-06-01 00:00:00] Signal SIGTERM received while health check failed. Force exiting.", "stopping"),
    ("[2025-06-01 00:00:00] Prefill batch. #new-seq: 1, #new-token: 7, token usage: 0.00, #running-req: 0",
     "launching"),
    ("[2026-11-20 10:00:00] SIGQUIT received. signum=3. It usually means one child failed.", "crashed"),
    ("[2025-06-01 00:00:00] Child process unexpectedly failed with an exit code 9. pid=4242", "crashed"),
    ("[2025-08-09 03:14:58 TP5] Scheduler hit an exception: Traceback (most recent call last):", "crashed"),
]


@pytest.mark.parametrize("line, phase", LINE_PHASES)
def test_line_sets_phase(line, phase):
    assert state_after(line).phase == phase


@pytest.mark.parametrize("line, progress", [
    ("Loading safetensors checkpoint shards:   0% Completed | 0/8 [00:00<?, ?it/s]", {"done": 0, "total": 8}),
    ("Loading pt checkpoint shards: 100% Completed | 2/2 [00:04<00:00,  2.01s/it]", {"done": 2, "total": 2}),
    ("Loading np_cache checkpoint shards:  33% Completed | 1/3 [00:01<00:02,  1.00s/it]", {"done": 1, "total": 3}),
    ("Loading safetensors using Runai Model Streamer:  50% Completed | 5/10 [00:10<00:10,  2.00s/it]",
     {"done": 5, "total": 10}),
    ("Loading safetensors using Fastsafetensor loader:  12% Completed | 2/17 [00:03<00:22,  1.50s/it]",
     {"done": 2, "total": 17}),
])
def test_weight_progress_variants(line, progress):
    assert state_after(line).progress["weights"] == progress


@pytest.mark.parametrize("line, progress", [
    ("Capturing batches (bs=256 avail_mem=10.77 GB):   3%|▎         | 1/36 [00:00<00:10,  3.33it/s]",
     {"done": 1, "total": 36}),
    ("Capturing batches (avail_mem=8.25 GB):   0%|          | 0/1 [00:00<?, ?it/s]", {"done": 0, "total": 1}),
    ("Capturing num tokens (num_tokens=4096 avail_mem=30.12 GB): 100%|██████████| 52/52 [00:30<00:00,  1.7it/s]",
     {"done": 52, "total": 52}),
])
def test_cuda_graph_progress_variants(line, progress):
    assert state_after(line).progress["cuda_graph"] == progress


def test_carriage_return_refreshes_count_as_lines():
    # v0.5.23 bars have no "\n": every refresh is "\r"-separated on one physical line, and the newest
    # refresh is unterminated until tqdm writes the next one.
    state = LogState()
    state.feed_text("\rMulti-thread loading shards:   0% Completed | 0/4 [00:00<?, ?it/s]"
                    "\rMulti-thread loading shards:  50% Completed | 2/4 [00:05<00:05,  2.50s/it]"
                    "\rMulti-thread loading shards:  75% Completed | 3/4 [00:07<00:02,  2.50s/it]")
    assert state.progress["weights"] == {"done": 2, "total": 4}
    assert state.last_line.startswith("Multi-thread loading shards:  50%")
    state.flush()
    assert state.progress["weights"] == {"done": 3, "total": 4}


def test_phases_only_move_forward():
    state = state_after(
        "[2025-01-01 00:00:00] Capture cuda graph begin. avail mem=9.1 GB",
        "[2025-01-01 00:00:01] Load weight begin. avail mem=9.0 GB",
    )
    assert state.phase == "capturing_cuda_graph"
    assert [entry["phase"] for entry in state.timeline] == ["capturing_cuda_graph"]


def test_crashed_and_stopping_are_final():
    crashed = state_after("[2025-01-01 00:00:00] Scheduler hit an exception: boom",
                          "[2025-01-01 00:00:01] The server is fired up and ready to roll!",
                          "[2025-01-01 00:00:02] Gracefully exiting... remaining number of requests 0")
    assert crashed.phase == "crashed"
    # The SIGTERM path kills its children; their deaths are part of stopping, not a crash.
    stopping = state_after("[2026-10-20 14:00:00] SIGTERM received. signum=None frame=None. Draining requests and "
                           "shutting down...",
                           "[2026-10-20 14:00:15] Subprocess scheduler_0 (pid=77) crashed with exit code -9. "
                           "Triggering SIGQUIT for cleanup...")
    assert stopping.phase == "stopping"
    assert stopping.error["summary"].startswith("Subprocess scheduler_0 (pid=77) crashed")


def test_crash_marker_without_traceback_is_the_error():
    state = state_after("[2025-01-01 00:00:00] Load weight begin. avail mem=70.00 GB", "Killed")
    assert state.phase == "crashed"
    assert state.as_dict()["error"] == {"summary": "Killed", "traceback": None}


def test_traceback_after_ready_is_reported_without_crashing():
    state = LogState()
    state.feed_text(
        "[2025-01-01 00:00:00] The server is fired up and ready to roll!\n"
        "[2025-01-01 00:01:00] Error in request: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py", line 512, in generate_request\n'
        "    ret = await _global_state.tokenizer_manager.generate_request(obj, request).__anext__()\n"
        "ValueError: The input (40961 tokens) is longer than the model's context length (40960 tokens).\n"
        "[2025-01-01 00:01:00] INFO:     127.0.0.1:40000 - \"POST /generate HTTP/1.1\" 400 Bad Request\n"
    )
    assert state.phase == "ready"
    assert state.error["summary"].startswith("ValueError: The input (40961 tokens)")


def test_traceback_lines_from_another_process_end_at_a_progress_bar():
    state = LogState()
    state.feed_text(
        "[2025-01-01 00:00:00 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "scheduler.py", line 1, in run_scheduler_process\n'
        "AssertionError: boom\n"
        "Loading safetensors checkpoint shards:  50% Completed | 4/8 [00:02<00:02,  1.77it/s]\n"
    )
    assert state.error["traceback"].endswith("AssertionError: boom")
    assert state.progress["weights"] == {"done": 4, "total": 8}


@pytest.mark.parametrize("line, timings", [
    (("Engine startup timings (s): load_weight=401.89, kv_cache_allocation=3.10, scheduler_e2e=625.45, "
     "cuda_graph={decode=180.02, prefill=12.50}, tokenizer_e2e=630.50"),
     {"load_weight": 401.89, "kv_cache_allocation": 3.10, "scheduler_e2e": 625.45,
      "cuda_graph": {"decode": 180.02, "prefill": 12.50}, "tokenizer_e2e": 630.50}),
    (("Engine startup timings (s): load_weight=312.45, kv_cache_allocation=0.91, scheduler_e2e=361.83, "
     "cuda_graph={'decode': 40.0}, tokenizer_e2e=365.00"),
     {"load_weight": 312.45, "kv_cache_allocation": 0.91, "scheduler_e2e": 361.83, "cuda_graph": {"decode": 40.0},
      "tokenizer_e2e": 365.00}),
    (("Engine startup timings (s): load_weight=1.00, kv_cache_allocation=0.20, scheduler_e2e=3.00, cuda_graph={}, "
     "tokenizer_e2e=4.00"),
     {"load_weight": 1.00, "kv_cache_allocation": 0.20, "scheduler_e2e": 3.00, "cuda_graph": {},
      "tokenizer_e2e": 4.00}),
])
def test_startup_timings(line, timings):
    state = state_after("[2026-10-20 14:03:05] " + line)
    assert state.facts["startup_timings"] == timings
    assert state.log_format == "new"


@pytest.mark.parametrize("line, facts", [
    (("Mamba Cache is allocated. max_mamba_cache_size: 48, conv_state size: 0.10GB, ssm_state size: 4.50GB "
     "intermediate_ssm_state_cache size: 1.20GB intermediate_conv_window_cache size: 0.05GB "),
     {"max_mamba_cache_size": 48, "mamba_conv_state_gb": 0.10, "mamba_ssm_state_gb": 4.50,
      "mamba_intermediate_ssm_state_cache_gb": 1.20, "mamba_intermediate_conv_window_cache_gb": 0.05}),
    ("KV Cache is allocated. #tokens: 389632, KV size: 6.48 GB", {"kv_cache_tokens": 389632, "kv_cache_size_gb": 6.48}),
    ("Draft model loaded. type=LlamaForCausalLMEagle3, mem usage=2.21 GB",
     {"draft_weight_load_type": "LlamaForCausalLMEagle3", "draft_weight_load_mem_usage": 2.21}),
    (("max_total_num_tokens=20480, chunked_prefill_size=2048, max_prefill_tokens=16384, max_running_requests=4096, "
     "context_len=32768, available_cpu_mem=412.07 GB"),
     {"max_total_num_tokens": 20480, "chunked_prefill_size": 2048, "max_prefill_tokens": 16384,
      "max_running_requests": 4096, "context_len": 32768, "available_cpu_mem": 412.07}),
])
def test_facts(line, facts):
    assert state_after("[2026-01-01 00:00:00] " + line).facts == facts


@pytest.mark.parametrize("lines, log_format", [
    (["[2026-01-01 00:00:00] Init torch distributed begin."], "classic"),
    (["[2026-01-01 00:00:00] server_args={'model_path': 'm'}",
      "[2026-01-01 00:00:01 TP0] Init torch distributed begin."], "new"),  # a 2026-08 nightly mixed both
    (["[2026-01-01 00:00:00] Load weight begin. avail mem=10.00 GB"], None),
])
def test_log_format_detection(lines, log_format):
    assert state_after(*lines).log_format == log_format


def test_phase_names_follow_the_contract():
    assert PHASES == ("launching", "initializing", "loading_weights", "allocating_memory", "capturing_cuda_graph",
                      "warming_up", "ready", "crashed", "stopping")
    assert parse_log("")["phase"] == "launching"


class TestLogFollower:
    def test_missing_file_then_partial_line(self, tmp_path):
        log_path = tmp_path / "server.log"
        follower = LogFollower(str(log_path))
        assert follower.read_new() == []
        log_path.write_bytes(b"[2026-01-01 00:00:00] Init torch distributed begin.\n[2026-01-01 00:00:01] Load wei")
        assert follower.read_new() == ["[2026-01-01 00:00:00] Init torch distributed begin."]
        assert follower.read_new() == []
        with open(log_path, "ab") as handle:
            handle.write(b"ght begin. avail mem=70.00 GB\n")
        assert follower.read_new() == ["[2026-01-01 00:00:01] Load weight begin. avail mem=70.00 GB"]

    def test_rotation_restarts_at_the_new_file(self, tmp_path):
        log_path = tmp_path / "server.log"
        log_path.write_bytes(b"old line 1\nold line 2\nold partial")
        follower = LogFollower(str(log_path))
        assert follower.read_new() == ["old line 1", "old line 2"]
        os.rename(log_path, str(log_path) + ".1")
        log_path.write_bytes(b"new line 1\nnew line 2 is longer than the old file was\n")
        assert follower.read_new() == ["new line 1", "new line 2 is longer than the old file was"]

    def test_truncation_restarts_at_zero(self, tmp_path):
        log_path = tmp_path / "server.log"
        log_path.write_bytes(b"a long first line of the previous run\n")
        follower = LogFollower(str(log_path))
        assert follower.read_new() == ["a long first line of the previous run"]
        with open(log_path, "wb") as handle:
            handle.write(b"fresh\n")
        assert follower.read_new() == ["fresh"]

    def test_carriage_returns_and_split_crlf(self, tmp_path):
        log_path = tmp_path / "server.log"
        log_path.write_bytes(b"\rbar 1/4\rbar 2/4\r")
        follower = LogFollower(str(log_path))
        assert follower.read_new() == ["", "bar 1/4"]
        with open(log_path, "ab") as handle:
            handle.write(b"\nnext\r\n")
        assert follower.read_new() == ["bar 2/4", "next"]


def test_follower_reads_head_and_tail_of_a_log_that_is_already_large(tmp_path):
    """A server running for weeks: its startup lines and its latest lines, whole, not everything between."""
    log = tmp_path / "big.log"
    lines = [f"[2026-11-29 10:00:00] line {index:04d}" for index in range(1000)]
    log.write_text("\n".join(lines) + "\n")
    follower = LogFollower(str(log), head_bytes=200, tail_bytes=200)
    read = follower.read_new()
    assert read[0] == lines[0] and read[-1] == lines[-1]
    assert len(read) < 20 and all(line in lines for line in read)
    with log.open("a") as handle:
        handle.write("[2026-11-29 10:00:01] appended\n")
    assert follower.read_new() == ["[2026-11-29 10:00:01] appended"]


ISSUE_LOGS = LOGS / "issues"


@pytest.mark.parametrize("name, summary, traceback_has", [
    # 0.4.x: the SIGQUIT handler's own log call failed; Python's logging printed its message.
    ("sglang_3685_sigquit_logging_error.log",
     "Message: 'Received sigquit from a child proces. It usually means the child failed.'", None),
    # Pasted without header and indentation: the exception line after the frames is the error.
    ("sglang_8974_traceback_without_header.log",
     "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)", "in NCCL_CHECK"),
    # The handler's RecursionError came first; the child's original exception is the error.
    ("sglang_4088_recursive_sigquit_handler.log",
     "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)", "in NCCL_CHECK"),
])
def test_crash_signatures_of_public_issues(name, summary, traceback_has):
    result = parse_log((ISSUE_LOGS / name).read_text(encoding="utf-8"))
    assert result["phase"] == "crashed"
    assert result["error"]["summary"] == summary
    if traceback_has is None:
        assert result["error"]["traceback"] is None
    else:
        assert traceback_has in result["error"]["traceback"]
        assert "RecursionError" not in result["error"]["traceback"]


def test_teardown_traceback_after_the_cause_does_not_replace_it():
    text = (ISSUE_LOGS / "sglang_4088_recursive_sigquit_handler.log").read_text(encoding="utf-8")
    handler, cause = text.split("[2025-08-08 09:09:09 TP0] ")
    result = parse_log("[2025-08-08 09:09:09 TP0] " + cause + "[2025-08-08 09:09:09] Received sigquit from a "
                       "child process. It usually means the child failed.\nTraceback (most recent call last):\n"
                       + handler.split("\n", 5)[5])
    assert result["error"]["summary"].startswith("RuntimeError: NCCL error")


def test_an_unindented_source_line_after_a_frame_of_a_traceback_with_header_is_no_exception():
    # Pasted without indentation: the line after a frame is its source line, the one after that the exception.
    state = state_after("[2026-01-01 00:00:00] Load weight begin. avail mem=1.00 GB",
                        "[2026-01-01 00:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
                        'File "/sgl/model_runner.py", line 9, in load_model',
                        "self.model = get_model(config)",
                        "KeyboardInterrupt")
    assert state.error["summary"] == "KeyboardInterrupt"
    assert state.error["traceback"].endswith("self.model = get_model(config)\nKeyboardInterrupt")


def test_traceback_without_header_needs_an_exception_line():
    state = state_after('  File "/x/faulthandler.py", line 3 in wrapper', "Extension modules: numpy",
                        "[2026-01-01 00:00:00] Load weight begin. avail mem=1.00 GB")
    assert state.error is None and state.phase == "loading_weights"


@pytest.mark.parametrize("line, facts", [
    ("max_total_num_tokens=12x3, chunked_prefill_size=8192, available_gpu_mem=1.2.3 GB",
     {"chunked_prefill_size": 8192}),
    ("max_total_num_tokens=" + "9" * 5000 + ", context_len=4096", {"context_len": 4096}),
    ("Load weight end. elapsed=1.2.3 s, type=M, avail mem=x GB, mem usage=2.00 GB.",
     {"weight_load_type": "M", "weight_load_mem_usage": 2.0}),
    ("KV Cache is allocated. #tokens: 12x3, KV size: 6.48 GB", {"kv_cache_size_gb": 6.48}),
])
def test_malformed_numbers_leave_their_fact_unknown(line, facts):
    assert state_after("[2026-01-01 00:00:00] " + line).facts == facts


def test_binary_and_truncated_lines_do_not_stop_parsing():
    state = LogState()
    state.feed_text("\x00\xff\ufffd[2026-01-01 00:00\n[2026-01-01 00:00:00 TP" + "9" * 5000 + "] Load weight begin.\n"
                    "Loading safetensors checkpoint shards:  50% Completed | 4/" + "9" * 5000 + "\n"
                    "[2026-01-01 00:00:01] Init torch distributed begin.\n")
    assert state.phase == "loading_weights" and state.progress["weights"] is None


def test_draft_crash_reports_the_draft_component():
    result = parse_log(read_fixture("crash_draft_worker.log"))
    assert result["component"] == "draft"
    assert [(entry["phase"], entry["component"]) for entry in result["timeline"][-2:]] == [
        ("loading_weights", "draft"), ("crashed", "draft")]


def test_weight_update_after_ready_is_no_startup_phase():
    state = state_after("[2026-01-01 00:00:00] Load weight end. type=M", "[2026-01-01 00:00:01] The server is "
                        "fired up and ready to roll!", "[2026-01-01 00:10:00] Load weight begin. avail mem=1.00 GB")
    assert (state.phase, state.component) == ("ready", "target")


def test_follower_of_an_unreadable_path_gives_no_lines_and_says_why(tmp_path):
    follower = LogFollower(str(tmp_path))
    assert follower.read_new() == []
    assert follower.read_error.startswith(f"cannot read {tmp_path}: Is a directory")


def test_a_record_glued_to_a_progress_bar_is_read_as_its_own_line():
    # Another rank's record written while rank 0's bar (no line break) was on screen: seen in CI under load.
    state = state_after(
        "[2026-12-01 20:04:22 TP0] Load weight begin. avail mem=138.79 GB",
        "[2026-12-01 20:04:22 TP0] Load weight end. elapsed=0.09 s, type=Qwen3NextForCausalLM, avail mem=128.79 GB, "
        "mem usage=10.00 GB.",
        "[2026-12-01 20:04:22 TP1] Load weight begin. avail mem=138.79 GB",
        "[2026-12-01 20:04:22 TP1] Load weight end. elapsed=0.09 s, type=Qwen3NextForCausalLM, avail mem=128.79 GB, "
        "mem usage=10.00 GB.",
        "[2026-12-01 20:04:22 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=15.13 GB",
        "Capturing batches (bs=2 avail_mem=13.66 GB):  98%|#########8| 50/51 [00:00<00:00, 180.28it/s]"
        "[2026-12-01 20:04:23 TP1] Load weight begin. avail mem=13.63 GB",
        "Capturing batches (bs=1 avail_mem=13.6 GB): 100%|##########| 51/51 [00:01<00:00, 2.01s/it]"
        "[2026-12-01 20:04:23] Received sigquit from a child process. It usually means the child failed.")
    assert state.phase == "crashed"
    assert [(entry["phase"], entry["component"]) for entry in state.timeline][-2:] == [
        ("loading_weights", "draft"), ("crashed", "draft")]


def test_a_record_glued_to_a_padded_progress_bar_is_read_as_its_own_line():
    # tqdm pads a refresh shorter than the previous one with spaces (bs=10 -> bs=8), so a record glued to it follows
    # "it/s] ". The draft load of TP2 (rank 0 still capturing) was lost that way and TP2's crash, logged before the
    # other ranks' draft loads began, was reported as a crash in the target's capture (molecule faults, loaded host).
    target_load = [f"[2026-12-03 11:17:24 TP{rank}] Load weight {step}. avail mem=136.79 GB"
                   for rank in range(4) for step in ("begin", "end")]
    bars = ("\rCapturing batches (bs=10 avail_mem=13.64 GB):  88%|########8 | 59/67 [00:01<00:00, 41.60it/s]"
            "\rCapturing batches (bs=8 avail_mem=13.60 GB):  90%|########9 | 60/67 [00:01<00:00, 41.61it/s] ")
    last_bar = "\rCapturing batches (bs=7 avail_mem=13.57 GB):  91%|#########1| 61/67 [00:01<00:00, 41.58it/s]"
    frame = ('  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/weight_utils.py", line 752, in '
             "default_weight_loader")
    error = ("AssertionError: Attempted to load weight (torch.Size([4096, 12288])) into parameter "
             "(torch.Size([2048, 6144]))")
    log = "\n".join([
        *target_load,
        "[2026-12-03 11:17:24 TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=8",
        bars + "[2026-12-03 11:17:25 TP2] Load weight begin. avail mem=13.34 GB",
        last_bar + "[2026-12-03 11:17:26 TP2] Scheduler hit an exception: Traceback (most recent call last):",
        frame,
        error,
        "[2026-12-03 11:17:26 TP1] Load weight begin. avail mem=13.34 GB",
        "[2026-12-03 11:17:26] Received sigquit from a child process. It usually means the child failed.",
        "",
    ])
    for chunk_size in (len(log), 1, 7):
        state = LogState()
        for start in range(0, len(log), chunk_size):
            state.feed_text(log[start:start + chunk_size])
        assert [(entry["phase"], entry["component"]) for entry in state.timeline][-3:] == [
            ("capturing_cuda_graph", "target"), ("loading_weights", "draft"), ("crashed", "draft")]
        assert state.error["summary"].startswith("AssertionError: Attempted to load weight")
        assert state.progress["cuda_graph"] == {"done": 61, "total": 67}


SHUTDOWN_0_5_23 = """[2026-10-30 10:00:00] The server is fired up and ready to roll!
[2026-10-30 10:01:00] SIGTERM received. signum=None frame=None. Draining requests and shutting down...
[2026-10-30 10:01:00] Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[].
[2026-10-30 10:01:15] Schedulers still alive 15s after ShutdownReq, killing them before they released: [4242, 4243]
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/sglang/srt/utils/common.py", line 2491, in _wait_for_reap_or_raise
    raise RuntimeError(
RuntimeError: kill_process_tree: 1 process(es) not reaped within 60s after SIGKILL; pids=[4243]
"""


def test_the_0_5_23_shutdown_names_the_processes_whose_gpu_memory_outlives_the_stop():
    parsed = parse_log(SHUTDOWN_0_5_23)
    assert parsed["phase"] == "stopping"
    assert parsed["unreleased"] == [
        {"pids": [4242, 4243], "why": "schedulers still alive 15 s after the shutdown request, SIGKILLed before they "
                                      "released their GPU memory"},
        {"pids": [4243], "why": "not reaped within 60 s of SIGKILL (stuck in the driver: their GPU memory is not freed)"},
    ]


def test_a_clean_shutdown_names_no_process():
    clean = SHUTDOWN_0_5_23.split("[2026-10-30 10:01:15]", maxsplit=1)[0]
    assert parse_log(clean)["unreleased"] == []


def test_every_crash_marker_has_a_sample_and_the_quick_scan_knows_its_words():
    markers = [rule for rule in RULES if rule.handler is _on_crash_marker]
    announcing = [line for line, _phase in LINE_PHASES if state_after(line).crash_announced]
    for rule in markers:
        samples = [line for line in announcing if re.search(rule.pattern.pattern.removeprefix("^"), line)]
        assert samples, f"no sample line of the crash marker {rule.pattern.pattern!r} in LINE_PHASES"
    for line in announcing:
        assert may_announce_crash(line), f"the quick scan (CRASH_MARKER_WORDS) misses {line!r}"
    assert not may_announce_crash(read_fixture("classic_tp1_mamba.log"))
