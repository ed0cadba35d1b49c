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
version_added: 1.0.0
author: gpuops.sglang contributors
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads only; runs the same in check mode.
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
        description: Server name (ownership marker C(GPUOPS_SGLANG_SERVER) and state file name).
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
  host:
    description: Address the servers listen on, as seen from the GPU host.
    type: str
    default: 127.0.0.1
  health_path:
    description: Health endpoint; C(/health_generate) runs a one-token generation.
    type: str
    default: /health_generate
  api_key:
    description: Sent as C(Authorization Bearer) when the servers were started with C(--api-key).
    type: str
  probe_timeout:
    description: Seconds each HTTP request may take; keep it above SGLang's 20 s health check timeout.
    type: float
    default: 30
  state_dir:
    description: Directory of the per-server state files written by C(gpuops.sglang.server).
    type: path
    default: /var/lib/gpuops-sglang
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
servers:
  description: One entry per server; empty in offline mode.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Server name.
      type: str
    status:
      description:
        - V(ready) (health 200), V(starting) (alive, health not 200), V(dead) (recorded as launched, no process
          left) or V(stopped) (no state file and no process).
      type: str
    alive:
      description: Whether the recorded main process (same pid and start time) or any marked process runs.
      type: bool
    pid:
      description: Recorded pid of the main process.
      type: int
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

