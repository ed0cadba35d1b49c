"""Multi-node tensor parallelism in the simulator: two "nodes" (processes with their own fake GPUs) on this
machine form one TP group over a real TCP rendezvous, as SGLang 0.5.10 with --nnodes/--node-rank does."""

import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from .conftest import SIM_SCRIPT, alive, fakegpu, free_port, read_cmdline, wait_for
from .test_sglang_sim import SIGQUIT_LINE, TS, assert_in_order, device_links, titles

GROUP_TIMEOUT = 120  # seconds a two-node startup (or crash) may take on a loaded machine
SCHEDULER_CRASH = rf"\[{TS} TP(?P<rank>\d)\] Scheduler hit an exception: Traceback \(most recent call last\):\n"
GLOO_CLOSED = r"RuntimeError: \[/pytorch/third_party/gloo/gloo/transport/tcp/pair\.cc:534\] Connection closed by peer " \
              r"\[127\.0\.0\.1\]:\d+$"
BEGIN = {"0.5.9": "Init torch distributed begin.", "0.5.23": "Init parallel begin."}


@pytest.fixture
def node_gpu_dirs(gpu_dir, tmp_path):
    """One fake-GPU directory per node, four GPUs each."""
    second = str(tmp_path / "gpus-node1")
    fakegpu.init(second, count=4)
    return [gpu_dir, second]


@pytest.fixture
def node(launch, node_gpu_dirs):
    """node(rank, *flags, dist_init_addr=True, env=None, version="0.5.9") -> SimServer of one node of a TP-8
    group over two nodes (--dist-init-addr 127.0.0.1:<node.dist_port>, unless dist_init_addr is False); its
    used_mib() and nvidia_smi() look at that node's GPUs."""

    def start(rank, *flags, dist_init_addr=True, env=None, version="0.5.9"):
        dist = ["--dist-init-addr", f"127.0.0.1:{start.dist_port}"] if dist_init_addr else []
        server = launch("--tp-size", "8", "--nnodes", "2", "--node-rank", str(rank), *dist, *flags,
                        env=dict(env or {}, GPUOPS_FAKE_GPU_DIR=node_gpu_dirs[rank]), version=version)
        server.gpu_dir = node_gpu_dirs[rank]
        return server

    start.dist_port = free_port()
    return start


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


# A rank's line is not always at the start of one: it may follow world rank 0's progress bar, which ends without
# a newline.
def rank_values(log, pattern):
    """{TP rank: float} of the lines matching pattern (one group: the value)."""
    return {int(rank): float(value) for rank, value in re.findall(rf"\[{TS} TP(\d)\] {pattern}", log)}


def rank_messages(log, rank):
    """The messages of one rank's lines, in order."""
    return re.findall(rf"\[{TS} TP{rank}\] ([^\r\n]*)", log)


def wait_dummy_health(server):
    server.wait_log(rf"^\[{TS}\] Dummy health check server started in background thread at 127\.0\.0\.1:{server.port}$",
                    GROUP_TIMEOUT)


