"""Issue 7: the templated pcie NCCL tuning reaches every tensor-parallel worker.

The proof needs two GPUs (TP=2, the nvidia-h200-x2 kind); with one GPU the same chain runs as TP=1
(one rank), which checks everything but the second rank. A TP server is rendered by the launch_scripts role (playbooks/deploy.yml) with `sglang_nccl: pcie` and
tests/gpu/nccl_tp_server.py as the server command (one NCCL rank per GPU, spawned like SGLang's
schedulers), launched by gpuops.sglang.server, waited for by gpuops.sglang.wait; then NCCL's own INFO
output, gpuops.sglang.server_info's per-worker NCCL check (also of a worker started without the
variables) and the stop with GPU memory verification are checked.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from .conftest import (
    DEPLOYMENT_VAR,
    MARKER_VAR,
    REPO_ROOT,
    free_port,
    gpu_used_mib,
    kill_marked,
    run_module,
    wait_for,
)

PCIE = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16",
        "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}
TP_SERVER = os.path.join(os.path.dirname(__file__), "nccl_tp_server.py")


def gpu_count():
    if not shutil.which("nvidia-smi"):
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], check=False, capture_output=True, text=True).stdout
    return len([line for line in out.splitlines() if line.startswith("GPU ")])


TP = min(gpu_count(), 2)
pytestmark = pytest.mark.skipif(TP == 0, reason="needs an NVIDIA GPU (two for the TP=2 proof)")


def deploy_tp2(tmp_path, port):
    model = tmp_path / "model"
    model.mkdir()
    host_vars = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "sglang_gpu_count": TP, "sglang_model_path": str(model),
        "sglang_servers": [{"name": "tp2", "port": port, "gpus": list(range(TP)), "tp_size": TP}],
        "sglang_server_command": [sys.executable, TP_SERVER],
        "sglang_nccl": "pcie",
        # INFO makes NCCL log every variable it took from the environment; multicast stays off on shared hosts.
        "sglang_env": {"NCCL_DEBUG": "INFO", "NCCL_NVLS_ENABLE": "0"},
        "sglang_script_dir": str(tmp_path / "bin"), "sglang_log_dir": str(tmp_path / "log"),
        "sglang_cache_dir": str(tmp_path / "cache"), "sglang_state_dir": str(tmp_path / "state"),
    }
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"sglang_hosts": {"hosts": {"localhost": host_vars}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO_ROOT, "ansible.cfg"))
    env.pop(MARKER_VAR, None)
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    if not os.path.exists(playbook):
        playbook = "ansible-playbook"
    done = subprocess.run([playbook, "-i", str(inventory), "playbooks/deploy.yml"], check=False, cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp_path / "bin" / "tp2.sh", tmp_path / "log" / "tp2.log", str(tmp_path / "state")


@pytest.fixture
def tp_server_killed_at_end():
    """Whatever happens, no process of server tp2 survives the test (later tests need idle GPUs)."""
    yield
    kill_marked("tp2")


def test_pcie_profile_reaches_every_rank_and_is_applied_by_nccl(
        tmp_path, cleanup_pids, fixtures_out, tp_server_killed_at_end):
    print(f"\nTP={TP}")
    baseline = [gpu_used_mib(gpu) for gpu in range(TP)]
    port = free_port()
    script, log_path, state_dir = deploy_tp2(tmp_path, port)
    text = script.read_text()
    for name, value in PCIE.items():
        assert f"export {name}={value}" in text
    spec = {"name": "tp2", "port": port, "gpus": list(range(TP)), "launch_script": str(script),
            "log_path": str(log_path)}
    started = run_module("gpuops.sglang.server", {"servers": [spec], "state_dir": state_dir})
    assert not started.get("failed"), started
    waited = run_module("gpuops.sglang.wait", {"servers": [{"name": "tp2"}], "state_dir": state_dir,
                                               "timeout": 300, "stall_timeout": 120, "progress_interval": 5})
    log = log_path.read_text()
    if fixtures_out:
        with open(os.path.join(fixtures_out, "tp-server.log"), "w") as handle:
            handle.write(log)
    assert not waited.get("failed"), log[-4000:]
    nccl_lines = "\n".join(line for line in log.splitlines() if "NCCL" in line)

    # NCCL's own account of the environment, once per rank process. A single rank runs no collective
    # algorithm, and NCCL (2.28.9 on the H200) then never reads NCCL_PROTO and NCCL_ALGO.
    applied = PCIE if TP >= 2 else {name: value for name, value in PCIE.items()
                                    if name not in ("NCCL_PROTO", "NCCL_ALGO")}
    for name, value in applied.items():
        lines = [line for line in log.splitlines() if f"{name} set by environment to {value}" in line]
        print(f"{name}: {len(lines)} NCCL INFO lines, e.g. {lines[:1]}")
        # NCCL prefixes its lines with "<host>:<pid>:<tid>"; one distinct pid per rank.
        assert len({line.split()[0].split(":")[1] for line in lines}) >= TP, f"{name}={value} not in every rank:\n{nccl_lines[:3000]}"
    assert log.count(f"all-reduces ok, value {TP ** 5} (expected {TP ** 5})") == TP

    info = run_module("gpuops.sglang.server_info", {"servers": [{"name": "tp2"}], "state_dir": state_dir})
    nccl = info["servers"][0]["nccl"]
    assert nccl["ok"], nccl
    workers_with_tuning = [worker for worker in nccl["workers"] if all(
        worker["nccl"].get(name) == value for name, value in PCIE.items())]
    assert len(workers_with_tuning) >= TP + 1  # the main process and every rank

    # A worker of this server started without the variables is flagged. It carries both ownership markers, as every
    # process of the server does (a name alone, without the deployment, is a foreign process: not this server's).
    env = {key: value for key, value in os.environ.items() if not key.startswith("NCCL_")}
    env[MARKER_VAR] = "tp2"
    env[DEPLOYMENT_VAR] = state_dir
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)
    cleanup_pids.append(stray.pid)
    info = run_module("gpuops.sglang.server_info", {"servers": [{"name": "tp2"}], "state_dir": state_dir})
    nccl = info["servers"][0]["nccl"]
    assert not nccl["ok"]
    assert [entry["pid"] for entry in nccl["missing"]] == [stray.pid]
    assert set(PCIE) <= set(nccl["missing"][0]["variables"])  # besides NCCL_DEBUG and NCCL_NVLS_ENABLE
    stray.kill()

    stopped = run_module("gpuops.sglang.server", {"servers": [spec], "state": "stopped", "state_dir": state_dir})
    assert not stopped.get("failed"), stopped
    print(f"stop: {stopped['servers'][0]['killed']} timings {stopped['timings']}")
    wait_for(lambda: all(gpu_used_mib(gpu) <= baseline[gpu] + 16 for gpu in range(TP)), 60,
             "every GPU back to baseline")
