# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: server
short_description: Start, restart or stop the SGLang servers of one GPU host (kill, verify GPU memory freed, relaunch)
description:
  - Brings every listed SGLang server of the host to O(state) in one call. The servers are handled together
    - first everything that must go is stopped, then the GPU memory of all their GPUs is verified free,
    then all servers are launched - never one after another.
  - A server's processes are found by the ownership marker C(GPUOPS_SGLANG_SERVER=<name>) in
    C(/proc/<pid>/environ), which every launch script exports and all SGLang children inherit (also
    schedulers orphaned to PID 1), and by the process group recorded at launch. Nothing is found or
    killed by command-line patterns.
  - Stopping sends SIGTERM to the server's process group and marker-matched processes, waits up to
    O(stop_timeout) seconds, then sends SIGKILL to what is left. Then C(nvidia-smi --query-gpu) is polled
    until the used memory of each affected GPU is at most O(gpu_free_threshold_mib), for up to
    O(gpu_free_timeout) seconds (the driver frees memory after the process is gone). If memory stays held,
    the task fails naming the processes that hold the GPU device open (pid, command line, owner server or foreign).
  - Launching rotates the previous log (C(log) -> C(log.1) ... C(log.5), never truncated), runs the launch script
    fully detached (new session, stdin from C(/dev/null), stdout and stderr to the log, no inherited file
    descriptors, so a run through C(pct exec) does not hang) with the marker and C(SPT_NOENV=1) set, and records
    pid, process group, launch time, pid start time and the sha256 of the launch script in C(<state_dir>/<name>.json).
  - C(SPT_NOENV=1) keeps C(setproctitle), which SGLang uses to name its scheduler processes, from overwriting
    C(/proc/<pid>/environ) and with it the marker; launch scripts should export it too.
  - Everything that can be checked is checked before any process is signalled - the request itself (duplicate
    names or ports, GPUs shared by two servers, missing or non-executable launch scripts), GPU indexes that
    C(nvidia-smi) does not list, GPUs held by foreign processes, and ports owned by foreign processes.
  - A process without the marker is foreign and is never signalled unless O(force_kill_gpu_holders=true).
  - A process marked with a server that is not listed but has a state file in O(state_dir) (a renamed or
    removed server) and that holds a GPU or port needed here is stale - it is stopped with the others and its
    state file removed (RV(stale_killed)). A marked process of a server without a state file there belongs to
    another deployment and fails the task.
  - A per-host lock (C(flock) on C(<state_dir>/.lock)) serialises concurrent runs; a second run waits up to
    O(lock_timeout) seconds, then fails naming the holder.
  - This module does not wait for the servers to become ready; use M(gpuops.sglang.wait) for that.
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
    details:
      - Reads processes, GPUs and state files and reports what would be stopped and launched, and fails for the
        same conflicts, but signals and launches nothing and takes no lock.
  diff_mode:
    support: full
    details: Per server before and after - running, pid, port, GPUs, launch script and its sha256, log path.
  idempotent:
    support: full
    details:
      - With O(state=started) a server whose recorded process is alive and whose launch script, port, GPUs and
        log path are unchanged is left alone. O(state=restarted) always relaunches.
