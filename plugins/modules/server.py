# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: server
short_description: Start, restart or stop the SGLang servers of one GPU host (kill, verify GPU memory freed, relaunch)
description:
  - Brings every listed SGLang server of the host to O(state) in one call. All servers are stopped at once, and
    each goes on at its own pace - its GPU memory verified free, then it is launched. One server whose GPU does
    not free in time, or whose process survives SIGKILL, is reported down (RV(down)) and fails the task; the
    others are relaunched and serving.
  - The kill -> verify -> launch sequence runs in a worker detached from the module (its own session, no
    terminal, SIGHUP and SIGINT ignored), so a Ctrl-C on the controller or a dropped connection never leaves
    servers silently down; the sequence completes and the next run reports it (RV(interrupted_runs)). The
    module, run in slices by its action plugin, reports live progress (which servers are still draining, when
    SIGKILL is sent and why, which GPU memory is still held) every O(progress_interval) seconds.
  - A server's processes are found by the ownership marker C(GPUOPS_SGLANG_SERVER=<name>) in
    C(/proc/<pid>/environ), which every launch script exports and all SGLang children inherit (also
    schedulers orphaned to PID 1), and by the process group recorded at launch. Nothing is found or
    killed by command-line patterns.
  - A running server is drained before it stops, for up to O(drain_timeout) seconds - until its requests in
    flight (running and waiting, from C(GET /v1/loads), or the C(/metrics) gauges of releases without it) reach 0.
    With O(router_url) it is first taken out of the router (its worker API), so no new request reaches it, and
    SIGTERM follows the drain; without a router, SIGTERM starts SGLang's own drain (it finishes what is in flight,
    then exits) and the count is followed. Progress lines say C(gpu3 draining, 12 requests left). Requests still
    in flight at O(drain_timeout) fail when the server stops.
  - A router that is unreachable, refuses O(router_api_key) or is not a router fails the call before anything is
    touched; a server that cannot be taken out of it is not stopped (RV(servers[].error)). Adding servers back
    once they are ready is M(gpuops.sglang.wait)'s part.
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
  - Everything that can be checked is checked before any process is signalled or any script written - the
    request itself (every number against its range, duplicate names or ports, GPUs shared by two servers, shared
    files, symbolic links at log or pid file paths, missing or non-executable launch scripts), GPU indexes that
    C(nvidia-smi) does not list, GPUs held by foreign processes, ports owned by foreign processes, and
    O(required_paths). Only then are the O(scripts) written.
  - A process is ours when it carries the marker and C(GPUOPS_SGLANG_STATE_DIR) naming this O(state_dir), in
    this PID namespace. A process without them is foreign and is never signalled unless
    O(force_kill_gpu_holders=true); the module's own ancestors (ansible-playbook, the operator's shell) never are.
  - A process marked with a server that is not listed but has a state file in O(state_dir) (a renamed or
    removed server) and that holds a GPU or port needed here is stale - it is stopped with the others and its
    state file removed (RV(stale_killed)). A marked process of a server without a state file there belongs to
    another deployment and fails the task.
  - A per-host lock (C(flock) on C(<state_dir>/.lock), held until the worker finishes) serialises concurrent
    calls; a second call waits up to O(lock_timeout) seconds, then fails naming the holder. With O(run_id) the
    call also confirms that its run still holds the host (see M(gpuops.sglang.host_lock)).
  - This module does not wait for the servers to become ready; use M(gpuops.sglang.wait) for that.
