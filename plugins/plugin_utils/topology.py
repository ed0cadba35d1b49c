# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Server topology of one GPU host: expansion of the generated layouts, of the multi-node groups it is a node of,
and validation.

Runs on the controller so that a bad topology fails before any host is touched.
"""

from __future__ import annotations

import difflib

# Names end up in file names, the ownership marker and log lines: one rule for controller and host.
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    launch_script_file,
    log_file,
    server_name_problem,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.option_ranges import kind
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
# A sglang_groups entry: one server whose tensor-parallel ranks span the hosts of ``nodes`` (rank 0 first), with
# the settings every node's rank shares.
GROUP_KEYS = ("name", "port", "tp_size", "nodes", "dist_init_port", "dist_init_addr") + SERVER_SETTINGS
# A node's own port: the group's port is taken on that host (or several nodes share a machine, as in tests).
NODE_KEYS = ("host", "gpus", "address", "env", "port")
DEFAULT_DIST_INIT_PORT = 50000


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
    node = server.get("node")  # a rank of a multi-node group: its GPUs are this host's share of tp_size
    problems.extend(f"{label}: {_unknown_key_problem(key)}" for key in server
                    if key not in SERVER_KEYS and not (key in ("node", "extra_ports") and isinstance(node, dict)))
    missing = [key for key in ("name", "port", "gpus") if key not in server]
    if missing:
        problems.append(f"{label}: missing {', '.join(missing)}")
        return None
    name = str(server["name"])
    if server_name_problem(name):
        problems.append(f"{label}: {server_name_problem(name)}")
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
    nodes = node["nnodes"] if node else 1
    if tp_size < 1 or dp_size < 1 or tp_size * dp_size != len(gpus) * nodes:
        where = f"its {len(gpus)} GPUs {gpus!r}" + (f" on each of its {nodes} nodes" if node else "")
        problems.append(
            f"{label}: tp_size={tp_size} x dp_size={dp_size} does not match {where}; "
            "tp_size x dp_size must equal the number of GPUs" + (" of all its nodes" if node else "")
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


def group_members(groups, host, play_hosts=None):
    """The servers ``host`` runs as a node of the multi-node ``groups`` (sglang_groups), each with its ``node``:
    group, nnodes, node_rank, dist_init_addr (rank 0's rendezvous) and the group's hosts in rank order.

    Every group is checked, not only this host's: all nodes see the same problems, before any host is touched.
    ``play_hosts``: the hosts of the play (ansible_play_hosts_all) when a relaunch asks; a group must have all its
    nodes in it, or the relaunch would stop ranks whose peers it cannot start. None: not checked (a status or a
    stop may look at one node).
    """
    if groups in (None, "", []):
        return []
    if not isinstance(groups, (list, tuple)):
        raise TopologyError(f"sglang_groups must be a list of groups ({{name, port, tp_size, nodes, ...}}), "
                            f"got a {kind(groups)}")
    problems, members, names = [], [], set()
    for position, group in enumerate(groups):
        label = f"sglang_groups[{position}]"
        if not isinstance(group, dict):
            problems.append(f"{label}: {group!r} is not a dict with name, port, tp_size and nodes")
            continue
        label = f"group {group.get('name', f'#{position}')!r}"
        problems.extend(f"{label}: unknown key {key!r}; a group takes {', '.join(GROUP_KEYS)}"
                        for key in group if key not in GROUP_KEYS)
        missing = [key for key in ("name", "port", "tp_size", "nodes") if key not in group]
        if missing:
            problems.append(f"{label}: missing {', '.join(missing)}")
            continue
        if group["name"] in names:
            problems.append(f"duplicate group name {group['name']!r}")
        names.add(group["name"])
        nodes = group["nodes"]
        if not isinstance(nodes, (list, tuple)) or len(nodes) < 2:
            problems.append(f"{label}: nodes must list at least 2 nodes ({{host, gpus}}, rank 0 first); a group on "
                            "one host is a server of sglang_servers")
            continue
        member = _group_member(group, label, host, play_hosts, problems)
        if member:
            members.append(member)
    if problems:
        raise TopologyError("invalid multi-node groups (sglang_groups):\n- " + "\n- ".join(problems))
    return members


def _group_member(group, label, host, play_hosts, problems):
    """Check one group's nodes; this host's server of it (or None)."""
    nodes, hosts, member = group["nodes"], [], None
    for rank, node in enumerate(group["nodes"]):
        if not isinstance(node, dict) or "host" not in node or "gpus" not in node:
            problems.append(f"{label}: nodes[{rank}] {node!r} is not a dict with host and gpus")
            return None
        problems.extend(f"{label}: nodes[{rank}]: unknown key {key!r}; a node takes {', '.join(NODE_KEYS)}"
                        for key in node if key not in NODE_KEYS)
        if node["host"] in hosts:
            problems.append(f"{label}: host {node['host']!r} is listed twice; one rank per host")
        hosts.append(node["host"])
        if play_hosts is not None and node["host"] not in play_hosts:
            problems.append(f"{label}: node {node['host']!r} (rank {rank}) is not in this play; a group is relaunched "
                            "as one unit, so every node must be (check --limit and the inventory)")
        if node.get("env") is not None and not isinstance(node["env"], dict):
            problems.append(f"{label}: nodes[{rank}].env must be a dict, got a {kind(node['env'])}")
    try:
        tp_size = _as_int(group["tp_size"])
        counts = {len(parse_gpus(node["gpus"])) for node in nodes}
    except ValueError:
        problems.append(f"{label}: tp_size and every node's gpus must be integers (GPU indexes)")
        return None
    if len(counts) != 1 or tp_size != counts.pop() * len(nodes):
        problems.append(f"{label}: tp_size={tp_size} must be split evenly over its {len(nodes)} nodes (the same "
                        f"number of GPUs on each: {tp_size // len(nodes) if tp_size % len(nodes) == 0 else '?'}); "
                        f"nodes have {[len(parse_gpus(node['gpus'])) for node in nodes]} GPUs")
    address = group.get("dist_init_addr")
    if address is None:
        port = group.get("dist_init_port", DEFAULT_DIST_INIT_PORT)
        try:
            if not 1 <= _as_int(port) <= 65535:
                raise ValueError(port)
        except ValueError:
            problems.append(f"{label}: dist_init_port {port!r} is not a TCP port (1-65535)")
        address = f"{nodes[0].get('address') or nodes[0]['host']}:{port}"
    elif (not isinstance(address, str) or address.rpartition(":")[0] == "" or not address.rpartition(":")[2].isdigit()
          or not 1 <= int(address.rpartition(":")[2]) <= 65535):
        problems.append(f"{label}: dist_init_addr {address!r} must be host:port (port 1-65535), rank 0's rendezvous "
                        "address")
    if host in hosts:
        rank = hosts.index(host)
        node = nodes[rank]
        member = {key: value for key, value in group.items() if key not in ("nodes", "dist_init_port", "dist_init_addr")}
        member.update(gpus=node["gpus"], port=node.get("port", group["port"]),
                      env={**(group.get("env") or {}), **(node.get("env") or {})},
                      node={"group": group["name"], "nnodes": len(nodes), "node_rank": rank,
                            "dist_init_addr": address, "hosts": hosts})
        if rank == 0 and address.rpartition(":")[2].isdigit():
            # Rank 0 listens on the rendezvous port too (SGLang's TCPStore, held while serving): checked free.
            member["extra_ports"] = [int(address.rpartition(":")[2])]
    return member


def expand_topology(servers=None, gpu_count=8, tp_size=1, dp_size=1, base_port=30000, host_gpu_count=None,
                    groups=None, host=None, play_hosts=None):
    """The host's validated server list: the explicit ``servers`` when given, else the generated layout - unless
    the host is a node of a multi-node group (``groups``), then only the explicit servers - plus its group ranks.

    host_gpu_count (reported by the host) bounds GPU indexes; it defaults to the declared gpu_count.
    """
    members = group_members(groups, host, play_hosts)
    bound = host_gpu_count if host_gpu_count is not None else gpu_count
    if isinstance(servers, (list, tuple)) and any(isinstance(server, dict) and "node" in server for server in servers):
        raise TopologyError("invalid server topology:\n- a sglang_servers entry has the key 'node', which only "
                            "sglang_groups sets (the rank of a multi-node group); describe the group there")
    if servers or members:
        if isinstance(servers, (list, tuple)) or not servers:  # else validate_servers names the wrong type
            servers = list(servers or []) + members
        return validate_servers(servers, gpu_count=bound)
    try:
        layout = [_as_int(value) for value in (gpu_count, tp_size, dp_size, base_port)]
    except ValueError:
        raise TopologyError("gpu_count, tp_size, dp_size and base_port must be integers, got "
                            f"{gpu_count!r}, {tp_size!r}, {dp_size!r}, {base_port!r}") from None
    return validate_servers(generate_servers(*layout), gpu_count=bound)


def add_paths(servers, script_dir, log_dir):
    """Set each server's ``launch_script`` and ``log_path`` (``<dir>/<name>.sh|.log``) unless it names its own."""
    for server in servers:
        server.setdefault("launch_script", launch_script_file(script_dir, server["name"]))
        server.setdefault("log_path", log_file(log_dir, server["name"]))
    return servers


def host_servers(servers, gpu_count=8, tp_size=1, dp_size=1, base_port=30000, host_gpu_count=None,
                 script_dir=None, log_dir=None, groups=None, host=None, play_hosts=None):
    """The ``gpuops.sglang.topology`` filter: ``expand_topology``, and with script_dir and log_dir each server's
    ``launch_script`` and ``log_path`` (``add_paths``)."""
    servers = expand_topology(servers or None, gpu_count=gpu_count, tp_size=tp_size, dp_size=dp_size,
                              base_port=base_port, host_gpu_count=host_gpu_count, groups=groups,
                              host=host, play_hosts=play_hosts)
    if script_dir and log_dir:
        add_paths(servers, script_dir, log_dir)
    return servers