def assert_crashed(server, error):
    """The crash path of a node: a scheduler's traceback ending in ``error`` (a regex), its SIGQUIT to the main
    process, the tree kill (the shell sees 137); returns the rank of the first such traceback."""
    assert server.wait_exit(GROUP_TIMEOUT) == -signal.SIGKILL
    log = server.log()
    crash = re.search(SCHEDULER_CRASH + r"(?:  .*\n)*" + error, log, re.MULTILINE)
    assert crash, log[-3000:]
    assert re.search(SIGQUIT_LINE, log[crash.end():], re.MULTILINE)
    wait_for(lambda: not server.children(), what="the node's processes to be killed")
    return int(crash["rank"])


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_two_nodes_form_one_group(node, node_gpu_dirs, version):
    # Something else holds 8 GiB of node 1's GPU 2 (TP5's, through CUDA_VISIBLE_DEVICES): every rank sizes its
    # pools by that GPU.
    fakegpu.allocate(node_gpu_dirs[1], os.getpid(), 2, 8 * 1024, "leftover")
    node0 = node(0, "--dist-timeout", "1200", version=version)
    # Alone, node 0 waits in the rendezvous: world rank 0 listens on --dist-init-addr, nothing goes further.
    wait_for(lambda: node0.log().count(BEGIN[version]) == 4 and accepts(node.dist_port), GROUP_TIMEOUT,
             what="node 0's four ranks in the rendezvous")
    assert "Load weight begin" not in node0.log() and node0.get("/health")[0] is None
    node1 = node(1, "--dist-timeout", "1200", version=version, env={"CUDA_VISIBLE_DEVICES": "3,2,1,0"})
    node0.wait_ready(GROUP_TIMEOUT)
    wait_dummy_health(node1)
    # /ready (v0.5.23) on node 0 only: the placeholder health server of node 1 has none
    assert (node0.get("/ready")[0], node1.get("/ready")[0]) == (200 if version == "0.5.23" else 404, 404)

    log0, log1 = node0.log(), node1.log()
    for log, ranks in ((log0, range(4)), (log1, range(4, 8))):
        for rank in ranks:
            assert_in_order(rank_messages(log, rank), [
                re.escape(BEGIN[version]),
                r"Custom allreduce is disabled because this process group spans across nodes\.",
                r"Init (torch distributed|parallel) ends\. elapsed=.*",
                r"Load weight begin\. .*",
                r"Load weight end\. .*",
                r"KV Cache is allocated\. .*",
                r"Capture .*(cuda|CUDA) graph end\. .*"])
        assert not re.search(rf" TP[{''.join(str(r) for r in range(8) if r not in ranks)}]\]", log)
    assert len(re.findall(rf"^\[{TS} TP0\] max_total_num_tokens=", log0, re.MULTILINE)) == 1
    # Node 1: no summary, no progress bars (world rank 0's), no tokenizer, no uvicorn, no warmup.
    for absent in ("max_total_num_tokens=", "Loading safetensors", "Capturing batches", "Uvicorn", "fired up",
                   "Engine startup timings"):
        assert absent not in log1

    # The tightest GPU sizes every rank: the same pool everywhere, so TP5 keeps 8 GiB less free than the others.
    tokens = rank_values(log0 + log1, r"KV Cache is allocated\. (?:dtype: \S+ )?#tokens: (\d+)")
    assert sorted(tokens) == list(range(8)) and len(set(tokens.values())) == 1
    free = rank_values(log0 + log1, r"Memory pool end\. avail mem=(\d+\.\d+) GB")
    assert free[0] - free[5] == pytest.approx(8.0, abs=0.02)
    assert free[4] == free[6] == free[7] == free[0]

    # Processes and GPUs per node: global ranks in the titles, the node's own GPUs in local rank order.
    assert titles(node0) == ["sglang::detokenizer"] + [f"sglang::scheduler_TP{rank}" for rank in range(4)]
    assert titles(node1) == [f"sglang::scheduler_TP{rank}" for rank in range(4, 8)]
    for server, first, gpus in ((node0, 0, [0, 1, 2, 3]), (node1, 4, [3, 2, 1, 0])):
        by_title = {read_cmdline(pid): pid for pid in server.children()}
        for local, gpu in enumerate(gpus):
            links = device_links(by_title[f"sglang::scheduler_TP{first + local}"])
            assert os.path.join(server.gpu_dir, "dev", f"nvidia{gpu}") in links
        assert all(used > 100_000 for used in server.used_mib().values())
        _rc, apps = server.nvidia_smi("--query-compute-apps=pid,process_name", "--format=csv,noheader")
        holders = sorted(line.split(", ")[1] for line in apps.splitlines() if line.split(", ")[0] != str(os.getpid()))
        assert holders == [f"sglang::scheduler_TP{first + local}" for local in range(4)]  # besides the leftover

    # Node 0 serves; node 1's dummy health server says 200 and knows nothing else.
    status, body = node0.get("/generate", method="POST", body=json.dumps({"text": "Hi", "sampling_params": {
        "max_new_tokens": 4}}), headers={"Content-Type": "application/json"})
    assert status == 200 and json.loads(body)["meta_info"]["completion_tokens"] == 4
    assert accepts(node.dist_port)  # world rank 0 keeps the store's port while serving
    info = json.loads(node0.get("/server_info")[1])
    assert (info["tp_size"], info["nnodes"], info["node_rank"]) == (8, 2, 0)
    for path in ("/ping", "/health", "/health_generate"):
        assert node1.get(path) == (200, "")
    assert node1.get("/metrics") == (404, json.dumps({"detail": "Not Found"}))  # no --enable-metrics
    assert node1.get("/generate", method="POST", body="{}")[0] == 404
    assert node1.get("/health", method="POST") == (405, json.dumps({"detail": "Method Not Allowed"}))
    assert not re.search(r'"GET /health', log1)  # uvicorn at log level warning: no access lines


