"""Shared fixtures for integration tests: real ansible-playbook runs against simulated SGLang servers.

Everything runs on this machine: ``localhost`` with the local connection, a fake GPU host made by
tests/simulator/fakegpu.py (``fake_gpus``), simulated model directories (``model_dir``) and launch
scripts that exec tests/simulator/sglang_sim.py (``make_server``). Modules are run through
``ansible-playbook`` (``ansible`` fixture), never by calling Python functions.

Every simulated host has its SGLang installed: a dist-info of the simulator's default version (the newest) in a
site directory that the servers' environment puts on PYTHONPATH (``install_sglang``), so the collection reads that
version as the host's SGLang and the simulator runs it (it simulates the dist-info its interpreter sees).

Cleanup: every process a test starts - through ansible or directly - carries the test's token in the
environment variable GPUOPS_TEST_TOKEN (inherited by SGLang children and orphans alike), and the
autouse fixture ``test_token`` SIGKILLs every process carrying it when the test ends. Processes of
other tests or other users of this machine are never touched.
"""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
import yaml

from ..ports import free_port, free_port_block

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SIMULATOR_DIR = os.path.join(REPO_ROOT, "tests", "simulator")
SGLANG_SIM = os.path.join(SIMULATOR_DIR, "sglang_sim.py")
FAKEGPU = os.path.join(SIMULATOR_DIR, "fakegpu.py")
# The venv interpreter runs ansible (ansible-core needs Python >= 3.12) and the simulated servers (setproctitle
# names their processes as SGLang's own).
PYTHON = sys.executable
BIN_DIR = os.path.dirname(PYTHON)
TOKEN_VAR = "GPUOPS_TEST_TOKEN"
MARKER_VAR = "GPUOPS_SGLANG_SERVER"
DEPLOYMENT_VAR = "GPUOPS_SGLANG_STATE_DIR"

sys.path.insert(0, SIMULATOR_DIR)
import fakegpu
from sglang_simulator.dist_info import write_site
from sglang_simulator.settings import DEFAULT_VERSION as SIMULATED_SGLANG

# The simulated hosts' Python for the modules: the machine's own python3 where there is one, as on a GPU host or in an
# LXC container - on Debian a build with optimizations, in which a module call costs about a third less CPU than in a
# source-built interpreter without them (pyenv's): the integration tier took 15 % less CPU.
HOST_PYTHON = fakegpu.MACHINE_PYTHON
# One local temp base for every ansible-playbook of the suite (each run makes its own directory in it): the payloads
# of our modules are built once for all the tests and xdist workers, not once per test (plugin_utils/payload_cache.py).
ANSIBLE_LOCAL_TEMP = os.path.join(REPO_ROOT, ".work", "ansible-local-tmp")
# And one cache of the modules' compiled module_utils (module_utils/_bytecode_cache.py), as a host has in its user's
# home; written also where the caller's environment says PYTHONDONTWRITEBYTECODE, so that every test runs through it.
MODULE_ENV = {"GPUOPS_SGLANG_BYTECODE_CACHE": os.path.join(REPO_ROOT, ".work", "bytecode-cache")}


def module_environment(base):
    """``base`` (an environment) as the tests' ansible-playbook runs get it: MODULE_ENV, PYTHONDONTWRITEBYTECODE unset."""
    env = dict(base, **MODULE_ENV)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def tagged_pids(token):
    """Pids of live processes whose environment carries ``GPUOPS_TEST_TOKEN=<token>``."""
    needle = f"{TOKEN_VAR}={token}".encode()
    return [int(name) for name in os.listdir("/proc")
            if name.isdigit() and int(name) != os.getpid() and needle in _environ(name)]


def stat_fields(pid):
    """Fields 3.. of /proc/<pid>/stat (state, ppid, pgrp, session, ...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def alive(pid):
    """The process runs (a zombie does not)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def descendants(root):
    """Every process below ``root`` (children, grandchildren, ...): what Ctrl-C or a dropped connection ends."""
    children = {}
    for entry in os.listdir("/proc"):
        fields = stat_fields(entry) if entry.isdigit() else None
        if fields:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@pytest.fixture(autouse=True)
