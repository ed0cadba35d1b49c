"""SGLANG_SIM_VERSION: the parser of each version (from the generated flag tables), /ready, v0.5.23's shutdown lines
and their faults, each version's metric names, the version reported, --make-site for importlib.metadata, and the version
a server simulates when SGLANG_SIM_VERSION is unset: the installed dist-info's, else the newest."""

import json
import os
import re
import signal
import subprocess
import sys

import fakegpu
import pytest
from sglang_simulator import flags

from .conftest import SIM_DIR, SIM_SCRIPT, alive, wait_for

# The shutdown waits (15 s, 60 s) on the simulated clock: 0.75 s and 3 s.
FAST = 0.05


def run_sim(version, *argv):
    return subprocess.run([sys.executable, SIM_SCRIPT, *argv], capture_output=True, text=True, check=False,
                          env=dict(os.environ, SGLANG_SIM_VERSION=version), timeout=30)


def test_the_parser_is_the_version_table(model_dir):
    # v0.5.23 has no --mamba-scheduler-strategy: argparse's own refusal, exit 2, before anything starts
    result = run_sim("0.5.23", "--model-path", model_dir, "--mamba-scheduler-strategy", "extra_buffer")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("usage: launch_server.py [-h] --model-path MODEL_PATH")
    assert result.stderr.endswith(
        "launch_server.py: error: unrecognized arguments: --mamba-scheduler-strategy extra_buffer\n")
    # the old --cuda-graph-max-bs is a prefix of two v0.5.23 options: ambiguous (allow_abbrev, kept by SGLang)
    result = run_sim("0.5.23", "--model-path", model_dir, "--cuda-graph-max-bs", "64")
    assert result.returncode == 2
    assert result.stderr.endswith("launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match "
                                  "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill\n")
    # a choice of the table
    result = run_sim("0.5.10", "--model-path", model_dir, "--mamba-scheduler-strategy", "extra_buffer_lazy")
    assert result.returncode == 2
    assert ("error: argument --mamba-scheduler-strategy: invalid choice: 'extra_buffer_lazy' (choose from "
            "'auto', 'no_buffer', 'extra_buffer')") in result.stderr
    # v0.5.10 takes it, with the simulator's own defaults and types on top, and any other option of its table
    args = flags.build_parser("0.5.10").parse_args(
        ["--model", "m", "--mamba-scheduler-strategy", "extra_buffer", "--tp", "2", "--cuda-graph-max-bs", "64",
         "--enable-piecewise-cuda-graph", "--bucket-time-to-first-token", "0.1", "0.5"])
    assert (args.model_path, args.mamba_scheduler_strategy, args.tp_size, args.cuda_graph_max_bs, args.port) == \
        ("m", "extra_buffer", 2, 64, 30000)
    assert args.bucket_time_to_first_token == ["0.1", "0.5"]
    new = flags.build_parser("0.5.23").parse_args(["--model-path", "m", "--cuda-graph-max-bs-decode", "48"])
    assert (new.cuda_graph_max_bs, new.mamba_radix_cache_strategy) == (48, "auto")


def test_the_table_is_found_beside_the_simulator_first():
    assert flags.TABLE_PATHS[0] == os.path.join(SIM_DIR, "sglang_flag_tables.py")
    assert os.path.isfile(flags.TABLE_PATHS[1])  # the collection's, relative to the simulator
    assert set(flags.load_tables()) == {"0.5.9", "0.5.10", "0.5.23"}


def test_unsupported_version_refused(model_dir):
    result = run_sim("0.5.11", "--model-path", model_dir)
    assert result.returncode == 1 and "SGLANG_SIM_VERSION must be one of 0.5.9, 0.5.10, 0.5.23" in result.stderr