def test_rendezvous_times_out(node):
    """Node 0 alone waits for the clients until --dist-timeout; node 1 without --dist-init-addr looks for the
    store on its own --host and a free port, where nobody listens, and times out connecting."""
    node0 = node(0, "--dist-timeout", "20")  # 1 s at the tests' time scale
    node1 = node(1, "--dist-timeout", "20", dist_init_addr=False)
    first = assert_crashed(node0, r"torch\.distributed\.DistStoreError: Timed out after 21 seconds waiting for "
                                  r"clients\. 4/8 clients joined\.$")
    assert first == 0  # world rank 0 hosts the store
    assert "_tcp_rendezvous_handler" in node0.log()
    assert_crashed(node1, r"torch\.distributed\.DistNetworkError: The client socket has timed out after 20000ms "
                          r"while trying to connect to \(127\.0\.0\.1, \d+\)\.$")
    for server in (node0, node1):
        assert "Init torch distributed ends" not in server.log() and "Load weight" not in server.log()
        assert server.used_mib() == {0: 0, 1: 0, 2: 0, 3: 0}


def test_dist_init_port_taken(node):
    with socket.create_server(("127.0.0.1", node.dist_port)):
        node0 = node(0)
        assert_crashed(node0, rf"torch\.distributed\.DistNetworkError: The server socket has failed to listen on any "
                              rf"local network address\. port: {node.dist_port}, useIpv6: false, code: -98, "
                              r"name: EADDRINUSE, message: address already in use$")


def test_node_hanging_before_the_rendezvous_keeps_the_others_waiting(node):
    env = {"SGLANG_SIM_FAULT": "hang_before_rendezvous@1"}  # one environment for both nodes
    node1 = node(1, "--dist-timeout", "20", env=env)
    wait_for(lambda: len(node1.children()) == 4, what="node 1's schedulers")
    node0 = node(0, "--dist-timeout", "20", env=env)
    assert_crashed(node0, r"torch\.distributed\.DistStoreError: Timed out after 21 seconds waiting for clients\. "
                          r"4/8 clients joined\.$")
    # Node 1's ranks are stuck before they ever connect: no timeout of theirs runs.
    assert node1.popen.poll() is None and len(node1.children()) == 4
    assert "Init torch distributed begin" not in node1.log()
    assert node1.used_mib() == {0: 0, 1: 0, 2: 0, 3: 0}
    assert node1.get("/health")[0] is None  # the dummy health server starts only once the schedulers are ready


def test_node_crash_while_loading_weights_fails_the_group(node):
    env = {"SGLANG_SIM_FAULT": "oom_load@1"}
    node0, node1 = node(0, env=env), node(1, env=env)
    assert assert_crashed(node1, r"torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate .*") >= 4
    assert re.search(r"GPU [0-3] has a total capacity", node1.log())  # the local GPU
    # Node 0's ranks loaded their weights and meet the gap in the next collective: sizing the pools by the MIN of
    # every rank's free memory.
    assert_crashed(node0, GLOO_CLOSED)
    log0 = node0.log()
    assert "in profile_max_num_token" in log0 and "KV Cache is allocated" not in log0 and "fired up" not in log0
    assert node1.used_mib() == node0.used_mib() == {0: 0, 1: 0, 2: 0, 3: 0}


