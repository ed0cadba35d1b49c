"""run_log.crash_of_current_run: the planner's question of a server whose main process still runs."""

import os
import time

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.run_log import (
    crash_of_current_run,
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
