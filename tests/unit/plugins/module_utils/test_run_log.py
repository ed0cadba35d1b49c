"""The log of the current run (run_log.py): run boundaries in unrotated logs, and the crash a running server's
log announces (the planner's question)."""

import os
import time

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.run_log import (
    RunLog,
    crash_of_current_run,
    line_epoch,
)

LOGS = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "logs")
FAILED_REQUEST = (
    "[2026-02-14 09:14:00] Error in request handler\n"
    "Traceback (most recent call last):\n"
    '  File "/sglang/srt/entrypoints/http_server.py", line 412, in generate_request\n'
    "ValueError: The input (9000 tokens) is longer than the model's context length (8192 tokens).\n"
)


def fixture(name):
    with open(os.path.join(LOGS, name)) as handle:
        return handle.read()


def epoch(stamp):
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))


def stamp(epoch):
    return time.strftime("[%Y-%m-%d %H:%M:%S]", time.localtime(epoch))


def test_line_epoch_reads_sglang_timestamps_in_local_time():
    now = int(time.time())
    assert line_epoch(stamp(now) + " Load weight begin. avail mem=139.00 GB") == now
    assert line_epoch(stamp(now)[:-1] + " TP3] Load weight begin.") == now
    assert line_epoch("Loading safetensors checkpoint shards:  50% Completed | 4/8") is None


def test_run_log_ignores_the_previous_run_of_an_unrotated_log(tmp_path):
    launched_at = time.time()
    old, new = launched_at - 3600, launched_at + 1
    log = tmp_path / "server.log"
    log.write_text("\n".join([
        stamp(old) + " Load weight begin. avail mem=139.00 GB",
        stamp(old) + " Scheduler hit an exception: Traceback (most recent call last):",
        '  File "model_runner.py", line 1, in load_model',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        stamp(new) + " server_args=ServerArgs(model_path='/models/qwen', tp_size=1)",
        stamp(new) + " Load weight begin. avail mem=139.00 GB",
        "Loading safetensors checkpoint shards:  50% Completed | 4/8 [00:02<00:02,  1.77it/s]",
        "",
    ]))

    run = RunLog(str(log), launched_at)
    run.read()

    assert run.state.phase == "loading_weights"
    assert run.state.error is None
    assert run.state.progress["weights"] == {"done": 4, "total": 8}
    assert run.activity_lines == 3
    assert run.tail[0].endswith("server_args=ServerArgs(model_path='/models/qwen', tp_size=1)")


def test_run_log_without_launch_time_reads_everything_and_health_checks_are_not_activity(tmp_path):
    log = tmp_path / "server.log"
    now = time.time()
    log.write_text("\n".join([
        stamp(now) + " Capture cuda graph begin. This can take up to several minutes. avail mem=10.77 GB",
        stamp(now) + ' INFO:     127.0.0.1:50386 - "GET /health_generate HTTP/1.1" 503 Service Unavailable',
        stamp(now) + " Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
        "",
    ]))

    run = RunLog(str(log))
    run.read()

    assert run.state.phase == "capturing_cuda_graph"
    assert run.activity_lines == 1
    assert "Capture cuda graph begin" in run.last_activity_line
    assert len(run.tail) == 3


@pytest.fixture
def log(tmp_path):
    def write(text):
        path = tmp_path / "gpu0.log"
        path.write_text(text)
        return str(path)
    return write


def test_a_crash_sglang_announced_after_the_launch_is_named_by_its_error(log):
    path = log(fixture("crash_nccl_init.log"))
    assert crash_of_current_run(path, epoch("2025-08-09 03:14:40")).startswith("RuntimeError: NCCL error")


def test_the_crash_of_a_run_before_the_launch_is_not_this_one(log):
    path = log(fixture("crash_nccl_init.log"))
    assert crash_of_current_run(path, epoch("2025-08-09 03:20:00")) is None


def test_a_failed_request_after_startup_is_no_crash(log):
    path = log(fixture("classic_tp1_mamba.log") + FAILED_REQUEST)
    assert crash_of_current_run(path, None) is None


def test_a_traceback_in_a_log_read_without_its_startup_is_no_crash_unless_announced(log):
    # Truncated by logrotate's copytruncate, or beyond the head and tail a long log is read by.
    assert crash_of_current_run(log(FAILED_REQUEST), None) is None
    announced = FAILED_REQUEST + ("[2026-02-14 09:14:01] Received sigquit from a child process. It usually means the "
                                  "child failed.\n")
    assert crash_of_current_run(log(announced), None).startswith("ValueError: The input")


def test_a_key_in_the_error_is_hidden(log):
    path = log("[2026-02-14 09:14:00] Load weight begin.\nTraceback (most recent call last):\n"
               "RuntimeError: bad header Authorization: Bearer sk-live-123456\n"
               "[2026-02-14 09:14:01] Received sigquit from a child process. It usually means the child failed.\n")
    crash = crash_of_current_run(path, None, secrets=["sk-live-123456"])
    assert crash.startswith("RuntimeError: bad header") and "sk-live-123456" not in crash


def test_no_log_no_crash(tmp_path):
    assert crash_of_current_run(None, None) is None
    assert crash_of_current_run(str(tmp_path / "missing.log"), None) is None
