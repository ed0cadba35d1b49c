"""Fault matrix: an operator injects faults; a failure never leaves a host worse than it found it.

No server is killed that was not asked for, one server's fault never takes the others down, no log is
lost, no secret is shown, and bad input gets a clear error naming the value before anything is touched.
Real ansible-playbook runs of the playbooks and modules against simulated servers on a fake GPU host.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import textwrap
import threading
import urllib.error
import urllib.request

import pytest

from .conftest import (
    BIN_DIR,
    PYTHON,
    REPO_ROOT,
    SIMULATOR_DIR,
    TOKEN_VAR,
    alive,
    descendants,
)

SERVER = "gpuops.sglang.server"
WAIT = "gpuops.sglang.wait"
SECRET = "sk-fault-matrix-7f3c9e21d4"


# ---- helpers ------------------------------------------------------------------------------------


def read_json(path):
    with open(path) as handle:
        return json.load(handle)


def read_text(path):
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def state_pid(state_dir, name):
    return read_json(os.path.join(str(state_dir), f"{name}.json"))["pid"]


def healthy(port, path="/health_generate"):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def summary(result):
    return result.task("Summary")[0]["msg"]


def failures(result):
    """Messages of every failed task of a playbook run (flattened to one string each)."""
    messages = []
    for _name, host, _duration in result.tasks():
        if host.get("failed"):
            msg = host.get("msg")
            messages.append(" | ".join(msg) if isinstance(msg, list) else str(msg))
    return messages


def sim_servers(sim_host, count, env=None):
    servers = [{"name": f"s{index}", "port": sim_host.port(index), "gpus": [index]} for index in range(count)]
    for name, extra in (env or {}).items():
        servers[int(name[1:])]["env"] = extra
    return servers


def running_fleet(sim_host, servers):
    """Relaunch ``servers`` on sim_host (all must become ready); returns {name: pid}."""
    first = sim_host.run("relaunch", {"sglang_servers": servers})
    assert first.rc == 0, failures(first) or first.stdout[-3000:]
    pids = {server["name"]: state_pid(sim_host.dir / "state", server["name"]) for server in servers}
    assert all(alive(pid) for pid in pids.values())
    return pids


def assert_untouched(pids, state_dir):
    """Every server still runs as the very pid it ran as before, and its state file says so."""
    for name, pid in pids.items():
        assert alive(pid), f"{name} (pid {pid}) was killed"
        assert state_pid(state_dir, name) == pid, f"{name} was relaunched"


@pytest.fixture
def tmpfs():
    """``tmpfs(path, size)`` mounts a small tmpfs at ``path`` (root only); always unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs to simulate a full disk needs root")
    mounted = []

    def mount(path, size="256k"):
        os.makedirs(path, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(str(path))
        return str(path)

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", path], check=False)


def fill(directory):
    """Fill the filesystem of ``directory`` up to the last byte (ENOSPC)."""
    with open(os.path.join(directory, "filler"), "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == 28, exc
    with pytest.raises(OSError), open(os.path.join(directory, "probe"), "wb") as handle:
        handle.write(b"x" * 8192)
        handle.flush()
        os.fsync(handle.fileno())


# ---- 1. crashed after ready, while the wait waits for a slower one ------------------------------


def test_a_server_that_crashes_after_ready_is_reported_crashed_at_the_end_of_the_wait(
        ansible, host_args, make_server):
    # Seconds apart, so that a loaded machine keeps the order: the wait is under way before flaky is ready (3-5 s),
    # sees it ready for 5 s, then crashed; slow is ready long after (18-30 s).
    flaky = make_server("flaky", [0], fault="crash_after_ready", time_scale=1, env={"SGLANG_SIM_FAULT_DELAY": "5"})
    slow = make_server("slow", [1], time_scale=6)
    tasks = [
        {"name": "launch", SERVER: dict(host_args, servers=[flaky, slow], state="restarted")},
        {"name": "wait", "ignore_errors": True, WAIT: {
            "servers": [{"name": "flaky"}, {"name": "slow"}], "state_dir": host_args["state_dir"],
            "progress_interval": 0.5, "stall_timeout": 0, "timeout": 120}},
    ]
    results = ansible.start_playbook(tasks).results(timeout=180)
    assert not results[0].get("failed"), results[0].get("msg")
    wait = results[-1]
    reports = {report["name"]: report for report in wait["servers"]}
    assert reports["slow"]["status"] == "ready", reports["slow"]["msg"]
    flaky_report = reports["flaky"]
    assert flaky_report["status"] == "crashed", flaky_report["msg"]
    assert wait["failed"] and wait["ready"] == ["slow"] and wait["not_ready"] == ["flaky"]
    assert re.search(r"\(it was ready after \d+(\.\d+)? s, but not at the end of the wait\)", flaky_report["msg"]), \
        flaky_report["msg"]
    # Its log says why: the exception line is in the message, not "no error in <log>".
    assert "no error in" not in flaky_report["msg"], flaky_report["msg"]
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in flaky_report["msg"]
    assert wait["msg"].startswith("1/2 servers not ready: flaky crashed in ")


# ---- 2. status.yml fails on dead, crashed and orphaned servers ----------------------------------


def test_status_fails_on_a_dead_a_crashed_and_an_orphaned_server_and_passes_when_all_are_ready(
        sim_host, wait_until, test_token):
    healthy_fleet = sim_servers(sim_host, 3, env={"s2": {"SGLANG_SIM_FAULT": "orphan_scheduler"}})
    pids = running_fleet(sim_host, healthy_fleet)
    ok = sim_host.run("status", {"sglang_servers": healthy_fleet})
    assert ok.rc == 0, failures(ok)
    assert ok.task("Fleet status")[0]["msg"][0] == "3/3 servers ready"

    # s3 crashes at init; the others are left as they are (started: unchanged).
    fleet = healthy_fleet + [{"name": "s3", "port": sim_host.port(3), "gpus": [3],
                              "env": {"SGLANG_SIM_FAULT": "oom_load"}}]
    crashed = sim_host.run("relaunch", {"sglang_servers": fleet})
    assert crashed.rc != 0
    assert_untouched(pids, sim_host.dir / "state")

    # s1: every process of it SIGKILLed -> dead. s2: only its main process -> its scheduler is orphaned.
    marker = b"GPUOPS_SGLANG_SERVER=s1"
    token = f"{TOKEN_VAR}={test_token}".encode()

    def processes_of_s1():
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/environ", "rb") as handle:
                        environ = handle.read().split(b"\0")
                except OSError:
                    continue
                if marker in environ and token in environ and alive(entry):
                    found.append(int(entry))
        return found

    for pid in processes_of_s1():
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not processes_of_s1(), what="every process of s1 to die")
    os.kill(pids["s2"], signal.SIGKILL)
    wait_until(lambda: not alive(pids["s2"]), what="the main process of s2 to die")

    status = sim_host.run("status", {"sglang_servers": fleet})
    assert status.rc != 0
    rows = {line.split()[0]: line.split() for line in status.task("Fleet status")[0]["msg"][2:]}
    assert rows["s0"][3] == "ready"
    assert rows["s2"][3] == "orphaned", rows["s2"]
    [problems] = status.task("no server is dead, crashed, orphaned or otherwise failing")
    assert problems["failed"]
    messages = problems["msg"]
    assert len(messages) == 3, messages
    assert messages[0].startswith("s1 dead: launched, but no process of it is left"), messages
    assert messages[1].startswith("s2 orphaned: its main process is gone but pids "), messages
    assert messages[2].startswith("s3 crashed in loading_weights: torch.OutOfMemoryError: CUDA out of memory"), \
        messages


# ---- 3. nvidia-smi hangs, prints nothing or is cut short ----------------------------------------


NVIDIA_SMI_FAULT_MESSAGES = {
    "hang": r"did not answer within 2 s \(nvidia_smi_timeout\); the driver may be hung",
    "empty": r"nvidia-smi --query-gpu printed 0 GPU lines, expected one line per GPU; its output was empty",
    "truncated": r"printed truncated output \(no final newline\)",
}


@pytest.mark.parametrize("fault", ["hang", "empty", "truncated"])
def test_a_failing_nvidia_smi_fails_the_preflight_and_kills_nothing(
        sim_host, fake_gpus, ansible, make_server, fault):
    servers = sim_servers(sim_host, 2)
    pids = running_fleet(sim_host, servers)
    state_dir = sim_host.dir / "state"
    query = re.escape(fake_gpus.nvidia_smi) + r" --query-gpu=index,uuid,name,memory\.used"
    # A hung command is named whole (path and query); empty output names the query it answered.
    expected = re.compile((query + r".*" if fault != "empty" else "") + NVIDIA_SMI_FAULT_MESSAGES[fault])
    subprocess.run([PYTHON, os.path.join(SIMULATOR_DIR, "fakegpu.py"), "fault", fake_gpus.dir, fault], check=True)

    result = sim_host.run("relaunch", {"sglang_servers": servers, "relaunch_state": "restarted",
                                       "sglang_nvidia_smi_timeout": 2})
    assert result.rc != 0
    # The GPU query rides on the hold's round trip; a failed one gives the hold back before it fails.
    [preflight] = [task for task in result.task("Hold the host") if task.get("action") == "gpuops.sglang.host_lock"]
    assert preflight["failed"] and expected.search(preflight["msg"]), preflight["msg"]
    assert preflight["released"] is True and not (state_dir / "run.json").exists()
    assert "0 GPUs" not in " ".join(failures(result))
    assert not result.task("Bring servers"), "nothing is stopped after a failed GPU query"
    assert_untouched(pids, state_dir)

    # The module directly, restarting the running servers: a failed GPU query stops nothing.
    module_servers = [{"name": server["name"], "port": server["port"], "gpus": server["gpus"],
                       "launch_script": str(sim_host.script(server["name"])),
                       "log_path": str(sim_host.log_dir / f"{server['name']}.log")} for server in servers]
    direct = ansible.module(SERVER, {
        "servers": module_servers, "state": "restarted", "state_dir": str(state_dir),
        "nvidia_smi": fake_gpus.nvidia_smi, "nvidia_smi_timeout": 2, "gpu_device_dir": fake_gpus.device_dir,
        "nvidia_driver_dir": fake_gpus.driver_dir})
    assert direct["failed"] and expected.search(direct["msg"]), direct["msg"]
    assert not direct.get("servers"), direct
    assert_untouched(pids, state_dir)


# ---- 4. disk full --------------------------------------------------------------------------------


def test_a_full_disk_fails_naming_the_path_and_enospc_before_any_server_is_stopped(
        sim_host, ansible, fake_gpus, tmpfs):
    servers = sim_servers(sim_host, 2)
    pids = running_fleet(sim_host, servers)
    state_dir = sim_host.dir / "state"

    # The script directory fills up: writing the launch scripts fails, nothing is stopped.
    script_dir = tmpfs(sim_host.script_dir)
    fill(script_dir)
    full = sim_host.run("relaunch", {"sglang_servers": servers, "relaunch_state": "restarted"})
    assert full.rc != 0
    # The relaunch is the hold's call: its server job refused, and the run fails with its message.
    [refused] = full.task("the hold's relaunch answered")
    assert refused["failed"]
    assert re.search(r"cannot write " + re.escape(script_dir) + r"/s[01]\.sh: .*No space left on device",
                     refused["msg"]), refused["msg"]
    assert_untouched(pids, state_dir)
    assert not (state_dir / "run.json").exists(), "the host was given back after the refusal"
    subprocess.run(["umount", script_dir], check=True)

    # The state directory fills up: the module fails before it stops anything.
    saved = {}
    for name in os.listdir(state_dir):
        if os.path.isfile(os.path.join(state_dir, name)):
            with open(os.path.join(state_dir, name), "rb") as handle:
                saved[name] = handle.read()
    tmpfs(state_dir)
    for name, data in saved.items():
        with open(os.path.join(state_dir, name), "wb") as handle:
            handle.write(data)
    fill(str(state_dir))
    module_servers = [{"name": server["name"], "port": server["port"], "gpus": server["gpus"],
                       "launch_script": str(sim_host.script(server["name"])),
                       "log_path": str(sim_host.log_dir / f"{server['name']}.log")} for server in servers]
    result = ansible.module(SERVER, {
        "servers": module_servers, "state": "restarted", "state_dir": str(state_dir),
        "nvidia_smi": fake_gpus.nvidia_smi, "gpu_device_dir": fake_gpus.device_dir,
        "nvidia_driver_dir": fake_gpus.driver_dir})
    assert result["failed"]
    assert str(state_dir) in result["msg"], result["msg"]
    assert "No space left on device" in result["msg"], result["msg"]
    assert "no server was stopped" in result["msg"], result["msg"]
    assert all(alive(pid) for pid in pids.values()), "a full state dir stopped a server"
    assert_untouched(pids, state_dir)


# ---- 5. Ctrl-C during the wait ------------------------------------------------------------------


def test_an_interrupted_wait_leaves_the_servers_starting_and_the_next_relaunch_is_a_no_op(
        sim_host, wait_until):
    servers = sim_servers(sim_host, 2)
    # The servers load no weights until the gate exists: the controller reaches the wait and reports progress before
    # they are ready, however busy this machine is (the test interrupts the wait, not a finished run).
    gate = sim_host.dir / "weights-arrived"
    variables = {"sglang_servers": servers,
                 "sglang_env": dict(sim_host.host_vars["sglang_env"], SGLANG_SIM_WEIGHTS_GATE=str(gate))}
    extra = sim_host.dir / "extra-interrupted.json"
    extra.write_text(json.dumps(variables))
    argv = [os.path.join(BIN_DIR, "ansible-playbook"), "-i", str(sim_host.inventory), "-e", f"@{extra}",
            os.path.join(REPO_ROOT, "playbooks", "relaunch.yml")]
    env = dict(sim_host.env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    run = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True)
    reader.start()
    waiting = re.compile(r"^simhost: 0/2 ready\b")
    try:
        wait_until(lambda: any(waiting.match(line) for line in list(lines)), timeout=300,
                   what="the wait to report progress")
        lease = read_json(sim_host.dir / "state" / "run.json")
        # The operator's Ctrl-C (or a dropped connection): the whole ansible-playbook process tree dies.
        for pid in [run.pid] + descendants(run.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    gate.touch()  # the startups go on, on their own
    pids = {server["name"]: state_pid(sim_host.dir / "state", server["name"]) for server in servers}
    wait_until(lambda: all(healthy(server["port"]) for server in servers), timeout=120,
               what="the servers to become ready on their own")
    assert_untouched(pids, sim_host.dir / "state")

    again = sim_host.run("relaunch", variables)
    assert again.rc == 0, failures(again)
    assert again.stats["changed"] == 0
    assert summary(again)[0] == "2/2 serving"
    [hold] = [result for result in again.task("Hold the host for this run")
              if result["action"] == "gpuops.sglang.host_lock"]
    assert (hold.get("taken_over") or {}).get("run_id") == lease["run_id"], hold
    assert_untouched(pids, sim_host.dir / "state")


def test_ctrl_c_says_what_goes_on_on_the_host_and_the_history_keeps_the_run(sim_host, wait_until):
    servers = sim_servers(sim_host, 2)
    gate = sim_host.dir / "weights-arrived"
    extra = sim_host.dir / "extra-ctrl-c.json"
    extra.write_text(json.dumps({"sglang_servers": servers, "sglang_env": dict(
        sim_host.host_vars["sglang_env"], SGLANG_SIM_WEIGHTS_GATE=str(gate))}))
    argv = [os.path.join(BIN_DIR, "ansible-playbook"), "-i", str(sim_host.inventory), "-e", f"@{extra}",
            os.path.join(REPO_ROOT, "playbooks", "relaunch.yml")]
    # The repository's stdout callback, in a session of its own: Ctrl-C signals the terminal's whole process group.
    run = subprocess.Popen(argv, cwd=REPO_ROOT, env=sim_host.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any(line.startswith("simhost: 0/2 ready") for line in list(lines)), timeout=300,
                   what="the wait to report progress")
        os.killpg(run.pid, signal.SIGINT)
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    reader.join(timeout=10)
    output = " ".join("".join(lines).split())
    assert "User interrupted execution" in output, output[-3000:]
    # A relaunch is one call: the hold stopped, launched and was waiting.
    assert ("Interrupted in 'gpuops.sglang.relaunch : Hold the host for this run': on each host where it had begun, "
            "a relaunch it began goes on there: the server sequence it started (stop, verify GPU memory, launch) "
            "finishes every server it began, detached, and the servers go on starting on their own; nothing is stopped. "
            "playbooks/status.yml shows how far they got") in output, output[-3000:]
    gate.touch()
    wait_until(lambda: all(healthy(server["port"]) for server in servers), timeout=120,
               what="the servers to become ready on their own")
    # The run reached the journal before its wait: the history shows what it changed and that nobody waited.
    history = sim_host.run("history", {"relaunch_history_last": 5})
    assert history.rc == 0
    [row] = [line for line in history.task("Run history")[0]["msg"][1:] if " relaunch " in line]
    assert "2 servers changed, not waited for (interrupted in its wait, or waiting)" in row, row


# ---- 6. a crash loop keeps the first crash's log ------------------------------------------------


def test_a_crash_loop_keeps_the_first_crash_and_bounded_generations(
        ansible, host_args, make_server, wait_until, tmp_path):
    crasher = make_server("crasher", [0], fault="oom_load")
    log = crasher["log_path"]
    crash_logs = []
    for _attempt in range(5):
        result = ansible.module(SERVER, dict(host_args, servers=[crasher], state="restarted", log_generations=2))
        assert not result.get("failed"), result.get("msg")
        pid = result["servers"][0]["pid"]
        wait_until(lambda pid=pid: not alive(pid) and "torch.OutOfMemoryError" in read_text(log),
                   timeout=60, what="the server to crash")
        crash_logs.append(read_text(log))
    assert len(set(crash_logs)) == len(crash_logs), "each run writes a log of its own"
    first_crash = read_text(log + ".first-crash")
    assert first_crash == crash_logs[0]
    assert "Traceback (most recent call last):" in first_crash and "torch.OutOfMemoryError" in first_crash
    assert read_text(log) == crash_logs[-1]
    assert read_text(log + ".1") == crash_logs[-2]
    assert read_text(log + ".2") == crash_logs[-3]
    name = os.path.basename(log)
    assert sorted(entry for entry in os.listdir(os.path.dirname(log)) if entry.startswith(name)) == [
        name, name + ".1", name + ".2", name + ".first-crash"]


# ---- 7. symbolic links at a log_path and at the lock --------------------------------------------


def test_a_symlink_at_a_log_path_or_at_the_lock_is_refused_and_nothing_is_touched(
        ansible, host_args, make_server, launched, tmp_path):
    first, second = make_server("a", [0]), make_server("b", [1])
    pids = launched(first, second)
    target = tmp_path / "precious.txt"
    target.write_text("precious\n")
    os.unlink(second["log_path"])
    os.symlink(target, second["log_path"])

    result = ansible.module(SERVER, dict(host_args, servers=[first, second], state="restarted"))
    assert result["failed"]
    assert f"{second['log_path']} is a symbolic link (to {target}); refusing to write through it" in result["msg"]
    assert target.read_text() == "precious\n" and os.path.islink(second["log_path"])
    assert_untouched(pids, host_args["state_dir"])

    # A symlink planted at the host lock.
    os.unlink(second["log_path"])
    lock = os.path.join(host_args["state_dir"], ".lock")
    os.unlink(lock)
    os.symlink(target, lock)
    locked = ansible.module(SERVER, dict(host_args, servers=[first, second], state="restarted"))
    assert locked["failed"]
    assert f"lock file {lock} is a symbolic link (to {target}); refusing to write through it" in locked["msg"], \
        locked["msg"]
    assert "Traceback" not in locked["msg"] and "MODULE FAILURE" not in locked["msg"], locked["msg"]
    assert target.read_text() == "precious\n"
    assert_untouched(pids, host_args["state_dir"])


# ---- 8. bad numbers through the playbook --------------------------------------------------------


def test_a_negative_stall_timeout_is_refused_on_the_controller_and_the_fleet_keeps_running(sim_host):
    servers = sim_servers(sim_host, 2)
    pids = running_fleet(sim_host, servers)
    result = sim_host.run("relaunch", {"sglang_servers": servers, "relaunch_state": "restarted"},
                          args=["-e", "relaunch_stall_timeout=-5"])
    assert result.rc != 0
    assert result.module_calls() == [], "refused before any module ran on the host"
    [refusal] = list(failures(result))
    assert "relaunch_stall_timeout=-5 is out of range: use 1-86400 s, or 0 to turn it off" in refusal
    assert_untouched(pids, sim_host.dir / "state")


# ---- 9. no API key shown from a foreign process's command line ----------------------------------


def test_an_api_key_in_a_foreign_command_line_is_never_shown(sim_host, fake_gpus, test_token, tmp_path):
    servers = sim_servers(sim_host, 2)
    env = dict(os.environ, **{TOKEN_VAR: test_token})
    env.pop("GPUOPS_SGLANG_SERVER", None)
    env.pop("GPUOPS_SGLANG_STATE_DIR", None)
    holder_code = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {SIMULATOR_DIR!r})
        import fakegpu
        device = fakegpu.open_device({fake_gpus.dir!r}, 0)
        fakegpu.allocate({fake_gpus.dir!r}, os.getpid(), 0, 20000, "python3")
        print("holding", flush=True)
        time.sleep(600)
    """)
    listener_code = textwrap.dedent(f"""
        import socket, time
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", {sim_host.port(1)}))
        sock.listen()
        print("holding", flush=True)
        time.sleep(600)
    """)
    foreign = []
    try:
        for name, code in (("gpu_holder.py", holder_code), ("port_holder.py", listener_code)):
            (tmp_path / name).write_text(code)
            process = subprocess.Popen([PYTHON, str(tmp_path / name), "--api-key", SECRET], stdout=subprocess.PIPE,
                                       text=True, env=env)
            foreign.append(process)
            assert process.stdout.readline().strip() == "holding"
        runs = [sim_host.run("relaunch", {"sglang_servers": servers}, args=["-vvvv"]),
                sim_host.run("relaunch", {"sglang_servers": servers}, json_output=False, args=["-vvvv"])]
        for run in runs:
            assert run.rc != 0
            output = run.stdout + run.stderr
            assert SECRET not in output, "the API key of a foreign process was shown"
            assert "refusing to touch any process" in output and "--api-key ********" in output
        [bring] = runs[0].task("Bring servers")
        assert bring["failed"]
        gpu_holder = (f"GPU 0 is held by foreign process {foreign[0].pid} ({PYTHON} {tmp_path}/gpu_holder.py "
                      "--api-key ********) that has no GPUOPS_SGLANG_SERVER marker; refusing to kill it")
        port_holder = (f"port {sim_host.port(1)} of server 's1' is in use by foreign process {foreign[1].pid} "
                       f"({PYTHON} {tmp_path}/port_holder.py --api-key ********); free the port or choose another one")
        assert bring["problems"] == [
            gpu_holder + ": stop it yourself or set force_kill_gpu_holders: true", port_holder]
        # The message shows the same command lines, the key hidden and nothing else of them lost.
        assert gpu_holder in bring["msg"], bring["msg"]
        assert port_holder in bring["msg"], bring["msg"]
        for process in foreign:
            assert process.poll() is None, "the foreign process was left alone"
        assert not (sim_host.dir / "state" / "s0.json").exists()
    finally:
        for process in foreign:
            process.kill()
            process.wait()
