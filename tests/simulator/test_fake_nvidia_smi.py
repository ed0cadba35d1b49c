"""The fake nvidia-smi against real H200 captures, and the fake GPU memory accounting."""

import os
import re
import signal
import subprocess
import sys

import fakegpu
import pytest

from .conftest import FAKEGPU_SCRIPT, SIM_DIR, wait_for

FIXTURES = os.path.join(SIM_DIR, "fixtures")
REAL_UUID = "GPU-040846e7-3418-8634-015a-4c7a97c15369"


def capture_sections(name):
    """The '## title' sections of a capture file, as {title: text}."""
    with open(os.path.join(FIXTURES, name)) as handle:
        parts = re.split(r"^## (.*)\n", handle.read(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def nvidia_smi(state_dir, *args):
    result = subprocess.run([os.path.join(state_dir, "bin", "nvidia-smi"), *args],
                            capture_output=True, text=True, check=False)
    return result.returncode, result.stdout


def nvidia_smi_output(state_dir, *args):
    """stdout of a run that must succeed."""
    rc, out = nvidia_smi(state_dir, *args)
    assert rc == 0, out
    return out


def mask_table(text):
    """Blank what differs between two runs of nvidia-smi: the clock, temperature and power."""
    lines = text.splitlines()
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}       ", lines[0])
    lines[0] = "<time>"
    return "\n".join(re.sub(r"\| N/A   \d\dC    P0 +\d+W /", "| N/A   xxC    P0   xxxW /", line) for line in lines)


@pytest.fixture
def holder():
    """A live process to own allocations (the real capture's holder was `python3 -`, pid 430)."""
    yield from _process_named("python3")


@pytest.fixture
def scheduler():
    """A live process whose argv[0] reads like a retitled SGLang scheduler."""
    yield from _process_named("sglang::scheduler")


def _process_named(argv0):
    # NVML names a compute app by argv[0] as the process shows it, so the tests choose it.
    process = subprocess.Popen([argv0, "-c", "import time; time.sleep(60)"], executable=sys.executable)
    yield process
    process.kill()
    process.wait()


def single_gpu(tmp_path, **options):
    state_dir = str(tmp_path / "gpu")
    fakegpu.init(state_dir, count=1, **options)
    uuid = fakegpu.load_config(state_dir)["gpus"][0]["uuid"]
    return state_dir, uuid


def test_idle_outputs_match_real_capture(tmp_path):
    state_dir, uuid = single_gpu(tmp_path)
    idle = capture_sections("idle.txt")

    rc, table = nvidia_smi(state_dir)
    assert rc == 0
    assert mask_table(table) == mask_table(idle["nvidia-smi (plain)"])

    rc, out = nvidia_smi(state_dir, "--query-gpu=index,uuid,name,memory.used,memory.total,memory.free,utilization.gpu",
                         "--format=csv,noheader,nounits")
    assert out.replace(uuid, REAL_UUID) == idle["query-gpu idle"]

    rc, out = nvidia_smi(state_dir, "--query-gpu=index,uuid,name,memory.used,memory.total", "--format=csv")
    assert out.replace(uuid, REAL_UUID) == idle["query-gpu idle with header"]

    rc, out = nvidia_smi(state_dir, "--query-compute-apps=pid,gpu_uuid,process_name,used_memory",
                         "--format=csv,noheader,nounits")
    assert (rc, out) == (0, idle["query-compute-apps idle"])


def test_busy_outputs_match_real_capture(tmp_path, holder):
    # NVML's reserved memory moved 615 -> 614 MiB between the idle and busy captures.
    state_dir, uuid = single_gpu(tmp_path, reserved_mib=614)
    fakegpu.allocate(state_dir, holder.pid, 0, 21099, "python3")
    busy = capture_sections("busy.txt")

    def real(text):
        return text.replace(uuid, REAL_UUID).replace(str(holder.pid), "430")

    out = nvidia_smi_output(state_dir, "--query-gpu=index,uuid,name,memory.used,memory.total,memory.free",
                            "--format=csv,noheader,nounits")
    assert real(out) == busy["query-gpu busy"]
    out = nvidia_smi_output(state_dir, "--query-compute-apps=pid,gpu_uuid,process_name,used_memory",
                            "--format=csv,noheader,nounits")
    assert real(out) == busy["query-compute-apps busy"]
    table = nvidia_smi_output(state_dir)
    expected = busy["nvidia-smi plain busy"]
    # The pid column is right-aligned: keep the width when substituting.
    assert mask_table(table).replace(f"{holder.pid:>14}", f"{430:>14}") == mask_table(expected)


def test_query_units_and_headers(tmp_path, scheduler):
    state_dir, _uuid = single_gpu(tmp_path)
    fakegpu.allocate(state_dir, scheduler.pid, 0, 1000, "recorded-name")
    out = nvidia_smi_output(state_dir, "--query-gpu=memory.used,utilization.gpu,pci.bus_id,driver_version,temperature.gpu",
                            "--format=csv")
    assert out.splitlines() == [
        "memory.used [MiB], utilization.gpu [%], pci.bus_id, driver_version, temperature.gpu",
        "1000 MiB, 0 %, 00000000:00:06.0, 580.159.04, 35",
    ]
    out = nvidia_smi_output(state_dir, "--query-gpu=memory.used,memory.free", "--format=csv,nounits")
    assert out.splitlines() == ["memory.used [MiB], memory.free [MiB]", "1000, 142156"]
    out = nvidia_smi_output(state_dir, "--query-compute-apps=pid,process_name,used_gpu_memory,gpu_name", "--format=csv")
    assert out.splitlines() == ["pid, process_name, used_gpu_memory [MiB], gpu_name",
                                f"{scheduler.pid}, sglang::scheduler, 991 MiB, NVIDIA H200"]


def test_selection_listing_and_errors(tmp_path):
    state_dir = str(tmp_path / "gpu")
    fakegpu.init(state_dir, count=3)
    uuids = [gpu["uuid"] for gpu in fakegpu.load_config(state_dir)["gpus"]]

    rc, out = nvidia_smi(state_dir, "-L")
    assert out.splitlines() == [f"GPU {i}: NVIDIA H200 (UUID: {uuids[i]})" for i in range(3)]
    rc, out = nvidia_smi(state_dir, f"--id=2,{uuids[0]}", "--query-gpu=index", "--format=csv,noheader")
    assert (rc, out) == (0, "2\n0\n")
    rc, out = nvidia_smi(state_dir, "-i", "1", "--query-gpu=index,pci.bus_id", "--format=csv,noheader")
    assert (rc, out) == (0, "1, 00000000:00:07.0\n")

    assert nvidia_smi(state_dir, "-i", "7", "-L") == (6, "No devices were found\n")
    rc, out = nvidia_smi(state_dir, "--query-gpu=index,foo", "--format=csv")
    assert rc == 2 and out.startswith('Field "foo" is not a valid field to query.')
    # UUIDs are stable per state dir: init again gives the same ones
    fakegpu.init(state_dir, count=3)
    assert [gpu["uuid"] for gpu in fakegpu.load_config(state_dir)["gpus"]] == uuids


def test_driver_mismatch_fails_every_call(tmp_path):
    state_dir = str(tmp_path / "gpu")
    subprocess.run([sys.executable, FAKEGPU_SCRIPT, "init", state_dir, "--count", "2", "--fail", "driver_mismatch"],
                   check=True)
    for args in ([], ["-L"], ["--query-gpu=index", "--format=csv"]):
        rc, out = nvidia_smi(state_dir, *args)
        assert rc == 18
        assert out.splitlines()[0] == "Failed to initialize NVML: Driver/library version mismatch"
        assert out.splitlines()[1].startswith("NVML library version: ")


def test_hidden_compute_apps_still_show_memory(tmp_path, holder):
    state_dir, _uuid = single_gpu(tmp_path, hide_compute_apps=True)
    fakegpu.allocate(state_dir, holder.pid, 0, 5000, "python3")
    out = nvidia_smi_output(state_dir, "--query-compute-apps=pid,used_memory", "--format=csv")
    assert out == "pid, used_gpu_memory [MiB]\n"
    out = nvidia_smi_output(state_dir, "--query-gpu=memory.used", "--format=csv,noheader,nounits")
    assert out == "5000\n"
    assert "No running processes found" in nvidia_smi(state_dir)[1]


def test_memory_of_dead_process_is_released_after_delay(tmp_path):
    state_dir = str(tmp_path / "gpu")
    subprocess.run([sys.executable, FAKEGPU_SCRIPT, "init", state_dir, "--count", "2", "--release-delay", "0.5"],
                   check=True)
    # The holder allocates through the API and keeps the device file open, as a CUDA process does.
    code = (f"import sys, time; sys.path.insert(0, {SIM_DIR!r}); import fakegpu, os\n"
            f"dev = fakegpu.open_device({state_dir!r}, 1)\n"
            f"fakegpu.allocate({state_dir!r}, os.getpid(), 1, 4096, 'python3')\n"
            "print('ready', flush=True); time.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "ready\n"
        links = [os.readlink(f"/proc/{process.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{process.pid}/fd")]
        assert fakegpu.device_path(state_dir, 1) in links
        assert nvidia_smi(state_dir, "--query-gpu=memory.used", "--format=csv,noheader,nounits")[1] == "0\n4096\n"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    # First seen dead now: still counted (the driver tears contexts down asynchronously) ...
    assert nvidia_smi(state_dir, "--query-gpu=memory.used", "--format=csv,noheader,nounits")[1] == "0\n4096\n"
    assert nvidia_smi(state_dir, "--query-compute-apps=pid", "--format=csv,noheader")[1] == ""
    # ... and gone after the release delay, its allocation file removed.
    wait_for(lambda: nvidia_smi(state_dir, "--query-gpu=memory.used", "--format=csv,noheader,nounits")[1]
             == "0\n0\n", timeout=10, what="memory release")
    assert os.listdir(os.path.join(state_dir, "alloc")) == []


def test_init_is_idempotent_and_keeps_allocations(tmp_path, holder):
    state_dir, _uuid = single_gpu(tmp_path)
    fakegpu.allocate(state_dir, holder.pid, 0, 300, "python3")
    fakegpu.allocate(state_dir, holder.pid, 0, 200, "python3")  # pools only grow
    fakegpu.init(state_dir, count=1)
    assert nvidia_smi(state_dir, "--query-gpu=memory.used", "--format=csv,noheader,nounits")[1] == "500\n"


GPU_QUERY = ["--query-gpu=index,uuid,name,memory.used,memory.total,memory.free,pci.bus_id",
             "--format=csv,noheader,nounits"]


def set_fault_by_cli(state_dir, fault):
    subprocess.run([sys.executable, FAKEGPU_SCRIPT, "fault", state_dir, fault], check=True)


def test_fault_empty_and_truncated_output(tmp_path):
    state_dir, _uuid = single_gpu(tmp_path)
    healthy = nvidia_smi_output(state_dir, *GPU_QUERY)
    set_fault_by_cli(state_dir, "empty")
    assert nvidia_smi(state_dir, *GPU_QUERY) == (0, "")
    set_fault_by_cli(state_dir, "truncated")
    rc, out = nvidia_smi(state_dir, *GPU_QUERY)
    assert rc == 0 and not out.endswith("\n") and healthy.startswith(out) and len(out) < len(healthy) - 1
    set_fault_by_cli(state_dir, "none")
    assert nvidia_smi_output(state_dir, *GPU_QUERY) == healthy
    assert not os.path.exists(os.path.join(state_dir, "nvidia-smi-fault"))


def test_fault_mismatch_prints_the_real_message_and_exits_18(tmp_path):
    state_dir, _uuid = single_gpu(tmp_path)
    set_fault_by_cli(state_dir, "mismatch")
    rc, out = nvidia_smi(state_dir, *GPU_QUERY)
    assert rc == 18
    assert out == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.159\n"


def test_fault_hang_ignores_sigterm_and_dies_by_sigkill(tmp_path):
    state_dir, _uuid = single_gpu(tmp_path)
    fakegpu.set_fault(state_dir, "hang")
    process = subprocess.Popen([os.path.join(state_dir, "bin", "nvidia-smi"), *GPU_QUERY],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=1)
        process.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.5)
    finally:
        process.kill()
        assert process.wait(timeout=10) == -signal.SIGKILL
        process.stdout.close()
        process.stderr.close()


def test_unknown_fault_is_refused(tmp_path):
    state_dir, _uuid = single_gpu(tmp_path)
    with pytest.raises(ValueError, match="one of hang, empty, truncated, mismatch"):
        fakegpu.set_fault(state_dir, "slow")
    result = subprocess.run([sys.executable, FAKEGPU_SCRIPT, "fault", state_dir, "slow"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "invalid choice" in result.stderr