options:
  servers:
    description:
      - The SGLang servers of this host.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - Unique server name. Value of the ownership marker and name of the state file; letters, digits, C(.),
            C(_) and C(-).
        type: str
        required: true
      port:
        description:
          - HTTP port the server listens on. A foreign process listening on it fails the task before anything
            is killed.
          - Required unless O(state=stopped).
        type: int
      gpus:
        description:
          - Indexes (as listed by C(nvidia-smi)) of the GPUs the server uses. No GPU may belong to two servers.
          - Required unless O(state=stopped); when stopping, defaults to the GPUs recorded at launch.
        type: list
        elements: int
      launch_script:
        description:
          - Executable script that exports C(GPUOPS_SGLANG_SERVER=<name>) and its environment, and C(exec)s
            SGLang (see M(gpuops.sglang.launch_scripts)). Its sha256 decides whether a running server is current.
          - Required unless O(state=stopped).
        type: path
      log_path:
        description:
          - File receiving the server's stdout and stderr. The previous one is rotated, never truncated.
          - Required unless O(state=stopped).
        type: path
      pid_file:
        description:
          - Also write the launched pid to this file, for tools that expect a pid file. The state file
            in O(state_dir) stays the record this collection uses.
        type: path
  state:
    description:
      - V(started) launches servers that are not running or whose launch script, port, GPUs or log path changed,
        and leaves the others alone.
      - V(restarted) stops and relaunches every listed server.
      - V(stopped) stops every listed server and verifies its GPU memory is freed.
    type: str
    choices: [started, restarted, stopped]
    default: started
  stop_timeout:
    description: Seconds to wait after SIGTERM before sending SIGKILL to what is left.
    type: float
    default: 30
  gpu_free_timeout:
    description: Seconds to wait for the GPU memory to be freed after the processes are gone.
    type: float
    default: 60
  gpu_free_threshold_mib:
    description: A GPU counts as free when C(memory.used) is at most this many MiB.
    type: int
    default: 1024
  force_kill_gpu_holders:
    description:
      - Also kill foreign processes (without the ownership marker) that hold the servers' GPUs. They are
        reported in RV(foreign_killed). Ports owned by foreign processes always fail the task.
    type: bool
    default: false
  ignore_gpu_holders:
    description:
      - Regular expressions (searched in the command line) of foreign processes that may keep the servers' GPU
        device nodes open. They are neither a conflict nor ever killed, also not with O(force_kill_gpu_holders).
      - On bare-metal hosts the persistence daemon and DCGM keep every C(/dev/nvidia<N>) open without using GPU
        memory; inside containers they are not visible. The GPU memory check after stopping still applies.
    type: list
    elements: str
    default: ['^(/\S+/)?nvidia-persistenced\b', '^(/\S+/)?nv-hostengine\b', 'dcgm-exporter']
  lock_timeout:
    description: Seconds to wait for the per-host lock held by another run; V(0) fails at once.
    type: float
    default: 300
notes:
  - Inside Proxmox LXC containers reached with C(community.proxmox.proxmox_pct_remote), the launch is fully
    detached, so C(pct exec) returns at once.
  - Memory is verified with C(nvidia-smi --query-gpu), which is correct inside containers; holders are found
    through C(/proc/<pid>/fd) because NVML does not list container processes.
seealso:
  - module: gpuops.sglang.wait
  - module: gpuops.sglang.gpu_info
"""

EXAMPLES = r"""
- name: Relaunch all servers of the host with new launch scripts
  gpuops.sglang.server:
    state: restarted
    servers:
      - name: gpu0-3
        port: 30000
        gpus: [0, 1, 2, 3]
        launch_script: /opt/sglang/launch/gpu0-3.sh
        log_path: /var/log/sglang/gpu0-3.log
      - name: gpu4-7
        port: 30001
        gpus: [4, 5, 6, 7]
        launch_script: /opt/sglang/launch/gpu4-7.sh
        log_path: /var/log/sglang/gpu4-7.log
  register: relaunch

- name: Launch only what is missing or changed
  gpuops.sglang.server:
    servers: "{{ sglang_servers }}"

- name: Stop a server, also killing a forgotten notebook that holds its GPUs
  gpuops.sglang.server:
    state: stopped
    force_kill_gpu_holders: true
    servers:
      - name: gpu0-3
