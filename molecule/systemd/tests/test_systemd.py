"""The fleet of ct200 run by systemd units: every process in its unit, a crash restarted by systemd and
reported by status.yml, the servers back after a container reboot, stop.yml stopping and disabling them.

The tests run in file order: each leaves the fleet serving for the next, the last stops it."""

import json
import re
import subprocess
import time

import pytest
from conftest import run_playbook, snapshot

SERVERS = {f"gpu{index}": 30000 + index for index in range(8)}
# Hang guard for a whole playbook or a container boot with 8 servers starting; not a speed check.
TIMEOUT = 300

# gpuops-sglang-<deployment id>-<name>.service: the unit names carry the deployment (its state dir).
UNITS = """
import glob, json, os, subprocess, sys
names = json.loads(sys.argv[1])
out = {}
for name in names:
    [path] = glob.glob(f"/etc/systemd/system/gpuops-sglang-????????-{name}.service")
    unit = os.path.basename(path)
    shown = subprocess.run(["systemctl", "show", "--property=ActiveState,MainPID,NRestarts,UnitFileState,ControlGroup",
                            unit], capture_output=True, text=True).stdout
    out[name] = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
cgroups = {}
for pid in filter(str.isdigit, __import__("os").listdir("/proc")):
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
        marker = next((e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"GPUOPS_SGLANG_SERVER=")), None)
        if marker:
            cgroups[pid] = [marker, open(f"/proc/{pid}/cgroup").read().strip()]
    except OSError:
        pass
print(json.dumps({"units": out, "processes": cgroups}))
"""


def units(host):
    """The units of every server (systemctl show) and every marked process with its cgroup, in one round trip."""
    return json.loads(host.check_output("python3 -c %s %s", UNITS, json.dumps(sorted(SERVERS))))


def healthy(host):
    return snapshot(host, SERVERS.values())["health"]


def wait_until(predicate, what, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:  # noqa: BLE001 - the container may be rebooting: the next look decides
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(2)


def all_ready(host):
    health = healthy(host)
    return health if all(health[str(port)] == 200 for port in SERVERS.values()) else None


def test_every_process_of_a_server_is_in_its_unit(host):
    seen = units(host)
    for name in SERVERS:
        unit = seen["units"][name]
        assert unit["ActiveState"] == "active", unit
        assert unit["UnitFileState"] == "enabled", unit
    assert sorted({marker for marker, _cgroup in seen["processes"].values()}) == sorted(SERVERS)
    for pid, (marker, cgroup) in seen["processes"].items():
        # An orphan is impossible: whatever a server spawns stays in its unit's cgroup and goes with it.
        assert re.search(rf"/gpuops-sglang-[0-9a-f]{{8}}-{re.escape(marker)}\.service$", cgroup), \
            f"pid {pid} of {marker} outside its unit: {cgroup}"


def test_a_crash_is_restarted_by_systemd_and_status_reports_the_restart(host):
    before = units(host)["units"]["gpu3"]
    host.run(f"kill -9 {before['MainPID']}")
    wait_until(lambda: int(units(host)["units"]["gpu3"]["NRestarts"]) == int(before["NRestarts"]) + 1
               and units(host)["units"]["gpu3"]["ActiveState"] == "active", "systemd to restart gpu3")
    wait_until(lambda: all_ready(host), "gpu3 to serve again after its restart")
    assert units(host)["units"]["gpu3"]["MainPID"] != before["MainPID"]
    result = run_playbook("status.yml")[0]
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert "gpu3 restarted by systemd 1 time" in result.stdout, result.stdout[-5000:]


def test_a_stalled_unit_is_stopped_not_restarted(host):
    # gpu5 hangs in its startup and is stall-killed: through systemd, so that Restart=on-failure does not bring it back
    # holding its GPU (killing its processes alone looked like a crash to systemd, which restarted it).
    hang = {"relaunch_only_servers": ["gpu5"], "relaunch_state": "restarted", "relaunch_stall_timeout": 5,
            "relaunch_rollback": False,
            "sglang_env": {"GPUOPS_FAKE_GPU_DIR": "{{ gpuops_rig_fake_gpu_dir }}", "SGLANG_SIM_TIME_SCALE": "0.3",
                           "SGLANG_SIM_FAULT": "hang_cuda_graph"}}
    result = run_playbook("relaunch.yml", "-e", json.dumps(hang))[0]
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-5000:]
    assert "gpu5 stalled in capturing_cuda_graph" in output and "killed pids" in output, output[-5000:]
    stalled = units(host)["units"]["gpu5"]
    time.sleep(5)  # restart_sec is 1 s: a restart would have happened by now
    seen = units(host)
    assert seen["units"]["gpu5"]["ActiveState"] in ("inactive", "failed"), seen["units"]["gpu5"]
    assert seen["units"]["gpu5"]["NRestarts"] == stalled["NRestarts"], seen["units"]["gpu5"]
    assert "gpu5" not in {marker for marker, _cgroup in seen["processes"].values()}
    # The next run brings it back as configured.
    result = run_playbook("relaunch.yml")[0]
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    wait_until(lambda: all_ready(host), "gpu5 to serve again")


def test_the_servers_come_back_after_the_container_reboots(host):
    pids = {name: unit["MainPID"] for name, unit in units(host)["units"].items()}
    subprocess.run(["lxc-stop", "-n", "200"], check=True, timeout=TIMEOUT)
    subprocess.run(["lxc-start", "-n", "200"], check=True, timeout=TIMEOUT)
    wait_until(lambda: all_ready(host), "every server to serve again after the reboot")
    after = units(host)["units"]
    assert all(after[name]["ActiveState"] == "active" for name in SERVERS), after
    assert {name: unit["MainPID"] for name, unit in after.items()} != pids
    result = run_playbook("status.yml")[0]
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]


def test_stop_stops_the_units_and_keeps_them_stopped_at_boot(host):
    result = run_playbook("stop.yml")[0]
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    seen = units(host)
    assert seen["processes"] == {}
    for name in SERVERS:
        assert seen["units"][name]["ActiveState"] in ("inactive", "failed"), seen["units"][name]
        assert seen["units"][name]["UnitFileState"] == "disabled", seen["units"][name]
