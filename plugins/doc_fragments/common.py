# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation shared by the gpuops.sglang modules that look at a GPU host.

C(gpuops.sglang.common.state_dir) documents O(state_dir), C(gpuops.sglang.common.gpu) documents O(nvidia_smi)
and O(gpu_device_dir); the argument spec matching them is C(COMMON_ARGUMENT_SPEC) in
module_utils/server_control.py. C(gpuops.sglang.common.idempotent) describes the C(idempotent) attribute,
which C(ansible.builtin.action_common_attributes) does not.
"""


class ModuleDocFragment:
    STATE_DIR = r"""
options:
  state_dir:
    description:
      - Directory of the per-server state files C(<state_dir>/<name>.json) written by M(gpuops.sglang.server),
        and of the per-host lock C(<state_dir>/.lock). M(gpuops.sglang.server) creates it when missing.
    type: path
    default: /var/lib/gpuops-sglang
"""

    GPU = r"""
options:
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

    IDEMPOTENT = r"""
attributes:
  idempotent:
    description:
      - When run twice in a row outside check mode, with the same arguments, the second run reports no change.
"""