def test_token():
    """A token unique to this test; every process carrying it is killed when the test ends."""
    token = uuid.uuid4().hex
    yield token
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = tagged_pids(token)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)


@pytest.fixture
def wait_until():
    """``wait_until(predicate, timeout=10, what=...)``: poll until predicate() is truthy, else fail the test."""
    def wait(predicate, timeout=10.0, what="condition"):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                pytest.fail(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.1)
    return wait


class FakeGpuHost:
    """A fake GPU host directory: ``nvidia_smi`` (executable), ``device_dir`` (nvidia<N> files), memory."""

    def __init__(self, directory, token, count=8):
        self.dir = str(directory)
        self.token = token
        self.count = count
        self.nvidia_smi = os.path.join(self.dir, "bin", "nvidia-smi")
        self.device_dir = os.path.join(self.dir, "dev")
        self.driver_dir = fakegpu.driver_gpus_dir(self.dir)
        self.init()

    def init(self, **options):
        """(Re)initialise, keeping allocations; options of fakegpu.init (release_delay, fail, ...)."""
        fakegpu.init(self.dir, count=self.count, **options)

    def used_mib(self, index):
        _config, gpus, _apps = fakegpu.gpu_status(self.dir)
        return gpus[index]["used_mib"]

    def hold(self, gpu, mib=20000, server=None, deployment=None, argv0=PYTHON):
        """Start a process that opens device nvidia<gpu> and allocates ``mib`` on it, like a CUDA process.

        Without ``server`` it is foreign (no ownership marker), and so it is with a marker but without the
        ``deployment`` (state_dir) it belongs to; ``argv0`` is the name it shows in its command line. Returns
        the Popen once it holds the memory.
        """
        env = {key: value for key, value in os.environ.items() if key not in (MARKER_VAR, DEPLOYMENT_VAR)}
        env[TOKEN_VAR] = self.token
        if server:
            env[MARKER_VAR] = server
        if deployment:
            env[DEPLOYMENT_VAR] = deployment
        code = textwrap.dedent(f"""
            import os, sys, time
            sys.path.insert(0, {SIMULATOR_DIR!r})
            import fakegpu
            device = fakegpu.open_device({self.dir!r}, {gpu})
            fakegpu.allocate({self.dir!r}, os.getpid(), {gpu}, {mib}, "python3")
            print("holding", flush=True)
            time.sleep(600)
        """)
        holder = subprocess.Popen([argv0, "-c", code], executable=PYTHON, stdout=subprocess.PIPE, text=True, env=env)
        assert holder.stdout.readline().strip() == "holding"
        return holder


@pytest.fixture
def fake_gpus(tmp_path, test_token):
    """An 8-GPU fake host (NVIDIA H200, 143771 MiB each) under tmp_path/gpu."""
    return FakeGpuHost(tmp_path / "gpu", test_token)


@pytest.fixture
def model_dir(tmp_path):
    """A small simulated model directory (2 shards, 2 GiB of weights)."""
    path = str(tmp_path / "model")
    subprocess.run([PYTHON, SGLANG_SIM, "--make-model", path, "--shards", "2", "--weights-gib", "2"], check=True)
    return path


def install_sglang(site, version=SIMULATED_SGLANG):
    """A simulated host's SGLang: ``site``/sglang-<version>.dist-info (the simulator's own), returned as the
    directory to put on the servers' PYTHONPATH."""
    write_site(str(site), version)
    return str(site)


