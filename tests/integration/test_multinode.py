"""Multi-node groups end to end: one TP=8 server across two simulated hosts (4 fake GPUs each, local connection),
relaunched by playbooks/relaunch.yml as one unit, with a real TCP rendezvous between the simulated nodes."""

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from .conftest import (
    PYTHON,
    FakeGpuHost,
    SimHost,
    free_port_block,
    http_status,
    tagged_pids,
)

NODES = ("node0", "node1")


class TwoNodes:
    """node0 and node1 in one inventory, each its own simulated host; the group tp8 spans both."""

    def __init__(self, tmp_path, token, model_path, node_env=None):
        self.hosts = {name: SimHost(tmp_path, FakeGpuHost(tmp_path / f"gpu-{name}", token, count=4), token,
                                    model_path, name=name) for name in NODES}
        self.rendezvous_port = free_port_block(1)
        self.group = {"name": "tp8", "port": self.port("node0"), "tp_size": 8,
                      "dist_init_addr": f"127.0.0.1:{self.rendezvous_port}",
                      "nodes": [{"host": name, "gpus": [0, 1, 2, 3], "port": self.port(name),
                                 "env": (node_env or {}).get(name, {})} for name in NODES]}
        inventory = tmp_path / "two-nodes.yml"
        inventory.write_text(yaml.safe_dump({"all": {"vars": {"sglang_groups": [self.group]}, "children": {
            "sglang_hosts": {"hosts": {name: host.host_vars for name, host in self.hosts.items()}}}}}))
        for host in self.hosts.values():
            host.inventory = inventory

    def port(self, name):
        return self.hosts[name].port(0)

    def run(self, playbook, extra_vars=None, **kwargs):
        """One ansible-playbook run over both nodes; its result reads node0 (``.of("node1")`` for the other)."""
        return self.hosts["node0"].run(playbook, extra_vars, **kwargs)

    def state(self, name):
        path = self.hosts[name].dir / "state" / "tp8.json"
        return json.loads(path.read_text()) if path.exists() else None

    def gpu_memory(self, name):
        return [self.hosts[name].fake_gpus.used_mib(index) for index in range(4)]


@pytest.fixture
def two_nodes(tmp_path, test_token, model_dir):
    return TwoNodes(tmp_path, test_token, model_dir)


def wait_results(result, name):
    return [server for task in result.of(name).task("Wait for every rank") for server in task.get("servers", [])]


def test_a_group_across_two_nodes_comes_up_as_one_server_and_a_second_run_changes_nothing(two_nodes):
    result = two_nodes.run("relaunch")
    assert result.rc == 0, result.stdout[-6000:]
    [rank0], [rank1] = wait_results(result, "node0"), wait_results(result, "node1")
    assert (rank0["status"], rank0["node_rank"]) == ("ready", 0)
    assert (rank1["status"], rank1["node_rank"]) == ("ready", 1)
    assert rank1["msg"].startswith("tp8 rank 1 ready after ") and "placeholder, never asked" in rank1["msg"]
    # Rank 0 serves the API; rank 1 only its placeholder health.
    status, body = http_status(two_nodes.port("node0"), "/model_info")
    assert status == 200 and json.loads(body)["model_path"]
    assert http_status(two_nodes.port("node1"), "/health")[0] == 200
    assert http_status(two_nodes.port("node1"), "/model_info")[0] == 404
    script = (two_nodes.hosts["node1"].script_dir / "tp8.sh").read_text().split()
    assert script[script.index("--nnodes"):script.index("--nnodes") + 9] == [
        "--nnodes", "2", "\\", "--node-rank", "1", "\\", "--dist-init-addr", f"127.0.0.1:{two_nodes.rendezvous_port}", "\\"]
    pids = {name: two_nodes.state(name)["pid"] for name in NODES}

    again = two_nodes.run("relaunch")
    assert again.rc == 0
    for name in NODES:
        assert [server["action"] for server in again.of(name).task("Plan the ranks")[0]["servers"]] == ["unchanged"]
        assert again.of(name).task("Start every rank")[0].get("skipped")
        assert two_nodes.state(name)["pid"] == pids[name]


