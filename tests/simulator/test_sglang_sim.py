"""The SGLang simulator: real processes, real HTTP, real log files."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from .conftest import (
    SIM_SCRIPT,
    alive,
    process_state,
    read_cmdline,
    read_environ,
    wait_for,
)

TS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
GB = r"\d+\.\d\d GB"

UVICORN_AND_WARMUP = [
    rf"\[{TS}\] INFO:     Started server process \[\d+\]",
    rf"\[{TS}\] INFO:     Waiting for application startup\.",
    rf"\[{TS}\] INFO:     Application startup complete\.",
    rf"\[{TS}\] INFO:     Uvicorn running on http://127\.0\.0\.1:\d+ \(Press CTRL\+C to quit\)",
    rf'\[{TS}\] INFO:     127\.0\.0\.1:\d+ - "GET /model_info HTTP/1\.1" 200 OK',
    rf'\[{TS}\] INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK',
    rf"\[{TS}\] The server is fired up and ready to roll!",
]
WEIGHT_BAR_DONE = r"Loading safetensors checkpoint shards: 100% Completed \| 4/4 \[\d\d:\d\d<\d\d:\d\d, +\d+\.\d\dit/s\]"
CAPTURE_BAR_DONE = rf"Capturing batches \(bs=1 avail_mem={GB}\): 100%\|█{{10}}\| 36/36 \[\d\d:\d\d<\d\d:\d\d, +\d+\.\d\dit/s\]"
SUMMARY = (rf"\[{TS} TP0\] max_total_num_tokens=(?P<tokens>\d+), chunked_prefill_size=8192, max_prefill_tokens=16384, "
           rf"max_running_requests=(?P<running>\d+), context_len=262144, available_gpu_mem={GB}")

SEQUENCES = {
    "0.5.9": [
        rf"\[{TS}\] server_args=ServerArgs\(model_path='[^']+', tokenizer_path=.*, tp_size=2, .*\)",
        rf"\[{TS} TP0\] Init torch distributed begin\.",
        rf"\[{TS} TP0\] Init torch distributed ends\. elapsed=\d+\.\d\d s, mem usage={GB}",
        rf"\[{TS} TP0\] Load weight begin\. avail mem={GB}",
        WEIGHT_BAR_DONE,
        (rf"\[{TS} TP0\] Load weight end\. elapsed=\d+\.\d\d s, type=Qwen3NextForCausalLM, dtype=torch\.bfloat16, "
         rf"avail mem={GB}, mem usage={GB}\."),
        (rf"\[{TS} TP0\] Mamba Cache is allocated\. max_mamba_cache_size: \d+, conv_state size: \d+\.\d\dGB, "
         r"ssm_state size: \d+\.\d\dGB "),
        rf"\[{TS} TP0\] KV Cache is allocated\. #tokens: \d+, K size: {GB}, V size: {GB}",
        rf"\[{TS} TP0\] Memory pool end\. avail mem={GB}",
        rf"\[{TS} TP0\] Capture cuda graph begin\. This can take up to several minutes\. avail mem={GB}",
        rf"\[{TS} TP0\] Capture cuda graph bs \[1, 2, 4, 8, 12, 16, 24, .*, 248, 256\]",
        CAPTURE_BAR_DONE,
        rf"\[{TS} TP0\] Capture cuda graph end\. Time elapsed: \d+\.\d\d s\. mem usage={GB}\. avail mem={GB}\.",
        SUMMARY,
        *UVICORN_AND_WARMUP,
    ],
    "0.5.23": [
        rf"\[{TS}\] server_args=\{{'model_path': '[^']+', .*'tp_size': 2, .*\}}",
        rf"\[{TS} TP0\] Init parallel begin\.",
        rf"\[{TS} TP0\] Init parallel ends\. elapsed=\d+\.\d\d s",
        rf"\[{TS} TP0\] Memory baseline taken\. mem usage={GB}",
        rf"\[{TS} TP0\] Load weight begin\. avail mem={GB}",
        WEIGHT_BAR_DONE,
        (rf"\[{TS} TP0\] Load weight end\. elapsed=\d+\.\d\d s, type=Qwen3NextForCausalLM, avail mem={GB}, "
         rf"mem usage={GB}\."),
        (rf"\[{TS} TP0\] Mamba Cache is allocated\. max_mamba_cache_size: \d+, conv_state size: \d+\.\d\dGB, "
         r"ssm_state size: \d+\.\d\dGB "),
        rf"\[{TS} TP0\] KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: \d+, K size: {GB}, V size: {GB}",
        rf"\[{TS} TP0\] Memory pool end\. avail mem={GB}",
        rf"\[{TS} TP0\] Capture target decode CUDA graph begin\. backend=full, num_tokens_per_req=1, avail mem={GB}",
        CAPTURE_BAR_DONE,
        (rf"\[{TS} TP0\] Capture target decode CUDA graph end\. bs=\[1, 2, 4, .*, 256\], elapsed=\d+\.\d\d s, "
         rf"mem usage={GB}, avail mem={GB}\."),
        SUMMARY,
        (rf"\[{TS} TP0\] Tree cache initialized: source=default impl=MambaRadixCache hybrid_swa=False hybrid_ssm=True "
         r"hicache_attached=False streaming_wrapped=False"),
        (rf"\[{TS}\] Engine startup timings \(s\): load_weight=\d+\.\d\d, kv_cache_allocation=\d+\.\d\d, "
         r"scheduler_e2e=\d+\.\d\d, cuda_graph=\{target_decode=\d+\.\d\d\}, tokenizer_e2e=\d+\.\d\d"),
        *UVICORN_AND_WARMUP,
    ],
}
# Not anchored: a rank's line may follow rank 0's progress bar, which ends without a newline.
SCHEDULER_CRASH = rf"\[{TS}( TP\d)?\] Scheduler hit an exception: Traceback \(most recent call last\):\n"
SIGQUIT_LINE = rf"\[{TS}\] Received sigquit from a child process\. It usually means the child failed\.$"


def assert_in_order(lines, patterns):
    """Every pattern matches a whole line, in this order (other lines may come between)."""
    position = 0
    for pattern in patterns:
        while position < len(lines) and not re.fullmatch(pattern, lines[position]):
            position += 1
        assert position < len(lines), f"no line matching {pattern!r} after the previous ones"
        position += 1


def titles(server):
    return sorted(read_cmdline(pid) for pid in server.children())


def device_links(pid):
    return {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_tp2_start_serve_and_sigterm(launch, gpu_dir, version):
    server = launch("--tp-size", "2", "--enable-metrics", version=version,
                    env={"CUDA_VISIBLE_DEVICES": "1,3", "SGLANG_SIM_EXTRA": "inherited"})
    server.wait_ready()
    lines = server.log_lines()
    assert_in_order(lines, SEQUENCES[version])
    # other ranks log too; unanchored, since a line may follow rank 0's bar, which ends without a newline
    assert re.search(rf"\[{TS} TP1\] Load weight end\. ", server.log())
    # progress bars come from rank 0 only
    assert sum(line.startswith("Loading safetensors checkpoint shards:   0% Completed | 0/4") for line in lines) == 1
    assert sum(line.startswith("Capturing batches (") and "| 0/36 [" in line for line in lines) == 1
    raw = server.log()
    bar_refresh_end = "\n" if version == "0.5.9" else "\r"  # classic BAR_FORMAT ends with "\n"
    # An intermediate refresh (which one: a starved process may skip some, as tqdm's mininterval does).
    assert re.search(r"\rLoading safetensors checkpoint shards: +\d+% Completed \| [123]/4 [^\r\n]*" + bar_refresh_end,
                     raw)
    summary = re.search(SUMMARY, raw)

    # process tree: unchanged main command line, titled children inheriting the environment
    assert "sglang_sim.py --model-path" in read_cmdline(server.pid)
    assert titles(server) == ["sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    by_title = {read_cmdline(pid): pid for pid in server.children()}
    for pid in by_title.values():
        assert process_state(pid)[1] == server.pid
        assert read_environ(pid)[b"SGLANG_SIM_EXTRA"] == b"inherited"

    # GPUs 1 and 3 (CUDA_VISIBLE_DEVICES positions 0 and 1) hold the memory, through open device files
    used = server.used_mib()
    assert used[0] == used[2] == 0 and used[1] > 100_000 and used[3] > 100_000
    assert os.path.join(gpu_dir, "dev", "nvidia1") in device_links(by_title["sglang::scheduler_TP0"])
    assert os.path.join(gpu_dir, "dev", "nvidia3") in device_links(by_title["sglang::scheduler_TP1"])
    _rc, apps = server.nvidia_smi("--query-compute-apps=pid,process_name", "--format=csv,noheader")
    assert sorted(apps.splitlines()) == sorted(f"{pid}, {title}" for title, pid in by_title.items()
                                               if title.startswith("sglang::scheduler"))

    # endpoints
    assert server.get("/health") == (200, "")
    assert server.get("/health_generate") == (200, "")
    status, body = server.get("/model_info")
    assert status == 200 and json.loads(body)["is_generation"] is True
    status, body = server.get("/get_server_info")
    info = json.loads(body)
    assert info["max_total_num_tokens"] == int(summary["tokens"])
    assert info["max_running_requests"] == int(summary["running"])
    assert info["context_len"] == 262144 and info["tp_size"] == 2
    assert info["version"] == version
    assert info["internal_states"][0]["memory_usage"]["token_capacity"] == int(summary["tokens"])
    status, body = server.get("/v1/models")
    assert json.loads(body)["data"][0]["max_model_len"] == 262144
    status, body = server.get("/metrics")
    assert status == 200
    assert re.search(r'^sglang:token_usage\{engine_type="unified",model_name="[^"]+",pp_rank="0",tp_rank="0"\} 0\.0$',
                     body, re.MULTILINE)
    assert "# TYPE sglang:mamba_usage gauge" in body and "# HELP sglang:num_running_reqs " in body
    status, body = server.get("/generate", method="POST",
                              body=json.dumps({"text": "Hi", "sampling_params": {"max_new_tokens": 8}}),
                              headers={"Content-Type": "application/json"})
    assert status == 200 and json.loads(body)["meta_info"]["completion_tokens"] == 8

    # SIGTERM once serving: drain, then kill_process_tree (exit 137), children and memory gone
    children = server.children()
    os.kill(server.pid, signal.SIGTERM)
    assert server.wait_exit() == -signal.SIGKILL
    assert re.search(rf"^\[{TS}\] SIGTERM received\. signum=None frame=None\. Draining requests and shutting down\.\.\.$",
                     server.log(), re.MULTILINE)
    wait_for(lambda: not any(alive(pid) for pid in children), what="children to exit")
    assert server.used_mib() == {0: 0, 1: 0, 2: 0, 3: 0}


def test_readiness_goes_refused_then_503_then_200(launch):
    server = launch("--disable-cuda-graph", time_scale=0.5)
    seen = []

    def probe():
        status = server.get("/health_generate")[0]
        if not seen or seen[-1] != status:
            seen.append(status)
        return status == 200

    wait_for(probe, timeout=30, interval=0.02, what="200 from /health_generate")
    assert seen == [None, 503, 200]
    assert "Capture cuda graph" not in server.log()


def test_api_key_and_metrics_disabled(launch):
    server = launch("--api-key", "sekrit")
    server.wait_ready()  # the warmup itself authenticates
    assert server.get("/model_info") == (401, json.dumps({"error": "Unauthorized"}))
    assert server.get("/v1/models")[0] == 401
    assert server.get("/model_info", headers={"Authorization": "Bearer sekrit"})[0] == 200
    assert server.get("/health") == (200, "")  # health and metrics paths are exempt, as in SGLang
    assert server.get("/metrics")[0] == 404  # no --enable-metrics


def test_mamba_strategy_and_max_running_requests(launch):
    no_buffer = launch("--mamba-scheduler-strategy", "no_buffer", "--disable-cuda-graph", "--base-gpu-id", "0")
    extra = launch("--mamba-scheduler-strategy", "extra_buffer", "--disable-cuda-graph", "--base-gpu-id", "1")
    capped = launch("--max-running-requests", "64", "--disable-cuda-graph", "--base-gpu-id", "2")
    running, slots = {}, {}
    for name, server in (("no_buffer", no_buffer), ("extra", extra), ("capped", capped)):
        server.wait_ready()
        info = json.loads(server.get("/server_info")[1])
        running[name], slots[name] = info["max_running_requests"], info["max_mamba_cache_size"]
        assert f"max_running_requests={running[name]}," in server.log()
    # the same memory split gives the same slots; a running request takes 3 of them (no_buffer), 5 (extra_buffer)
    assert slots["no_buffer"] == slots["extra"] > 320
    assert running["no_buffer"] == slots["no_buffer"] // 3
    assert running["extra"] == slots["extra"] // 5
    assert running["capped"] == 64


def test_data_parallel_process_titles(launch):
    server = launch("--dp-size", "2", "--disable-cuda-graph")
    server.wait_ready()
    assert titles(server) == ["sglang::data_parallel_controller", "sglang::detokenizer",
                              "sglang::scheduler_DP0_TP0", "sglang::scheduler_DP1_TP0"]
    assert re.search(rf"^\[{TS} DP1 TP0\] Load weight end\.", server.log(), re.MULTILINE)
    used = server.used_mib()
    assert used[0] > 0 and used[1] > 0 and used[2] == 0
    assert len(json.loads(server.get("/server_info")[1])["internal_states"]) == 2


def test_sigterm_during_startup_kills_at_once(launch):
    server = launch(env={"SGLANG_SIM_FAULT": "hang_after_weights"})
    server.wait_log(WEIGHT_BAR_DONE)
    children = wait_for(lambda: len(server.children()) == 2 and server.children(), what="children")
    assert server.used_mib()[0] > 20_000  # the weights stay loaded while it hangs
    assert server.get("/health")[0] is None  # HTTP never came up
    os.kill(server.pid, signal.SIGTERM)
    assert server.wait_exit() == -signal.SIGTERM
    wait_for(lambda: not any(alive(pid) for pid in children), what="children to die with the parent")
    assert "Load weight end" not in server.log()
    wait_for(lambda: server.used_mib()[0] == 0, what="memory release")


CRASHES = {
    "draft_crash": ("AssertionError: Attempted to load weight", "speculative/eagle_worker.py"),
    "oom_load": ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "model_loader/loader.py"),
    "nccl_error": ("RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
                   "pynccl_wrapper.py"),
    "missing_model": ("OSError: Incorrect path_or_model_id: '/nonexistent/model'.", "managers/scheduler.py"),
}


@pytest.mark.parametrize("case", sorted(CRASHES))
def test_startup_crash_kills_whole_tree(launch, draft_model_dir, case):
    flags = ["--tp-size", "2"]
    if case == "draft_crash":
        flags += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft_model_dir]
    env = {} if case == "missing_model" else {"SGLANG_SIM_FAULT": case}
    server = launch(*flags, env=env, model="/nonexistent/model" if case == "missing_model" else None)
    assert server.wait_exit() == -signal.SIGKILL  # kill_process_tree SIGKILLs itself: shell status 137
    error, frame = CRASHES[case]
    log = server.log()
    assert re.search(SCHEDULER_CRASH, log, re.MULTILINE)
    assert re.search(r"^" + re.escape(error), log, re.MULTILINE)
    assert frame in log
    assert re.search(SIGQUIT_LINE, log, re.MULTILINE)
    wait_for(lambda: not server.children(), what="children to be killed")
    if case == "draft_crash":  # the target finished before the draft worker failed
        assert "Capture cuda graph end" in log and "type=LlamaForCausalLMEagle3" not in log


def test_hang_in_cuda_graph_capture(launch):
    server = launch(env={"SGLANG_SIM_FAULT": "hang_cuda_graph"})
    server.wait_log(r"Capturing batches \(bs=\d+ avail_mem=[\d.]+ GB\):  +\d\d%\|")
    assert server.popen.poll() is None
    assert server.get("/health")[0] is None
    assert "Capture cuda graph end" not in server.log()


def test_crash_after_ready(launch):
    server = launch(env={"SGLANG_SIM_FAULT": "crash_after_ready", "SGLANG_SIM_FAULT_DELAY": "0.3"})
    server.wait_ready()
    assert server.wait_exit() == -signal.SIGKILL
    log = server.log()
    fired_up = log.index("The server is fired up")
    assert log.index("Scheduler hit an exception") > fired_up
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in log
    assert re.search(SIGQUIT_LINE, log, re.MULTILINE)


def test_a_main_process_stuck_after_a_crash_lives_on_with_its_schedulers(launch):
    server = launch(env={"SGLANG_SIM_FAULT": "nccl_error,stuck_after_crash"})
    server.wait_log(SIGQUIT_LINE)
    with pytest.raises(subprocess.TimeoutExpired):  # what a real one does at once: kill its tree and itself
        server.popen.wait(timeout=1)
    assert server.children(), "its schedulers live on too"


def test_orphaned_schedulers_survive_parent_sigkill(launch):
    server = launch("--tp-size", "2", env={"SGLANG_SIM_FAULT": "orphan_scheduler"})
    server.wait_ready()
    schedulers = [pid for pid in server.children() if read_cmdline(pid).startswith("sglang::scheduler")]
    assert len(schedulers) == 2
    os.kill(server.pid, signal.SIGKILL)
    assert server.wait_exit() == -signal.SIGKILL
    wait_for(lambda: all(process_state(pid)[1] != server.pid for pid in schedulers), what="re-parenting")
    for pid in schedulers:
        assert alive(pid)
        assert os.getsid(pid) == pid  # left the launcher's session and process group
        assert read_environ(pid)[b"GPUOPS_SGLANG_SERVER"] == server.marker.encode()
    assert sorted(server.children()) == sorted(schedulers)  # the detokenizer died with its parent
    used = server.used_mib()
    assert used[0] > 100_000 and used[1] > 100_000


def test_ignore_sigterm_needs_sigkill(launch):
    server = launch(env={"SGLANG_SIM_FAULT": "ignore_sigterm"})
    server.wait_ready()
    os.kill(server.pid, signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        server.wait_exit(timeout=0.5)
    assert server.get("/health") == (200, "")
    assert "SIGTERM received" not in server.log()
    os.kill(server.pid, signal.SIGKILL)
    assert server.wait_exit() == -signal.SIGKILL


def test_slow_release_keeps_memory_after_death(launch):
    server = launch(env={"SGLANG_SIM_FAULT": "slow_release", "SGLANG_SIM_RELEASE_DELAY": "1"})
    server.wait_ready()
    os.killpg(server.pid, signal.SIGKILL)
    server.wait_exit()
    wait_for(lambda: not server.children(), what="the tree to die")
    assert server.used_mib()[0] > 100_000
    assert server.nvidia_smi("--query-compute-apps=pid", "--format=csv,noheader")[1] == ""
    wait_for(lambda: server.used_mib()[0] == 0, timeout=15, what="the delayed release")


def test_argument_errors_like_argparse(model_dir):
    result = subprocess.run([sys.executable, SIM_SCRIPT, "--model-path", model_dir, "--bogus-flag"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: launch_server.py [-h] --model-path MODEL_PATH")
    assert "error: unrecognized arguments: --bogus-flag" in result.stderr
    # the v0.5.23 flag name does not exist in v0.5.9, and vice versa
    for version, flag in (("0.5.9", "--mamba-radix-cache-strategy"), ("0.5.23", "--mamba-scheduler-strategy")):
        result = subprocess.run([sys.executable, SIM_SCRIPT, "--model-path", model_dir, flag, "extra_buffer"],
                                capture_output=True, text=True, check=False,
                                env=dict(os.environ, SGLANG_SIM_VERSION=version))
        assert result.returncode == 2 and f"unrecognized arguments: {flag}" in result.stderr


def test_setproctitle_wipes_environ_without_spt_noenv(launch):
    """Real setproctitle reuses the environ area for the title: /proc/<pid>/environ reads empty unless
    SPT_NOENV is set, so markers in the environment are only visible with SPT_NOENV=1 (conftest sets it)."""
    pytest.importorskip("setproctitle")
    server = launch("--disable-cuda-graph", env={"SPT_NOENV": None})
    server.wait_ready()
    children = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                if (process_state(pid) or ("", 0))[1] == server.pid]
    assert sorted(read_cmdline(pid) for pid in children) == ["sglang::detokenizer", "sglang::scheduler"]
    assert all(read_environ(pid) == {} for pid in children)
    assert b"GPUOPS_SGLANG_SERVER" in read_environ(server.pid)  # the main process keeps its own
