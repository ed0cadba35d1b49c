"""Progress lines the action plugins print: the wait's per-host line and the server module's stop phase."""

from ansible_collections.gpuops.sglang.plugins.plugin_utils.progress import (
    format_server_progress,
    format_wait_progress,
)


def report(name, status, phase, progress=None, **extra):
    return dict(name=name, status=status, phase=phase, progress=progress or {}, **extra)


def test_format_wait_progress_summarises_every_server_not_ready():
    reports = [report(f"gpu{index}", "ready", "ready") for index in range(5)] + [
        report("gpu3b", "waiting", "loading_weights", {"weights": {"done": 37, "total": 64}}),
        report("gpu6", "waiting", "capturing_cuda_graph", {"cuda_graph": None}),
        report("gpu7", "crashed", "loading_weights"),
    ]
    assert format_wait_progress("ct200", reports) == (
        "ct200: 5/8 ready | gpu3b loading weights 37/64 | gpu6 capturing cuda graph | gpu7 crashed in loading weights")


def test_format_wait_progress_names_stalled_killed_and_timed_out_servers():
    reports = [
        report("a", "stalled", "capturing_cuda_graph", killed_pids=[41, 42]),
        report("b", "timeout", "warming_up"),
        report("c", "waiting", "ready"),
        report("d", "crashed", "initializing", killed_pids=[43]),  # its main process outlived the crash
    ]
    assert format_wait_progress("h", reports) == (
        "h: 0/4 ready | a stalled in capturing cuda graph (killed) | b timed out in warming up | c up, health pending"
        " | d crashed in initializing (killed)")


def test_wait_progress_says_how_long_a_server_has_been_silent():
    reports = [report("gpu3", "waiting", "loading_weights", {"weights": {"done": 12, "total": 64}}, silent_s=41.2),
               report("gpu4", "waiting", "loading_weights", {"weights": {"done": 30, "total": 64}}, silent_s=2.0)]
    assert format_wait_progress("ct200", reports) == (
        "ct200: 0/2 ready | gpu3 loading weights 12/64, silent for 41 s | gpu4 loading weights 30/64")


def test_wait_progress_names_a_replaced_server_and_a_draft_model_in_a_snapshot():
    reports = [report("a", "replaced", "launching"),
               report("b", "starting", "loading_weights", {"weights": {"done": 1, "total": 2}}, component="draft",
                      silent_s=30.0)]
    assert format_wait_progress("h", reports) == (
        "h: 0/2 ready | a replaced by another run | b loading weights (draft model) 1/2, silent for 30 s")


def step(name, step, seconds=0.0, action="relaunched", **extra):
    return dict({"name": name, "step": step, "seconds": seconds, "action": action, "processes_left": 0,
                 "signal": None, "gpu_used_mib": {}, "port_holders": [], "error": None}, **extra)


def test_server_progress_names_who_is_draining_killed_waiting_for_memory_or_down():
    progress = {"elapsed": 31.4, "servers": [
        step("gpu0", "done"),
        step("gpu1", "stopping", 12.3, processes_left=3, signal="SIGTERM"),
        step("gpu5", "draining", 8.2, requests_left=12),
        step("gpu6", "draining", 0.1, requests_left=None),
        step("gpu7", "draining", 60.0, requests_left=3),
        step("gpu2", "killing", 0.5, processes_left=1, signal="SIGKILL"),
        step("gpu3", "verifying", 8.0, gpu_used_mib={"3": 40000}),
        step("gpu4", "failed", 60.0, error="gpu4 is down: ..."),
    ], "events": [
        {"server": "gpu0", "event": "stopped", "at_s": 1.0, "stop_s": 1.0},
        {"server": "gpu2", "event": "sigkill", "at_s": 30.0, "after_s": 30.0, "processes": 1,
         "ignored_sigterm": True},
        {"server": "gpu4", "event": "failed", "at_s": 31.0, "error": "gpu4 is down: GPU 4 memory not freed"},
        {"server": "gpu0", "event": "drain_end", "at_s": 0.5, "outcome": "drained", "seconds": 0.5,
         "requests_left": 0, "error": None},
        {"server": "gpu7", "event": "drain_end", "at_s": 60.0, "outcome": "timed_out", "seconds": 60.0,
         "requests_left": 3, "error": None},
    ]}
    assert format_server_progress("ct200", progress).split("\n") == [
        "ct200: gpu2 SIGKILL sent 30 s after SIGTERM: it ignored SIGTERM for the whole stop_timeout (1 processes)",
        "ct200: gpu4 FAILED: gpu4 is down: GPU 4 memory not freed",
        ("ct200: gpu7 drain_timeout reached after 60 s with 3 requests in flight: stopping it anyway (those requests "
         "fail)"),
        ("ct200: 1/8 stopped or launched after 31 s"
         " | gpu1 stopping 12 s after SIGTERM (3 processes left)"
         " | gpu5 draining, 12 requests left (8 s)"
         " | gpu6 draining (0 s)"
         " | gpu7 draining, 3 requests left (60 s)"
         " | gpu2 SIGKILL sent 0 s ago (1 processes left)"
         " | gpu3 waiting 8 s for GPU memory to be freed (GPU 3 40000 MiB)"),
    ]


def test_server_progress_is_silent_without_a_snapshot():
    assert format_server_progress("ct200", None) is None


def test_wait_progress_names_the_rank_of_a_group_node_and_says_it_waits_in_the_rendezvous():
    rank1 = report("qwen-tp8", "waiting", "initializing", node_rank=1,
                   last_log_line="[2026-12-01 10:00:00 TP4] Init torch distributed begin.")
    rank0 = report("qwen-tp8", "waiting", "loading_weights", {"weights": {"done": 12, "total": 64}}, node_rank=0)
    assert format_wait_progress("gpu-ct402", [rank1]) == \
        "gpu-ct402: 0/1 ready | qwen-tp8 rank1 init distributed (waiting for rank 0)"
    assert format_wait_progress("gpu-ct401", [rank0]) == "gpu-ct401: 0/1 ready | qwen-tp8 rank0 loading weights 12/64"
    alone = dict(rank1, node_rank=0)
    assert format_wait_progress("h", [alone]) == "h: 0/1 ready | qwen-tp8 rank0 init distributed (waiting for the " \
                                                 "other nodes)"


def test_wait_progress_names_a_ready_server_whose_last_check_has_no_answer_yet():
    reports = [report("gpu0", "ready", "ready", confirming_s=6.4), report("gpu1", "ready", "ready")]
    assert format_wait_progress("ct200", reports) == "ct200: 2/2 ready | gpu0 not answering the last check for 6 s"