@pytest.fixture
def make_server(tmp_path, fake_gpus, model_dir, test_token):
    """Factory writing a launch script for a simulated server; returns its ``servers:`` entry.

    ``make_server(name, gpus, port=None, fault=None, time_scale=0.05, env=None)`` -> dict with name,
    port, gpus, launch_script and log_path. The script exports the ownership marker, SPT_NOENV=1, the
    fake GPU dir, CUDA_VISIBLE_DEVICES, the simulator settings and the host's SGLang (PYTHONPATH: the
    dist-info of install_sglang), then execs sglang_sim.py with TP = len(gpus).
    ``fault`` is SGLANG_SIM_FAULT; ``env`` adds or overrides exported variables.
    """
    scripts, logs = tmp_path / "scripts", tmp_path / "logs"
    scripts.mkdir(exist_ok=True)
    site = install_sglang(tmp_path / "sglang-site")

    def make(name, gpus, port=None, fault=None, time_scale=0.05, env=None):
        port = port or free_port()
        exports = {
            MARKER_VAR: name,
            # Like the role's scripts: a server started by hand from its script still belongs to its deployment.
            DEPLOYMENT_VAR: str(tmp_path / "state"),
            # setproctitle (scheduler titles) would otherwise overwrite /proc/<pid>/environ and the marker.
            "SPT_NOENV": "1",
            TOKEN_VAR: test_token,
            "GPUOPS_FAKE_GPU_DIR": fake_gpus.dir,
            "CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in gpus),
            "SGLANG_SIM_TIME_SCALE": str(time_scale),
            "PYTHONPATH": site,
        }
        if fault:
            exports["SGLANG_SIM_FAULT"] = fault
        exports.update(env or {})
        lines = ["#!/bin/sh"] + [f"export {key}='{value}'" for key, value in exports.items()]
        lines.append(f"exec {PYTHON} {SGLANG_SIM} --model-path {model_dir} --host 127.0.0.1 --port {port} "
                     f"--tp-size {len(gpus)}")
        script = scripts / f"{name}.sh"
        script.write_text("\n".join(lines) + "\n")
        script.chmod(0o755)
        return {"name": name, "port": port, "gpus": list(gpus), "launch_script": str(script),
                "log_path": str(logs / f"{name}.log")}

    return make


@pytest.fixture
def host_args(tmp_path, fake_gpus):
    """Module options pointing at the fake host: state_dir, nvidia_smi, gpu_device_dir, nvidia_driver_dir."""
    return {"state_dir": str(tmp_path / "state"), "nvidia_smi": fake_gpus.nvidia_smi,
            "gpu_device_dir": fake_gpus.device_dir, "nvidia_driver_dir": fake_gpus.driver_dir}


def job_records(state_dir):
    """The host job records of ``state_dir``: {file name: record}. Never the hidden temporary file of a record
    being replaced (safe_files.write_atomic writes it in the same directory)."""
    jobs = os.path.join(state_dir, "jobs")
    records = {}
    for name in os.listdir(jobs):
        if name.endswith(".json") and not name.startswith("."):
            with open(os.path.join(jobs, name)) as handle:
                records[name] = json.load(handle)
    return records


def read_state(host_args, name):
    """The state file gpuops.sglang.server wrote for server ``name``."""
    with open(os.path.join(host_args["state_dir"], f"{name}.json")) as handle:
        return json.load(handle)


@pytest.fixture
def launched(ansible, host_args, fake_gpus, wait_until):
    """``launched(*specs, **options)`` starts the servers through gpuops.sglang.server (options: state, ...) and
    waits until each holds GPU memory; returns their pids by name."""
    def launch(*specs, **options):
        result = ansible.module("gpuops.sglang.server", dict(host_args, servers=list(specs), **options))
        assert not result.get("failed"), result.get("msg")
        for spec in specs:
            wait_until(lambda spec=spec: all(fake_gpus.used_mib(gpu) > 1024 for gpu in spec["gpus"]),
                       what=f"{spec['name']} holding GPU memory")
        return {server["name"]: server["pid"] for server in result["servers"]}
    return launch


class PlaybookRun:
    """A started ansible-playbook; ``results()`` waits and returns one host result per task."""

    def __init__(self, process, playbook):
        self.process = process
        self.playbook = playbook
        self.rc = None
        self.stdout = self.stderr = ""
        self.progress = []

    def results(self, timeout=120):
        self.stdout, self.stderr = self.process.communicate(timeout=timeout)
        self.rc = self.process.returncode
        # Progress lines of the sliced modules (wait, server, host_lock) precede the JSON report.
        start = 0 if self.stdout.startswith("{") else self.stdout.find("\n{") + 1
        try:
            report = json.loads(self.stdout[start:]) if start >= 0 else None
        except ValueError:
            report = None
        if report is None:
            pytest.fail(f"ansible-playbook printed no JSON (rc={self.rc}):\n{self.stdout}\n{self.stderr}")
        self.progress = self.stdout[:start].splitlines()
        return [task["hosts"]["localhost"] for play in report["plays"] for task in play["tasks"]]

    def result(self, timeout=120):
        """The result of the last task (the module under test in a one-task playbook)."""
        return self.results(timeout)[-1]


