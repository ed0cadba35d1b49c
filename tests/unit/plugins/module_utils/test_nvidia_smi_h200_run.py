"""The nvidia-smi outputs that the modules parsed during the tests/gpu run on a real H200 (issue 6).

Saved by tests/gpu/test_real_gpu.py (GPUOPS_GPU_FIXTURES_OUT) while a 20 GiB CUDA process held GPU 0
("busy") and after gpuops.sglang.server stopped it ("idle").
"""

import os

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.nvidia_smi import (
    COMPUTE_APP_FIELDS,
    GPU_FIELDS,
    device_minors,
    parse_csv,
)

RUN = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "nvidia_smi", "h200-run")
UUID = "GPU-fbebc83b-9a1b-2f37-2ccf-65efae99eb8d"
QUERY_GPU = ("index", "uuid", "name", "memory.used", "memory.total", "memory.free")


def read(name):
    with open(os.path.join(RUN, name)) as handle:
        return handle.read()


def gpu_fields():
    by_query = {field.query: field for field in GPU_FIELDS}
    return tuple(by_query[query] for query in QUERY_GPU)


@pytest.mark.parametrize("name", ["busy-query-gpu.txt", "busy-query-gpu-header.txt"])
def test_busy_gpu_query_with_and_without_header_and_units(name):
    (gpu,) = parse_csv(read(name), gpu_fields())
    assert gpu == {"index": 0, "uuid": UUID, "name": "NVIDIA H200", "memory_used_mib": 21099,
                   "memory_total_mib": 143771, "memory_free_mib": 122058}


@pytest.mark.parametrize("name", ["idle-query-gpu.txt", "idle-query-gpu-header.txt"])
def test_idle_gpu_after_the_stop(name):
    (gpu,) = parse_csv(read(name), gpu_fields())
    assert gpu["memory_used_mib"] == 0 and gpu["memory_free_mib"] == 143156


def test_compute_apps_name_the_executable_as_started():
    by_query = {field.query: field for field in COMPUTE_APP_FIELDS}
    fields = tuple(by_query[query] for query in ("pid", "gpu_uuid", "process_name", "used_memory"))
    (app,) = parse_csv(read("busy-query-compute-apps.txt"), fields)
    # NVML reports argv[0] as the process was started (here a venv's python3 by absolute path).
    assert app == {"pid": 789, "gpu_uuid": UUID, "process_name": "/opt/torch/.venv/bin/python3",
                   "used_memory_mib": 21090}
    assert parse_csv(read("idle-query-compute-apps.txt"), fields) == []


def test_device_minor_from_the_drivers_information_file(tmp_path):
    """/proc/driver/nvidia/gpus/0000:00:06.0/information of the H200 run, moved to minor 5 as in a container
    given that host GPU as its GPU 0; nvidia-smi's 8-digit bus id domain finds the 4-digit directory."""
    directory = tmp_path / "0000:00:06.0"
    directory.mkdir()
    information = read("proc-driver-nvidia-gpus-information.txt")
    assert "Device Minor: \t 0\n" in information
    (directory / "information").write_text(information.replace("Device Minor: \t 0", "Device Minor: \t 5"))
    gpus = [{"index": 0, "pci_bus_id": "00000000:00:06.0"}, {"index": 1, "pci_bus_id": "00000000:00:07.0"}]
    # GPU 1 has no information file here: its index stands in for the minor.
    assert device_minors(gpus, str(tmp_path)) == {0: 5, 1: 1}
