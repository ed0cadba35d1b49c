"""After the strategy switch: every server healthy, the hybrid ones launched with extra_buffer, on ct200 (detached)
and ct201 (systemd) alike - each host's scripts spelled for the SGLang it has installed, detected, not configured:
0.5.23 on ct200 (the rig's), 0.5.10 on ct201 (the rig's site of that version on its PYTHONPATH)."""

from conftest import (
    JOURNAL,
    SCRIPT_DIR,
    assert_gpu_memory_is_ours,
    assert_launched_by_the_hosts_launcher,
    snapshot,
)

SERVERS = {"hybrid0": {"port": 30000, "gpus": [0]}, "hybrid1": {"port": 30001, "gpus": [1]},
           "dense0": {"port": 30002, "gpus": [2]}, "dense1": {"port": 30003, "gpus": [3]}}
# The version each host runs (inventory/hosts.yml: sglang_version unset) and its spelling of the strategy's flag.
MAMBA_FLAGS = {"0.5.23": "--mamba-radix-cache-strategy", "0.5.10": "--mamba-scheduler-strategy"}
SGLANG = {"ct200": "0.5.23", "ct201": "0.5.10"}


def test_strategy_switched_only_where_set_in_the_spelling_of_each_hosts_sglang(host, inventory_hostname):
    version = SGLANG[inventory_hostname]
    [other_flag] = [flag for other, flag in MAMBA_FLAGS.items() if other != version]
    state = snapshot(host, [server["port"] for server in SERVERS.values()], journal=JOURNAL, versions=True)
    assert state["health"] == {str(server["port"]): 200 for server in SERVERS.values()}
    for name in SERVERS:
        content = state["scripts"][f"{SCRIPT_DIR}/{name}.sh"]["content"]
        assert (f"{MAMBA_FLAGS[version]} extra_buffer" in content) == name.startswith("hybrid")
        assert other_flag not in content and "no_buffer" not in content
    # The servers run the version the host has installed (the simulator runs the dist-info it sees) ...
    assert state["versions"] == {str(server["port"]): version for server in SERVERS.values()}
    # ... and the journal records it for every server that came up (the converge's four, the switch's two).
    ready = [(record.get("run_id"), name, entry.get("sglang_version")) for record in state["journal"]
             if record.get("job") == "relaunch" for name, entry in record.get("servers", {}).items()
             if entry.get("outcome") == "ready"]
    assert {name for _run, name, _version in ready} == set(SERVERS), ready
    assert {recorded for _run, _name, recorded in ready} == {version}, ready
    assert_gpu_memory_is_ours(state, SERVERS)
    assert_launched_by_the_hosts_launcher(state, host)