class Ansible:
    """Runs modules through ansible-playbook on localhost (local connection), JSON results back."""

    def __init__(self, workdir, token):
        self.workdir = workdir
        self.inventory = os.path.join(workdir, "hosts")
        with open(self.inventory, "w") as handle:
            handle.write(f"localhost ansible_connection=local ansible_python_interpreter={HOST_PYTHON}\n")
        self.env = dict(module_environment(os.environ), **{
            TOKEN_VAR: token,
            "ANSIBLE_CONFIG": os.path.join(REPO_ROOT, "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_LOCAL_TEMP": ANSIBLE_LOCAL_TEMP,
            "ANSIBLE_NOCOLOR": "1",
        })
        self.env.pop(MARKER_VAR, None)
        self.count = 0

    def start_playbook(self, tasks, check=False, diff=False, extra_args=()):
        """Start ansible-playbook with ``tasks`` (a list of task dicts) for localhost; returns a PlaybookRun."""
        self.count += 1
        playbook = os.path.join(self.workdir, f"playbook-{self.count}.yml")
        with open(playbook, "w") as handle:
            json.dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], handle, indent=2)
        argv = [os.path.join(BIN_DIR, "ansible-playbook"), "-i", self.inventory, playbook] + list(extra_args)
        argv += ["--check"] if check else []
        argv += ["--diff"] if diff else []
        process = subprocess.Popen(argv, cwd=REPO_ROOT, env=self.env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return PlaybookRun(process, playbook)

    def start_module(self, module, args, check=False, diff=False):
        return self.start_playbook([{"name": module, module: args}], check=check, diff=diff)

    def module(self, module, args, check=False, diff=False, timeout=120):
        """Run one module task and return its result dict (``failed``/``msg`` on failure)."""
        return self.start_module(module, args, check=check, diff=diff).result(timeout)


@pytest.fixture
def ansible(tmp_path, test_token):
    """An :class:`Ansible` runner; modules run as ``ansible.module("gpuops.sglang.server", {...})``."""
    workdir = tmp_path / "ansible"
    workdir.mkdir()
    return Ansible(str(workdir), test_token)


# Tasks that run on the controller only; every other task is a module call on the GPU host.
CONTROLLER_ACTIONS = {"ansible.builtin.set_fact", "ansible.builtin.debug", "ansible.builtin.assert",
                      "ansible.builtin.include_role", "ansible.builtin.include_tasks",
                      "ansible.builtin.validate_argument_spec"}


class PlaybookResult:
    """One ansible-playbook run; ``host`` is the host whose results stats, tasks and task read."""

    def __init__(self, completed, json_output, host="simhost"):
        self.host = host
        self.rc = completed.returncode
        self.stdout, self.stderr = completed.stdout, completed.stderr
        self.report = None
        if json_output:
            # Live progress lines of gpuops.sglang.wait precede the JSON document.
            start = self.stdout.find("{\n")
            if start < 0:
                pytest.fail(f"ansible-playbook printed no JSON (rc={self.rc}):\n{self.stdout}\n{self.stderr}")
            self.report = json.loads(self.stdout[start:])

    def __repr__(self):
        """What pytest prints for ``assert result.rc == 0``: why the run failed, not an object address."""
        if self.report is None:
            failed = [self.stdout[-3000:]]
        else:
            failed = [f"{name}: {result.get('msg')}" for play in self.report["plays"] for task in play["tasks"]
                      for name in [task["task"]["name"]] for result in task["hosts"].values()
                      if result.get("failed") and not result.get("ignore_errors")]
        return "\n".join([f"<ansible-playbook rc={self.rc}; failed tasks:", *failed,
                          f"stderr: {self.stderr[-2000:]}>"])

    @property
    def stats(self):
        return self.report["stats"][self.host]

    def of(self, host):
        """The same run, read for another host of its inventory."""
        other = object.__new__(PlaybookResult)
        other.__dict__.update(self.__dict__, host=host)
        return other

    def tasks(self):
        """(task name, host result, task duration) of every task that ran on the host, in order."""
        return [(task["task"]["name"], task["hosts"][self.host], task["task"]["duration"])
                for play in self.report["plays"] for task in play["tasks"] if self.host in task["hosts"]]

    def task(self, name_part):
        """Host results of the tasks whose name contains ``name_part``."""
        return [result for name, result, _duration in self.tasks() if name_part in name]

    def waits(self):
        """The results of the run's waits: its wait tasks', or - a relaunch with nothing to change, one call - the
        hold's (the wait it ran in that call)."""
        return [result for result in self.task("Wait until the launched servers are ready") if "servers" in result] or [
            result["converged"]["wait"] for result in self.task("Hold the host") if result.get("converged")]

    def server_answers(self):
        """The answers of the run's server calls (its "Bring servers" tasks, the canary's and batches'), or - a relaunch
        the hold did in its one call - the hold's (the server job it ran, or its read-only plan when nothing changed)."""
        return [result for result in self.task("Bring servers") if "servers" in result] or [
            result["converged"]["server"] for result in self.task("Hold the host") if result.get("converged")]

    def module_calls(self):
        """Actions of the tasks that ran a module on the host (skipped tasks excluded)."""
        return [result["action"] for _name, result, _duration in self.tasks()
                if result["action"] not in CONTROLLER_ACTIONS and not result.get("skipped")]


class SimHost:
    """A simulated GPU host (fake GPUs, simulated model, SGLang ``sglang_version`` installed: the dist-info in
    ``site``, on the servers' PYTHONPATH through sglang_env) with its own inventory; runs the repo's playbooks."""

    def __init__(self, tmp_path, fake_gpus, token, model_path, name="simhost", sglang_version=SIMULATED_SGLANG):
        self.name = name
        self.dir = tmp_path / name
        self.dir.mkdir()
        self.sglang_version = sglang_version
        self.site = install_sglang(self.dir / "site", sglang_version)
        self.token = token
        self.fake_gpus = fake_gpus
        self.base_port = free_port_block(8)
        self.script_dir = self.dir / "bin"
        self.log_dir = self.dir / "log"
        self.host_vars = {
            "ansible_connection": "local",
            "ansible_python_interpreter": HOST_PYTHON,
            "sglang_base_port": self.base_port,
            "sglang_server_command": [PYTHON, SGLANG_SIM],
            "sglang_model_path": model_path,
            "sglang_env": {"GPUOPS_FAKE_GPU_DIR": fake_gpus.dir, "SGLANG_SIM_TIME_SCALE": "0.05", TOKEN_VAR: token,
                           "PYTHONPATH": self.site},
            "sglang_script_dir": str(self.script_dir),
            "sglang_log_dir": str(self.log_dir),
            "sglang_cache_dir": str(self.dir / "cache"),
            "sglang_state_dir": str(self.dir / "state"),
            "sglang_nvidia_smi": fake_gpus.nvidia_smi,
            "sglang_gpu_device_dir": fake_gpus.device_dir,
            "sglang_nvidia_driver_dir": fake_gpus.driver_dir,
            "relaunch_wait_timeout": 60,
            "relaunch_stall_timeout": 20,
            "relaunch_progress_interval": 1,
        }
        self.inventory = self.dir / "hosts.yml"
        self.inventory.write_text(yaml.safe_dump({"all": {"children": {"sglang_hosts": {
            "hosts": {name: self.host_vars}}}}}))
        self.runs = 0
        self.env = dict(module_environment(os.environ), ANSIBLE_CONFIG=os.path.join(REPO_ROOT, "ansible.cfg"),
                        ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=ANSIBLE_LOCAL_TEMP, **{TOKEN_VAR: token})
        self.env.pop("GPUOPS_SGLANG_SERVER", None)

    def port(self, index):
        return self.base_port + index

    def run(self, playbook, extra_vars=None, json_output=True, args=(), timeout=300):
        """Run playbooks/<playbook>.yml against simhost; extra_vars go through a JSON file (no quoting)."""
        self.runs += 1
        extra = self.dir / f"extra-{self.runs}.json"
        extra.write_text(json.dumps(extra_vars or {}))
        # Text output is what the operator reads: the stdout callback of the repository's ansible.cfg.
        env = dict(self.env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json") if json_output else self.env
        argv = [os.path.join(BIN_DIR, "ansible-playbook"), "-i", str(self.inventory), "-e", f"@{extra}",
                os.path.join(REPO_ROOT, "playbooks", f"{playbook}.yml"), *args]
        completed = subprocess.run(argv, check=False, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                                   capture_output=True, text=True, timeout=timeout)
        return PlaybookResult(completed, json_output, self.name)

    def script(self, name):
        return self.script_dir / f"{name}.sh"


@pytest.fixture
def sim_host(tmp_path, fake_gpus, test_token, model_dir):
    return SimHost(tmp_path, fake_gpus, test_token, model_dir)


# The real routers (tests/integration/test_router.py, test_rolling_relaunch.py): sglang-router 0.3.2 and smg 1.13.0, both
# pinned in requirements/. Both wheels install a console script "smg" (the last installed wins), so each is started
# by its module: 0.3.2 as "python -m sglang_router.launch_router", smg as "python -m smg launch". Short health checks
# so a draining server is judged within seconds; round_robin so every server gets requests (cache_aware sent
# everything to one of two idle servers when the reference was written).
ROUTER_FLAGS = ["--policy", "round_robin", "--health-check-interval-secs", "1", "--health-check-timeout-secs", "2",
                "--health-failure-threshold", "3", "--health-success-threshold", "2",
                "--worker-startup-timeout-secs", "5", "--log-level", "info"]
ROUTER_COMMANDS = {
    "sglang-router": ["-m", "sglang_router.launch_router"],
    # smg probes a worker that does not answer yet every 30 s by default: every second, like 0.3.2's backoff.
    "smg": ["-m", "smg", "launch", "--worker-startup-check-interval", "1"],
}
ROUTER_MODULES = {"sglang-router": "sglang_router", "smg": "smg"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Router:
    def __init__(self, process, url, log_path, kind):
        self.process, self.url, self.log_path, self.kind = process, url, log_path, kind

    def log(self):
        with open(self.log_path, errors="replace") as handle:
            return ANSI.sub("", handle.read())


def http_status(port, path, timeout=5):
    """``(status, body)`` of a GET on loopback; ``(None, "")`` when nothing answers."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode()
    except OSError:
        return None, ""
    finally:
        connection.close()


@pytest.fixture(params=sorted(ROUTER_COMMANDS))
def router_kind(request):
    """Which real router a test runs against: every router test runs against both (skipped where not installed)."""
    pytest.importorskip(ROUTER_MODULES[request.param], reason=f"{request.param} is not installed (requirements/"
                        "requirements.txt pins sglang-router==0.3.2 and smg==1.13.0; run make, or pip install them)")
    return request.param


@pytest.fixture
def start_router(tmp_path, test_token, wait_until, router_kind):
    """``start_router(*worker_urls, extra=())``: the real router of ``router_kind`` on loopback, answering; a Router.

    Its HTTP and Prometheus ports are free ports of this pytest process (both routers bind 29000 on 0.0.0.0 for
    Prometheus unless told otherwise); its log is in the test's own directory."""
    def start(*worker_urls, extra=()):
        port = free_port_block(2)
        log_path = tmp_path / f"router-{port}.log"
        argv = [PYTHON, *ROUTER_COMMANDS[router_kind], "--host", "127.0.0.1", "--port", str(port),
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(port + 1), *ROUTER_FLAGS, *extra]
        if worker_urls:
            argv += ["--worker-urls", *worker_urls]
        env = dict(os.environ, GPUOPS_TEST_TOKEN=test_token, SPT_NOENV="1")
        with open(log_path, "w") as log:
            process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        router = Router(process, f"http://127.0.0.1:{port}", log_path, router_kind)
        wait_until(lambda: process.poll() is not None or http_status(port, "/liveness")[0] == 200, timeout=20,
                   what="the router answering /liveness")
        assert process.poll() is None, f"the router exited with {process.returncode}:\n{router.log()[-3000:]}"
        # The cleanup finds it by the token (setproctitle would have wiped it without SPT_NOENV).
        assert process.pid in tagged_pids(test_token)
        return router

    return start
