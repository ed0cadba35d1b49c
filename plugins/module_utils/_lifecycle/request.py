# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The request of the server module, checked before any process is looked at or touched (files are only looked
at): names, ports, GPUs, files, numbers and the launch scripts' markers; one error lists every problem."""

import os
import re

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    argument_specs,
    draining,
    launchers,
    naming,
    option_ranges,
    safe_files,
)

STATES = ("started", "restarted", "stopped")
# Foreign processes that keep GPU device nodes open on bare-metal hosts without using memory.
IGNORED_GPU_HOLDERS = (r"^(/\S+/)?nvidia-persistenced\b", r"^(/\S+/)?nv-hostengine\b", r"dcgm-exporter")

# The server module's options (also read by converge.py, which plans a relaunch with them in the hold's call).
SERVER_ARGUMENT_SPEC = {
    **argument_specs.STATE_DIR,
    **argument_specs.GPU,
    **argument_specs.servers_option(
        required=True,
        gpus={"type": "list", "elements": "int"},
        launch_script={"type": "path"},
        pid_file={"type": "path"},
        extra_ports={"type": "list", "elements": "int"},
    ),
    "state": {"type": "str", "choices": list(STATES), "default": "started"},
    "rollback": {"type": "bool", "default": False},
    "max_changes": {"type": "int"},
    "max_changes_scope": {"type": "str", "choices": ["all", "unseen"], "default": "all"},
    "batch_size": {"type": "int"},
    "scripts": {"type": "list", "elements": "dict", "default": [], "options": argument_specs.SCRIPT_OPTIONS},
    "required_paths": {"type": "list", "elements": "path", "default": []},
    "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
    "run_id": {"type": "str"},
    "stop_timeout": {"type": "float", "default": 30},
    "drain_timeout": {"type": "float", "default": 60},
    "gpu_free_timeout": {"type": "float", "default": 60},
    "gpu_free_threshold_mib": {"type": "int", "default": 1024},
    "force_kill_gpu_holders": {"type": "bool", "default": False},
    "ignore_gpu_holders": {"type": "list", "elements": "str", "default": list(IGNORED_GPU_HOLDERS)},
    "lock_timeout": {"type": "float", "default": 300},
    "log_generations": {"type": "int", "default": safe_files.LOG_GENERATIONS},
    "progress_interval": {"type": "float", "default": 10},
    "launcher": {"type": "str", "choices": list(launchers.LAUNCHERS), "default": "detached"},
    **argument_specs.HTTP,
    **argument_specs.ROUTER,
    **argument_specs.SYSTEMD,
    **argument_specs.JOURNAL,
}


class ServerControlError(Exception):
    """A user-facing failure; ``details`` go into the module result next to the message."""

    def __init__(self, msg, **details):
        super().__init__(msg)
        self.details = details


