"""Fixtures for the simulator tests: fake GPU dirs, model dirs, free ports and simulated servers
that are always cleaned up, orphans included (found by a per-test marker in their environment)."""

import http.client
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

from ..ports import free_port

SIM_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SIM_DIR)

import fakegpu
from sglang_simulator.config import make_model

SIM_SCRIPT = os.path.join(SIM_DIR, "sglang_sim.py")
FAKEGPU_SCRIPT = os.path.join(SIM_DIR, "fakegpu.py")
MARKER_VAR = "GPUOPS_SGLANG_SERVER"


def wait_for(predicate, timeout=20.0, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def http_request(port, path, method="GET", headers=None, body=None):
    """(status, body) or (None, error) when nothing listens."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read().decode()
    except OSError as exc:
        return None, str(exc)
    finally:
        connection.close()


def read_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return {}
    return dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)


def read_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def process_state(pid):
    """(state, ppid) from /proc/<pid>/stat, or None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def alive(pid):
    state = process_state(pid)
    return state is not None and state[0] not in ("Z", "X")


def marked_pids(marker):
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and read_environ(int(entry)).get(MARKER_VAR.encode()) == marker.encode():
            pids.append(int(entry))
    return pids


def log_writers(log_path):
    pids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") == log_path:
                    pids.append(int(entry))
                    break
            except OSError:
                continue
    return pids


class SimServer:
    """One simulated SGLang server started like a launch script would: own session, log file."""

    def __init__(self, port, log_path, popen, marker, gpu_dir):
        self.port, self.log_path, self.popen, self.marker, self.gpu_dir = port, log_path, popen, marker, gpu_dir

    @property
    def pid(self):
        return self.popen.pid

    def log(self):
        with open(self.log_path, encoding="utf-8", errors="replace", newline="") as handle:  # keep tqdm's \r
            return handle.read()

    def log_lines(self):
        """Lines as a reader of the log sees them: tqdm's \\r refreshes split into lines."""
        return [line for line in re.split(r"[\r\n]", self.log()) if line]

    def wait_log(self, pattern, timeout=20.0):
        return wait_for(lambda: re.search(pattern, self.log(), re.MULTILINE), timeout, what=f"log line {pattern!r}")

    def wait_ready(self, timeout=30.0):
        self.wait_log(r"The server is fired up and ready to roll!", timeout)

    def wait_exit(self, timeout=20.0):
        return self.popen.wait(timeout)

    def get(self, path, **kwargs):
        return http_request(self.port, path, **kwargs)

    def children(self):
        """Processes of this server other than the main one (they all carry the marker)."""
        return [pid for pid in marked_pids(self.marker) if pid != self.pid and alive(pid)]

    def nvidia_smi(self, *args):
        result = subprocess.run([os.path.join(self.gpu_dir, "bin", "nvidia-smi"), *args],
                                capture_output=True, text=True, check=False)
        return result.returncode, result.stdout

    def used_mib(self):
        rc, out = self.nvidia_smi("--query-gpu=index,memory.used", "--format=csv,noheader,nounits")
        assert rc == 0, out
        return {int(index): int(used) for index, used in (line.split(", ") for line in out.splitlines())}


@pytest.fixture
def gpu_dir(tmp_path):
    path = str(tmp_path / "gpus")
    fakegpu.init(path, count=4)
    return path


@pytest.fixture
def model_dir(tmp_path):
    path = str(tmp_path / "model")
    make_model(["--make-model", path, "--arch", "Qwen3NextForCausalLM", "--hybrid-mamba",
                "--shards", "4", "--weights-gib", "20"])
    return path


@pytest.fixture
def draft_model_dir(tmp_path):
    path = str(tmp_path / "draft")
    make_model(["--make-model", path, "--arch", "LlamaForCausalLMEagle3", "--shards", "1",
                "--weights-gib", "0.8", "--layers", "1"])
    return path


@pytest.fixture
def launch(tmp_path, gpu_dir, model_dir):
    """launch(*flags, env=None, version="0.5.9", time_scale=0.05, model=None) -> SimServer.

    Each server is given its version (SGLANG_SIM_VERSION): 0.5.9 unless the test names another, because most of
    these tests expect the classic dialect's lines; the simulator's own default (the newest) is tested in
    test_sim_versions.py. Kills everything started afterwards, orphans included."""
    started = []

    def start(*flags, env=None, version="0.5.9", time_scale=0.05, model=None):
        port = free_port()
        marker = f"simtest-{uuid.uuid4().hex[:12]}"
        log_path = str(tmp_path / f"{marker}.log")
        # SPT_NOENV=1 as in a launch script: otherwise setproctitle wipes the children's /proc/<pid>/environ
        full_env = dict(os.environ, GPUOPS_FAKE_GPU_DIR=gpu_dir, SGLANG_SIM_VERSION=version,
                        SGLANG_SIM_TIME_SCALE=str(time_scale), SPT_NOENV="1", **{MARKER_VAR: marker})
        full_env.pop("CUDA_VISIBLE_DEVICES", None)
        for name, value in (env or {}).items():  # None removes a variable
            if value is None:
                full_env.pop(name, None)
            else:
                full_env[name] = value
        argv = [sys.executable, SIM_SCRIPT, "--model-path", model or model_dir, "--port", str(port), *flags]
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                     start_new_session=True)
        server = SimServer(port, log_path, popen, marker, gpu_dir)
        started.append(server)
        return server

    yield start
    for server in started:
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        # Orphans that left the process group: found by marker, or by the log they still write to
        # (their environ reads empty when setproctitle ran without SPT_NOENV).
        for pid in set(marked_pids(server.marker)) | set(log_writers(server.log_path)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        server.popen.wait(10)
