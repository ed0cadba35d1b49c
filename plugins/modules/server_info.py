# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
---
module: server_info
short_description: Facts about the SGLang servers of a host, or an offline parse of an SGLang log
description:
  - For every server (those listed in O(servers), else every server with a state file in O(state_dir)) reports
    whether its process is alive, its pid and uptime, launch-script drift, health, selected
    C(/get_server_info) fields, C(/metrics) gauges, the C(NCCL_*) environment every worker process really
    has compared with the launch script, and its parsed log (phase, progress, configured facts, error).
  - With only O(log_path), parses that log file offline and returns RV(log).
  - The HTTP requests to all servers run in parallel, so a hung server costs at most O(probe_timeout) once.
version_added: 0.1.0
author: gpuops.sglang contributors (@gpuops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuops.sglang.common.state_dir
  - gpuops.sglang.common.http
  - gpuops.sglang.common.health
  - gpuops.sglang.common.systemd
  - gpuops.sglang.common.journal
attributes:
  check_mode:
    support: full
    details: Reads only (and, outside check mode, appends a status line to the run journal with O(journal)).
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  servers:
    description:
      - The servers to describe; O(servers[].port) and O(servers[].log_path) default to what the state file recorded.
      - Default is every server with a state file in O(state_dir).
    type: list
    elements: dict
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
  log_path:
    description: Parse this SGLang log offline instead of describing servers. Mutually exclusive with O(servers).
    type: path
  _run_by:
    description:
      - Internal, set by the action plugin - who runs the task (controller, user, AWX job), for the run journal.
        Do not set it.
    type: dict
notes:
  - C(/metrics) answers only when the server runs with C(--enable-metrics); RV(servers[].metrics) is null otherwise.
seealso:
  - module: gpuops.sglang.wait
  - module: gpuops.sglang.server
"""

EXAMPLES = r"""
- name: Describe every server of the host
  gpuops.sglang.server_info:
  register: info

- name: Fail when a launch script changed since its server started
  ansible.builtin.assert:
    that: info.servers | selectattr('launch_script.drift') | list | length == 0
    fail_msg: "relaunch needed: {{ info.servers | selectattr('launch_script.drift') | map(attribute='name') | join(', ') }}"

- name: Fail when a worker does not run with the NCCL settings of its launch script
  ansible.builtin.assert:
    that: info.servers | rejectattr('nccl.ok') | list | length == 0

- name: Why did the last start fail?
  gpuops.sglang.server_info:
    log_path: /var/log/sglang/gpu7.log
  register: parsed

- name: Show the error
  ansible.builtin.debug:
    msg: "{{ parsed.log.phase }}: {{ parsed.log.error.summary | default('no error') }}"
"""

RETURN = r"""
journal_error:
  description: Why the status line could not be appended to the run journal; null when it was.
  returned: when O(journal) and servers were reported, outside check mode
  type: str
servers:
  description: One entry per server; empty in offline mode.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Server name.
      type: str
    sglang:
      description:
        - What the interpreter of the server's launch command (the first word of the command its script runs) has
          installed of sglang now, read by that interpreter without importing sglang - C(interpreter), C(version)
          (null when there is none or it cannot be read), C(location), or C(problem) saying why there is no version.
          Null for a server with no recorded command.
      type: dict
      sample: {"interpreter": "/opt/sglang/bin/python", "version": "0.5.23", "location": "/opt/sglang/lib/python3.12/site-packages"}
    status:
      description:
        - V(ready) (health 200), V(starting) (alive, health not 200, no crash in its log), V(crashed) (its log
          shows a fatal error; the C(error) of RV(servers[].log) has the exception line), V(orphaned) (processes of the server,
          such as a scheduler, still run without their main process - they may hold GPU memory), V(dead)
          (recorded as launched, no process left), V(foreign_listener) (another process listens on its port - nothing
          is asked of it), V(misconfigured) (it answers HTTP 404 on O(health_path), no such
          endpoint) or V(stopped) (no state file and no process).
      type: str
    alive:
      description: Whether the recorded main process (same pid and start time) or any process of the server runs.
      type: bool
    main_alive:
      description: Whether the recorded main process (same pid and start time) runs.
      type: bool
    pid:
      description: Recorded pid of the main process (under systemd, the unit's main process, also after systemd restarted it).
      type: int
    launcher:
      description:
        - What the launcher knows of the server; null without a state file.
        - C(launcher) (V(detached) or V(systemd)); under systemd also C(unit), C(active_state), C(sub_state),
          C(main_pid), C(restarts) (how often systemd restarted it) and C(enabled) (starts at boot), or C(error)
          when systemctl did not answer.
      type: dict
      sample: {"launcher": "systemd", "unit": "gpuops-sglang-1b2c3d4e-gpu3.service", "active_state": "active", "restarts": 1}
    uptime_seconds:
      description: Seconds since launch, while alive.
      type: float
    processes:
      description: Every live process carrying the server's ownership marker, C(pid) and C(cmdline).
      type: list
      elements: dict
    launch_script:
      description:
        - C(path), C(running_sha256) (recorded at launch), C(disk_sha256) (now; null when the file is gone) and
          C(drift), true when the script on disk is not the one the server runs.
      type: dict
    health:
      description: C(status) (HTTP status, null when unreachable) and C(error).
      type: dict
    server_info:
      description: Selected C(/get_server_info) fields; null when it did not answer.
      type: dict
    metrics:
      description:
        - C(/metrics) gauges (C(token_usage), C(mamba_usage), C(num_running_reqs), C(num_queue_reqs),
          C(gen_throughput), ...); null without C(--enable-metrics).
      type: dict
    capacity:
      description:
        - The binding constraint named from the live gauges and what the server configured (rules and sources in
          C(docs/capacity.md)) - C(bound) (V(idle), V(mamba), V(kv), V(request_limit), V(queueing), V(headroom),
          V(unknown)), C(evidence), C(advice) (a flag to try, or null), C(figures); null without metrics.
      type: dict
      sample:
        bound: mamba
        evidence: mamba_usage 0.61 vs token_usage 0.21, 32 running = max_running_requests, queue 0
        advice: try `--mamba-scheduler-strategy no_buffer` or a larger `--max-mamba-cache-size`
    nccl:
      description:
        - C(expected), the C(export NCCL_*=...) lines of the launch script; C(workers), every marked process with
          the C(NCCL_*) variables of its environment; C(mismatches) (C(pid), C(variable), C(expected), C(actual));
          C(missing) (C(pid), C(variables)); C(ok), true when every worker has every expected value.
      type: dict
    log:
      description: Parsed log of the current run, shaped like RV(log).
      type: dict
log:
  description: Offline parse of O(log_path).
  returned: when O(log_path) is given
  type: dict
  contains:
    phase:
      description: Last startup phase reached, C(crashed) or C(stopping).
      type: str
    component:
      description: V(draft) when that phase belongs to the speculative-decoding draft model, else V(target).
      type: str
    progress:
      description: C(weights) and C(cuda_graph) progress, each C({done, total}) or null.
      type: dict
    facts:
      description: What the server configured (C(max_total_num_tokens), C(max_running_requests), C(context_len), ...).
      type: dict
    error:
      description: C(summary) (the exception line) and C(traceback); null when the log shows no error.
      type: dict
    timeline:
      description: Phases with the timestamp and line that started each.
      type: list
      elements: dict
    last_line:
      description: Last line of the log.
      type: str
"""

# First of ours: the rest of module_utils is then compiled once per host, not in every call.
import ansible_collections.gpuops.sglang.plugins.module_utils._bytecode_cache  # noqa: F401  pylint: disable=unused-import
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.sglang.plugins.module_utils import (
    argument_specs,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.option_ranges import (
    range_problems,
    url_path_problem,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_facts import (
    describe_servers,
    journal_status,
    parse_log_file,
)

ARGUMENT_SPEC = {
    **argument_specs.servers_option(),
    "log_path": {"type": "path"},
    **argument_specs.HTTP,
    **argument_specs.HEALTH,
    **argument_specs.STATE_DIR,
    **argument_specs.SYSTEMD,
    **argument_specs.JOURNAL,
    # Internal, set by the action plugin: who runs this status (for the run journal).
    "_run_by": {"type": "dict"},
}


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[("servers", "log_path")],
        supports_check_mode=True,
    )
    problems = range_problems(module.params, argument_specs.HTTP_RANGES)
    problems += [problem for problem in [url_path_problem("health_path", module.params["health_path"])] if problem]
    if problems:
        module.fail_json(msg="invalid request: " + "; ".join(problems))
    log_path = module.params["log_path"]
    if log_path:
        log = parse_log_file(log_path)
        if log.get("read_error"):
            module.fail_json(msg=log["read_error"])
        module.exit_json(changed=False, servers=[], log=log)
    servers = describe_servers(module.params)
    result = {"changed": False, "servers": servers}
    if module.params["journal"] and not module.check_mode and servers:
        result["journal_error"] = journal_status(module.params, servers)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
