"""After test_1_converged.py: a rank-1 crash (one relaunch without rollback, run in ct200's turn; testinfra runs a
file host by host) fails the group fast with its traceback, and no node keeps GPU memory."""

import json

import pytest
from conftest import run_playbook, servers_of, snapshot

PORT = 30000


@pytest.fixture
def state(host):
    return snapshot(host, [PORT])


def test_a_rank_1_crash_fails_the_group_fast_with_its_traceback(inventory_hostname):
    if inventory_hostname != "ct200":
        pytest.skip("one relaunch covers both nodes")
    # Without the rollback (tests/integration/test_multinode.py proves it), so the failed group stays down.
    result, _calls = run_playbook("relaunch.yml", "-e", json.dumps({
        "relaunch_state": "restarted", "multinode_fault": "oom_load", "relaunch_rollback": False}))
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-5000:]
    assert "tp8 crashed in loading_weights" in output, output[-8000:]
    assert "torch.OutOfMemoryError" in output and "Traceback (most recent call last)" in output, output[-8000:]


def test_no_node_keeps_gpu_memory_after_the_crash(state):
    assert servers_of(state["processes"]).get("tp8", []) == [], "no rank of the failed group runs"
    assert all(used <= 1024 for used in state["gpu_memory_mib"].values()), state["gpu_memory_mib"]
