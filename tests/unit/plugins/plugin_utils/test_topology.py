"""Topology expansion and validation: generated layouts, explicit servers, every error names the bad value."""

import pytest
from ansible_collections.gpuops.sglang.plugins.plugin_utils.topology import (
    TopologyError,
    add_paths,
    expand_topology,
    gpu_index_problems,
)


def test_default_is_one_server_per_gpu_on_consecutive_ports():
    servers = expand_topology(gpu_count=8, base_port=30000)
    assert [(s["name"], s["port"], s["gpus"], s["tp_size"]) for s in servers] == [
        (f"gpu{index}", 30000 + index, [index], 1) for index in range(8)]


def test_tensor_parallel_groups_take_consecutive_gpus():
    servers = expand_topology(gpu_count=8, tp_size=8)
    assert servers == [{"name": "gpu0-7", "port": 30000, "gpus": list(range(8)), "tp_size": 8, "dp_size": 1}]
    assert [s["gpus"] for s in expand_topology(gpu_count=8, tp_size=4)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_explicit_servers_are_normalized_and_keep_their_overrides():
    servers = expand_topology([
        {"name": "big", "port": "31000", "gpus": "0,1,2,3", "mem_fraction_static": 0.8},
        {"name": "small", "port": 31001, "gpus": [4], "env": {"A": "1"}},
    ])
    assert servers[0] == {"name": "big", "port": 31000, "gpus": [0, 1, 2, 3], "tp_size": 4, "dp_size": 1,
                          "mem_fraction_static": 0.8}
    assert servers[1]["env"] == {"A": "1"}


@pytest.mark.parametrize("servers, gpu_count, expected", [
    ([{"name": "a", "port": 1, "gpus": [0, 1]}, {"name": "b", "port": 2, "gpus": [1]}], 8,
     "overlapping GPUs: GPU 1 is used by servers 'a' and 'b'"),
    ([{"name": "a", "port": 30000, "gpus": [0]}, {"name": "b", "port": 30000, "gpus": [1]}], 8,
     "duplicate port 30000: servers 'a' and 'b'"),
    ([{"name": "a", "port": 1, "gpus": [0]}, {"name": "a", "port": 2, "gpus": [1]}], 8, "duplicate server name 'a'"),
    ([{"name": "a", "port": 1, "gpus": [0, 1, 2], "tp_size": 2}], 8,
     "tp_size=2 x dp_size=1 does not match its 3 GPUs [0, 1, 2]"),
    ([{"name": "a", "port": 1, "gpus": [3, 8]}], 8, "GPU index 8 is beyond the host's GPU count 8 (valid: 0-7)"),
    ([{"name": "a b", "port": 1, "gpus": [0]}], 8, "name 'a b' must start with a letter or digit and contain only"),
    # A pattern's $ matches before a trailing newline; the name is matched whole.
    ([{"name": "gpu0\n", "port": 1, "gpus": [0]}], 8, "name 'gpu0\\n' must start with a letter or digit"),
    ([{"name": "-x", "port": 1, "gpus": [0]}], 8, "name '-x' must start with a letter or digit"),
    ([{"name": "run", "port": 1, "gpus": [0]}], 8, "name 'run' is reserved: its state file would be the run lease"),
    ([{"name": "a", "port": 1, "gpus": [0], "mem_fraction": 0.8}], 8,
     "server 'a': unknown key 'mem_fraction'; did you mean 'mem_fraction_static'? an entry takes name, port, gpus"),
    ([{"name": "a", "port": 1, "gpus": [0], "zzz": 1}], 8, "server 'a': unknown key 'zzz'; an entry takes name"),
    ([{"name": "a", "port": 1, "gpus": [0], "api_key": "k"}], 8,
     "server 'a': api_key cannot be set per server; set sglang_api_key for the host"),
    ([{"name": "a", "port": 1, "gpus": [0], "state_dir": "/x"}], 8, "server 'a': state_dir cannot be set per server"),
    ([{"name": "a", "port": 1, "gpus": [0], "extra_args": ["--tp", "2"]}], 8,
     "server 'a': extra_args must be a dict, got a list"),
    ([{"name": "a", "port": 1, "gpus": [0], "mem_fraction_static": 1.5}], 8,
     "server 'a': mem_fraction_static=1.5 is out of range: use 0-1 (exclusive)"),
    ([{"name": "a", "port": 1, "gpus": [0], "context_length": "abc"}], 8,
     "server 'a': context_length must be a number (1-16777216), got 'abc'"),
    ([{"name": "a", "port": 1, "gpus": [0], "speculative": {"algorithm": "EAGLE", "num_steps": 0}}], 8,
     "server 'a': speculative.num_steps=0 is out of range: use 1-64"),
    ([{"name": "a", "port": 1, "gpus": {"0": 1}}], 8, "gpus {'0': 1} is not a list of GPU indexes"),
    (["gpu0"], 8, "server #0: 'gpu0' is not a dict with name, port and gpus"),
    ([{"name": "a", "port": 70000, "gpus": [0]}], 8, "port 70000 is not a TCP port"),
    ([{"name": "a", "port": 1, "gpus": ["x"]}], 8, "gpus ['x'] is not a list of GPU indexes"),
    ([{"name": "a", "gpus": [0]}], 8, "server 'a': missing port"),
])
def test_invalid_topologies_name_the_bad_value(servers, gpu_count, expected):
    with pytest.raises(TopologyError) as error:
        expand_topology(servers, gpu_count=gpu_count)
    assert expected in str(error.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(TopologyError) as error:
        expand_topology([{"name": "a", "port": 1, "gpus": [0]}, {"name": "b", "port": 1, "gpus": [0, 9]}])
    message = str(error.value)
    assert "duplicate port 1" in message and "GPU 0 is used by servers 'a' and 'b'" in message
    assert "GPU index 9" in message


def test_host_gpu_count_bounds_the_generated_layout():
    with pytest.raises(TopologyError, match="GPU index 4 is beyond the host's GPU count 4"):
        expand_topology(gpu_count=8, host_gpu_count=4)


def test_an_expanded_topology_is_checked_against_the_hosts_gpu_count_without_expanding_it_again():
    servers = expand_topology(gpu_count=16, tp_size=4)
    assert gpu_index_problems(servers, 16) == []
    assert gpu_index_problems(servers, 8) == [
        f"server 'gpu8-11': GPU index {gpu} is beyond the host's GPU count 8 (valid: 0-7)" for gpu in range(8, 12)
    ] + [f"server 'gpu12-15': GPU index {gpu} is beyond the host's GPU count 8 (valid: 0-7)" for gpu in range(12, 16)]


def test_group_size_must_divide_the_gpu_count():
    with pytest.raises(TopologyError, match="gpu_count=8 cannot be split into servers of tp_size\\*dp_size=3"):
        expand_topology(gpu_count=8, tp_size=3)


def test_paths_follow_the_name_unless_given():
    servers = add_paths([{"name": "gpu0"}, {"name": "x", "log_path": "/l/x"}], "/opt/bin/", "/var/log/s")
    assert servers[0] == {"name": "gpu0", "launch_script": "/opt/bin/gpu0.sh", "log_path": "/var/log/s/gpu0.log"}
    assert servers[1]["log_path"] == "/l/x"


def test_a_dict_for_the_server_list_is_named():
    with pytest.raises(TopologyError, match="sglang_servers must be a list of servers .*, got a dict"):
        expand_topology({"name": "a", "port": 1, "gpus": [0]})


def test_generated_ports_stay_tcp_ports():
    with pytest.raises(TopologyError, match="server 'gpu1': port 65536 is not a TCP port"):
        expand_topology(gpu_count=2, base_port=65535)
