# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Server topology of one GPU host: expansion of the generated layouts and validation.

Runs on the controller so that a bad topology fails before any host is touched.
"""

from __future__ import annotations

import difflib

from ansible_collections.gpuops.sglang.plugins.module_utils.option_ranges import kind

# Names end up in file names, the ownership marker and log lines: one rule for controller and host.
from ansible_collections.gpuops.sglang.plugins.module_utils.procfs import SERVER_NAME
from ansible_collections.gpuops.sglang.plugins.plugin_utils.launch_script import (
    HOST_SETTINGS,
    SERVER_SETTINGS,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.role_options import (
    override_problems,
)

# Keys of a sglang_servers entry: its place in the topology, its files, then the settings it overrides.
TOPOLOGY_KEYS = ("name", "port", "gpus", "tp_size", "dp_size", "launch_script", "log_path")
SERVER_KEYS = TOPOLOGY_KEYS + SERVER_SETTINGS
_DICT_SETTINGS = ("env", "extra_args", "speculative")


class TopologyError(ValueError):
    """All problems of a topology, one per line, each naming the bad value."""


def _as_int(value):
    """int() that refuses booleans (YAML ``yes`` is not a GPU index); ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(value)  # noqa: TRY004 - one ValueError path reports every bad value
    if isinstance(value, int):
        return value
    return int(str(value).strip())


def parse_gpus(gpus):
    """``[0, 1]``, ``"0,1"`` or ``3`` -> list of ints (ValueError on anything else)."""
    if isinstance(gpus, (list, tuple)):
        return [_as_int(gpu) for gpu in gpus]
    if isinstance(gpus, str):
        return [_as_int(gpu) for gpu in gpus.split(",") if gpu.strip()]
    return [_as_int(gpus)]


def generate_servers(gpu_count, tp_size=1, dp_size=1, base_port=30000):
    """Split GPUs 0..gpu_count-1 into consecutive groups of tp_size * dp_size GPUs, one server each.

    Group size 1 gives the per-GPU layout (gpu0..gpuN-1); a group of 8 gives one TP=8 server gpu0-7.
    """
    group = tp_size * dp_size
    if group < 1 or gpu_count < 1 or gpu_count % group:
        raise TopologyError(
            f"gpu_count={gpu_count!r} cannot be split into servers of tp_size*dp_size={group!r} GPUs; "
            "use a tp_size*dp_size that divides the GPU count"
        )
    servers = []
    for index, first in enumerate(range(0, gpu_count, group)):
        gpus = list(range(first, first + group))
        name = f"gpu{first}" if group == 1 else f"gpu{first}-{gpus[-1]}"
        servers.append({"name": name, "port": base_port + index, "gpus": gpus,
                        "tp_size": tp_size, "dp_size": dp_size})
    return servers


