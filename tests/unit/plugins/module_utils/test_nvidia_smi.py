"""nvidia-smi CSV parsing on real H200 captures, and the query helpers against the fake nvidia-smi."""

import os
import re
import subprocess
import sys

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.nvidia_smi import (
    COMPUTE_APP_FIELDS,
    DEFAULT_NVIDIA_SMI_TIMEOUT,
    GPU_FIELDS,
    NvidiaSmiError,
    bounded_runner,
    parse_csv,
    query_compute_apps,
    query_gpus,
)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "nvidia_smi")
FAKEGPU = os.path.join(os.path.dirname(__file__), "..", "..", "..", "simulator", "fakegpu.py")
H200_UUID = "GPU-040846e7-3418-8634-015a-4c7a97c15369"


def capture_section(filename, title):
    """The lines under ``## <title>`` in a capture file (captures are sections of raw output)."""
    with open(os.path.join(FIXTURES, filename)) as handle:
        text = handle.read()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    assert match, f"section {title!r} missing from {filename}"
    return match.group(1)


def fields(*queries):
    by_query = {field.query: field for field in GPU_FIELDS + COMPUTE_APP_FIELDS}
    return tuple(by_query[query] for query in queries)


# What the captures queried: GPU_FIELDS without pci.bus_id.
CAPTURE_FIELDS = tuple(field for field in GPU_FIELDS if field.query != "pci.bus_id")


def run(argv):
    process = subprocess.run(argv, capture_output=True, text=True, check=False)
    return process.returncode, process.stdout, process.stderr


def test_query_gpu_busy_capture():
    rows = parse_csv(capture_section("busy.txt", "query-gpu busy"), CAPTURE_FIELDS)
    assert rows == [{
        "index": 0, "uuid": H200_UUID, "name": "NVIDIA H200",
        "memory_used_mib": 21099, "memory_total_mib": 143771, "memory_free_mib": 122058,
    }]


def test_header_and_units_are_understood():
    text = capture_section("idle.txt", "query-gpu idle with header")
    assert text.startswith("index, uuid, name, memory.used [MiB]")
    rows = parse_csv(text, fields("index", "uuid", "name", "memory.used", "memory.total"))
    assert rows == [{"index": 0, "uuid": H200_UUID, "name": "NVIDIA H200",
                     "memory_used_mib": 0, "memory_total_mib": 143771}]


def test_column_count_mismatch_is_an_error_not_a_misparse():
    # The idle capture queried one more column than CAPTURE_FIELDS.
    with pytest.raises(NvidiaSmiError, match="expected 6 columns .* got 7"):
        parse_csv(capture_section("idle.txt", "query-gpu idle"), CAPTURE_FIELDS)


def test_compute_apps_capture():
    busy = capture_section("busy.txt", "query-compute-apps busy")
    rows = parse_csv(busy, fields("pid", "gpu_uuid", "process_name", "used_memory"))
    assert rows == [{"pid": 430, "gpu_uuid": H200_UUID, "process_name": "python3", "used_memory_mib": 21090}]
    assert parse_csv(capture_section("idle.txt", "query-compute-apps idle"), COMPUTE_APP_FIELDS) == []


def test_placeholders_become_none_and_free_text_keeps_commas():
    rows = parse_csv("7, GPU-x, [N/A], python3 -c print(1, 2)\n", COMPUTE_APP_FIELDS)
    assert rows == [{"pid": 7, "gpu_uuid": "GPU-x", "used_memory_mib": None, "process_name": "python3 -c print(1, 2)"}]


def test_garbage_value_names_the_field():
    with pytest.raises(NvidiaSmiError, match="'lots' for memory.used"):
        parse_csv("0, GPU-x, H200, lots, 1, 1\n", CAPTURE_FIELDS)


@pytest.fixture
def fake_gpus(tmp_path):
    def init(*extra):
        subprocess.run([sys.executable, FAKEGPU, "init", str(tmp_path), "--count", "4"] + list(extra), check=True)
        return str(tmp_path / "bin" / "nvidia-smi")
    return init