import glob
import hashlib
import os
import re
import shlex
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.sglang.plugins.module_utils import procfs
from ansible_collections.gpuops.sglang.plugins.module_utils.http_probe import (
    get_json,
    http_get,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.prometheus import (
    sglang_gauges,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness import (
    DEFAULT_STATE_DIR,
    RunLog,
    redact,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    read_state,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log import parse_log

SERVER_INFO_FIELDS = (
    "version", "model_path", "served_model_name", "tp_size", "dp_size", "pp_size", "mem_fraction_static",
    "max_total_num_tokens", "max_running_requests", "max_req_input_len", "context_length",
    "chunked_prefill_size", "max_prefill_tokens", "cuda_graph_max_bs", "kv_cache_dtype", "attention_backend",
    "speculative_algorithm", "max_mamba_cache_size",
)
# Per DP rank in "internal_states"; the first rank's values are reported.
INTERNAL_STATE_FIELDS = ("memory_usage", "last_gen_throughput", "effective_max_running_requests_per_dp")


def nccl_exports(script_text):
    """``{NCCL_X: value}`` from the script's ``export NCCL_X=value`` lines (quotes and comments handled)."""
    exported = {}
    for line in script_text.splitlines():
        if not re.match(r"\s*export\s", line):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for word in words[1:]:
            variable, sep, value = word.partition("=")
            if sep and variable.startswith("NCCL_"):
                exported[variable] = value
    return exported


def compare_nccl(expected, processes):
    workers, mismatches, missing = [], [], []
    for info in processes:
        environ = procfs.read_environ(info.pid)
        seen = {key: value for key, value in environ.items() if key.startswith("NCCL_")}
        workers.append({"pid": info.pid, "cmdline": info.cmdline, "nccl": seen})
        absent = sorted(variable for variable in expected if variable not in seen)
        if absent:
            missing.append({"pid": info.pid, "cmdline": info.cmdline, "variables": absent})
        mismatches.extend({"pid": info.pid, "cmdline": info.cmdline, "variable": variable,
                           "expected": value, "actual": seen[variable]}
                          for variable, value in sorted(expected.items())
                          if variable in seen and seen[variable] != value)
    return {"expected": expected, "workers": workers, "mismatches": mismatches, "missing": missing,
            "ok": not mismatches and not missing}


def file_sha256(path):
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def launch_script_facts(state):
    path = state.get("launch_script")
    if not path:
        return {"path": None, "running_sha256": None, "disk_sha256": None, "drift": False, "nccl_expected": {}}
    running, on_disk = state.get("script_sha256"), file_sha256(path)
    try:
        with open(path, errors="replace") as handle:
            expected = nccl_exports(handle.read())
    except OSError:
        expected = {}
    return {"path": path, "running_sha256": running, "disk_sha256": on_disk,
            "drift": bool(running) and running != on_disk, "nccl_expected": expected}


def http_facts(host, port, params):
    """Health, /get_server_info and /metrics of one server (runs in a worker thread)."""
    facts = {"health": {"status": None, "error": "no port known"}, "server_info": None, "metrics": None}
    if not port:
        return facts
    base_url, timeout, api_key = f"http://{host}:{port}", params["probe_timeout"], params["api_key"]
    status, _body, error = http_get(base_url + params["health_path"], timeout, api_key)
    facts["health"] = {"status": status, "error": error}
    if status is None:
        return facts
    info, facts["server_info_error"] = get_json(base_url + "/get_server_info", timeout, api_key)
    if info:
        selected = {key: info[key] for key in SERVER_INFO_FIELDS if key in info}
        internal = (info.get("internal_states") or [{}])[0]
        selected.update((key, internal[key]) for key in INTERNAL_STATE_FIELDS if key in internal)
        facts["server_info"] = selected
    status, body, error = http_get(base_url + "/metrics", timeout, api_key)
    if status == 200:
        facts["metrics"] = sglang_gauges(body)
    else:
        facts["metrics_error"] = error or f"HTTP {status} (the server runs without --enable-metrics?)"
    return facts


def describe_server(spec, params, now):
    """Everything that needs no HTTP: process, script drift, NCCL environment, log."""
    name = spec["name"]
    state = read_state(params["state_dir"], name) or {}
    pid = state.get("pid")
    processes = procfs.find_marked(name)
    main_alive = procfs.pid_alive(pid, state.get("pid_starttime")) if pid else False
    alive = main_alive or bool(processes)
    script = launch_script_facts(state)
    run_log = RunLog(spec.get("log_path") or state.get("log_path"), state.get("launched_at"))
    run_log.read()
    launched_at = state.get("launched_at")
    return {
        "name": name,
        "port": spec.get("port") or state.get("port"),
        "pid": pid,
        "alive": alive,
        "launched_at": launched_at,
        "uptime_seconds": round(now - launched_at, 1) if main_alive and launched_at else None,
        "processes": [{"pid": info.pid, "cmdline": info.cmdline} for info in processes],
        "launch_script": {key: value for key, value in script.items() if key != "nccl_expected"},
        "nccl": compare_nccl(script["nccl_expected"], processes),
        "log": run_log.state.as_dict(),
        "state_recorded": bool(state),
    }


def server_status(server):
    if server["alive"]:
        return "ready" if server["health"]["status"] == 200 else "starting"
    return "dead" if server.pop("state_recorded") else "stopped"


def main():
    module = AnsibleModule(
        argument_spec={
            "servers": {"type": "list", "elements": "dict", "options": {
                "name": {"type": "str", "required": True},
                "port": {"type": "int"},
                "log_path": {"type": "path"},
            }},
            "log_path": {"type": "path"},
            "host": {"type": "str", "default": "127.0.0.1"},
            "health_path": {"type": "str", "default": "/health_generate"},
            "api_key": {"type": "str", "no_log": True},
            "probe_timeout": {"type": "float", "default": 30},
            "state_dir": {"type": "path", "default": DEFAULT_STATE_DIR},
        },
        mutually_exclusive=[("servers", "log_path")],
        supports_check_mode=True,
    )
    params = module.params
    if params["log_path"]:
        try:
            with open(params["log_path"], errors="replace") as handle:
                module.exit_json(changed=False, servers=[], log=parse_log("".join(map(redact, handle))))
        except OSError as error:
            module.fail_json(msg=f"cannot read {params['log_path']}: {error}")

    specs = params["servers"]
    if specs is None:
        state_files = sorted(glob.glob(os.path.join(params["state_dir"], "*.json")))
        specs = [{"name": os.path.basename(path)[:-len(".json")]} for path in state_files]
    now = time.time()
    servers = [describe_server(spec, params, now) for spec in specs]
    with ThreadPoolExecutor(max_workers=max(1, len(servers))) as pool:
        answers = pool.map(lambda server: http_facts(params["host"], server["port"], params), servers)
        for server, answer in zip(servers, answers):
            server.update(answer)
            server["status"] = server_status(server)
    module.exit_json(changed=False, servers=servers)


if __name__ == "__main__":
    main()