def _unknown_key_problem(key):
    if key in HOST_SETTINGS:
        return f"{key} cannot be set per server; set sglang_{key} for the host"
    close = difflib.get_close_matches(str(key), SERVER_KEYS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key {key!r}; {hint}an entry takes {', '.join(SERVER_KEYS)}"


def _normalize(server, position, problems):
    """One explicit server entry -> dict with typed name/port/gpus/tp_size/dp_size (other keys kept)."""
    if not isinstance(server, dict):
        problems.append(f"server #{position}: {server!r} is not a dict with name, port and gpus")
        return None
    label = f"server {server.get('name', f'#{position}')!r}"
    result = dict(server)
    problems.extend(f"{label}: {_unknown_key_problem(key)}" for key in server if key not in SERVER_KEYS)
    missing = [key for key in ("name", "port", "gpus") if key not in server]
    if missing:
        problems.append(f"{label}: missing {', '.join(missing)}")
        return None
    name = str(server["name"])
    # fullmatch: a pattern's $ also matches before a trailing newline.
    if not SERVER_NAME.fullmatch(name):
        problems.append(f"{label}: name {name!r} must start with a letter or digit and contain only letters, "
                        "digits, '.', '_' and '-'")
    for key in _DICT_SETTINGS:
        if server.get(key) is not None and not isinstance(server[key], dict):
            problems.append(f"{label}: {key} must be a dict, got a {kind(server[key])}")
    problems.extend(override_problems(server, label))
    result["name"] = name
    try:
        result["port"] = _as_int(server["port"])
        if not 1 <= result["port"] <= 65535:
            raise ValueError(result["port"])
    except ValueError:
        problems.append(f"{label}: port {server['port']!r} is not a TCP port (1-65535)")
        return None
    try:
        gpus = parse_gpus(server["gpus"])
        if not gpus or min(gpus) < 0:
            raise ValueError(gpus)
    except ValueError:
        problems.append(f"{label}: gpus {server['gpus']!r} is not a list of GPU indexes (e.g. [0, 1])")
        return None
    if len(set(gpus)) != len(gpus):
        problems.append(f"{label}: gpus {gpus!r} lists a GPU twice")
    result["gpus"] = gpus
    try:
        dp_size = _as_int(server.get("dp_size", 1))
        tp_size = _as_int(server.get("tp_size", len(gpus) // max(dp_size, 1)))
    except ValueError:
        problems.append(f"{label}: tp_size/dp_size must be integers")
        return None
    if tp_size < 1 or dp_size < 1 or tp_size * dp_size != len(gpus):
        problems.append(
            f"{label}: tp_size={tp_size} x dp_size={dp_size} does not match its {len(gpus)} GPUs {gpus!r}; "
            "tp_size x dp_size must equal the number of GPUs"
        )
    result["tp_size"], result["dp_size"] = tp_size, dp_size
    return result


def validate_servers(servers, gpu_count=None):
    """Normalize and cross-check a server list; raise TopologyError listing every problem.

    gpu_count, when known (declared, or reported by the host), bounds the GPU indexes.
    """
    if not isinstance(servers, (list, tuple)):
        raise TopologyError(f"sglang_servers must be a list of servers ({{name, port, gpus, ...}}), "
                            f"got a {kind(servers)}")
    if not servers:
        raise TopologyError("the server list is empty; define sglang_servers or a GPU count")
    problems = []
    normalized = [_normalize(server, position, problems) for position, server in enumerate(servers)]
    normalized = [server for server in normalized if server is not None]
    names, ports, gpu_owner = {}, {}, {}
    for server in normalized:
        name = server["name"]
        if name in names:
            problems.append(f"duplicate server name {name!r}")
        names[name] = server
        if server["port"] in ports:
            problems.append(f"duplicate port {server['port']}: servers {ports[server['port']]!r} and {name!r}")
        ports.setdefault(server["port"], name)
        for gpu in server["gpus"]:
            if gpu in gpu_owner and gpu_owner[gpu] != name:
                problems.append(f"overlapping GPUs: GPU {gpu} is used by servers {gpu_owner[gpu]!r} and {name!r}")
            gpu_owner.setdefault(gpu, name)
        if gpu_count is not None:
            problems.extend(gpu_index_problems([server], gpu_count))
    if problems:
        raise TopologyError("invalid server topology:\n- " + "\n- ".join(problems))
    return normalized


def gpu_index_problems(servers, gpu_count):
    """One message per GPU index of the validated ``servers`` beyond a host's ``gpu_count`` GPUs.

    validate_servers bounds the indexes with it; a relaunch checks the expanded topology against the count the
    host reported (gpu_info) with it, without expanding the topology again.
    """
    count = int(gpu_count)
    return [f"server {server['name']!r}: GPU index {gpu} is beyond the host's GPU count {count} (valid: 0-{count - 1})"
            for server in servers for gpu in server["gpus"] if gpu >= count]


def expand_topology(servers=None, gpu_count=8, tp_size=1, dp_size=1, base_port=30000, host_gpu_count=None):
    """The host's validated server list: the explicit ``servers`` when given, else the generated layout.

    host_gpu_count (reported by the host) bounds GPU indexes; it defaults to the declared gpu_count.
    """
    if not servers:
        try:
            layout = [_as_int(value) for value in (gpu_count, tp_size, dp_size, base_port)]
        except ValueError:
            raise TopologyError("gpu_count, tp_size, dp_size and base_port must be integers, got "
                                f"{gpu_count!r}, {tp_size!r}, {dp_size!r}, {base_port!r}") from None
        servers = generate_servers(*layout)
    bound = host_gpu_count if host_gpu_count is not None else gpu_count
    return validate_servers(servers, gpu_count=bound)


def add_paths(servers, script_dir, log_dir):
    """Set each server's ``launch_script`` and ``log_path`` (``<dir>/<name>.sh|.log``) unless it names its own."""
    for server in servers:
        server.setdefault("launch_script", f"{script_dir.rstrip('/')}/{server['name']}.sh")
        server.setdefault("log_path", f"{log_dir.rstrip('/')}/{server['name']}.log")
    return servers