"""

RETURN = r"""
servers:
  description: One entry per server, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Server name.
      type: str
      sample: gpu0-3
    action:
      description: What was done (in check mode, what would be done).
      type: str
      choices: [unchanged, launched, relaunched, stopped, already_stopped]
      sample: relaunched
    reason:
      description: Why.
      type: str
      sample: "changed: launch script content"
    changed:
      description: Whether this server was stopped or launched.
      type: bool
    pid:
      description: Pid of the launched (or unchanged, running) server; null when stopped or in check mode.
      type: int
      sample: 41234
    pgid:
      description: Its process group (the launch runs in a new session, so equal to the pid).
      type: int
      sample: 41234
    port:
      description: Server port.
      type: int
    gpus:
      description: GPU indexes of the server.
      type: list
      elements: int
    log_path:
      description: The log the server writes to.
      type: str
    rotated_log:
      description: Where the previous log went (C(<log_path>.1)); null when there was none.
      type: str
      sample: /var/log/sglang/gpu0-3.log.1
    state_file:
      description: The state file of the server.
      type: str
    killed:
      description: Processes of the server that were signalled, with the last signal they needed.
      type: list
      elements: dict
      sample: [{"pid": 41000, "cmdline": "python3 -m sglang.launch_server ...", "signal": "SIGTERM"}]
    killed_pids:
      description: The pids of RV(servers[].killed).
      type: list
      elements: int
    gpu_memory_before_mib:
      description: Used memory per GPU index before anything was stopped.
      type: dict
      sample: {"0": 120500, "1": 120480}
    gpu_memory_after_mib:
      description: Used memory per GPU index after stopping, before launching (empty when nothing was verified).
      type: dict
      sample: {"0": 0, "1": 0}
    timings:
      description: Seconds per step for this server (C(stop_s), C(gpu_free_s), C(launch_s)).
      type: dict
      sample: {"stop_s": 2.1, "gpu_free_s": 0.8, "launch_s": 0.01}
stale_killed:
  description:
    - Processes of servers not listed here but recorded in O(state_dir) (renamed or removed) of which one held a
      needed GPU or port; the whole server was stopped (C(holds) names what the process held, null for the rest).
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 3000, "cmdline": "sglang::scheduler", "server": "old-name", "holds": "GPU 2", "signal": "SIGTERM"}]
foreign_killed:
  description: Foreign GPU holders killed because O(force_kill_gpu_holders=true).
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 5000, "cmdline": "python3 notebook.py", "server": null, "holds": "GPU 3", "signal": "SIGTERM"}]
timings:
  description: Seconds per phase for the whole host (C(lock_wait_s), C(stop_s), C(gpu_free_s), C(total_s)).
  returned: always
  type: dict
  sample: {"lock_wait_s": 0.0, "stop_s": 3.2, "gpu_free_s": 1.1, "total_s": 4.5}
problems:
  description: On failure before anything was touched, every problem found (the message joins them).
  returned: failure
  type: list
  elements: str
gpu_holders:
  description: On a GPU memory verification failure, per GPU index the processes holding the device open.
  returned: failure
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.sglang.plugins.module_utils.server_control import (
    COMMON_ARGUMENT_SPEC,
    IGNORED_GPU_HOLDERS,
    STATES,
    ServerControl,
    ServerControlError,
)


def main():
    argument_spec = {
        **COMMON_ARGUMENT_SPEC,
        "servers": {"type": "list", "elements": "dict", "required": True, "options": {
            "name": {"type": "str", "required": True},
            "port": {"type": "int"},
            "gpus": {"type": "list", "elements": "int"},
            "launch_script": {"type": "path"},
            "log_path": {"type": "path"},
            "pid_file": {"type": "path"},
        }},
        "state": {"type": "str", "choices": list(STATES), "default": "started"},
        "stop_timeout": {"type": "float", "default": 30},
        "gpu_free_timeout": {"type": "float", "default": 60},
        "gpu_free_threshold_mib": {"type": "int", "default": 1024},
        "force_kill_gpu_holders": {"type": "bool", "default": False},
        "ignore_gpu_holders": {"type": "list", "elements": "str", "default": list(IGNORED_GPU_HOLDERS)},
        "lock_timeout": {"type": "float", "default": 300},
    }
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    control = ServerControl(module.run_command, module.params, check_mode=module.check_mode)
    try:
        result = control.apply()
    except ServerControlError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    if not module._diff:
        result.pop("diff")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
