"""Multi-node groups (sglang_groups): each node's share of the group, and every problem named before any host is
touched."""

import pytest
from ansible_collections.gpuops.sglang.plugins.plugin_utils.launch_script import (
    launch_argv,
    launch_env,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.topology import (
    TopologyError,
    expand_topology,
    group_members,
)

HOSTS = ["gpu-ct401", "gpu-ct402", "gpu-ct403"]
GROUP = {"name": "qwen-tp8", "port": 30000, "tp_size": 8, "mem_fraction_static": 0.85,
         "env": {"NCCL_DEBUG": "WARN"},
         "nodes": [{"host": "gpu-ct401", "gpus": [0, 1, 2, 3], "address": "10.10.0.1",
                    "env": {"NCCL_SOCKET_IFNAME": "eth1", "GLOO_SOCKET_IFNAME": "eth1"}},
                   {"host": "gpu-ct402", "gpus": "4,5,6,7", "env": {"NCCL_SOCKET_IFNAME": "ens5"}}]}
SETTINGS = {"model_path": "/models/Qwen3-Next", "host": "0.0.0.0", "state_dir": "/var/lib/gpuops-sglang"}


def test_each_node_gets_its_rank_with_its_gpus_and_env_and_rank_0_s_rendezvous():
    [rank0] = expand_topology(groups=[GROUP], host="gpu-ct401", play_hosts=HOSTS)
    [rank1] = expand_topology(groups=[GROUP], host="gpu-ct402", play_hosts=HOSTS)
    assert rank0["gpus"] == [0, 1, 2, 3] and rank1["gpus"] == [4, 5, 6, 7]
    assert rank0["tp_size"] == rank1["tp_size"] == 8 and rank0["mem_fraction_static"] == 0.85
    assert rank0["node"] == {"group": "qwen-tp8", "nnodes": 2, "node_rank": 0, "dist_init_addr": "10.10.0.1:50000",
                             "hosts": ["gpu-ct401", "gpu-ct402"]}
    assert rank1["node"]["node_rank"] == 1 and rank1["node"]["dist_init_addr"] == "10.10.0.1:50000"
    # Rank 0 listens on the rendezvous port too: the server module checks it free of foreign processes.
    assert rank0["extra_ports"] == [50000] and "extra_ports" not in rank1
    assert rank1["env"] == {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "ens5"}
    argv = launch_argv(rank1, SETTINGS)
    assert argv[argv.index("--tp-size"):argv.index("--tp-size") + 8] == [
        "--tp-size", "8", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.10.0.1:50000"]
    assert ["NCCL_SOCKET_IFNAME", "eth1"] in launch_env(rank0, SETTINGS)
    assert ["GLOO_SOCKET_IFNAME", "eth1"] in launch_env(rank0, SETTINGS)


def test_a_node_runs_its_ranks_and_its_own_servers_but_no_generated_layout():
    assert expand_topology(groups=[GROUP], host="gpu-ct403", play_hosts=HOSTS)[0]["name"] == "gpu0"  # not a node
    own = {"name": "small", "port": 30001, "gpus": [7]}
    with pytest.raises(TopologyError, match="overlapping GPUs: GPU 7 is used by servers 'small' and 'qwen-tp8'"):
        expand_topology([own], groups=[GROUP], host="gpu-ct402", play_hosts=HOSTS)
    names = [server["name"] for server in expand_topology([dict(own, gpus=[0])], groups=[GROUP], host="gpu-ct402",
                                                          play_hosts=HOSTS)]
    assert names == ["small", "qwen-tp8"]


def test_the_rendezvous_defaults_to_rank_0_s_host_name_and_port_50000_or_is_given():
    nodes = [{"host": "a", "gpus": [0]}, {"host": "b", "gpus": [0]}]
    group = {"name": "g", "port": 30000, "tp_size": 2, "nodes": nodes}
    assert group_members([group], "b")[0]["node"]["dist_init_addr"] == "a:50000"
    assert group_members([dict(group, dist_init_port=51000)], "b")[0]["node"]["dist_init_addr"] == "a:51000"
    assert group_members([dict(group, dist_init_addr="10.0.0.9:1234")], "a")[0]["node"]["dist_init_addr"] == \
        "10.0.0.9:1234"


@pytest.mark.parametrize("change, message", [
    ({"tp_size": 6}, ("tp_size=6 must be split evenly over its 2 nodes (the same number of GPUs on each: 3); nodes "
                      "have [4, 4] GPUs")),
    ({"nodes": [GROUP["nodes"][0]]}, "nodes must list at least 2 nodes"),
    ({"nodes": [GROUP["nodes"][0], dict(GROUP["nodes"][1], gpus=[4, 5])]}, "nodes have [4, 2] GPUs"),
    ({"nodes": [GROUP["nodes"][0], dict(GROUP["nodes"][1], host="gpu-ct401")]},
     "host 'gpu-ct401' is listed twice; one rank per host"),
    ({"nodes": [GROUP["nodes"][0], dict(GROUP["nodes"][1], host="elsewhere")]},
     "node 'elsewhere' (rank 1) is not in this play; a group is relaunched as one unit"),
    ({"dist_init_port": 70000}, "dist_init_port 70000 is not a TCP port"),
    ({"dist_init_addr": "10.0.0.1"}, "dist_init_addr '10.0.0.1' must be host:port"),
    ({"dist_init_addr": "10.0.0.1:0"}, "dist_init_addr '10.0.0.1:0' must be host:port (port 1-65535)"),
    ({"dist_init_addr": "10.0.0.1:65536"}, "dist_init_addr '10.0.0.1:65536' must be host:port (port 1-65535)"),
    ({"gpus": [0]}, "unknown key 'gpus'; a group takes name, port, tp_size, nodes"),
    ({"nodes": [GROUP["nodes"][0], dict(GROUP["nodes"][1], rank=1)]}, "nodes[1]: unknown key 'rank'"),
])
def test_every_problem_of_any_group_is_named_on_every_host(change, message):
    with pytest.raises(TopologyError) as raised:
        expand_topology(groups=[dict(GROUP, **change)], host="gpu-ct403", play_hosts=HOSTS)
    assert message in str(raised.value)
    assert str(raised.value).startswith("invalid multi-node groups (sglang_groups):\n- group 'qwen-tp8': ")


def test_groups_must_be_a_list_of_named_groups():
    with pytest.raises(TopologyError, match="sglang_groups must be a list of groups"):
        group_members({"name": "g"}, "a")
    with pytest.raises(TopologyError, match="duplicate group name 'g'"):
        group = {"name": "g", "port": 1, "tp_size": 2, "nodes": [{"host": "a", "gpus": [0]}, {"host": "b", "gpus": [0]}]}
        group_members([group, group], "a")


def test_a_server_entry_cannot_make_itself_a_rank():
    with pytest.raises(TopologyError, match="a sglang_servers entry has the key 'node', which only sglang_groups sets"):
        expand_topology([{"name": "x", "port": 1, "gpus": [0], "node": {"node_rank": 1}}])


def test_the_play_is_checked_only_when_asked():
    # A status or a stop may look at one node (no play_hosts); a relaunch passes the play's hosts.
    assert expand_topology(groups=[GROUP], host="gpu-ct401")[0]["node"]["node_rank"] == 0