def test_unbalanced_memory_fails_every_other_rank(node, node_gpu_dirs):
    fakegpu.allocate(node_gpu_dirs[1], os.getpid(), 1, 30 * 1024, "leftover")  # on TP5's GPU
    node0, node1 = node(0), node(1)
    unbalanced = (r"RuntimeError: The memory capacity is unbalanced\. Some GPUs may be occupied by other processes\. "
                  r"pre_model_load_memory=\d+\.\d+, local_gpu_memory=\d+\.\d+, local_gpu_memory \* 0\.9=\d+\.\d+$")
    assert_crashed(node0, unbalanced)
    assert assert_crashed(node1, unbalanced) in (4, 6, 7)
    assert not re.search(rf"\[{TS} TP5\] Scheduler hit an exception: [^\n]*\n(?:  .*\n)*RuntimeError: The memory",
                         node1.log())


def test_node_death_after_ready_fails_node_0(node):
    node0, node1 = node(0), node(1, "--enable-metrics")
    node0.wait_ready(GROUP_TIMEOUT)
    wait_dummy_health(node1)
    status, body = node1.get("/metrics")
    assert status == 200 and "sglang:" not in body  # only attn-TP-rank-0 schedulers export
    os.killpg(node1.pid, signal.SIGKILL)  # the host of node 1 goes away
    assert assert_crashed(node0, GLOO_CLOSED) == 0  # world rank 0 holds the connections of the others
    assert "in recv_requests" in node0.log()
    assert node0.get("/health")[0] is None


def test_crash_after_ready_on_node_1(node):
    env = {"SGLANG_SIM_FAULT": "crash_after_ready@1", "SGLANG_SIM_FAULT_DELAY": "3"}
    node0, node1 = node(0, env=env), node(1, env=env)
    node0.wait_ready(GROUP_TIMEOUT)
    wait_dummy_health(node1)
    seen = []

    def probe():
        status = node1.get("/health")[0]
        if not seen or seen[-1] != status:
            seen.append(status)
        return status is None

    wait_for(probe, GROUP_TIMEOUT, interval=0.02, what="node 1's health server to go away")
    assert seen == [200, None]  # 200 while its schedulers crashed, until the process was gone
    assert assert_crashed(node1, r"RuntimeError: CUDA error: an illegal memory access was encountered") == 4
    assert assert_crashed(node0, GLOO_CLOSED) == 0
    assert node0.log().index("The server is fired up") < node0.log().index("Scheduler hit an exception")


def test_schedulers_killed_on_node_1(node):
    """Schedulers that die without raising (the OOM killer) are only noticed by the main process's wait."""
    node0, node1 = node(0), node(1)
    node0.wait_ready(GROUP_TIMEOUT)
    wait_dummy_health(node1)
    schedulers = sorted(node1.children())
    for stop in (signal.SIGSTOP, signal.SIGKILL):  # stopped first: none can notice the others' end and raise
        for pid in schedulers:
            os.kill(pid, stop)
    assert node1.wait_exit(GROUP_TIMEOUT) == 3
    log1 = node1.log()
    ended = re.findall(rf"^\[{TS}\] Scheduler or DataParallelController (\d+) terminated with -9$", log1, re.MULTILINE)
    assert sorted(map(int, ended)) == schedulers
    assert re.search(rf"^\[{TS}\] ERROR:    Application startup failed\. Exiting\.$", log1, re.MULTILINE)
    assert_crashed(node0, GLOO_CLOSED)
    assert not any(alive(pid) for pid in schedulers)


@pytest.mark.parametrize("flags, error", [
    (["--tp-size", "8", "--nnodes", "3"], "AssertionError: tp_size must be divisible by number of nodes"),
    (["--tp-size", "2", "--dp-size", "2", "--nnodes", "2"],
     "AssertionError: multi-node data parallel is not supported unless dp attention!"),
])
def test_server_args_checks(model_dir, flags, error):
    result = subprocess.run([sys.executable, SIM_SCRIPT, "--model-path", model_dir, *flags],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert result.stderr.startswith("Traceback (most recent call last):\n")
    assert "in check_server_args" in result.stderr and result.stderr.endswith(error + "\n")


def test_fault_for_an_unknown_node_rank(model_dir):
    result = subprocess.run([sys.executable, SIM_SCRIPT, "--model-path", model_dir], capture_output=True, text=True,
                            check=False, env=dict(os.environ, SGLANG_SIM_FAULT="oom_load@first"))
    assert result.returncode == 1
    assert "'oom_load@first' names no node rank after '@'; write oom_load@1 for node rank 1" in result.stderr
