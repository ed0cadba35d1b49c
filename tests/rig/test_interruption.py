"""playbooks/relaunch.yml through community.proxmox.proxmox_pct_remote, cut short: a stopped or missing
container is explained before anything on the host is touched, and a controller killed while the servers
stop does not leave them down - the detached worker relaunches them, and the next run reports it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from .test_rig import COMMAND_TIMEOUT, REPO, pct, skip_reason

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
STATE_DIR = "/var/lib/gpuops-sglang"
SERVERS = [{"name": "a", "port": 30000, "gpus": [0]}, {"name": "b", "port": 30001, "gpus": [1]},
           {"name": "c", "port": 30002, "gpus": [2]}]

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


@pytest.fixture(scope="module")
def ct(shared_rig, tmp_path_factory):
    inventories = tmp_path_factory.mktemp("inventory")
    with shared_rig.container(gpus=4, inventory=inventories / "rig.yml") as (vmid, state):
        missing = shared_rig.unused_vmid()
        hosts = inventories / "hosts.yml"
        hosts.write_text(yaml.safe_dump({"sglang_hosts": {
            "hosts": {f"ct{vmid}": None, "ctmissing": {"proxmox_vmid": missing}},
            "vars": {
                "sglang_server_command": ["python3", "{{ gpuops_rig_simulator_dir }}/sglang_sim.py"],
                "sglang_model_path": "/models/fake-model",
                "sglang_gpu_device_dir": "{{ gpuops_rig_fake_gpu_dir }}/dev",
                "sglang_nvidia_driver_dir": "{{ gpuops_rig_fake_gpu_dir }}/driver/gpus",
                # Servers that ignore SIGTERM: each stop lasts relaunch_stop_timeout, then SIGKILL.
                "sglang_env": {"GPUOPS_FAKE_GPU_DIR": "{{ gpuops_rig_fake_gpu_dir }}", "SGLANG_SIM_TIME_SCALE": "0.1",
                               "SGLANG_SIM_FAULT": "ignore_sigterm"},
                "sglang_servers": SERVERS,
                "relaunch_stop_timeout": 5,
                "relaunch_progress_interval": 1,
                "relaunch_wait_timeout": 60}}}))
        # ctmissing is reached like the CT, with a vmid no container has.
        rig_inventory = yaml.safe_load(Path(state["inventory"]).read_text())
        rig_inventory["all"]["children"]["rig"]["hosts"]["ctmissing"] = None
        Path(state["inventory"]).write_text(yaml.safe_dump(rig_inventory))
        yield {**state, "vmid": vmid, "missing_vmid": missing, "host": f"ct{vmid}",
               "inventories": [state["inventory"], str(hosts)]}


def playbook_argv(ct, host, *extra):
    inventories = [arg for path in ct["inventories"] for arg in ("-i", path)]
    return [ANSIBLE_PLAYBOOK, *inventories, "playbooks/relaunch.yml", "-e", f"sglang_hosts={host}", *extra]


def playbook_env(**extra):
    return dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **extra)


def relaunch(ct, host, *extra, **env):
    return subprocess.run(playbook_argv(ct, host, *extra), cwd=REPO, env=playbook_env(**env), capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT, check=False)


def in_ct(ct, script):
    result = pct(ct, "exec", str(ct["vmid"]), "--", "/bin/sh", "-c", script)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def server_states(ct):
    return {server["name"]: json.loads(in_ct(ct, f"cat {STATE_DIR}/{server['name']}.json")) for server in SERVERS}


def job_records(ct):
    listing = in_ct(ct, f"for record in {STATE_DIR}/jobs/*.json; do [ -f $record ] && cat $record && echo; done; true")
    return [json.loads(line) for line in listing.splitlines() if line.strip()]


def healthy(ct, port):
    return in_ct(ct, f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/health; true") == "200"


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.5)


def assert_nothing_after_the_first_contact(run):
    assert "Preflight" not in run.stdout and "Bring servers" not in run.stdout, run.stdout[-3000:]


def assert_host_untouched(ct):
    assert in_ct(ct, f"ls -d {STATE_DIR} /opt/gpuops-sglang 2>/dev/null; true") == ""


def children(pid):
    found = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # exited meanwhile
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.add(int(entry))
    return found


def kill_tree(root):
    """SIGKILL a process and all its descendants, frozen first so none forks or reparents meanwhile.

    ansible-core 2.21 runs each fork in a session of its own: killing ansible-playbook's process group
    would leave the fork holding the paramiko connection running the task to its end.
    """
    frozen, pending = set(), {root}
    while pending:
        pid = pending.pop()
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            continue
        frozen.add(pid)
        pending |= children(pid) - frozen
    for pid in frozen:
        os.kill(pid, signal.SIGKILL)


def test_stopped_container_is_explained(ct):
    vmid = str(ct["vmid"])
    assert pct(ct, "stop", vmid).returncode == 0
    try:
        run = relaunch(ct, ct["host"])
        checked = relaunch(ct, ct["host"], "--check")
    finally:
        assert pct(ct, "start", vmid).returncode == 0
    for result in (run, checked):
        assert result.returncode != 0
        assert (f"container {vmid} is not running on node 127.0.0.1 (pct said: container '{vmid}' not running!): "
                f"start it with `pct start {vmid}`") in result.stdout, result.stdout[-3000:]
        assert "Bring servers" not in result.stdout
    assert_nothing_after_the_first_contact(run)
    assert_host_untouched(ct)


def test_missing_container_is_explained(ct):
    run = relaunch(ct, "ctmissing")
    assert run.returncode != 0
    vmid = ct["missing_vmid"]
    assert f"container {vmid} does not exist on node 127.0.0.1 (pct said: Configuration file 'nodes/" in run.stdout, \
        run.stdout[-3000:]
    assert "check proxmox_vmid of ctmissing" in run.stdout
    assert_nothing_after_the_first_contact(run)


def test_killed_controller_leaves_no_server_down_and_the_next_run_reports_it(ct):
    first = relaunch(ct, ct["host"])
    assert first.returncode == 0, first.stdout[-3000:]
    before = server_states(ct)

    interrupted = subprocess.Popen(playbook_argv(ct, ct["host"], "-e", "relaunch_state=restarted"), cwd=REPO,
                                   env=playbook_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # SIGTERM is ignored, so the worker spends relaunch_stop_timeout (5 s) stopping: kill it then.
        wait_until(lambda: any(record["status"] == "running" for record in job_records(ct)), 60,
                   "the host-side sequence runs")
        time.sleep(1)
        kill_tree(interrupted.pid)
    finally:
        interrupted.wait(timeout=COMMAND_TIMEOUT)
    (job,) = [record for record in job_records(ct) if not record["reported"]]
    assert job["status"] == "running", "killed too late: the sequence had finished"

    # The worker carries on alone: every server relaunched (new pids), then they come up healthy.
    wait_until(lambda: all(record["status"] != "running" for record in job_records(ct)), 60, "the worker finished")
    after = server_states(ct)
    for server in SERVERS:
        assert after[server["name"]]["pid"] != before[server["name"]]["pid"]
        assert after[server["name"]]["run_id"] == job["run_id"]
        wait_until(lambda port=server["port"]: healthy(ct, port), 30, f"server {server['name']} is healthy")

    # The next run takes over the dead run's hold and reports what the worker did (its hold, which runs the server
    # call's job in its own call).
    start = time.monotonic()
    following = relaunch(ct, ct["host"], ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    assert following.returncode == 0, following.stdout[-3000:]
    assert time.monotonic() - start < 60
    # Progress lines (the wait for the host among them) come before the report.
    report = json.loads(following.stdout[following.stdout.index("\n{") + 1:])
    (reported,) = [run for play in report["plays"] for task in play["tasks"]
                   for result in [task["hosts"][ct["host"]]]
                   for run in result.get("interrupted_runs") or result.get("converged", {}).get("server", {}).get(
                       "interrupted_runs", [])]
    assert (reported["job_id"], reported["run_id"], reported["status"]) == (job["job_id"], job["run_id"], "done")
    assert sorted(reported["servers"]) == ["a relaunched", "b relaunched", "c relaunched"]
    assert reported["down"] == []
    [summary] = [task["hosts"][ct["host"]]["msg"] for play in report["plays"] for task in play["tasks"]
                 if task["task"]["name"].endswith("Summary")]
    assert summary[1].startswith(f"an earlier run was interrupted (job {job['job_id']}, run {job['run_id']}); "
                                 "its host-side sequence finished on its own: "), summary
    assert server_states(ct) == after  # nothing relaunched again