version_added: 0.1.0
author: gpuops.sglang contributors (@gpuops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuops.sglang.common.state_dir
  - gpuops.sglang.common.gpu
  - gpuops.sglang.common.http
  - gpuops.sglang.common.router
  - gpuops.sglang.common.systemd
  - gpuops.sglang.common.journal
  - gpuops.sglang.common.idempotent
attributes:
  platform:
    platforms: posix
  check_mode:
    support: full
    details:
      - Reads processes, GPUs and state files and reports what would be stopped and launched (judging given
        O(scripts) by their new content), and fails for the same conflicts, but writes, signals and launches
        nothing and takes no lock.
  diff_mode:
    support: full
    details:
      - A list - first per server before and after (running, pid, port, GPUs, launch script and its sha256, log
        path), then one diff per changed O(scripts) entry, with every API key hidden.
  idempotent:
    support: full
    details:
      - With O(state=started) a server whose recorded process is alive (with O(launcher=systemd), the unit's main
        process, also after systemd restarted it) and whose launch script, port, GPUs, log path, launcher and unit
        are unchanged is left alone; RV(servers[].reason) names what changed otherwise. O(state=restarted) always
        relaunches.
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
          - Server name - the value of its ownership marker C(GPUOPS_SGLANG_SERVER) and the name of its state file
            C(<state_dir>/<name>.json); letters, digits, C(.), C(_) and C(-), starting with a letter or digit.
          - Unique among O(servers).
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
      extra_ports:
        description:
          - Other TCP ports the server listens on, e.g. the rendezvous port (C(--dist-init-addr)) of rank 0 of a
            multi-node group. Like O(servers[].port), a foreign process listening on one fails the task before
            anything is killed.
        type: list
        elements: int
      pid_file:
        description:
          - Also write the launched pid to this file (replaced atomically, never written through a symbolic
            link), for tools that expect a pid file. The state file in O(state_dir) stays the record this
            collection uses.
        type: path
  scripts:
    description:
      - Launch scripts to write (mode 0700) once every check passed, each the O(servers[].launch_script) of
        the server of that name; see M(gpuops.sglang.launch_scripts), which writes them without relaunching.
        A refused run leaves scripts, processes and logs as they were.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Server name.
        type: str
        required: true
      path:
        description: The server's launch script.
        type: path
        required: true
      content:
        description: The script (it may hold the API key, so it is never shown).
        type: str
        required: true
  required_paths:
    description: Paths that must exist on the host before any script is written (model directories).
    type: list
    elements: path
    default: []
  secrets:
    description:
      - Values (API keys) never to show in results, messages or diffs.
      - The credentials in O(scripts) (values of credential-like exports such as C(HF_TOKEN) and flags such as
        C(--hf-token)) are hidden the same way without being listed here.
    type: list
    elements: str
    default: []
  run_id:
    description:
      - The run (from M(gpuops.sglang.host_lock)) this call belongs to. The call fails, touching nothing, when
        another run holds the host; servers it launches record it, so the wait can tell them from servers
        another run replaced.
    type: str
  log_generations:
    description: Rotated logs kept per server (C(log.1) ... C(log.<N>)), 1-100; the first crash of a crash loop is kept as C(log.first-crash) besides.
    type: int
    default: 5
  progress_interval:
    description: Seconds between progress reports while the sequence runs (0.1-600).
    type: float
    default: 10
  _carry:
    description:
      - Internal, set by the action plugin - the job started by the first slice of this task. Do not set it.
    type: dict
  launcher:
    description:
      - How a server is run. V(detached) starts its launch script as a process of its own session, detached from
        the module. V(systemd) runs it as the systemd service C(gpuops-sglang-<deployment id>-<name>.service) (the
        id, 8 hex digits, derived from O(state_dir), so two deployments may both have a server gpu0) written into
        O(systemd.unit_dir) from the same settings (C(ExecStart) the launch script, output appended to
        O(servers[].log_path), C(KillMode=control-group), C(TimeoutStopSec) from O(stop_timeout)); the unit's
        cgroup is then the authoritative set of the server's processes, so none can be orphaned.
      - Stopping always goes through the launcher that launched the server (recorded in its state file), so
        switching launchers relaunches the servers cleanly.
    type: str
    choices: [detached, systemd]
    default: detached
  state:
    description:
      - V(started) launches servers that are not running or whose launch script, port, GPUs or log path changed,
        and leaves the others alone.
      - V(restarted) stops and relaunches every listed server.
      - V(stopped) stops every listed server and verifies its GPU memory is freed.
    type: str
    choices: [started, restarted, stopped]
    default: started
  rollback:
    description:
      - Relaunch every listed server with its last good configuration - the launch script it ran when it last
        reached ready (kept by M(gpuops.sglang.wait) in C(<state_dir>/last-good/)) - and restore that script as its
        O(servers[].launch_script), so a reboot or a hand start runs it too. Requires O(state=restarted) and no
        O(scripts).
      - The script runs with today's O(api_key) - a key rotated away since it came up never serves again - its
        C(--api-key) is rewritten when it differs (or removed, without O(api_key)).
      - A server without a usable last good configuration is stopped instead (its GPUs verified free) and the
        C(error) of RV(servers[].rollback) says why - none kept, its files could have been written by another user
        (a link, another owner, group/other-writable), its key cannot be replaced, or it fails the launch script
        checks.
    type: bool
    default: false
  max_changes:
    description:
      - A canary - at most this many of the servers that need a change get it in this call (the first ones, in the
        order of O(servers)); the others are reported V(deferred), keep running what they run, and their scripts
        are not written (1-4096).
    type: int
  max_changes_scope:
    description:
      - What O(max_changes) limits. V(all) - every server that needs a change.
      - V(unseen) - a canary only for a configuration that never came up on this host. The first O(max_changes)
        servers whose new launch script is not one of their last good ones (C(<state_dir>/last-good/)) get it, and
        every other server that would stop a serving process - its own, or that of a renamed or removed server in
        its way (RV(stale_killed)) - is V(deferred); a server that stops nothing is launched all the same. When
        every change goes back to a configuration its server came up with, there is no canary and only
        O(batch_size) limits.
    type: str
    choices: [all, unseen]
    default: all
  batch_size:
    description:
      - At most this many of the servers that need a change get it in this call - the canary first, then the first
        ones in the order of O(servers); the others are V(deferred) as with O(max_changes). Unset - no limit
        (1-4096).
    type: int
  stop_timeout:
    description: Seconds to wait after SIGTERM (after the drain) before sending SIGKILL to what is left (0-3600).
    type: float
    default: 30
  drain_timeout:
    description:
      - Seconds a running server may take to finish its requests in flight before it is stopped anyway
        (0-86400); V(0) stops at once (SIGTERM, then SIGKILL after O(stop_timeout)).
      - The count is read from O(host) with O(api_key); a server that gives none (still starting, hung) is not
        waited for.
    type: float
    default: 60
  gpu_free_timeout:
    description: Seconds to wait for the GPU memory of a server to be freed after its processes are gone (0-3600).
    type: float
    default: 60
  gpu_free_threshold_mib:
    description: A GPU counts as free when C(memory.used) is at most this many MiB (0-1048576).
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
    description: Seconds to wait for the per-host lock held by another call; V(0) fails at once (0-86400).
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
      choices: [unchanged, launched, relaunched, stopped, already_stopped, deferred]
      sample: relaunched
    rollback:
      description:
        - With O(rollback), the last good configuration the server went back to - C(to_run_id), C(to_time) (epoch),
          C(script_sha256), C(key_status) (the key it serves with - V(current), V(rekeyed) (the current one put in place
          of another), V(removed) or V(none); never the value) - or C(error) when it had no usable one (it was
          stopped).
      returned: with O(rollback)
      type: dict
    error:
      description: Why this server failed (its GPU not freed, processes surviving SIGKILL, its launch); null when it did not.
      type: str
    down:
      description: True when this server failed after it was stopped (or before it was launched) - it is not running now.
      type: bool
    reason:
      description: >-
        Why. A server whose main process runs on after SGLang announced a crash in the log of its recorded launch
        (stuck, holding its GPUs) is relaunched, C(its process N still runs but its log shows a crash: <error>), never
        left C(unchanged).
      type: str
      sample: "changed: launch script content"
    changed:
      description: The compared settings that differ from what the server runs with, each as C([key, before, after])
        (C(script_sha256), C(port), the launcher's own settings); empty when nothing differs.
      type: list
      elements: list
    settings_changed:
      description:
        - The launch settings the server's new launch script changes (flags, environment, command), each as
          C({setting, before, after}) with credentials hidden; absent when its script is new or unchanged. Also in
          check mode, where it is what would change.
      type: list
      elements: dict
      returned: when its launch script changes
      sample: [{"setting": "--mamba-scheduler-strategy", "before": "extra_buffer", "after": "no_buffer"}]
    came_up_before:
      description:
        - For a server this call launches, whether its launch script is one it came up with on this host before (one
          of its last good scripts, C(<state_dir>/last-good/)); false for a configuration new to it.
      type: bool
      returned: when the server is launched or relaunched
    script_changed:
      description:
        - Its launch script was written anew (new, or changed) by this call - a new configuration. A server started
          again with the script it had (killed from outside, O(state=restarted)) has none, and its failure is not
          one of a new configuration.
      type: bool
      returned: when its launch script changes
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
    drain:
      description:
        - How the server's drain before its stop ended - C(outcome) V(drained) (no request left), V(timed_out)
          (O(drain_timeout) reached; C(requests_left) failed), V(uncounted) (it gave no count, C(error) says why) or
          V(exited) (SGLang's own drain ended and it exited) - with C(seconds) and C(requests_left). Null when it
          was not drained (not running, or O(drain_timeout=0)).
      type: dict
      sample: {"outcome": "drained", "seconds": 4.2, "requests_left": 0, "error": null}
    router:
      description:
        - With O(router_url), for a server that was stopped - C(worker_url) (the server as the router's worker) and
          C(removed_ids), the router entries taken out (empty when the router did not list it).
      type: dict
      sample: {"worker_url": "http://10.0.0.5:30003", "removed_ids": ["5f0c..."]}
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
canary:
  description:
    - The servers that went first while the others (V(deferred)) wait for them - the first O(max_changes) that need a
      change, or with O(max_changes_scope=unseen) those going to a configuration they never came up with. Empty
      when no server was deferred (nobody waits for a canary). A server whose own process holds a GPU or port of a
      server that goes cannot wait, and goes too.
  returned: always
  type: list
  elements: str
  sample: [gpu0]
removed:
  description:
    - The servers of RV(stale_killed) (renamed or removed from the topology), each with the launch script it ran,
      which stays in place. Their launcher let them go first (a systemd unit is stopped and disabled, so neither
      its restart policy nor a reboot brings the server back); C(error) says why it could not. In check mode,
      those that would be stopped.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "gpu1", "launch_script": "/opt/sglang/bin/gpu1.sh"}]
foreign_killed:
  description: Foreign GPU holders killed because O(force_kill_gpu_holders=true).
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 5000, "cmdline": "python3 notebook.py", "server": null, "holds": "GPU 3", "signal": "SIGTERM"}]
down:
  description: Servers this call left down (stopped, not relaunched); the task failed and its C(msg) says why for each.
  returned: always
  type: list
  elements: str
