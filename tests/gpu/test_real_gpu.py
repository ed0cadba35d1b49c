"""gpuops.sglang's kill -> verify GPU memory freed path against the real NVIDIA driver.

Run on a machine with an NVIDIA GPU and torch (skipped elsewhere): `pytest tests/gpu -v -s`.
Timings are printed, never asserted.
"""

import os
import signal
import subprocess
import sys
import time

from .conftest import CUDA_HOLDER, gpu_used_mib, run_module, wait_for

HOLD_GIB = 20
HOLD_MIB = HOLD_GIB * 1024


def save_nvidia_smi_outputs(directory, label):
    """Keep what the real nvidia-smi printed for the queries the modules make."""
    queries = {
        "query-gpu": ["--query-gpu=index,uuid,name,memory.used,memory.total,memory.free",
                      "--format=csv,noheader,nounits"],
        "query-gpu-header": ["--query-gpu=index,uuid,name,memory.used,memory.total,memory.free", "--format=csv"],
        "query-compute-apps": ["--query-compute-apps=pid,gpu_uuid,process_name,used_memory",
                               "--format=csv,noheader,nounits"],
        "plain": [],
    }
    os.makedirs(directory, exist_ok=True)
    for name, args in queries.items():
        out = subprocess.run(["nvidia-smi", *args], check=False, capture_output=True, text=True).stdout
        with open(os.path.join(directory, f"{label}-{name}.txt"), "w") as handle:
            handle.write(out)


def test_marked_server_found_then_stopped_and_memory_verified(cuda_server, baseline_mib, fixtures_out):
    server = cuda_server("gpu-holder", gib=HOLD_GIB)
    started = run_module("gpuops.sglang.server", server.module_args("started"))
    assert not started.get("failed"), started
    pid = started["servers"][0]["pid"]
    wait_for(lambda: "holding" in server.log(), 120, "the CUDA server to allocate its memory")

    info = run_module("gpuops.sglang.gpu_info", {})
    assert not info.get("failed"), info
    gpu0 = info["gpus"][0]
    smi_used = gpu_used_mib()
    print(f"\ngpu_info: GPU 0 {gpu0['memory_used_mib']} MiB used; nvidia-smi now {smi_used} MiB")
    assert gpu0["memory_used_mib"] >= HOLD_MIB
    assert abs(gpu0["memory_used_mib"] - smi_used) < 1024
    holders = {proc["pid"]: proc for proc in gpu0["processes"]}
    assert pid in holders, f"the server (pid {pid}) is not among the holders found through /proc: {holders}"
    assert holders[pid]["server"] == "gpu-holder"
    if fixtures_out:
        save_nvidia_smi_outputs(fixtures_out, "busy")

    stopped = run_module("gpuops.sglang.server", server.module_args("stopped"))
    assert not stopped.get("failed"), stopped
    result = stopped["servers"][0]
    assert pid in result["killed_pids"]
    assert result["gpu_memory_after_mib"]["0"] <= 1024
    print(f"stop: {result['killed']} timings {result['timings']} host timings {stopped['timings']}")
    assert gpu_used_mib() <= baseline_mib + 16
    if fixtures_out:
        save_nvidia_smi_outputs(fixtures_out, "idle")


def test_release_time_after_sigkill(cuda_server, baseline_mib):
    """How long the real driver takes to free memory after a SIGKILL (printed, not asserted)."""
    server = cuda_server("gpu-release", gib=HOLD_GIB)
    started = run_module("gpuops.sglang.server", server.module_args("started"))
    assert not started.get("failed"), started
    wait_for(lambda: "holding" in server.log(), 120, "the CUDA server to allocate its memory")
    os.kill(started["servers"][0]["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    samples = []
    while time.monotonic() - killed_at < 30:
        used = gpu_used_mib()
        samples.append((round(time.monotonic() - killed_at, 3), used))
        if used <= baseline_mib + 16:
            break
        time.sleep(0.05)
    print(f"\nmemory.used after SIGKILL (s, MiB): {samples[:5]} ... {samples[-1]} ({len(samples)} samples)")
    assert samples[-1][1] <= baseline_mib + 16


def test_orphan_found_by_marker_killed_and_memory_verified(cuda_server, baseline_mib):
    server = cuda_server("gpu-orphan", gib=HOLD_GIB, orphan_child=True)
    started = run_module("gpuops.sglang.server", server.module_args("started"))
    assert not started.get("failed"), started
    parent = started["servers"][0]["pid"]
    wait_for(lambda: server.log().count("holding") >= 2, 120, "parent and child to allocate")
    child = int(server.log().split("started child pid=")[1].split()[0])
    os.kill(parent, signal.SIGKILL)
    time.sleep(1)
    assert os.path.exists(f"/proc/{child}"), "the orphan died with its parent"
    assert gpu_used_mib() >= HOLD_MIB, "the orphan should still hold its memory"

    stopped = run_module("gpuops.sglang.server", server.module_args("stopped"))
    assert not stopped.get("failed"), stopped
    result = stopped["servers"][0]
    print(f"\norphan stop: {result['killed']} timings {result['timings']}")
    assert child in result["killed_pids"]
    assert gpu_used_mib() <= baseline_mib + 16


def test_foreign_holder_refused_without_force_killed_with_force(cuda_server, baseline_mib, cleanup_pids, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "GPUOPS_SGLANG_SERVER"}
    with open(tmp_path / "foreign.log", "w") as foreign_log:
        foreign = subprocess.Popen([sys.executable, CUDA_HOLDER, "--gib", "10"], env=env,
                                   stdout=foreign_log, stderr=subprocess.STDOUT, start_new_session=True)
    cleanup_pids.append(foreign.pid)
    wait_for(lambda: "holding" in (tmp_path / "foreign.log").read_text(), 120, "the foreign process to allocate")
    server = cuda_server("gpu-wants-0", gib=1)

    refused = run_module("gpuops.sglang.server", server.module_args("started"))
    assert refused.get("failed"), refused
    assert str(foreign.pid) in refused["msg"], refused["msg"]
    assert foreign.poll() is None, "a foreign process was killed without force"
    print(f"\nrefused: {refused['msg']}")

    forced = run_module("gpuops.sglang.server", server.module_args("started", force_kill_gpu_holders=True))
    assert not forced.get("failed"), forced
    assert foreign.pid in [proc["pid"] for proc in forced["foreign_killed"]]
    foreign.wait(timeout=30)
    print(f"forced: foreign_killed {forced['foreign_killed']} timings {forced['timings']}")

    stopped = run_module("gpuops.sglang.server", server.module_args("stopped"))
    assert not stopped.get("failed"), stopped
    assert gpu_used_mib() <= baseline_mib + 16
