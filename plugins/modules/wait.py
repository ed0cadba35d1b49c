# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: wait
short_description: Wait until SGLang servers are ready, with live progress, crash and stall detection
description:
  - Waits until every listed SGLang server answers its generating health check with HTTP 200, then
    reports what each server actually configured (token pool, running requests, context length, ...).
  - >-
    The wait runs on the GPU host, which polls every server several times a second (health, log, process);
    the action plugin of the same name runs it in slices of about O(progress_interval) seconds and, after
    each slice, prints one progress line per host, for example
    C(ct200: 5/8 ready | gpu3 loading weights 37/64 | gpu6 capturing cuda graph | gpu7 crashed in loading weights).
    The lines reach C(ansible-playbook) output and AWX/AAP job output (as verbose events) while the task runs.
  - A server whose process is gone fails at once (within about a second) with the phase it reached, its
    exit status when known, the error summary line and the traceback from its log; its timeout is never waited out.
  - A server whose log shows no new output and no phase change for O(stall_timeout) seconds is reported as
    stalled (a hung NCCL init, weight load or CUDA graph capture never ends by itself), and killed with
    O(kill_stalled=true) - but only after one more health probe, sent once the silence was noticed, did not
    answer 200; a server that serves is never stalled or killed. The progress line says C(silent for N s)
    for a server whose log has not moved for 30 s.
  - Before the task returns, every server decided ready is looked at once more; one whose process died or
    that stopped answering meanwhile is reported V(crashed), one that another run relaunched meanwhile V(replaced).
    One whose health check does not answer (a frozen process) is asked again slice by slice, the progress line
    saying C(gpu0 not answering the last check for N s), up to O(probe_timeout) in all; then it counts as a slow
    answer and stays ready.
  - With O(servers[].pid) (the pid M(gpuops.sglang.server) launched), a server that another run relaunched
    meanwhile is reported V(replaced), never its crash or readiness taken for this run's.
  - Every server is waited for and reported even when others fail. The task fails when any server is not
    ready; RV(msg) names each such server and why.
  - Only log content written after the server's launch (C(launched_at) in its state file) is considered, so
    a log that was not rotated cannot report a previous run's phase or crash.
  - With O(router_url), once every server is decided, each ready one that the deployment owes a place in the
    router (launched from nothing, or taken out by this run or an earlier one that did not put it back) is
    added back and must be listed healthy within O(router_timeout); one that is not is reported V(unrouted) and
    fails the task while it keeps running. RV(servers[].router) has its new router id. A ready server found
    outside the router that was not taken out by this deployment (an operator's choice) is left out and
    reported (C(left_out)). Servers that are not ready are never added, since the router's add job cannot be
    cancelled and would add a crashed server whenever it answered again.
  - When the wait is over, the outcome of every server (settings of its launch script, what it configured,
    startup timings, error line) is appended to the run journal (O(journal)), and each server is compared with
    the last earlier run in which it came up with the same model (RV(servers[].since_last_good)).
version_added: 0.1.0
author: gpuops.sglang contributors (@gpuops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuops.sglang.common.state_dir
  - gpuops.sglang.common.http
  - gpuops.sglang.common.health
  - gpuops.sglang.common.router
  - gpuops.sglang.common.journal
  - ansible.builtin.action_common_attributes.flow
attributes:
  check_mode:
    support: full
    details:
      - In check mode the module takes one snapshot of every server (one health probe, the log and the process)
        without waiting or killing, and does not fail for servers that are not ready; RV(servers[].status)
        is then C(starting) for a server still on its way.
  diff_mode:
    support: none
  action:
    support: full
    details: The action plugin runs the module repeatedly, in slices, and prints the progress lines.
  async:
    support: none
  bypass_host_loop:
    support: none
  platform:
    platforms: posix
options:
  servers:
    description:
      - The servers to wait for.
      - O(servers[].port), O(servers[].log_path) and the pid default to what C(gpuops.sglang.server) recorded in
        the state file C(<state_dir>/<name>.json).
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - Server name - the value of its ownership marker C(GPUOPS_SGLANG_SERVER) and the name of its state file
            C(<state_dir>/<name>.json); letters, digits, C(.), C(_) and C(-), starting with a letter or digit.
        type: str
        required: true
      port:
        description: HTTP port of the server.
        type: int
      log_path:
        description: File the server writes its stdout and stderr to.
        type: path
      pid:
        description:
          - Pid of the server's main process, when it was not launched by C(gpuops.sglang.server).
          - Without a pid (given or recorded) a crash is only detected from the log.
        type: int
      action:
        description:
          - What M(gpuops.sglang.server) did to the server (V(launched), V(relaunched), V(unchanged), ...),
            recorded in the run journal with its outcome; V(rolled_back) for a relaunch with its last good
            configuration (its journal entry then replaces this run's failed attempt, which it records).
        type: str
      node_rank:
        description:
          - The server is this node of a multi-node group (C(--node-rank)). From rank 1 on SGLang serves a
            placeholder health endpoint that always answers 200, so such a node is judged by its process and its log
            alone (ready once its log says its schedulers are up, stalled after O(stall_timeout) of silence).
        type: int
  timeout:
    description:
      - Seconds the whole wait may take (1-604800). Large models need tens of minutes (weight loading, JIT
        compiles, CUDA graph capture).
      - Servers not ready by then are reported with RV(servers[].status=timeout).
    type: float
    default: 1800
  stall_timeout:
    description:
      - Seconds without new log output (health checks do not count) and without a phase change after which a
        server is reported as stalled (1-86400). V(0) disables stall detection.
      - Keep it above the longest silent step of your models, such as a JIT compile during capture.
    type: float
    default: 600
  kill_stalled:
    description:
      - Kill a stalled server with SIGKILL, its process group and every process carrying its ownership marker
        (also schedulers orphaned to PID 1), so its GPUs are freed. The task then reports a change.
      - The same for a crashed server whose main process still runs 3 s after its log showed the crash. SGLang
        kills its own tree at once after a crash, so one that lingers is stuck, holds its GPUs, and would be taken
        for running by the next relaunch.
      - A server this run left unchanged is never killed.
    type: bool
    default: false
  progress_interval:
    description:
      - Seconds between progress lines (0.1-600). Each slice of polling on the host lasts about this long (longer
        only while a health request is still in flight), so this is also the cost in round trips to the host.
    type: float
    default: 10
  run_id:
    description:
      - The run (from M(gpuops.sglang.host_lock)) this wait belongs to; every slice confirms the run still holds
        the host and fails, touching nothing, when another run took it over.
    type: str
  release_run:
    description:
      - When the wait is over (ready or not), give the host back for O(run_id), as
        M(gpuops.sglang.host_lock) with O(gpuops.sglang.host_lock#module:state=released) would - for the last call of
        a run, one round trip fewer. An interrupted wait does not release; the caller's own release still does.
    type: bool
    default: false
  hold_on_failure:
    description:
      - With O(release_run), keep the hold when a server is not ready - the caller acts on the failure (a rollback)
        and gives the host back afterwards.
    type: bool
    default: false
  _carry:
    description:
      - Internal, set by the action plugin - the state of the trackers after the previous slice. Do not set it.
    type: dict
notes:
  - The progress lines are printed by the action plugin with C(Display.display), so they show at every verbosity.
  - Stall detection reads the server log; without a log (no O(servers[].log_path) and no state file) only the
    process and the health endpoint are watched.
seealso:
  - module: gpuops.sglang.server
  - module: gpuops.sglang.server_info
"""

EXAMPLES = r"""
- name: Wait for the servers launched by gpuops.sglang.server (port, log and pid from the state files)
  gpuops.sglang.wait:
    servers:
      - name: gpu0
      - name: gpu1
    timeout: 2400
    stall_timeout: 900
    kill_stalled: true

- name: Wait for a server started some other way
  gpuops.sglang.wait:
    servers:
      - name: qwen
        port: 30000
        log_path: /var/log/sglang/qwen.log
        pid: "{{ qwen_pid }}"
    api_key: "{{ sglang_api_key }}"
    progress_interval: 5
  register: waited

- name: Show what the server configured
  ansible.builtin.debug:
    msg: "{{ waited.servers[0].facts }}"
"""

RETURN = r"""
msg:
  description: Summary; names every server that is not ready and why.
  returned: always
  type: str
  sample: "1/2 servers not ready: gpu7 crashed in loading_weights: torch.OutOfMemoryError: CUDA out of memory."
ready:
  description: Names of the servers that are ready.
  returned: always
  type: list
  elements: str
not_ready:
  description: Names of the servers that are not ready.
  returned: always
  type: list
  elements: str
elapsed:
  description: Seconds the wait took.
  returned: always
  type: float
journal_error:
  description: Why the run journal could not be written (the wait's result stands); null when it was.
  returned: when O(journal), outside check mode
  type: str
released:
  description: With O(release_run), whether the run still held the host and gave it back.
  returned: when O(release_run) and O(run_id) were given, outside check mode
  type: bool
servers:
  description: One entry per server, in the order of O(servers).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Server name.
      type: str
    status:
      description:
        - V(ready), V(crashed) (process gone, or its log shows a fatal error), V(stalled), V(timeout),
          V(replaced) (another run relaunched it meanwhile), V(unrouted) (ready, but the router did not take it
          back; C(router_error) says why), V(foreign_listener) (another process listens on its port; no request is sent to it, so it never gets the
          API key), V(misconfigured) (its port answers HTTP 404 on O(health_path), no such
          endpoint; said at once, never killed); V(starting) only in check mode.
      type: str
      sample: ready
    phase:
      description:
        - Startup phase (C(launching), C(initializing), C(loading_weights), C(allocating_memory),
          C(capturing_cuda_graph), C(warming_up), C(ready)); for a crashed or stalled server the phase it reached.
      type: str
    progress:
      description: Progress bars seen in the log, C(weights) and C(cuda_graph), each C({done, total}) or null.
      type: dict
    seconds_to_ready:
      description:
        - Seconds from launch (state file) or from the start of the wait until health answered 200; null for a
          server whose C(action) is V(unchanged) (the run did not start it; see RV(servers[].uptime_s)).
      type: float
    uptime_s:
      description: For a server whose C(action) is V(unchanged) that is ready - seconds since it was launched.
      type: float
      returned: for a ready server the run left unchanged
    facts:
      description:
        - What the server configured, from C(/get_server_info) and its log (C(max_total_num_tokens),
          C(max_running_requests), C(context_len), C(chunked_prefill_size), C(max_prefill_tokens),
          C(available_gpu_mem), C(max_mamba_cache_size) for hybrid Mamba models).
      type: dict
      sample: {"max_total_num_tokens": 1254567, "max_running_requests": 48, "context_len": 262144}
    facts_source:
      description: V(get_server_info) when the endpoint answered, else V(log).
      type: str
    error:
      description: The error the log shows, C(summary) (the exception line) and C(traceback); null when none.
      type: dict
      sample: {"summary": "RuntimeError: NCCL error: unhandled system error", "traceback": "Traceback ..."}
    router:
      description:
        - With O(router_url), for a ready server - C(worker_url) (the server as the router's worker), C(worker_id)
          (its id in the router), C(healthy) (listed healthy, so it takes the router's traffic) and C(left_out)
          (not in the router and not taken out by this deployment, so left out).
      type: dict
      sample: {"worker_url": "http://10.0.0.5:30003", "worker_id": "4b1e...", "healthy": true, "left_out": false}
    exit_status:
      description: Exit status of the main process when the host still knows it (shell style, 137 for SIGKILL).
      type: int
    timeline:
      description: Phases with the log timestamp of the line that started each, and the health answer that made it ready.
      type: list
      elements: dict
    last_log_line:
      description: Last line of the log.
      type: str
    log_tail:
      description: The last lines of the log of this run.
      type: list
      elements: str
    silent_s:
      description: Seconds since the server's log last moved (health checks do not count).
      type: float
    health:
      description: Last health answer, C(status) (HTTP status, null when unreachable) and C(error).
      type: dict
    killed_pids:
      description: Pids killed because the server stalled, or crashed and its main process lived on (O(kill_stalled)).
      type: list
      elements: int
    not_killed:
      description:
        - Why a stalled server, or a crashed one whose main process lived on, was not killed -
          V(kill_stalled is false), this run left it unchanged, another call
          held the host lock (it may be relaunching the server), or another run replaced it; null otherwise.
      type: str
    msg:
      description: One sentence about this server.
      type: str
    journal:
      description:
        - The entry appended to the run journal - C(action), C(outcome), C(script_sha256), C(model), C(settings)
          (C(command), C(flags), C(env) of the launch script, keys hidden), C(changed) (settings changed since the
          server's previous journal entry), C(facts) (configured facts and pool sizes), C(timings) (C(weights_s),
          C(cuda_graph_s), C(warmup_s), C(ready_s)), C(error).
      returned: when O(journal), outside check mode
      type: dict
    since_last_good:
      description:
        - This run against the last earlier run in which the server came up with the same model; null when there
          is none. C(run_id), C(time), C(changed) (C(setting), C(before), C(after)), and C(facts), C(timings),
          C(probe), each mapping a name to its C(before) and C(after).
        - A server renamed since (no run of its own under this name) is compared with the one that ran the same
          model on the same GPUs (C(CUDA_VISIBLE_DEVICES)); C(name) then says which.
        - C(sglang_version) (C(before), C(after)) when the SGLang the host has installed changed since (C(before) null
          when that run did not read it).
      returned: when O(journal), outside check mode
      type: dict
      sample:
        run_id: 3f2a9c
        changed: [{"setting": "--mamba-scheduler-strategy", "before": "extra_buffer", "after": "no_buffer"}]
        facts: {"max_running_requests": {"before": 32, "after": 53}}
        timings: {"ready_s": {"before": 212.0, "after": 95.0}}
    model_came_up_as:
      description:
        - When RV(servers[].since_last_good) is null but the model came up on this host under other server names
          (another topology, e.g. another C(tp_size)), those names - nothing to compare, but not a model new here.
      returned: when it applies
      type: list
      elements: str
      sample: ["gpu0", "gpu1"]
"""

# First of ours: the rest of module_utils is then compiled once per host, not in every call.
import ansible_collections.gpuops.sglang.plugins.module_utils._bytecode_cache  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpuops.sglang.plugins.module_utils.argument_specs import (
    WAIT_ARGUMENT_SPEC,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness import wait_slice
from ansible_collections.gpuops.sglang.plugins.module_utils.run_lock import RunLockError
from ansible_collections.gpuops.sglang.plugins.module_utils.sliced_module import (
    run_slice,
)


def main():
    run_slice(WAIT_ARGUMENT_SPEC, wait_slice, (ValueError, RunLockError))


if __name__ == "__main__":
    main()
