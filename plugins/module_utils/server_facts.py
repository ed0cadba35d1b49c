# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Facts about the SGLang servers of a host, for gpuops.sglang.server_info.

Per server: process liveness, launch script drift, the NCCL environment every worker really has
compared with the launch script, the parsed log of the current run, and - probed in parallel, so a
hung server costs one probe timeout - health, selected ``/get_server_info`` fields and ``/metrics`` gauges.
"""

import glob
import os
import re
import shlex
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    capacity_rules,
    capacity_snapshot,
    journal,
    launchers,
    naming,
    procfs,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.fact_table import (
    SERVER_INFO_FIELDS,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.http_probe import (
    get_json,
    http_get,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launch_settings import (
    node_rank_of,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.prometheus import (
    sglang_gauges,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness_rules import (
    SERVER_INFO_RULES,
    Observation,
    decide,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.run_log import RunLog
from ansible_collections.gpuops.sglang.plugins.module_utils.script_files import (
    read_script,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_text
from ansible_collections.gpuops.sglang.plugins.module_utils.server_plan import (
    recorded_settings,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_processes import (
    ServerProcesses,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    read_state,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_install import (
    server_versions,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log import parse_log

# Per DP rank in "internal_states"; the first rank's values are reported (max_mamba_cache_size as the scheduler
# sized it: the top level holds the launch argument).
INTERNAL_STATE_FIELDS = ("memory_usage", "last_gen_throughput", "effective_max_running_requests_per_dp",
                         "max_mamba_cache_size")


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


def launch_script_facts(state):
    path = state.get("launch_script")
    if not path:
        return {"path": None, "running_sha256": None, "disk_sha256": None, "drift": False, "nccl_expected": {}}
    running = state.get("script_sha256")
    try:
        on_disk, text = read_script(path)
        expected = nccl_exports(text)
    except OSError:
        on_disk, expected = None, {}
    return {"path": path, "running_sha256": running, "disk_sha256": on_disk,
            "drift": bool(running) and running != on_disk, "nccl_expected": expected}


def http_facts(host, port, params, foreign_listener=None):
    """Health, /get_server_info and /metrics of one server (runs in a worker thread); none of them asked when
    ``foreign_listener`` says another process listens on its port (it must never get the API key)."""
    facts = {"health": {"status": None, "error": "no port known"}, "server_info": None, "metrics": None}
    if foreign_listener:
        facts["health"] = {"status": None, "error": foreign_listener}
        return facts
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


def describe_server(spec, params, now, by_name):
    """Everything that needs no HTTP: process, script drift, NCCL environment, log; ``by_name``: the launchers."""
    name = spec["name"]
    state = read_state(params["state_dir"], name) or {}
    launcher = by_name.get(recorded_settings(state)["launcher"], by_name[launchers.DEFAULT_LAUNCHER])
    try:
        running, launcher_facts = launcher.observe(name, state), launcher.status(name, state) if state else None
    except launchers.LauncherError as exc:
        # A status report still reports what /proc shows when the launcher (systemctl) cannot answer.
        launcher_facts = {"launcher": launcher.name, "error": str(exc)}
        running = by_name[launchers.DEFAULT_LAUNCHER].observe(name, state)
    processes = [running.processes[pid] for pid in sorted(running.processes)]
    main_alive = running.main is not None
    alive = main_alive or bool(processes)
    pid, launched_at = state.get("pid"), state.get("launched_at")
    if main_alive and running.main.pid != pid:
        # systemd restarted it since it was recorded: its current run is the one to look at.
        pid, launched_at = running.main.pid, procfs.start_epoch(running.main)
    script = launch_script_facts(state)
    run_log = RunLog(spec.get("log_path") or state.get("log_path"), launched_at)
    run_log.read()
    return {
        "name": name,
        "port": spec.get("port") or state.get("port"),
        # A node of a multi-node group: from rank 1 on, its health endpoint is a placeholder that proves nothing.
        "node_rank": node_rank_of(state.get("settings")),
        "launcher": launcher_facts,
        "pid": pid,
        "alive": alive,
        "main_alive": main_alive,
        "launched_at": launched_at,
        "uptime_seconds": round(now - launched_at, 1) if main_alive and launched_at else None,
        "processes": [{"pid": info.pid, "cmdline": info.cmdline} for info in processes],
        "launch_script": {key: value for key, value in script.items() if key != "nccl_expected"},
        "nccl": compare_nccl(script["nccl_expected"], processes),
        "log": run_log.state.as_dict(),
        "state_recorded": bool(state),
        "_settings": state.get("settings"),
    }


def server_status(server, now, foreign_listener=None):
    """The verdict of ``SERVER_INFO_RULES`` on one snapshot, else starting; consumes the ``state_recorded`` key."""
    observation = Observation(now=now, snapshot=True, main_alive=server["main_alive"], processes_alive=server["alive"],
                              state_recorded=server.pop("state_recorded"), log_phase=server["log"].get("phase"),
                              answer=server["health"], placeholder_health=bool(server.get("node_rank")),
                              foreign_listener=foreign_listener)
    verdict = decide(observation, SERVER_INFO_RULES)
    return verdict.status if verdict else "starting"


def parse_log_file(path):
    """Offline parse of a whole SGLang log, API keys redacted.

    Never raises: ``read_error`` in the result says why the log (or its rest) could not be read, else None;
    what was read is parsed.
    """
    lines, read_error = [], None
    try:
        with open(path, "rb") as handle:
            for raw_line in handle:
                lines.append(scrub_text(raw_line.decode("utf-8", "replace")))
    except OSError as exc:
        read_error = f"cannot read {path}: {exc.strerror or exc}"
    return dict(parse_log("".join(lines)), read_error=read_error)


def describe_servers(params):
    """Facts of the servers in ``params["servers"]``, or of every server with a state file when None.

    ``params`` are server_info's options: servers, host, health_path, api_key, probe_timeout, state_dir.
    """
    specs = params["servers"]
    if specs is None:
        state_files = sorted(glob.glob(os.path.join(params["state_dir"], "*" + naming.STATE_SUFFIX)))
        # The run lease (run.json) lies beside the state files: it is no server.
        specs = [{"name": os.path.basename(path)[:-len(naming.STATE_SUFFIX)]} for path in state_files
                 if naming.valid_server_name(os.path.basename(path)[:-len(naming.STATE_SUFFIX)])]
    now = time.time()
    owner = ServerProcesses(params["state_dir"])
    by_name = launchers.launchers(owner, params)
    with owner.one_look():
        servers = [describe_server(spec, params, now, by_name) for spec in specs]
    sockets = procfs.ListeningSockets()
    foreign = {server["name"]: owner.foreign_listener(server["name"], server["port"], likely=[server["pid"]],
                                                      sockets=sockets)
               if server["port"] else None for server in servers}
    # Which SGLang each server's interpreter has installed now (an upgrade since the launch shows here).
    installed = server_versions({server["name"]: server["_settings"] for server in servers})
    with ThreadPoolExecutor(max_workers=max(1, len(servers))) as pool:
        answers = pool.map(lambda server: http_facts(params["host"], server["port"], params, foreign[server["name"]]),
                           servers)
        for server, answer in zip(servers, answers):
            server.update(answer)
            server["status"] = server_status(server, now, foreign[server["name"]])
            settings = server.pop("_settings")
            server["sglang"] = installed.get(server["name"])
            server["capacity"] = capacity_rules.judge(capacity_snapshot.snapshot_of(
                server["metrics"], server["server_info"], settings, server["log"].get("facts"))) \
                if server["metrics"] else None
    return servers


def journal_status(params, servers):
    """Append what a status run saw (health, live gauges, the capacity verdict) to the run journal."""
    entries = {server["name"]: {key: value for key, value in (
        ("outcome", server["status"]), ("pid", server["pid"]), ("metrics", server["metrics"]),
        ("capacity", server["capacity"]), ("sglang_version", (server.get("sglang") or {}).get("version")))
        if value is not None} for server in servers}
    header = dict(journal.run_header(params["state_dir"], "status"), by=params.get("_run_by") or {})
    return journal.append(params["state_dir"], header, entries)