def test_ready_phases_v0_5_23(launch):
    server = launch("--disable-cuda-graph", version="0.5.23", time_scale=0.3,
                    env={"SGLANG_SIM_DECODE_TOKENS_PER_S": "100"})
    seen = []

    def probe():
        status = server.get("/ready")[0]
        if not seen or seen[-1] != status:
            seen.append(status)
        return status == 200

    wait_for(probe, timeout=30, interval=0.02, what="200 from /ready")
    assert seen == [None, 503, 200]
    assert server.get("/pause_generation", method="POST")[0] == 200
    assert server.get("/ready") == (503, "") and server.get("/health")[0] == 200
    assert server.get("/continue_generation", method="POST")[0] == 200
    assert server.get("/ready") == (200, "")
    # a request of 1.5 s keeps the drain going; /ready says no from the SIGTERM on
    client = subprocess.Popen([sys.executable, "-c", (
        "import http.client, sys; c = http.client.HTTPConnection('127.0.0.1', int(sys.argv[1]), timeout=30); "
        "c.request('POST', '/generate', body='{\"text\": \"x\", \"sampling_params\": {\"max_new_tokens\": 150}}', "
        "headers={'Content-Type': 'application/json'}); print(c.getresponse().status)"), str(server.port)],
        stdout=subprocess.PIPE, text=True)
    wait_for(lambda: json.loads(server.get("/v1/loads")[1])["loads"][0]["num_running_reqs"] == 1,
             what="the request to run")
    os.kill(server.pid, signal.SIGTERM)
    server.wait_log(r"Gracefully exiting\.\.\. Remaining number of requests 1\.")
    assert server.get("/ready") == (503, "")
    assert client.communicate(timeout=30)[0].strip() == "200"
    assert server.wait_exit() == -signal.SIGKILL


def test_no_ready_before_v0_5_23(launch):
    server = launch("--disable-cuda-graph", version="0.5.9")
    server.wait_ready()
    assert server.get("/ready") == (404, json.dumps({"detail": "Not Found"}))


def scheduler_on_gpu(server, index):
    device = fakegpu.device_path(server.gpu_dir, index)
    [pid] = [pid for pid in server.children()
             if device in {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}]
    return pid


STRAGGLERS = "Schedulers still alive 15s after ShutdownReq, killing them before they released: "
NOT_REAPED = "process(es) not reaped within 60s after SIGKILL; pids="


@pytest.mark.parametrize("version, fault", [("0.5.23", None), ("0.5.23", "scheduler_ignores_shutdown"),
                                            ("0.5.10", "scheduler_ignores_shutdown")])
def test_shutdown_after_the_drain(launch, version, fault):
    server = launch("--tp-size", "2", "--disable-cuda-graph", version=version, time_scale=FAST,
                    env={"SGLANG_SIM_FAULT": fault} if fault else None)
    server.wait_ready()
    tp0 = scheduler_on_gpu(server, 0)
    os.kill(server.pid, signal.SIGTERM)
    assert server.wait_exit() == -signal.SIGKILL  # exit 137 in every version
    log = server.log()
    assert NOT_REAPED not in log
    if version == "0.5.23":
        assert f"kill_process_tree called: parent_pid={server.pid}, include_parent=True, pid={server.pid}" in log
    if version == "0.5.23" and fault:  # the TP0 scheduler ignored the ShutdownReq; TP1 released and exited
        assert re.search(rf"^\[[^]]+\] {re.escape(STRAGGLERS)}\[{tp0}\]$", log, re.MULTILINE), log[-2000:]
        assert log.index(STRAGGLERS) < log.index("kill_process_tree called")
    else:
        assert STRAGGLERS not in log
    wait_for(lambda: not server.children(), what="the tree to die")
    assert server.used_mib() == {0: 0, 1: 0, 2: 0, 3: 0}


