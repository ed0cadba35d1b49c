"""gpuops.sglang.server_info through real ansible-playbook runs against simulated SGLang servers."""

import os
import subprocess

from ansible_collections.gpuops.sglang.plugins.module_utils.server_processes import (
    ServerProcesses,
)

from .conftest import PYTHON, SGLANG_SIM


def edit_script(server, old, new):
    with open(server["launch_script"]) as handle:
        script = handle.read()
    assert old in script
    with open(server["launch_script"], "w") as handle:
        handle.write(script.replace(old, new))


def launch_and_wait(ansible, host_args, servers):
    results = ansible.start_playbook([
        {"name": "launch", "gpuops.sglang.server": dict(host_args, servers=servers, state="restarted")},
        {"name": "wait", "gpuops.sglang.wait": {"servers": [{"name": server["name"]} for server in servers],
                                                "state_dir": host_args["state_dir"], "timeout": 60}},
    ]).process.communicate(timeout=120)[0]
    assert '"failed": true' not in results, results


def test_drift_nccl_environment_per_worker_and_metrics(ansible, host_args, make_server, model_dir, tmp_path):
    hybrid = str(tmp_path / "qwen3-next")
    subprocess.run([PYTHON, SGLANG_SIM, "--make-model", hybrid, "--arch", "Qwen3NextForCausalLM", "--hybrid-mamba",
                    "--shards", "2", "--weights-gib", "2"], check=True)
    tuned = make_server("tuned", [0, 1], env={"NCCL_P2P_LEVEL": "PXB", "NCCL_ALGO": "Ring"})
    edit_script(tuned, f"--model-path {model_dir}", f"--model-path {hybrid} --enable-metrics")
    plain = make_server("plain", [2])
    launch_and_wait(ansible, host_args, [tuned, plain])
    # The scripts change on disk after the launch: tuned now wants another P2P level and one more variable.
    edit_script(tuned, "export NCCL_P2P_LEVEL='PXB'", "export NCCL_P2P_LEVEL='SYS'\nexport NCCL_PROTO=Simple")

    # A run holding the host leaves its lease beside the state files: it is no server.
    with open(os.path.join(host_args["state_dir"], "run.json"), "w") as lease:
        lease.write('{"run_id": "another-run"}')
    result = ansible.module("gpuops.sglang.server_info", {"state_dir": host_args["state_dir"]})

    servers = {server["name"]: server for server in result["servers"]}
    assert sorted(servers) == ["plain", "tuned"]
    tuned_info, plain_info = servers["tuned"], servers["plain"]
    for info in (tuned_info, plain_info):
        assert info["status"] == "ready" and info["alive"] and info["uptime_seconds"] > 0
        assert info["health"]["status"] == 200
        assert info["log"]["phase"] == "ready"
        assert info["server_info"]["max_total_num_tokens"] == info["log"]["facts"]["max_total_num_tokens"]
    assert tuned_info["launch_script"]["drift"] is True
    assert tuned_info["launch_script"]["running_sha256"] != tuned_info["launch_script"]["disk_sha256"]
    assert plain_info["launch_script"]["drift"] is False

    # Every marker-matched process: main, two schedulers, detokenizer - all with the launch-time values.
    nccl = tuned_info["nccl"]
    marked = sorted(ServerProcesses(host_args["state_dir"]).of_server("tuned")[0])
    assert sorted(worker["pid"] for worker in nccl["workers"]) == marked and len(marked) >= 4
    assert any("sglang::scheduler_TP1" in worker["cmdline"] for worker in nccl["workers"])
    assert nccl["expected"] == {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring"}
    assert all(worker["nccl"]["NCCL_P2P_LEVEL"] == "PXB" for worker in nccl["workers"])
    assert sorted(m["pid"] for m in nccl["mismatches"]) == marked
    assert {(m["variable"], m["expected"], m["actual"]) for m in nccl["mismatches"]} == {("NCCL_P2P_LEVEL", "SYS", "PXB")}
    assert sorted(m["pid"] for m in nccl["missing"]) == marked
    assert all(m["variables"] == ["NCCL_PROTO"] for m in nccl["missing"])
    assert nccl["ok"] is False
    assert plain_info["nccl"]["ok"] is True and plain_info["nccl"]["mismatches"] == []

    # Gauges from /metrics (hybrid Mamba model: mamba_usage too); the plain server runs without metrics.
    metrics = tuned_info["metrics"]
    assert metrics["token_usage"] == 0.0 and metrics["mamba_usage"] == 0.0
    assert metrics["num_running_reqs"] == 0 and metrics["num_queue_reqs"] == 0 and metrics["gen_throughput"] == 0.0
    assert tuned_info["log"]["facts"]["max_mamba_cache_size"] > 0
    assert plain_info["metrics"] is None and "404" in plain_info["metrics_error"]


def test_crash_after_ready_is_reported_crashed_and_its_log_parses_offline(
        ansible, host_args, make_server, wait_until):
    # Ready in 3-5 s and crashed 5 s later: the wait is under way before, even on a loaded machine.
    server = make_server("flaky", [0], fault="crash_after_ready", time_scale=1, env={"SGLANG_SIM_FAULT_DELAY": "5"})
    launch_and_wait(ansible, host_args, [server])
    wait_until(lambda: not ServerProcesses(host_args["state_dir"]).of_server("flaky")[0], timeout=30,
               what="the server to crash after ready")

    described = ansible.module("gpuops.sglang.server_info", {"servers": [{"name": "flaky"}],
                                                             "state_dir": host_args["state_dir"]})
    offline = ansible.module("gpuops.sglang.server_info", {"log_path": server["log_path"]})

    info = described["servers"][0]
    assert info["status"] == "crashed" and info["alive"] is False and info["processes"] == []
    assert info["health"]["status"] is None and info["uptime_seconds"] is None
    assert info["log"]["error"]["summary"].startswith("RuntimeError: CUDA error: an illegal memory access")
    log = offline["log"]
    assert offline["servers"] == []
    assert log["phase"] == "crashed"
    assert log["error"] == info["log"]["error"]
    assert log["error"]["traceback"].startswith("Traceback (most recent call last):")
    assert "ready" in [entry["phase"] for entry in log["timeline"]]
    facts = log["facts"]
    assert {"max_total_num_tokens", "max_running_requests", "context_len", "chunked_prefill_size"} <= set(facts)
    assert facts["max_total_num_tokens"] > 0
