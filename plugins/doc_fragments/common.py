# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options shared by the gpuops.sglang modules that look at a GPU host.

C(extends_documentation_fragment: gpuops.sglang.common) documents O(state_dir), O(nvidia_smi) and
O(gpu_device_dir); C(gpuops.sglang.common.gpu) documents only the two GPU options. The argument
spec matching them is C(COMMON_ARGUMENT_SPEC) in module_utils/server_control.py.
"""

_STATE_DIR = r"""
  state_dir:
    description:
      - Directory of the per-server state files (C(<state_dir>/<name>.json)) and of the per-host lock
        (C(<state_dir>/.lock)). Created when missing.
    type: path
    default: /var/lib/gpuops-sglang
"""

_GPU = r"""
  nvidia_smi:
    description:
      - The C(nvidia-smi) executable, a name looked up in E(PATH) or an absolute path.
      - Only C(--query-gpu) is used (memory per GPU); NVML cannot list processes inside containers, so
        processes are found through C(/proc) instead.
    type: str
    default: nvidia-smi
  gpu_device_dir:
    description:
      - Directory of the GPU device nodes C(nvidia<N>). A process holds GPU N when one of its file descriptors
        points to C(<gpu_device_dir>/nvidia<N>).
    type: path
    default: /dev
"""


class ModuleDocFragment:
    DOCUMENTATION = "options:" + _STATE_DIR + _GPU

    GPU = "options:" + _GPU
