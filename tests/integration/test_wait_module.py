"""gpuops.sglang.wait through real ansible-playbook runs against simulated SGLang servers.

Every test launches its servers with gpuops.sglang.server and waits for them with gpuops.sglang.wait
in the same playbook, as the relaunch role does.
"""

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import procfs
from ansible_collections.gpuops.sglang.plugins.module_utils.server_processes import (
    ServerProcesses,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    read_state,
)

from .conftest import PYTHON, SGLANG_SIM

PROGRESS_LINE = re.compile(r"^localhost: \d+/\d+ ready\b.*$", re.MULTILINE)


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            return answer.status
    except (urllib.error.URLError, OSError):
        return None


def add_flags(server, *flags):
    """Append SGLang flags to the exec line of a launch script written by make_server."""
    with open(server["launch_script"]) as handle:
        script = handle.read()
    with open(server["launch_script"], "w") as handle:
        handle.write(script.rstrip("\n") + " " + " ".join(flags) + "\n")
    return server


def launch_and_wait(ansible, host_args, servers, check=False, **wait_args):
    """Run server (restarted) then wait in one playbook; return (wait result, progress lines printed)."""
    tasks = [
        {"name": "launch", "gpuops.sglang.server": dict(host_args, servers=servers, state="restarted")},
        {"name": "wait", "ignore_errors": True, "gpuops.sglang.wait": dict(
            {"servers": [{"name": server["name"]} for server in servers], "state_dir": host_args["state_dir"],
             "progress_interval": 0.5, "stall_timeout": 0, "timeout": 60}, **wait_args)},
    ]
    run = ansible.start_playbook(tasks)
    return finish(run, check)


def task_results(run):
    """(results of every task, progress lines, stdout); the progress lines come before the JSON report."""
    stdout, _stderr = run.process.communicate(timeout=120)
    report = json.loads(stdout[0 if stdout.startswith("{") else stdout.index("\n{") + 1:])
    results = [task["hosts"]["localhost"] for play in report["plays"] for task in play["tasks"]]
    return results, PROGRESS_LINE.findall(stdout), stdout


def finish(run, check=False):
    """The wait task's result and the progress lines printed while it ran."""
    results, progress, _stdout = task_results(run)
    assert check or not results[0].get("failed"), results[0].get("msg")
    return results[-1], progress


def by_name(result):
    return {server["name"]: server for server in result["servers"]}


def test_ready_servers_report_configured_facts_and_progress_lines(ansible, host_args, make_server):
    # Startups of 10-15 s: on a loaded machine (make test's lanes share 2 cores) the wait's first slice still comes
    # while they start, so the progress lines of a start are there to check.
    servers = [make_server("gpu0", [0], time_scale=2), make_server("gpu1-2", [1, 2], time_scale=2)]

    result, progress = launch_and_wait(ansible, host_args, servers)

    assert not result.get("failed"), result["msg"]
    assert result["ready"] == ["gpu0", "gpu1-2"] and result["not_ready"] == []
    for server in result["servers"]:
        assert server["status"] == "ready" and server["phase"] == "ready"
        assert server["facts_source"] == "get_server_info"
        facts = server["facts"]
        assert facts["max_total_num_tokens"] > 0 and facts["max_running_requests"] > 0
        assert facts["context_len"] > 0 and facts["chunked_prefill_size"] > 0 and facts["available_gpu_mem"] > 0
        assert server["seconds_to_ready"] > 0
        phases = [entry["phase"] for entry in server["timeline"]]
        assert phases[0] == "initializing" and phases[-1] == "ready"
        assert "loading_weights" in phases and "capturing_cuda_graph" in phases
        assert server["progress"]["weights"] == {"done": 2, "total": 2}
    # Live progress: a line per slice while starting, the last one when all are ready.
    assert len(progress) >= 2, progress
    assert any("gpu0 " in line for line in progress[:-1]), progress
    assert progress[-1] == "localhost: 2/2 ready"


@pytest.fixture
def draft_model(tmp_path):
    path = str(tmp_path / "draft")
    subprocess.run([PYTHON, SGLANG_SIM, "--make-model", path, "--arch", "LlamaForCausalLMEagle3", "--shards", "1",
                    "--weights-gib", "0.5"], check=True)
    return path


