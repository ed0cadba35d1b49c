"""Fixtures for tests on a real NVIDIA GPU (skipped where there is none).

The modules run through the real `ansible` command with the local connection, against real CUDA
processes (tests/gpu/cuda_holder.py, torch) and the real nvidia-smi. Set GPUOPS_GPU_FIXTURES_OUT to a
directory to keep the nvidia-smi outputs the modules parsed, as fixtures for the unit tests.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CUDA_HOLDER = os.path.join(os.path.dirname(__file__), "cuda_holder.py")
ANSIBLE = shutil.which("ansible", path=os.path.dirname(sys.executable)) or shutil.which("ansible")
MARKER_VAR = "GPUOPS_SGLANG_SERVER"
# With the marker, what makes a process one of a deployment's servers (plugins/module_utils/procfs.py).
DEPLOYMENT_VAR = "GPUOPS_SGLANG_STATE_DIR"


def _gpu_available():
    if not shutil.which("nvidia-smi"):
        return "no nvidia-smi on this machine"
    if subprocess.run(["nvidia-smi", "-L"], check=False, capture_output=True).returncode != 0:
        return "nvidia-smi finds no GPU"
    # In a child process: CUDA initialised here would make pytest itself a holder of /dev/nvidia0.
    probe = subprocess.run([sys.executable, "-c", "import torch; assert torch.cuda.is_available()"],
                           check=False, capture_output=True)
    if probe.returncode != 0:
        return "torch with CUDA is not usable"
    return None


_SKIP_REASON = _gpu_available()


def pytest_collection_modifyitems(config, items):
    if _SKIP_REASON:
        skip = pytest.mark.skip(reason=f"needs a real NVIDIA GPU: {_SKIP_REASON}")
        for item in items:
            if "tests/gpu/" in str(item.fspath):
                item.add_marker(skip)


def gpu_used_mib(index=0):
    out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_module(module, args):
    """Run one module with the real `ansible` command (local connection); returns its result dict."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO_ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env.pop(MARKER_VAR, None)
    proc = subprocess.run(
        [ANSIBLE, "localhost", "-i", "localhost,", "-c", "local", "-o",
         "-e", f"ansible_python_interpreter={sys.executable}", "-m", module]
        + (["-a", json.dumps(args)] if args else []),
        check=False, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    # One-line output: "localhost | SUCCESS => {...}" or "localhost | FAILED! => {...}".
    line = next((line for line in proc.stdout.splitlines() if "=> {" in line), None)
    assert line, f"no result from {module} (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    status, result = line.split(" => ", 1)
    # The one-line format carries the outcome in the prefix, not as a "failed" key.
    return dict(json.loads(result), failed="FAILED" in status)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


class CudaServer:
    """A launch script that starts tests/gpu/cuda_holder.py as a marked server, and its paths."""

    def __init__(self, workdir, name, gib=20, orphan_child=False):
        self.name = name
        self.port = free_port()
        self.script = os.path.join(workdir, f"{name}.sh")
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.state_dir = os.path.join(workdir, "state")
        flags = " --orphan-child" if orphan_child else ""
        with open(self.script, "w") as handle:
            handle.write(
                "#!/bin/sh\n"
                f"export {MARKER_VAR}={name}\n"
                "export SPT_NOENV=1\n"
                "export CUDA_VISIBLE_DEVICES=0\n"
                f"exec {sys.executable} {CUDA_HOLDER} --gib {gib} --port {self.port}{flags}\n")
        os.chmod(self.script, 0o755)

    def spec(self):
        return {"name": self.name, "port": self.port, "gpus": [0], "launch_script": self.script,
                "log_path": self.log_path}

    def module_args(self, state, **extra):
        return dict({"servers": [self.spec()], "state": state, "state_dir": self.state_dir,
                     "stop_timeout": 10, "gpu_free_timeout": 60}, **extra)

    def log(self):
        try:
            with open(self.log_path) as handle:
                return handle.read()
        except OSError:
            return ""


@pytest.fixture
def baseline_mib():
    """GPU 0's used memory before the test, once idle (an earlier test's kill may still be releasing)."""
    def idle_reading():
        used = gpu_used_mib()
        return (used,) if used < 1024 else None  # a tuple, so that 0 MiB counts as found

    return wait_for(idle_reading, 60, "GPU 0 to be idle")[0]


@pytest.fixture
def fixtures_out():
    return os.environ.get("GPUOPS_GPU_FIXTURES_OUT")


@pytest.fixture
def cleanup_pids():
    """Pids a test started outside the modules; SIGKILLed at the end whatever happened."""
    pids = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _marked_pids(name):
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if f"{MARKER_VAR}={name}".encode() in handle.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def kill_marked(name):
    for pid in _marked_pids(name):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def cuda_server(tmp_path):
    """Factory of CudaServer; every process marked with one of them is SIGKILLed when the test ends."""
    made = []

    def make(name, **options):
        server = CudaServer(str(tmp_path), name, **options)
        made.append(server)
        return server

    yield make
    for server in made:
        kill_marked(server.name)
