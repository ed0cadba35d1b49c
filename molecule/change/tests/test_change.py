"""After the strategy switch: every server healthy, the hybrid ones launched with extra_buffer, on ct200 (detached)
and ct201 (systemd) alike."""

from conftest import (
    SCRIPT_DIR,
    assert_gpu_memory_is_ours,
    assert_launched_by_the_hosts_launcher,
    snapshot,
)

SERVERS = {"hybrid0": {"port": 30000, "gpus": [0]}, "hybrid1": {"port": 30001, "gpus": [1]},
           "dense0": {"port": 30002, "gpus": [2]}, "dense1": {"port": 30003, "gpus": [3]}}


def test_strategy_switched_only_where_set(host):
    state = snapshot(host, [server["port"] for server in SERVERS.values()])
    assert state["health"] == {str(server["port"]): 200 for server in SERVERS.values()}
    for name in SERVERS:
        content = state["scripts"][f"{SCRIPT_DIR}/{name}.sh"]["content"]
        assert ("--mamba-scheduler-strategy extra_buffer" in content) == name.startswith("hybrid")
        assert "no_buffer" not in content
    assert_gpu_memory_is_ours(state, SERVERS)
    assert_launched_by_the_hosts_launcher(state, host)