def test_unreaped_child_keeps_its_memory(launch):
    server = launch("--tp-size", "2", "--disable-cuda-graph", version="0.5.23", time_scale=FAST,
                    env={"SGLANG_SIM_FAULT": "unreaped_child"})
    server.wait_ready()
    tp0, tp1 = scheduler_on_gpu(server, 0), scheduler_on_gpu(server, 1)
    os.kill(server.pid, signal.SIGTERM)
    assert server.wait_exit() == -signal.SIGKILL
    log = server.log()
    assert f"{STRAGGLERS}[{tp0}]" in log  # stuck: it did not answer the ShutdownReq either
    assert re.search(rf"^\[[^]]+\] kill_process_tree: 1 {re.escape(NOT_REAPED)}\[{tp0}\]$", log, re.MULTILINE), \
        log[-2000:]
    wait_for(lambda: not alive(tp1), what="TP1 to be killed")
    assert alive(tp0) and os.getsid(tp0) == tp0  # left running, detached
    assert server.children() == [tp0]
    used = server.used_mib()
    assert used[0] > 100_000 and used[1] == 0


def metrics_text(server):
    status, body = server.get("/metrics")
    assert status == 200
    return body


def gauge(text, name):
    return float(re.search(rf"^sglang:{name}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE).group(1))


NEW_NAMES = ("kv_used_tokens", "kv_available_tokens", "kv_evictable_tokens", "mamba_used_tokens",
             "mamba_available_tokens", "mamba_evictable_tokens", "startup_time_seconds")


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10.post1", "0.5.23"])
def test_version_reported_and_metric_names(launch, version):
    server = launch("--enable-metrics", "--disable-cuda-graph", "--max-mamba-cache-size", "30", version=version,
                    time_scale=FAST)
    server.wait_ready()
    assert json.loads(server.get("/server_info")[1])["version"] == version
    assert json.loads(server.get("/get_server_info")[1])["version"] == version
    assert json.loads(server.get("/v1/loads")[1])["version"] == version
    log = server.log()
    assert ("Init parallel begin." in log) == (version == "0.5.23")  # the dialect follows the version
    text = metrics_text(server)
    assert "sglang:engine_startup_time" not in text
    if version != "0.5.23":
        assert not [name for name in NEW_NAMES if f"sglang:{name}" in text]
        return
    for name in NEW_NAMES[:-1]:
        assert f"# TYPE sglang:{name} gauge" in text
    pool = gauge(text, "max_total_num_tokens")
    assert gauge(text, "kv_used_tokens") == gauge(text, "num_used_tokens") == 0
    assert gauge(text, "kv_available_tokens") == pool and gauge(text, "kv_evictable_tokens") == 0
    assert (gauge(text, "mamba_used_tokens"), gauge(text, "mamba_available_tokens")) == (0, 30)
    phases = dict(re.findall(r'^sglang:startup_time_seconds\{[^}]*phase="(\w+)"[^}]*\} (\S+)$', text, re.MULTILINE))
    assert set(phases) == {"load_weight", "kv_cache_allocation", "cuda_graph", "scheduler_e2e", "tokenizer_e2e"}
    assert float(phases["scheduler_e2e"]) >= float(phases["load_weight"]) > 0


def test_v0_5_23_resolves_and_validates_the_mamba_strategy(launch, model_dir, tmp_path):
    # auto: extra_buffer with the overlap schedule (0.5.10 resolves it to no_buffer), as /server_info shows it
    auto = launch("--disable-cuda-graph", version="0.5.23", time_scale=FAST)
    auto.wait_ready()
    info = json.loads(auto.get("/server_info")[1])
    assert (info["mamba_radix_cache_strategy"], info["disable_overlap_schedule"]) == ("extra_buffer", False)
    os.kill(auto.pid, signal.SIGKILL)  # its GPU memory for the next one
    auto.wait_exit()
    off = launch("--disable-cuda-graph", "--disable-overlap-schedule", version="0.5.23", time_scale=FAST)
    off.wait_ready()
    assert json.loads(off.get("/server_info")[1])["mamba_radix_cache_strategy"] == "no_buffer"
    # no_buffer with the overlap schedule on: SGLang's assertion ends the launch before any process starts
    refused = run_sim("0.5.23", "--model-path", model_dir, "--mamba-radix-cache-strategy", "no_buffer")
    assert refused.returncode == 1 and "validate_mamba_no_buffer" in refused.stderr
    assert refused.stderr.rstrip().endswith("AssertionError: no_buffer do not support overlap schedule. "
                                            "Try to set disable_overlap_schedule=True.")
    # extra_buffer on a model without mamba state
    dense = str(tmp_path / "dense")
    assert run_sim("0.5.23", "--make-model", dense, "--shards", "1").returncode == 0
    refused = run_sim("0.5.23", "--model-path", dense, "--mamba-radix-cache-strategy", "extra_buffer")
    assert refused.returncode == 1
    assert refused.stderr.rstrip().endswith(
        "ValueError: --mamba-radix-cache-strategy extra_buffer needs mamba state, got Qwen3ForCausalLM.")


def test_make_site_answers_importlib_metadata(tmp_path):
    site = str(tmp_path / "site")
    query = [sys.executable, "-c",
             "import importlib.metadata as m; print(m.version('sglang'), m.metadata('sglang')['Summary'])"]
    env = dict(os.environ, PYTHONPATH=site)
    # Without --version the default, the newest.
    for argv, expected in ((["--make-site", site], "0.5.23"), (["--make-site", site, "--version", "0.5.10.post1"],
                                                               "0.5.10.post1")):
        assert run_sim("0.5.9", *argv).returncode == 0  # SGLANG_SIM_VERSION does not pick it: --version does
        out = subprocess.run(query, capture_output=True, text=True, check=True, env=env).stdout
        assert out.startswith(expected + " ") and "simulator" in out
    assert os.listdir(site) == ["sglang-0.5.10.post1.dist-info"]  # the earlier one replaced
    assert run_sim("0.5.9", "--make-site", site, "--version", "0.6.0").returncode == 2


def run_sim_env(env, *argv):
    """The simulator with ``env`` over this environment (None removes a variable), SGLANG_SIM_VERSION unset."""
    full_env = dict(os.environ, **{name: value for name, value in env.items() if value is not None})
    for name in ["SGLANG_SIM_VERSION", *env]:
        if env.get(name) is None:
            full_env.pop(name, None)
    return subprocess.run([sys.executable, SIM_SCRIPT, *argv], capture_output=True, text=True, check=False,
                          env=full_env, timeout=30)


def test_the_installed_dist_info_is_the_version_simulated(tmp_path, model_dir, launch):
    # Nothing installed, nothing set: the newest (v0.5.23 has no --mamba-scheduler-strategy).
    result = run_sim_env({}, "--model-path", model_dir, "--mamba-scheduler-strategy", "extra_buffer")
    assert result.returncode == 2 and "unrecognized arguments: --mamba-scheduler-strategy" in result.stderr
    site = str(tmp_path / "site")
    run_sim("0.5.9", "--make-site", site, "--version", "0.5.10.post1").check_returncode()
    # The dist-info on the PYTHONPATH picks the parser: v0.5.10's choices.
    result = run_sim_env({"PYTHONPATH": site}, "--model-path", model_dir, "--mamba-scheduler-strategy",
                         "extra_buffer_lazy")
    assert result.returncode == 2 and "invalid choice: 'extra_buffer_lazy'" in result.stderr
    # SGLANG_SIM_VERSION that says another version than the one installed: refused, naming both.
    result = run_sim_env({"PYTHONPATH": site, "SGLANG_SIM_VERSION": "0.5.23"}, "--model-path", model_dir)
    assert result.returncode == 1
    assert result.stderr.startswith("SGLANG_SIM_VERSION is 0.5.23, but sglang 0.5.10.post1 is installed for this "
                                    f"interpreter ({site}")
    # The server reports the installed version, as given.
    server = launch("--disable-cuda-graph", env={"SGLANG_SIM_VERSION": None, "PYTHONPATH": site}, time_scale=FAST)
    server.wait_ready()
    assert json.loads(server.get("/server_info")[1])["version"] == "0.5.10.post1"
    assert "Init parallel begin." not in server.log()  # the classic dialect
