# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPUs of a host as the modules report them: nvidia-smi's figures and the processes holding each device,
found through /proc (not NVML) and judged ours or not. Reads only: nothing here signals a process, so the modules
that only look (gpu_info, host_lock) carry no stop or kill code.
"""

from ansible_collections.gpuops.sglang.plugins.module_utils import procfs
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    DEFAULT_STATE_DIR,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.nvidia_smi import (
    DRIVER_GPUS_DIR,
    NvidiaSmiError,
    device_minors,
    query_gpus,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_processes import (
    ServerProcesses,
)


class GpuError(Exception):
    """nvidia-smi could not list the GPUs, or a requested GPU index is not on this host."""


def require_present(present, requested):
    """Fail naming every requested GPU index that nvidia-smi does not list; ``requested``: [(index, label)]."""
    unknown = [label for gpu, label in requested if gpu not in present]
    if unknown:
        listed = ", ".join(str(index) for index in sorted(present)) or "none"
        raise GpuError(f"GPU index not present on this host (nvidia-smi lists {listed}): " + ", ".join(unknown))


def gpu_inventory(run, nvidia_smi="nvidia-smi", device_dir="/dev", gpus=None, driver_dir=DRIVER_GPUS_DIR,
                  state_dir=DEFAULT_STATE_DIR):
    """GPUs with their memory and the processes holding them (``ours``: a server of this deployment)."""
    try:
        listed = query_gpus(run, nvidia_smi)
    except NvidiaSmiError as exc:
        raise GpuError(str(exc))
    require_present([gpu["index"] for gpu in listed], [(gpu, str(gpu)) for gpu in gpus or []])
    selected = [gpu for gpu in listed if not gpus or gpu["index"] in gpus]
    minors = device_minors(selected, driver_dir)
    holders = procfs.gpu_holders(device_dir, minors)
    owner = ServerProcesses(state_dir)
    for gpu in selected:
        gpu["device_minor"] = minors[gpu["index"]]
        gpu["processes"] = []
        for pid in holders.get(gpu["index"], []):
            entry = procfs.describe(pid)
            entry["ours"] = owner.owner(pid).verdict == "ours"
            gpu["processes"].append(entry)
    return selected