def test_restarted_stops_every_rank_on_every_node_before_any_rank_starts(two_nodes):
    assert two_nodes.run("relaunch").rc == 0
    before = {name: two_nodes.state(name)["pid"] for name in NODES}
    result = two_nodes.run("relaunch", {"relaunch_state": "restarted"})
    assert result.rc == 0, result.stdout[-6000:]
    names = [play_task["task"]["name"] for play in result.report["plays"] for play_task in play["tasks"]]
    [first] = [index for index, name in enumerate(names) if "Stop rank 0 of those groups" in name]
    [rest] = [index for index, name in enumerate(names) if "Stop the other ranks of those groups" in name]
    [start] = [index for index, name in enumerate(names) if "Start every rank of the groups" in name]
    assert first < rest < start, "rank 0 stops (drained) first, then the other ranks, then every rank starts"
    [rank0] = result.of("node0").task("Stop rank 0")[0]["servers"]
    assert rank0["action"] == "stopped" and rank0["drain"]["outcome"] in ("drained", "exited"), rank0
    assert result.of("node1").task("Stop rank 0")[0].get("skipped")
    # Rank 1 ended by itself once rank 0 was gone (its gloo connection closed), or was stopped.
    [rank1] = result.of("node1").task("Stop the other ranks")[0]["servers"]
    assert rank1["action"] in ("stopped", "already_stopped") and not rank1["error"]
    for name in NODES:
        assert two_nodes.state(name)["pid"] != before[name]


def test_a_rank_that_crashes_fails_its_group_fast_and_no_node_keeps_gpu_memory(tmp_path, test_token, model_dir):
    nodes = TwoNodes(tmp_path, test_token, model_dir, node_env={"node1": {"SGLANG_SIM_FAULT": "oom_load"}})
    result = nodes.run("relaunch")
    assert result.rc != 0
    [rank1] = wait_results(result, "node1")
    assert rank1["status"] == "crashed" and rank1["phase"] == "loading_weights"
    assert "torch.OutOfMemoryError" in rank1["error"]["summary"] and "Traceback" in rank1["error"]["traceback"]
    [rank0] = wait_results(result, "node0")
    assert rank0["status"] in ("crashed", "stalled"), rank0["msg"]
    failures = result.of("node1").task("Check that every server is ready")[0]["msg"]
    assert any(failure.startswith("tp8 crashed in loading_weights") for failure in failures), failures
    for name in NODES:
        assert nodes.gpu_memory(name) == [0, 0, 0, 0], f"{name} holds GPU memory"
        [cleanup] = result.of(name).task("Stop the ranks of every group that failed on any node")[0]["servers"]
        assert cleanup["action"] in ("stopped", "already_stopped") and not cleanup["error"]
    assert [pid for pid in tagged_pids(test_token) if "sglang_sim" in Path(f"/proc/{pid}/cmdline").read_text(
        errors="replace")] == [], "no rank left running"


def test_a_group_with_a_node_outside_the_play_is_refused_before_any_host_is_touched(two_nodes):
    result = two_nodes.run("relaunch", args=("--limit", "node0"))
    assert result.rc != 0
    [check] = result.task("Expand and validate the server topology")
    assert "node 'node1' (rank 1) is not in this play" in check["msg"]
    assert two_nodes.state("node0") is None


def test_a_foreign_process_on_the_rendezvous_port_is_refused_before_any_rank_is_touched(two_nodes):
    squatter = subprocess.Popen([PYTHON, "-c", textwrap.dedent(f"""
        import socket, time
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", {two_nodes.rendezvous_port}))
        listener.listen()
        print("listening", flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout.readline().strip() == "listening"
        result = two_nodes.run("relaunch")
        assert result.rc != 0
        [plan] = result.task("Plan the ranks")
        assert f"port {two_nodes.rendezvous_port} of server 'tp8'" in plan["msg"], plan["msg"]
        assert two_nodes.state("node0") is None and two_nodes.state("node1") is None, "no rank launched anywhere"
    finally:
        squatter.kill()
        squatter.wait()


def test_a_group_that_fails_with_a_new_configuration_goes_back_to_its_last_good_one_on_every_node(two_nodes):
    assert two_nodes.run("relaunch").rc == 0
    good = {name: two_nodes.state(name)["script_sha256"] for name in NODES}
    broken = dict(two_nodes.group, nodes=[two_nodes.group["nodes"][0],
                                          dict(two_nodes.group["nodes"][1], env={"SGLANG_SIM_FAULT": "oom_load"})])
    result = two_nodes.run("relaunch", {"sglang_groups": [broken]})
    assert result.rc != 0
    failures = result.of("node1").task("Check that every server is ready")[0]["msg"]
    assert failures[0].startswith("tp8 crashed in loading_weights") and failures[0].endswith(": ready again"), failures
    for name in NODES:
        now = two_nodes.state(name)
        assert now["script_sha256"] == good[name], f"{name} runs its last good configuration again"
    assert http_status(two_nodes.port("node0"), "/health_generate")[0] == 200, "the group serves again"
