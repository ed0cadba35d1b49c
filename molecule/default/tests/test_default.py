"""The fleet after relaunch.yml: ct200 runs gpu0..gpu7 (one GPU each), ct201 one TP=8 server with
the pcie NCCL profile and EAGLE3; ct202 and ct203 the same under systemd units. Checked inside the containers through
proxmox_pct_remote."""


import pytest
from conftest import (
    SCRIPT_DIR,
    assert_gpu_memory_is_ours,
    assert_launched_by_the_hosts_launcher,
    converge_needed,
    converge_pct_calls,
    run_playbook,
    servers_of,
    snapshot,
)

PCIE_NCCL = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16",
             "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}
PER_GPU = {f"gpu{index}": {"port": 30000 + index, "gpus": [index], "tp": 1} for index in range(8)}
TP8 = {"gpu0-7": {"port": 30000, "gpus": list(range(8)), "tp": 8}}
# ct202 and ct203: ct200 and ct201 under systemd.
EXPECTED = {"ct200": PER_GPU, "ct201": TP8, "ct202": PER_GPU, "ct203": TP8}
PCIE_EAGLE3_HOSTS = {"ct201", "ct203"}
# What one module run costs through proxmox_pct_remote: the action plugins pipeline every module of the
# collection (the payload on python3's stdin, docs/round-trips.md); the temp dir path would cost 6.
PCT_CALLS_PER_MODULE_RUN = 1
# A relaunch is one module call, in slices of relaunch_progress_interval: host_lock claims the host, reports its GPUs,
# writes the scripts and launches as gpuops.sglang.server would, waits as gpuops.sglang.wait would and gives the host
# back; never a call per server.
# pct exec calls per host, counted by the rig's call log: a relaunch of one 8-server host, a converge that changes
# nothing (one call: the hold plans, waits and gives the host back), status.yml (by hand the relaunch took 238).
MAX_PCT_CALLS = {"relaunch": 6, "no-op": 1, "status": 2}


@pytest.fixture(scope="module")
def servers(inventory_hostname):
    return EXPECTED[inventory_hostname]


@pytest.fixture(scope="module")
def state(host, servers):
    return snapshot(host, [server["port"] for server in servers.values()])


def test_launch_scripts_content_and_mode(state, servers, inventory_hostname):
    assert sorted(state["scripts"]) == sorted(f"{SCRIPT_DIR}/{name}.sh" for name in servers)
    for name, server in servers.items():
        script = state["scripts"][f"{SCRIPT_DIR}/{name}.sh"]
        assert script["mode"] == 0o700, "scripts can carry the API key"
        content = script["content"]
        assert f"export GPUOPS_SGLANG_SERVER={name}\n" in content
        assert f"export CUDA_VISIBLE_DEVICES={','.join(map(str, server['gpus']))}\n" in content
        assert "exec python3 /opt/gpuops-sim/sglang_sim.py" in content
        assert f"--port {server['port']}" in content
        assert ("--tp-size 8" in content) == (server["tp"] == 8)
        for variable, value in PCIE_NCCL.items():
            assert (f"export {variable}={value}\n" in content) == (inventory_hostname in PCIE_EAGLE3_HOSTS)
        assert ("--speculative-algorithm EAGLE3" in content) == (inventory_hostname in PCIE_EAGLE3_HOSTS)


def test_marker_on_every_worker(state, servers):
    by_server = servers_of(state["processes"])
    assert sorted(by_server) == sorted(servers)
    for process in state["processes"]:
        assert process["server"], f"process without the ownership marker holds a GPU: {process}"
        assert process["state"] != "Z", f"zombie: {process}"
    for name, server in servers.items():
        # SGLang titles them sglang::scheduler, with a _TP<rank> suffix when tp_size > 1.
        schedulers = [p for p in by_server[name] if p["cmdline"].startswith("sglang::scheduler")]
        assert len(schedulers) == server["tp"], by_server[name]
        held = sorted({gpu for process in by_server[name] for gpu in process["gpus"]})
        assert held == server["gpus"]


def test_nccl_environment_of_every_tp_worker(state, servers, inventory_hostname):
    for name in servers:
        for process in servers_of(state["processes"])[name]:
            expected = PCIE_NCCL if inventory_hostname in PCIE_EAGLE3_HOSTS else {}
            assert process["nccl"] == expected, process


def test_servers_run_under_the_hosts_launcher(state, host):
    assert_launched_by_the_hosts_launcher(state, host)


def test_every_port_healthy(state, servers):
    assert state["health"] == {str(server["port"]): 200 for server in servers.values()}


def test_gpu_memory_accounted_to_our_processes_only(state, servers):
    assert_gpu_memory_is_ours(state, servers)


def test_relaunch_converge_round_trips():
    per_vmid = converge_pct_calls()
    for vmid, calls in sorted(per_vmid.items()):
        print(f"relaunch converge on CT {vmid}: {calls['calls']} pct exec round trips, "
              f"module runs {dict(calls['module_runs'])}")
    assert sorted(per_vmid) == ["200", "201", "202", "203"]
    for vmid, calls in per_vmid.items():
        runs = calls["module_runs"]
        # 8 servers cost the same module runs as 1, under either launcher: the host's whole job is one call.
        assert set(runs) == {"host_lock"}, runs
        # Every pct exec of the converge is one module run: a run that fell back to the temp dir fails this.
        assert calls["calls"] == PCT_CALLS_PER_MODULE_RUN * sum(runs.values()), calls
        assert calls["calls"] <= MAX_PCT_CALLS["relaunch"], calls


def test_a_no_op_converge_and_status_cost_a_few_round_trips():
    # The idempotence run is the no-op: molecule failed it if anything changed.
    per_vmid = converge_pct_calls(run=1)
    assert sorted(per_vmid) == ["200", "201", "202", "203"]
    for vmid, calls in sorted(per_vmid.items()):
        print(f"no-op converge on CT {vmid}: {calls['calls']} pct exec, module runs {dict(calls['module_runs'])}")
        assert calls["calls"] <= MAX_PCT_CALLS["no-op"], (calls, converge_needed(run=1))
    result, per_vmid = run_playbook("status.yml")
    assert result.returncode == 0, result.stdout[-5000:]
    for vmid, calls in sorted(per_vmid.items()):
        print(f"status.yml on CT {vmid}: {calls['calls']} pct exec, module runs {dict(calls['module_runs'])}")
        assert calls["calls"] <= MAX_PCT_CALLS["status"], calls
