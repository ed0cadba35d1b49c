# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: gpu_info
short_description: GPUs of a host with their memory and the processes holding them
description:
  - Lists the GPUs with index, uuid, name and memory (from C(nvidia-smi --query-gpu)), and for each the processes
    that hold its device node open, found through C(/proc/<pid>/fd) - NVML cannot list processes inside
    containers because it is not PID-namespace aware.
  - Each process is attributed to the SGLang server whose ownership marker C(GPUOPS_SGLANG_SERVER) it carries;
    a process without the marker is foreign.
  - "Fails with a clear message when C(nvidia-smi) is missing or fails, for example with
    C(NVML: Driver/library version mismatch) in a container whose driver libraries differ from the host's."
version_added: 0.1.0
author: gpuops.sglang contributors (@gpuops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuops.sglang.common.state_dir
  - gpuops.sglang.common.gpu
  - gpuops.sglang.common.idempotent
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
    details: The module only reads.
  diff_mode:
    support: N/A
    details: The module only reads.
  idempotent:
    support: full
    details: The module only reads.
options:
  gpus:
    description: Only report these GPU indexes (default all). An index C(nvidia-smi) does not list fails the task.
    type: list
    elements: int
seealso:
  - module: gpuops.sglang.server
"""

EXAMPLES = r"""
- name: Show every GPU and who holds it
  gpuops.sglang.gpu_info:
  register: gpu_info

- name: Look at GPU 3 only
  gpuops.sglang.gpu_info:
    gpus: [3]
  register: gpu3

- name: Fail when a foreign process holds GPU 3
  ansible.builtin.assert:
    that: gpu3.gpus[0].processes | rejectattr('ours') | list | length == 0
    fail_msg: "GPU 3 is held by {{ gpu3.gpus[0].processes | rejectattr('ours') | list }}"
"""

RETURN = r"""
gpus:
  description: One entry per GPU, ordered by index.
  returned: success
  type: list
  elements: dict
  contains:
    index:
      description: GPU index as C(nvidia-smi) numbers it.
      type: int
      sample: 0
    uuid:
      description: GPU uuid.
      type: str
      sample: GPU-040846e7-3418-8634-015a-4c7a97c15369
    name:
      description: Product name.
      type: str
      sample: NVIDIA H200
    memory_used_mib:
      description: Used memory in MiB.
      type: int
      sample: 21099
    memory_total_mib:
      description: Total memory in MiB.
      type: int
      sample: 143771
    memory_free_mib:
      description: Free memory in MiB.
      type: int
      sample: 122058
    pci_bus_id:
      description: PCI bus id as C(nvidia-smi) prints it.
      type: str
      sample: "00000000:00:06.0"
    device_minor:
      description: Minor number M of the GPU's device node C(nvidia<M>) (see O(nvidia_driver_dir)).
      type: int
      sample: 0
    processes:
      description: Processes holding the GPU's device node open.
      type: list
      elements: dict
      contains:
        pid:
          description: Process id (in this host's or container's PID namespace).
          type: int
        cmdline:
          description: Command line (or C([comm]) when it has none).
          type: str
        server:
          description: Server name from its ownership marker; null for a foreign process.
          type: str
        ours:
          description: Whether the process is a server of this deployment (marker and O(state_dir)).
          type: bool
"""

# First of ours: the rest of module_utils is then compiled once per host, not in every call.
import ansible_collections.gpuops.sglang.plugins.module_utils._bytecode_cache  # noqa: F401  pylint: disable=unused-import
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.sglang.plugins.module_utils import (
    argument_specs,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.gpu_inventory import (
    GpuError,
    gpu_inventory,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.nvidia_smi import (
    bounded_runner,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.option_ranges import (
    range_problems,
)


def main():
    argument_spec = dict(argument_specs.STATE_DIR, **argument_specs.GPU, gpus={"type": "list", "elements": "int"})
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    problems = range_problems(params, argument_specs.GPU_RANGES)
    if problems:
        module.fail_json(msg="invalid request: " + "; ".join(problems))
    try:
        gpus = gpu_inventory(bounded_runner(params["nvidia_smi_timeout"]), params["nvidia_smi"],
                             params["gpu_device_dir"], params["gpus"], params["nvidia_driver_dir"], params["state_dir"])
    except GpuError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, gpus=gpus)


if __name__ == "__main__":
    main()