def watch_deaths(state_dir, names):
    """Record when each server's recorded process dies (polled every 10 ms in a thread)."""
    died = {}

    def watch():
        deadline = time.time() + 60
        while len(died) < len(names) and time.time() < deadline:
            for name in set(names) - set(died):
                state = read_state(state_dir, name)
                if state and not procfs.pid_alive(state["pid"], state["pid_starttime"]):
                    died[name] = time.time()
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return died


def test_startup_faults_fail_fast_with_summary_and_traceback_while_others_get_ready(
        ansible, host_args, make_server, draft_model, wait_until):
    servers = [
        make_server("healthy", [0], time_scale=0.3),
        add_flags(make_server("draft", [1], fault="draft_crash"),
                  "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft_model),
        make_server("oom", [2], fault="oom_load"),
        make_server("nccl", [3], fault="nccl_error"),
        make_server("stuck", [4], fault="nccl_error,stuck_after_crash"),
    ]

    result, progress = launch_and_wait(ansible, host_args, servers, stall_timeout=30, kill_stalled=True)

    assert result["failed"]
    assert result["ready"] == ["healthy"]
    reports = by_name(result)
    assert reports["healthy"]["status"] == "ready"
    expected = {
        # The draft model loads after the target's graph capture: the crash is in loading (the draft's) weights.
        "draft": ("loading_weights", "AssertionError: Attempted to load weight (torch.Size([4096, 12288]))"),
        "oom": ("loading_weights", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"),
        "nccl": ("initializing", "RuntimeError: NCCL error: unhandled system error"),
        "stuck": ("initializing", "RuntimeError: NCCL error: unhandled system error"),
    }
    for name, (phase, summary) in expected.items():
        report = reports[name]
        assert report["status"] == "crashed", report["msg"]
        assert report["phase"] == phase
        assert report["error"]["summary"].startswith(summary)
        assert report["error"]["traceback"].startswith("Traceback (most recent call last):")
        assert report["error"]["summary"] in report["error"]["traceback"]
        assert any(summary in line for line in report["log_tail"])
        assert f"{name} crashed in {phase}" in result["msg"]
        assert summary in result["msg"]
    assert "crashed in" in progress[-1]
    # Its main process did not kill its tree after the crash (SGLang's does, at once): stuck, holding its GPU, and
    # a later relaunch would take it for running - killed.
    stuck = reports["stuck"]
    assert stuck["killed_pids"] and stuck["pid"] in stuck["killed_pids"], stuck["msg"]
    assert f"; its main process {stuck['pid']} outlived the crash; killed pids " in stuck["msg"]
    assert result["changed"]
    owner = ServerProcesses(host_args["state_dir"])
    wait_until(lambda: not owner.of_server("stuck")[0], what="the stuck server's processes gone")


def test_crash_detection_delay_is_measured(ansible, host_args, make_server):
    died = watch_deaths(host_args["state_dir"], ["nccl"])

    result, _progress = launch_and_wait(ansible, host_args, [make_server("nccl", [0], fault="nccl_error")],
                                        timeout=600, progress_interval=10)
    finished = time.time()

    assert by_name(result)["nccl"]["status"] == "crashed"
    assert "nccl" in died
    # Printed, not asserted: from the process's death to the end of ansible-playbook (detection, the
    # module's return, the report and ansible's own shutdown).
    print(f"MEASURED: crash detected and reported {finished - died['nccl']:.2f} s after the process died")


@pytest.mark.parametrize("kill_stalled", [False, True])
def test_hung_servers_are_reported_stalled_naming_the_phase(ansible, host_args, make_server, wait_until, kill_stalled):
    servers = [make_server("weights", [0], fault="hang_after_weights"),
               make_server("graph", [1], fault="hang_cuda_graph")]

    result, progress = launch_and_wait(ansible, host_args, servers, stall_timeout=1.5, kill_stalled=kill_stalled)
    owner = ServerProcesses(host_args["state_dir"])

    assert result["failed"] and result["not_ready"] == ["weights", "graph"]
    reports = by_name(result)
    for name, phase, last_line in (("weights", "loading_weights", "Loading safetensors checkpoint shards: 100%"),
                                   ("graph", "capturing_cuda_graph", "Capturing batches")):
        report = reports[name]
        assert report["status"] == "stalled"
        assert report["phase"] == phase
        assert f"{name} stalled in {phase}: no log output for" in report["msg"]
        assert last_line in report["msg"]
    assert "stalled in" in progress[-1]
    assert result["changed"] is kill_stalled
    for name in ("weights", "graph"):
        if kill_stalled:
            assert reports[name]["killed_pids"]
            wait_until(lambda name=name: not owner.of_server(name)[0], what=f"{name} processes gone")
        else:
            assert reports[name]["killed_pids"] == [] and owner.of_server(name)[0]


def test_a_ready_server_frozen_before_the_end_of_the_wait_is_said_while_its_last_check_waits(
        ansible, host_args, make_server):
    """The wait looks at every ready server once more at its end; one that froze since (SIGSTOP here: a hung driver
    call, a debugger) answers nothing until probe_timeout. The wait says so slice by slice instead of going silent,
    and its silence is a slow answer, not a crash."""
    servers = [make_server("fast", [0], time_scale=0.05), make_server("slow", [1], time_scale=4)]
    frozen = {}

    def freeze_fast_once_ready():
        deadline = time.time() + 60
        while time.time() < deadline:
            state = read_state(host_args["state_dir"], "fast")
            if state and http_status(f"http://127.0.0.1:{servers[0]['port']}/health") == 200:
                time.sleep(5)  # the wait (a health probe a second) has seen it ready, on a loaded machine too
                os.kill(state["pid"], signal.SIGSTOP)
                frozen["pid"] = state["pid"]
                return
            time.sleep(0.1)

    thread = threading.Thread(target=freeze_fast_once_ready, daemon=True)
    thread.start()
    try:
        # Each slice is a module call of its own (seconds apart on a loaded machine): room for a few.
        result, progress = launch_and_wait(ansible, host_args, servers, probe_timeout=15)
    finally:
        thread.join(timeout=60)
        if "pid" in frozen:
            os.kill(frozen["pid"], signal.SIGCONT)
    assert "pid" in frozen, "fast was frozen"
    assert result["ready"] == ["fast", "slow"], result["msg"]
    waiting = [line for line in progress if "fast not answering the last check for " in line]
    assert len(waiting) >= 2, progress
    assert progress[-1] == "localhost: 2/2 ready"


def test_timeout_reports_the_phase_reached(ansible, host_args, make_server):
    servers = [make_server("slow", [0], time_scale=20)]

    result, _progress = launch_and_wait(ansible, host_args, servers, timeout=1.5)

    report = by_name(result)["slow"]
    assert result["failed"]
    assert report["status"] == "timeout"
    assert report["phase"] in ("initializing", "loading_weights")
    assert report["msg"].startswith("slow not ready after 1.5 s, in ")
    assert report["health"]["status"] is None  # connection refused: the port opens after the schedulers


def test_api_key_reaches_get_server_info_and_stays_hidden(ansible, host_args, make_server):
    servers = [add_flags(make_server("secured", [0]), "--api-key", "s3cret-key")]
    tasks_args = {"servers": [{"name": "secured"}], "state_dir": host_args["state_dir"], "progress_interval": 0.5}
    run = ansible.start_playbook([
        {"name": "launch", "gpuops.sglang.server": dict(host_args, servers=servers, state="restarted")},
        {"name": "wrong key", "gpuops.sglang.wait": dict(tasks_args, api_key="wrong")},
        {"name": "right key", "gpuops.sglang.wait": dict(tasks_args, api_key="s3cret-key")},
    ])
    (_launch, wrong, right), _progress, stdout = task_results(run)

    # /health_generate needs no key, so both are ready; only the right key reads /get_server_info.
    assert by_name(right)["secured"]["facts_source"] == "get_server_info"
    assert by_name(wrong)["secured"]["facts_source"] == "log"
    assert "401" in by_name(wrong)["secured"]["server_info_error"]
    assert by_name(wrong)["secured"]["facts"]["max_total_num_tokens"] == \
        by_name(right)["secured"]["facts"]["max_total_num_tokens"]
    assert "s3cret-key" not in stdout


def test_check_mode_takes_a_snapshot_without_failing(ansible, host_args, make_server):
    servers = [make_server("starting", [0], time_scale=20)]
    ansible.module("gpuops.sglang.server", dict(host_args, servers=servers, state="restarted"))

    run = ansible.start_module("gpuops.sglang.wait", {"servers": [{"name": "starting"}],
                                                      "state_dir": host_args["state_dir"], "timeout": 600}, check=True)
    result, progress = finish(run, check=True)

    assert not result.get("failed")
    assert result["not_ready"] == ["starting"]
    assert by_name(result)["starting"]["status"] == "starting"
    assert progress == [progress[0]] and progress[0].startswith("localhost: 0/1 ready | starting ")
