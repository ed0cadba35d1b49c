"""Where the fleet runs: the embedded default inventory on this machine, or rig containers through pct.

A target knows its inventory, where each server's log is as seen from this machine, how to reset a
host (every fleet process killed, by pid: bench/fleet_tool.py) and, through pct, how many ``pct exec``
calls a run made (the rig's pct stand-in logs every call).
"""

import json
import socket
import subprocess
import sys
from pathlib import Path

from bench.collection import BENCH, REPO

FLEET_TOOL = BENCH / "fleet_tool.py"
SIMULATOR = REPO / "tests" / "simulator"


def run_checked(argv, **kwargs):
    result = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed (rc={result.returncode}): "
                           f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result.stdout


class LocalTarget:
    """inventories/local (host ``simhost``, local connection) with its simulated host under ``workdir``."""

    name = "local"

    def __init__(self, workdir, base_port):
        self.simhost = Path(workdir).resolve() / "simhost"
        self.base_port = base_port
        self.model_path = str(self.simhost / "models" / "Qwen3-Next-80B-A3B-Instruct")
        self.draft_model_path = str(self.simhost / "models" / "eagle3-draft")
        self.gpu_dir = str(self.simhost / "gpu")
        self.hosts = ["simhost"]

    def prepare(self, gpus, host_count=1):
        """The simulated host of `make sim-host`, in the bench's own directory, on free ports (one host only)."""
        for port in range(self.base_port, self.base_port + gpus):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    raise RuntimeError(f"port {port} is in use on this machine; pass another --base-port")
        python = sys.executable
        run_checked([python, SIMULATOR / "fakegpu.py", "init", self.gpu_dir, "--count", str(gpus)])
        run_checked([python, SIMULATOR / "sglang_sim.py", "--make-model", self.model_path,
                     "--arch", "Qwen3NextForCausalLM", "--hybrid-mamba", "--shards", "8"])
        run_checked([python, SIMULATOR / "sglang_sim.py", "--make-model", self.draft_model_path,
                     "--arch", "LlamaForCausalLMEagle3", "--shards", "1", "--weights-gib", "0.8"])
        # SGLang installed, as make sim-host does: the simulator's default version (the newest).
        run_checked([python, SIMULATOR / "sglang_sim.py", "--make-site", self.site])

    @property
    def site(self):
        return str(self.simhost / "site")

    def inventory_args(self, host_count=1):
        return ["-i", str(REPO / "inventories" / "local" / "hosts.yml")]

    def extra_vars(self, time_scale):
        return {"simhost_dir": str(self.simhost), "sglang_base_port": self.base_port,
                "sglang_env": {"GPUOPS_FAKE_GPU_DIR": self.gpu_dir, "SGLANG_SIM_TIME_SCALE": str(time_scale),
                               "PYTHONPATH": self.site}}

    def log_path(self, host, server):
        return str(self.simhost / "log" / f"{server}.log")

    def tool(self, host, *args):
        return json.loads(run_checked([sys.executable, FLEET_TOOL, self.gpu_dir, *args]))

    def forget_pid_files(self, host):
        for pid_file in (self.simhost / "bin" / "by-hand").glob("*.pid"):
            pid_file.unlink()

    def pct_calls(self, since, until):
        return None

    def close(self):
        pass


class RigTarget:
    """Rig containers (tests/rig) reached through community.proxmox.proxmox_pct_remote, bench/inventory-pct."""

    name = "pct"
    base_port = 30000
    # bench/inventory-pct/group_vars/sglang_hosts.yml and the rig's container layout.
    LOG_DIR = "/var/lib/gpuops-bench/log"
    BY_HAND_DIR = "/var/lib/gpuops-bench/bin/by-hand"
    GPU_DIR = "/var/lib/fake-gpu"
    model_path = "/models/fake-model-hybrid"
    draft_model_path = "/models/fake-model"
    gpu_dir = GPU_DIR

    def __init__(self, vmids, port, workdir):
        """``vmids``: the containers the rig may bring up, the first for the scenarios, more for the scaling."""
        from tests.rig import rig  # root-only machinery, imported where it is used
        self.rig = rig
        self.vmids = list(vmids)
        self.port = port
        self.workdir = workdir
        self.hosts = [f"ct{vmid}" for vmid in self.vmids]
        self.inventory = None
        self.started = False

    def prepare(self, gpus, host_count=1):
        """The rig with the first ``host_count`` containers (called again to grow it)."""
        if not self.started:
            reason = self.rig.unavailable_reason()
            if reason:
                raise RuntimeError(f"the LXC rig cannot come up here: {reason}")
            self.started = True  # from here on, close() takes down what up() made, also halfway
        state = self.rig.up(self.vmids[:host_count], gpus=gpus, workdir=self.workdir, port=self.port)
        self.inventory = state["inventory"]

    def inventory_args(self, host_count=1):
        return ["-i", self.inventory, "-i", str(BENCH / "inventory-pct"),
                "--limit", ",".join(self.hosts[:host_count])]

    def extra_vars(self, time_scale):
        return {"sglang_env": {"GPUOPS_FAKE_GPU_DIR": self.GPU_DIR, "SGLANG_SIM_TIME_SCALE": str(time_scale)}}

    def vmid(self, host):
        return host.removeprefix("ct")

    def rootfs(self, host):
        return self.rig.container_root(self.vmid(host))

    def log_path(self, host, server):
        return str(self.rootfs(host) / self.LOG_DIR.lstrip("/") / f"{server}.log")

    def tool(self, host, *args):
        # lxc-attach, not pct: the bench's own calls stay out of the pct call log.
        with open(FLEET_TOOL) as script:
            output = run_checked(["lxc-attach", "-n", self.vmid(host), "--clear-env", "--", "python3", "-",
                                  self.GPU_DIR, *args], stdin=script)
        return json.loads(output)

    def forget_pid_files(self, host):
        for pid_file in (self.rootfs(host) / self.BY_HAND_DIR.lstrip("/")).glob("*.pid"):
            pid_file.unlink()

    def pct_calls(self, since, until):
        return sum(1 for call in self.rig.read_call_log(self.workdir)
                   if since <= call["time"] <= until and call["argv"][:1] == ["exec"])

    def close(self):
        """Down with the rig this target brought up; a rig it did not start (another one's) is left alone."""
        if self.started:
            self.rig.down(self.workdir)
