"""What the faults converge leaves behind: the surviving servers healthy, the failed ones (and the
orphaned scheduler and the foreign processes) gone, and GPU memory held only by the survivors."""

import pytest
from conftest import assert_gpu_memory_is_ours, servers_of, snapshot

RUNNING = {
    "ct200": {"healthy": {"port": 30000, "gpus": [0]}, "orphaner": {"port": 30003, "gpus": [3]}},
    "ct201": {"left": {"port": 30000, "gpus": [0, 1, 2, 3]}, "right": {"port": 30001, "gpus": [4, 5, 6, 7]}},
}


@pytest.fixture(scope="module")
def servers(inventory_hostname):
    return RUNNING[inventory_hostname]


@pytest.fixture(scope="module")
def state(host, servers):
    return snapshot(host, [server["port"] for server in servers.values()])


def test_only_the_surviving_servers_run(state, servers):
    assert sorted(servers_of(state["processes"])) == sorted(servers)
    assert all(process["server"] for process in state["processes"]), state["processes"]


def test_survivors_healthy(state, servers):
    assert state["health"] == {str(server["port"]): 200 for server in servers.values()}


def test_failed_servers_freed_their_gpus(state, servers):
    assert_gpu_memory_is_ours(state, servers)