def test_query_gpus_through_fake_nvidia_smi(fake_gpus):
    nvidia_smi = fake_gpus()
    gpus = query_gpus(run, nvidia_smi)
    assert [gpu["index"] for gpu in gpus] == [0, 1, 2, 3]
    assert gpus[0]["memory_total_mib"] == 143771 and gpus[0]["memory_used_mib"] == 0
    assert [gpu["index"] for gpu in query_gpus(run, nvidia_smi, ids=[1, 3])] == [1, 3]
    assert query_compute_apps(run, nvidia_smi) == []


def test_driver_mismatch_is_explained(fake_gpus):
    nvidia_smi = fake_gpus("--fail", "driver_mismatch")
    with pytest.raises(NvidiaSmiError) as error:
        query_gpus(run, nvidia_smi)
    message = str(error.value)
    assert "Failed to initialize NVML: Driver/library version mismatch" in message
    assert "rc=18" in message and "must be exactly the host's version" in message


def test_missing_binary(tmp_path):
    missing = str(tmp_path / "nvidia-smi")
    with pytest.raises(NvidiaSmiError, match=f"nvidia-smi not found: {re.escape(missing)} is not an executable"):
        query_gpus(run, missing)
    with pytest.raises(NvidiaSmiError, match="no 'nvidia-smi-nowhere' in PATH"):
        query_gpus(run, "nvidia-smi-nowhere")


def set_fault(state_dir, fault):
    subprocess.run([sys.executable, FAKEGPU, "fault", state_dir, fault], check=True)


def test_bounded_runner_kills_a_hung_nvidia_smi_and_names_the_command(fake_gpus, tmp_path):
    nvidia_smi = fake_gpus()
    set_fault(str(tmp_path), "hang")
    with pytest.raises(NvidiaSmiError) as error:
        query_gpus(bounded_runner(1), nvidia_smi)
    assert str(error.value) == (
        f"{nvidia_smi} --query-gpu=index,uuid,name,memory.used,memory.total,memory.free,pci.bus_id "
        "--format=csv,noheader,nounits did not answer within 1 s (nvidia_smi_timeout); the driver may be hung: "
        "check `nvidia-smi` on the host")
    assert DEFAULT_NVIDIA_SMI_TIMEOUT == 30


def test_bounded_runner_returns_what_run_command_returns(fake_gpus, tmp_path):
    nvidia_smi = fake_gpus()
    assert query_gpus(bounded_runner(), nvidia_smi) == query_gpus(run, nvidia_smi)
    set_fault(str(tmp_path), "mismatch")
    with pytest.raises(NvidiaSmiError, match="(?s)rc=18.*Driver/library version mismatch.*must be exactly the host"):
        query_gpus(bounded_runner(), nvidia_smi)


@pytest.mark.parametrize("fault, message", [
    ("empty", "printed 0 GPU lines, expected one line per GPU; its output was empty or cut short"),
    ("truncated", "printed truncated output"),
])
def test_empty_or_truncated_output_is_an_error_not_zero_gpus(fake_gpus, tmp_path, fault, message):
    nvidia_smi = fake_gpus()
    set_fault(str(tmp_path), fault)
    with pytest.raises(NvidiaSmiError, match=re.escape(message)):
        query_gpus(bounded_runner(), nvidia_smi)


def test_fewer_gpu_lines_than_ids_asked_for_is_an_error():
    def one_line(argv):
        return 0, "0, GPU-x, NVIDIA H200, 0, 143771, 143156, 00000000:00:06.0\n", ""
    with pytest.raises(NvidiaSmiError, match=r"printed 1 GPU lines, expected 2 lines \(--id=0,1\)"):
        query_gpus(one_line, "/bin/sh", ids=[0, 1])


def test_gpu_line_cut_inside_its_bus_id_is_an_error():
    with pytest.raises(NvidiaSmiError, match="'00000000:0' for pci.bus_id"):
        parse_csv("0, GPU-x, NVIDIA H200, 0, 143771, 143156, 00000000:0\n", GPU_FIELDS)


def test_no_compute_apps_is_an_empty_list(fake_gpus):
    assert query_compute_apps(bounded_runner(), fake_gpus()) == []
