"""Helpers of the scenarios' testinfra checks (molecule/<scenario>/tests).

Each host is inspected in ONE round trip through its Ansible connection (proxmox_pct_remote ->
pct exec): molecule/shared/probe.py runs in the container and returns a JSON snapshot.
"""

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# Hang guard for one playbook run from a verify step; not a speed check.
PLAYBOOK_TIMEOUT = 300
PROBE = (Path(__file__).parent / "shared" / "probe.py").read_text()
FAKE_GPU_DIR = "/var/lib/fake-gpu"
SCRIPT_DIR = "/opt/gpuops-sglang/bin"
JOURNAL = "/var/lib/gpuops-sglang/journal.jsonl"
PCT_CALL_LOG = Path("/var/tmp/gpuops-rig/pct-calls.log")
# A module run through a remote temp dir (AnsiballZ_<module>.py), or pipelined: the interpreter with the module
# on stdin, the command ending "# gpuops.sglang.<module>" (plugins/plugin_utils/pipelining.py).
MODULE_RUN = re.compile(r"python3 \S+/AnsiballZ_(\w+)\.py|# gpuops\.sglang\.(\w+)$")


def snapshot(host, ports, **more):
    """Processes (marker, NCCL env, GPUs held), /health_generate per port, GPU memory, allocations, scripts; ``more``:
    journal=<path> (its records), versions=True (the version each port's server reports)."""
    spec = json.dumps({"ports": sorted(ports), "fake_gpu_dir": FAKE_GPU_DIR, "script_dir": SCRIPT_DIR, **more})
    return json.loads(host.check_output("python3 -c %s %s", PROBE, spec))


def servers_of(processes):
    """{server name: [processes carrying its marker]}."""
    by_server = {}
    for process in processes:
        if process["server"]:
            by_server.setdefault(process["server"], []).append(process)
    return by_server


def converge_ranges():
    return json.loads((Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "converge-pct-calls.json").read_text())


def converge_pct_calls(run=0):
    """The pct calls of a run of molecule/shared/converge.yml (0: the converge, 1: the idempotence run), per vmid:
    {"calls": n, "module_runs": Counter(module)}."""
    ranges = converge_ranges()
    return pct_calls(PCT_CALL_LOG.read_text().splitlines()[ranges[run]["first"]:ranges[run]["end"]])


def converge_needed(run=0):
    """{host: why its hold found something to do (host_lock's converge_needed), None for a no-op} of that run."""
    return converge_ranges()[run].get("converge_needed") or {}


def run_playbook(name, *args):
    """``(completed process, pct calls per vmid)`` of one playbooks/<name> run against the scenario's inventory."""
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_FORCE_COLOR="0")
    inventory = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "inventory"
    first = len(PCT_CALL_LOG.read_text().splitlines())
    result = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks" / name), *args],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=PLAYBOOK_TIMEOUT, check=False)
    return result, pct_calls(PCT_CALL_LOG.read_text().splitlines()[first:])


def pct_calls(lines):
    """Lines of the pct call log, per vmid: {"calls": n, "module_runs": Counter(module)}."""
    per_vmid = {}
    for line in lines:
        argv = json.loads(line)["argv"]
        entry = per_vmid.setdefault(argv[1], {"calls": 0, "module_runs": Counter()})
        entry["calls"] += 1
        match = MODULE_RUN.search(" ".join(argv))
        if match:
            entry["module_runs"][match.group(1) or match.group(2)] += 1
    return per_vmid


def assert_gpu_memory_is_ours(state, servers):
    """Every GPU's used memory is the sum of allocations of live processes of the server owning that GPU."""
    owner_of_gpu = {gpu: name for name, server in servers.items() for gpu in server["gpus"]}
    marked = {process["pid"]: process["server"] for process in state["processes"] if process["server"]}
    for alloc in state["allocations"]:
        assert marked.get(alloc["pid"]) == owner_of_gpu.get(alloc["gpu"]), \
            f"GPU {alloc['gpu']} memory held by pid {alloc['pid']} (server {marked.get(alloc['pid'])})"
    for gpu, used in state["gpu_memory_mib"].items():
        accounted = sum(alloc["mib"] for alloc in state["allocations"] if alloc["gpu"] == int(gpu))
        assert used == accounted, f"GPU {gpu}: {used} MiB used, {accounted} MiB accounted to processes"
        assert (used > 0) == (int(gpu) in owner_of_gpu), f"GPU {gpu}: {used} MiB used"


def assert_launched_by_the_hosts_launcher(state, host):
    """Under sglang_launcher: systemd (a host var of the scenario's inventory) every process of a server runs in its
    server's unit, gpuops-sglang-...<name>.service; detached (the default), in no unit of ours."""
    systemd = host.ansible.get_variables().get("sglang_launcher") == "systemd"
    for process in state["processes"]:
        unit = re.search(r"/(gpuops-sglang-\S*)\.service$", process["cgroup"])
        if systemd:
            assert unit and unit.group(1).endswith(process["server"]), process
        else:
            assert unit is None, process


@pytest.fixture(scope="module")
def inventory_hostname(host):
    return host.backend.host