journal_error:
  description:
    - Why the run journal could not be written (the call's result stands). The server module journals every
      server of a stop (O(state=stopped)) and the servers it left down; M(gpuops.sglang.wait) journals the others.
  returned: when the call journaled something
  type: str
interrupted_runs:
  description:
    - Earlier calls whose result nobody picked up (the controller was interrupted or the connection dropped while
      their worker ran), with what they did - C(job_id), C(run_id), C(status), C(servers) (changed ones, e.g.
      C(gpu3 relaunched)), C(down) and C(msg).
  returned: success
  type: list
  elements: dict
scripts:
  description: Per O(scripts) entry, its C(path), whether it C(changed) and its C(sha256).
  returned: success
  type: dict
timings:
  description: Seconds per phase for the whole host (C(lock_wait_s), C(act_s), C(total_s)).
  returned: always
  type: dict
  sample: {"lock_wait_s": 0.0, "act_s": 4.5}
problems:
  description: On failure before anything was touched, every problem found (the message joins them).
  returned: failure
  type: list
  elements: str
"""

# First of ours: the rest of module_utils is then compiled once per host, not in every call.
import time

import ansible_collections.gpuops.sglang.plugins.module_utils._bytecode_cache  # noqa: F401  pylint: disable=unused-import
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.sglang.plugins.module_utils import host_job
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.job import (
    ServerControl,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.request import (
    SERVER_ARGUMENT_SPEC,
    ServerControlError,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.result import (
    scrub_failure_words,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.script_files import (
    secrets_of,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_text

ARGUMENT_SPEC = SERVER_ARGUMENT_SPEC


def main():
    # _carry: the job a previous slice of this task started (set by the action plugin).
    module = AnsibleModule(argument_spec=dict(ARGUMENT_SPEC, _carry={"type": "dict"}), supports_check_mode=True)
    params = module.params
    params["secrets"] = secrets_of(params["scripts"], params["secrets"])
    # Ansible hides them from the whole result too, like the values of no_log options.
    module.no_log_values.update(params["secrets"])
    try:
        if params["_carry"]:
            carry = params["_carry"]
            result = host_job.follow_result(params["state_dir"], carry["job"], time.time() + params["progress_interval"],
                                            carry.get("events_seen", 0), None if module.check_mode else params["run_id"])
        else:
            result = ServerControl(params, check_mode=module.check_mode).apply(params["progress_interval"])
    except ServerControlError as exc:
        module.fail_json(msg=scrub_text(str(exc), params["secrets"]), **exc.details)
    except host_job.JobError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # noqa: BLE001  # pylint: disable=broad-except
        # Nothing unexpected may reach the controller as a raw traceback: it could quote a command line.
        module.fail_json(msg=scrub_text(f"unexpected {type(exc).__name__}: {exc}", params["secrets"]))
    # One diff per written script, then the state of the servers that change (Ansible shows a list of diffs in
    # order): the flag that changes comes first, the pids and hashes after it.
    state = result.pop("diff", None)
    diffs = (result.pop("script_diffs", None) or []) + ([state] if state and state["after"] else [])
    if module._diff and diffs:
        result["diff"] = diffs
    scrub_failure_words(result, params["secrets"])
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
