"""The log of the current run (run_log.py): run boundaries in unrotated logs."""

import time

from ansible_collections.gpuops.sglang.plugins.module_utils.run_log import (
    RunLog,
    line_epoch,
)


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