def validate_request(params, launcher):
    """Check the request, and what ``launcher`` (the requested one) asks of it, before any process is looked at or
    touched (files are only looked at); raise one error listing every problem."""
    servers, state = params["servers"], params["state"]
    problems = option_ranges.range_problems(params, argument_specs.SERVER_RANGES) + draining.router_problems(
        params.get("router_url"), params["host"], params.get("router_worker_host"))
    problems += launcher.option_problems(params)
    for pattern in params["ignore_gpu_holders"]:
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"ignore_gpu_holders entry {pattern!r} is not a valid regular expression: {exc}")
    scripts = {script["name"]: script for script in params.get("scripts") or []}
    launching = state != "stopped"
    seen_names, seen_ports, gpu_owner = {}, {}, {}
    seen_files = {}  # (option, path) -> server: two servers sharing a log or script would mix up their records
    for position, server in enumerate(servers):
        where = f"servers[{position}]"
        name = server.get("name")
        if not naming.valid_server_name(name):
            problems.append(f"{where}.name {name!r} is invalid: use letters, digits, '.', '_' and '-' "
                            "(it names files and the marker value)")
        duplicate = name in seen_names
        if duplicate and naming.valid_server_name(name):
            problems.append(f"duplicate server name {name!r} (servers[{seen_names[name]}] and {where})")
        seen_names.setdefault(name, position)
        where = f"{where} ({name})"
        if launching:
            missing = [key for key in ("port", "gpus", "launch_script", "log_path") if server.get(key) in (None, [])]
            if missing:
                problems.append(f"{where}: {', '.join(missing)} required for state={state}")
        for extra in server.get("extra_ports") or []:
            if not 1 <= extra <= 65535:
                problems.append(f"{where}.extra_ports entry {extra} is out of range 1-65535")
        port = server.get("port")
        if port is not None:
            if not 1 <= port <= 65535:
                problems.append(f"{where}.port {port} is out of range 1-65535")
            elif port in seen_ports:
                problems.append(f"port {port} is used by both {seen_ports[port]!r} and {name!r}")
            seen_ports.setdefault(port, name)
        for gpu in server.get("gpus") or []:
            if gpu < 0:
                problems.append(f"{where}.gpus contains {gpu}; GPU indexes are >= 0")
            elif gpu_owner.get(gpu, name) != name:
                problems.append(f"GPU {gpu} is assigned to both {gpu_owner[gpu]!r} and {name!r}")
            gpu_owner.setdefault(gpu, name)
        for option in ("launch_script", "log_path", "pid_file"):
            path = None if duplicate else server.get(option)  # a repeated server repeats its files: said above
            if path and (option, os.path.realpath(path)) in seen_files:
                problems.append(f"{option} {path} is used by both {seen_files[option, os.path.realpath(path)]!r} "
                                f"and {name!r}")
            elif path:
                seen_files[option, os.path.realpath(path)] = name
        if launching and server.get("log_path"):
            problem = safe_files.log_dir_problem(os.path.dirname(server["log_path"]) or ".")
            if problem:
                problems.append(f"{where}.log_path {server['log_path']}: {problem}")
        for option in ("log_path", "pid_file"):
            if server.get(option) and os.path.islink(server[option]):
                problems.append(f"{where}.{option} {server[option]} is a symbolic link (to "
                                f"{os.readlink(server[option])}); refusing to write through it: remove it or "
                                "point it at a regular file")
        script = server.get("launch_script")
        if launching and script:
            problems.extend(script_problems(where, name, script, scripts.get(name)))
        if launching:
            problems.extend(launcher.server_problems(where, server))
    for name, script in scripts.items():
        server = next((server for server in servers if server.get("name") == name), None)
        if server is None or server.get("launch_script") != script["path"]:
            problems.append(f"scripts entry {name!r} ({script['path']}) is not the launch_script of a listed server")
    if problems:
        raise ServerControlError("invalid request: " + "; ".join(problems), problems=problems)


def script_problems(where, name, path, given):
    """Problems of one launch script: the content to be written when ``given``, else the file on the host."""
    if given is not None:
        content = given["content"]
    elif not os.path.isfile(path):
        return [f"{where}.launch_script {path} does not exist or is not a file"]
    elif not os.access(path, os.X_OK):
        mode = oct(os.stat(path).st_mode & 0o777)
        return [f"{where}.launch_script {path} is not executable (mode {mode}); make it executable"]
    else:
        with open(path, errors="replace") as handle:
            content = handle.read()
    exported = _exported_marker(content)
    if exported not in (None, name):
        return [(f"{where}.launch_script {path} exports {naming.MARKER_VAR}={exported}, "
                 f"not {name}: its processes would be taken for server {exported!r}")]
    return []


_MARKER_EXPORT = re.compile(r"^[ \t]*export[ \t]+" + naming.MARKER_VAR + r"=['\"]?([^'\"\s]+)", re.MULTILINE)


def _exported_marker(script_text):
    """The marker value a launch script exports (the last one wins in sh), or None."""
    values = _MARKER_EXPORT.findall(script_text)
    return values[-1] if values else None
