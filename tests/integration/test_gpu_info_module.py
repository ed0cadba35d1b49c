"""gpuops.sglang.gpu_info through ansible-playbook against a fake GPU host."""

import os
import stat
import subprocess

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils._bytecode_cache import (
    CACHE_DIR_VARIABLE,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.payload_cache import (
    sources_digest,
)

from .conftest import HOST_PYTHON

MODULE = "gpuops.sglang.gpu_info"


def gpu_args(fake_gpus, **extra):
    return dict({"nvidia_smi": fake_gpus.nvidia_smi, "gpu_device_dir": fake_gpus.device_dir}, **extra)


def test_holders_with_owner_names(ansible, fake_gpus, host_args):
    ours = fake_gpus.hold(1, mib=3000, server="alpha", deployment=host_args["state_dir"])
    foreign = fake_gpus.hold(3, mib=5000)
    unowned = fake_gpus.hold(4, mib=1000, server="beta")  # a marker without its deployment: foreign
    result = ansible.module(MODULE, gpu_args(fake_gpus, state_dir=host_args["state_dir"]))
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    gpus = {gpu["index"]: gpu for gpu in result["gpus"]}
    assert sorted(gpus) == list(range(8))
    assert gpus[1]["memory_used_mib"] == 3000 and gpus[3]["memory_used_mib"] == 5000
    assert gpus[0]["memory_used_mib"] == 0 and gpus[0]["processes"] == []
    assert gpus[0]["name"] == "NVIDIA H200" and gpus[0]["memory_total_mib"] == 143771
    assert gpus[0]["uuid"].startswith("GPU-")
    [holder] = gpus[1]["processes"]
    assert (holder["pid"], holder["server"], holder["ours"]) == (ours.pid, "alpha", True)
    [stranger] = gpus[3]["processes"]
    assert (stranger["pid"], stranger["server"], stranger["ours"]) == (foreign.pid, None, False)
    assert "fakegpu.open_device" in stranger["cmdline"]
    [unowned_holder] = gpus[4]["processes"]
    assert (unowned_holder["pid"], unowned_holder["ours"]) == (unowned.pid, False)


def test_selected_gpus_and_unknown_index(ansible, fake_gpus):
    result = ansible.module(MODULE, gpu_args(fake_gpus, gpus=[2, 5]))
    assert [gpu["index"] for gpu in result["gpus"]] == [2, 5]
    result = ansible.module(MODULE, gpu_args(fake_gpus, gpus=[2, 9]))
    assert result["failed"]
    assert result["msg"] == "GPU index not present on this host (nvidia-smi lists 0, 1, 2, 3, 4, 5, 6, 7): 9"


def test_driver_mismatch_fails_clearly(ansible, fake_gpus):
    fake_gpus.init(fail="driver_mismatch")
    result = ansible.module(MODULE, gpu_args(fake_gpus))
    assert result["failed"]
    assert "Failed to initialize NVML: Driver/library version mismatch" in result["msg"]
    assert "the container's driver libraries must be exactly the host's version" in result["msg"]


def test_missing_binary_fails_clearly(ansible, fake_gpus, tmp_path):
    missing = str(tmp_path / "no-such" / "nvidia-smi")
    result = ansible.module(MODULE, gpu_args(fake_gpus, nvidia_smi=missing))
    assert result["failed"]
    assert result["msg"] == f"nvidia-smi not found: {missing} is not an executable file"
    result = ansible.module(MODULE, gpu_args(fake_gpus, nvidia_smi="nvidia-smi-not-installed"))
    assert result["failed"]
    assert "nvidia-smi not found: no 'nvidia-smi-not-installed' in PATH" in result["msg"]


def test_a_payload_is_built_once_and_kept_for_the_next_run_of_the_same_sources(ansible, fake_gpus, tmp_path):
    # A local temp base of its own (nothing kept yet); ANSIBLE_DEBUG: Ansible says when it builds a module's payload.
    local_tmp = tmp_path / "local-tmp"
    ansible.env = dict(ansible.env, ANSIBLE_LOCAL_TEMP=str(local_tmp), ANSIBLE_DEBUG="1")
    said = []
    for _run in range(2):
        run = ansible.start_module(MODULE, gpu_args(fake_gpus))
        stdout, _stderr = run.process.communicate(timeout=120)
        assert run.process.returncode == 0, stdout[-3000:]
        said.append(stdout)
    assert "ANSIBALLZ: Creating module" in said[0]
    assert "ANSIBALLZ: using cached module" in said[1] and "ANSIBALLZ: Creating module" not in said[1]
    [digest] = os.listdir(local_tmp / "gpuops-sglang-ansiballz")
    assert digest == sources_digest()


HOST_HAS_PYTHON_3_10 = subprocess.run(
    [HOST_PYTHON, "-c", "import sys; sys.exit(sys.version_info < (3, 10))"], check=False).returncode == 0


@pytest.mark.skipif(not HOST_HAS_PYTHON_3_10, reason="the cache needs Python 3.10 on the host")
def test_a_module_call_keeps_its_compiled_module_utils_for_the_next(ansible, fake_gpus, tmp_path):
    cache = tmp_path / "bytecode"
    ansible.env = dict(ansible.env, **{CACHE_DIR_VARIABLE: str(cache)})
    ansible.env.pop("PYTHONDONTWRITEBYTECODE", None)
    assert ansible.module(MODULE, gpu_args(fake_gpus))["gpus"]
    kept = {entry.name: (entry.stat().st_ino, entry.stat().st_mtime_ns) for entry in os.scandir(cache)}
    # gpu_info's own: argument_specs, gpu_inventory, nvidia_smi, option_ranges and what they import.
    assert len(kept) >= 4 and stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert ansible.module(MODULE, gpu_args(fake_gpus))["gpus"]
    again = {entry.name: (entry.stat().st_ino, entry.stat().st_mtime_ns) for entry in os.scandir(cache)}
    assert again == kept, "the second call read them: it compiled and wrote nothing"
