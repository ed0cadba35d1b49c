"""gpuops.sglang.server through ansible-playbook against simulated SGLang servers on a fake GPU host."""

import hashlib
import json
import os
import signal
import socket
import sys

import pytest

from .conftest import alive, job_records, read_state, stat_fields

MODULE = "gpuops.sglang.server"
MARKER = b"GPUOPS_SGLANG_SERVER="


@pytest.fixture
def marked(test_token):
    """``marked(name)``: live pids of this test carrying the ownership marker of server ``name``.

    Other tests on this machine may run servers of the same name, hence the test token filter.
    """
    token = f"GPUOPS_TEST_TOKEN={test_token}".encode()

    def pids(name):
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    environ = handle.read().split(b"\0")
            except OSError:
                continue
            if MARKER + name.encode() in environ and token in environ and alive(entry):
                found.append(int(entry))
        return sorted(found)
    return pids


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


@pytest.fixture
def server(ansible, host_args):
    """``server(servers, **options)`` runs the module (options: state, check, diff, ...) and returns its result."""
    def run(servers, check=False, diff=False, **options):
        return ansible.module(MODULE, dict(host_args, servers=servers, **options), check=check, diff=diff)
    return run


def by_name(result):
    return {entry["name"]: entry for entry in result["servers"]}


def test_start_records_state_and_second_run_is_idempotent(server, launched, make_server, host_args, fake_gpus, marked):
    alpha, beta = make_server("alpha", [0, 1]), make_server("beta", [2])
    pids = launched(alpha, beta)
    for spec in (alpha, beta):
        state = read_state(host_args, spec["name"])
        assert state["pid"] == state["pgid"] == pids[spec["name"]]
        assert (state["port"], state["gpus"], state["launch_script"], state["log_path"]) == (
            spec["port"], spec["gpus"], spec["launch_script"], spec["log_path"])
        with open(spec["launch_script"], "rb") as handle:
            assert state["script_sha256"] == hashlib.sha256(handle.read()).hexdigest()
        assert state["pid_starttime"] == int(stat_fields(state["pid"])[19])
        # The SGLang main process and its schedulers all carry the marker.
        assert state["pid"] in marked(spec["name"]) and len(marked(spec["name"])) > 1
    assert fake_gpus.used_mib(3) == 0

    again = server([alpha, beta])
    assert again["changed"] is False
    for entry in again["servers"]:
        assert entry["action"] == "unchanged" and entry["pid"] == pids[entry["name"]]
        assert entry["killed_pids"] == []


def test_same_server_name_in_another_deployment_is_left_alone(server, launched, make_server, marked, tmp_path):
    """Two deployments (state_dirs) on one host may both call a server alpha; each only touches its own."""
    ours = make_server("alpha", [0])
    theirs = make_server("alpha-theirs", [1])
    script = theirs["launch_script"]
    with open(script) as handle:
        text = handle.read()
    other = str(tmp_path / "other-deployment")
    with open(script, "w") as handle:
        handle.write(text.replace("GPUOPS_SGLANG_SERVER='alpha-theirs'", "GPUOPS_SGLANG_SERVER='alpha'")
                     .replace(f"GPUOPS_SGLANG_STATE_DIR='{tmp_path / 'state'}'", f"GPUOPS_SGLANG_STATE_DIR='{other}'"))
    theirs["name"] = "alpha"
    result = server([theirs], state_dir=other)
    assert not result.get("failed"), result.get("msg")
    their_pids = set(marked("alpha"))
    pids = launched(ours)
    assert set(marked("alpha")) - their_pids, "our alpha should have started beside theirs"

    result = server([ours], state="restarted")
    assert not result.get("failed"), result.get("msg")
    assert pids["alpha"] in result["servers"][0]["killed_pids"]
    assert not their_pids & set(result["servers"][0]["killed_pids"])
    assert all(alive(pid) for pid in their_pids)


def test_changed_script_relaunches_only_that_server(server, launched, make_server, fake_gpus, marked):
    alpha, beta = make_server("alpha", [0, 1]), make_server("beta", [2])
    pids = launched(alpha, beta)
    old_alpha = set(marked("alpha"))
    with open(alpha["launch_script"], "a") as handle:
        handle.write("# tuned\n")
    result = server([alpha, beta])
    assert result["changed"] is True
    entries = by_name(result)
    assert entries["alpha"]["action"] == "relaunched"
    assert entries["alpha"]["reason"] == "changed: launch script content"
    assert set(entries["alpha"]["killed_pids"]) == old_alpha
    assert entries["alpha"]["gpu_memory_before_mib"]["0"] > 0
    assert entries["alpha"]["gpu_memory_after_mib"] == {"0": 0, "1": 0}
    assert entries["alpha"]["pid"] != pids["alpha"] and alive(entries["alpha"]["pid"])
    assert not any(alive(pid) for pid in old_alpha)
    assert entries["beta"]["action"] == "unchanged" and entries["beta"]["killed_pids"] == []
    assert alive(pids["beta"])


def test_check_mode_launches_nothing(server, launched, make_server, host_args, marked):
    alpha, beta = make_server("alpha", [0]), make_server("beta", [1])
    pids = launched(alpha)
    with open(alpha["launch_script"], "a") as handle:
        handle.write("# tuned\n")
    result = server([alpha, beta], check=True, diff=True)
    assert result["changed"] is True
    entries = by_name(result)
    assert entries["alpha"]["action"] == "relaunched" and entries["beta"]["action"] == "launched"
    assert entries["alpha"]["killed_pids"] == [] and entries["beta"]["pid"] is None
    assert result["diff"][0]["before"]["beta"]["running"] is False
    assert result["diff"][0]["after"]["beta"]["running"] is True
    assert result["diff"][0]["after"]["beta"]["script_sha256"] != result["diff"][0]["before"]["beta"]["script_sha256"]
    # Nothing happened: alpha still runs as before, beta was not launched, no state written for it.
    assert alive(pids["alpha"]) and read_state(host_args, "alpha")["pid"] == pids["alpha"]
    assert marked("beta") == []
    assert not os.path.exists(os.path.join(host_args["state_dir"], "beta.json"))
    assert not os.path.exists(beta["log_path"])


def test_diff_shows_before_and_after(server, launched, make_server):
    alpha = make_server("alpha", [0])
    pids = launched(alpha)
    result = server([alpha], state="restarted", diff=True)
    before, after = result["diff"][0]["before"]["alpha"], result["diff"][0]["after"]["alpha"]
    assert before["running"] and before["pid"] == pids["alpha"]
    assert after["running"] and after["pid"] == result["servers"][0]["pid"] != pids["alpha"]
    assert before["script_sha256"] == after["script_sha256"]
    # Without --diff no diff is returned; nothing changes, nothing to show.
    assert "diff" not in server([alpha])
    assert "diff" not in server([alpha], diff=True)


def test_restart_rotates_logs_and_never_truncates(server, launched, make_server):
    alpha = make_server("alpha", [0])
    launched(alpha)
    log = alpha["log_path"]
    with open(log, "a") as handle:
        handle.write("first run was here\n")
    first_size = os.path.getsize(log)
    result = server([alpha], state="restarted")
    assert result["servers"][0]["rotated_log"] == log + ".1"
    assert os.path.getsize(log + ".1") >= first_size
    with open(log + ".1") as handle:
        assert "first run was here" in handle.read()
    server([alpha], state="restarted")
    with open(log + ".2") as handle:
        assert "first run was here" in handle.read()
    with open(log) as handle:
        assert "first run was here" not in handle.read()


def test_stop_waits_until_memory_is_released(server, launched, make_server, fake_gpus, host_args, marked):
    # slow_release: the driver keeps the memory for 1.5 s after the processes are gone.
    alpha = make_server("alpha", [4, 5], fault="slow_release", env={"SGLANG_SIM_RELEASE_DELAY": "1.5"})
    launched(alpha)
    result = server([alpha], state="stopped")
    assert not result.get("failed"), result.get("msg")
    entry = result["servers"][0]
    assert entry["action"] == "stopped" and entry["killed_pids"]
    assert entry["gpu_memory_after_mib"] == {"4": 0, "5": 0}
    # The module returned only once the memory was back: it is free right now.
    assert fake_gpus.used_mib(4) == 0 and fake_gpus.used_mib(5) == 0
    assert marked("alpha") == []
    assert not os.path.exists(os.path.join(host_args["state_dir"], "alpha.json"))
    again = server([{"name": "alpha"}], state="stopped")
    assert again["changed"] is False and again["servers"][0]["action"] == "already_stopped"


def test_memory_not_freed_in_time_fails_clearly(server, launched, make_server):
    alpha = make_server("alpha", [4], fault="slow_release", env={"SGLANG_SIM_RELEASE_DELAY": "30"})
    launched(alpha)
    result = server([alpha], state="stopped", gpu_free_timeout=0.5)
    assert result["failed"]
    assert result["msg"].startswith(
        "alpha is down: GPU memory not freed within gpu_free_timeout=0.5 s (threshold 1024 MiB): GPU 4 still uses ")
    assert "; no process here holds the device" in result["msg"] and result["msg"].endswith("Now down: alpha")
    assert result["changed"] is True and result["servers"][0]["killed_pids"]
    assert result["down"] == ["alpha"] and result["servers"][0]["down"]


def test_orphaned_scheduler_is_found_by_marker(server, launched, make_server, fake_gpus, host_args, marked):
    alpha = make_server("alpha", [6, 7], fault="orphan_scheduler")
    pids = launched(alpha)
    os.kill(pids["alpha"], signal.SIGKILL)
    # The schedulers left the launcher's process group (setsid), outlive it and keep their GPU memory.
    orphans = [pid for pid in marked("alpha") if pid != pids["alpha"] and int(stat_fields(pid)[2]) == pid]
    assert len(orphans) == 2 and fake_gpus.used_mib(6) > 0 and fake_gpus.used_mib(7) > 0
    result = server([{"name": "alpha"}], state="stopped")
    assert not result.get("failed"), result.get("msg")
    assert set(orphans) <= set(result["servers"][0]["killed_pids"])
    assert not any(alive(pid) for pid in orphans)
    assert result["servers"][0]["gpu_memory_after_mib"] == {"6": 0, "7": 0}


def test_a_main_process_that_outlived_its_crash_is_relaunched_not_taken_for_running(
        server, make_server, marked, wait_until):
    # A wait with kill_stalled false (or a run that ended first) left it so: its log ends in the crash, its main
    # process never ended its tree.
    alpha = make_server("alpha", [0], fault="nccl_error,stuck_after_crash")
    launched = server([alpha])
    assert not launched.get("failed"), launched.get("msg")
    stuck = launched["servers"][0]["pid"]
    wait_until(lambda: "Received sigquit from a child process" in read_text(alpha["log_path"]), timeout=30,
               what="the crash in alpha's log")
    assert alive(stuck)

    planned = server([alpha], check=True)
    assert planned["servers"][0]["action"] == "relaunched"
    assert planned["servers"][0]["reason"] == (
        f"its process {stuck} still runs but its log shows a crash: RuntimeError: NCCL error: unhandled system error "
        "(run with NCCL_DEBUG=INFO for details)")
    assert alive(stuck)

    result = server([alpha])
    assert not result.get("failed"), result.get("msg")
    assert result["servers"][0]["action"] == "relaunched" and stuck in result["servers"][0]["killed_pids"]
    assert not alive(stuck) and result["servers"][0]["pid"] in marked("alpha")


def test_ignored_sigterm_escalates_to_sigkill(server, launched, make_server, marked):
    alpha = make_server("alpha", [0], fault="ignore_sigterm")
    pids = launched(alpha)
    result = server([alpha], state="stopped", stop_timeout=1)
    assert not result.get("failed"), result.get("msg")
    signals = {entry["pid"]: entry["signal"] for entry in result["servers"][0]["killed"]}
    assert signals[pids["alpha"]] == "SIGKILL"
    assert marked("alpha") == []


def test_foreign_gpu_holder_is_refused_then_killed_with_force(server, launched, make_server, fake_gpus):
    alpha = make_server("alpha", [2, 3])
    pids = launched(alpha)
    foreign = fake_gpus.hold(3, mib=8000)
    result = server([alpha], state="restarted")
    assert result["failed"]
    assert result["msg"] == (
        f"refusing to touch any process: GPU 3 is held by foreign process {foreign.pid} ({sys.executable} -c "
        f"{foreign.args[2]}) that has no GPUOPS_SGLANG_SERVER marker; refusing to kill it: stop it yourself or "
        "set force_kill_gpu_holders: true")
    assert alive(pids["alpha"]) and foreign.poll() is None

    result = server([alpha], state="restarted", force_kill_gpu_holders=True)
    assert not result.get("failed"), result.get("msg")
    [killed] = result["foreign_killed"]
    assert (killed["pid"], killed["server"], killed["holds"]) == (foreign.pid, None, "GPU 3")
    assert foreign.wait(timeout=10) == -signal.SIGTERM
    assert result["servers"][0]["action"] == "relaunched" and not alive(pids["alpha"])


def test_gpu_holders_found_by_device_minor_in_a_container_given_host_gpus_4_to_7(
        server, make_server, fake_gpus, ansible, host_args):
    # nvidia-smi numbers the container's GPUs 0-7 while their device nodes are the host's nvidia4..nvidia11.
    fake_gpus.init(minor_offset=4)
    foreign = fake_gpus.hold(1, mib=4000)
    assert os.path.realpath(os.path.join(fake_gpus.device_dir, "nvidia5")) in {
        os.readlink(f"/proc/{foreign.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{foreign.pid}/fd")}
    result = server([make_server("alpha", [1])])
    assert result["failed"] and f"GPU 1 is held by foreign process {foreign.pid} (" in result["msg"]

    info = ansible.module("gpuops.sglang.gpu_info", {key: host_args[key] for key in (
        "nvidia_smi", "gpu_device_dir", "nvidia_driver_dir")})
    gpu1 = info["gpus"][1]
    assert gpu1["device_minor"] == 5 and [proc["pid"] for proc in gpu1["processes"]] == [foreign.pid]
    assert all(gpu["processes"] == [] for gpu in info["gpus"] if gpu["index"] != 1)


def test_device_daemons_holding_a_gpu_are_ignored_and_never_killed(server, launched, make_server, fake_gpus):
    alpha = make_server("alpha", [2])
    pids = launched(alpha)
    # nvidia-persistenced keeps every device node open on bare-metal hosts, using no memory.
    daemon = fake_gpus.hold(2, mib=0, argv0="/usr/bin/nvidia-persistenced")
    result = server([alpha], state="restarted", force_kill_gpu_holders=True)
    assert not result.get("failed"), result.get("msg")
    assert result["foreign_killed"] == [] and daemon.poll() is None
    assert result["servers"][0]["action"] == "relaunched" and not alive(pids["alpha"])

    result = server([alpha], state="restarted", ignore_gpu_holders=[])
    assert result["failed"] and f"GPU 2 is held by foreign process {daemon.pid} (" in result["msg"]


def test_bad_ignore_pattern_is_rejected_before_anything_is_touched(server, launched, make_server):
    alpha = make_server("alpha", [0])
    pids = launched(alpha)
    result = server([alpha], state="restarted", ignore_gpu_holders=["nvidia-(persistenced"])
    assert result["failed"]
    assert "ignore_gpu_holders entry 'nvidia-(persistenced' is not a valid regular expression" in result["msg"]
    assert alive(pids["alpha"])


def test_foreign_port_owner_is_refused_before_anything_is_killed(server, launched, make_server, marked):
    beta = make_server("beta", [1])
    pids = launched(beta)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        alpha = make_server("alpha", [0], port=port)
        with open(beta["launch_script"], "a") as handle:
            handle.write("# changed: beta would be relaunched\n")
        result = server([alpha, beta])
    assert result["failed"]
    assert f"port {port} of server 'alpha' is in use by foreign process {os.getpid()} (" in result["msg"]
    assert "free the port or choose another one" in result["msg"]
    assert alive(pids["beta"]) and marked("alpha") == []


def test_stale_server_on_needed_gpu_is_stopped(server, make_server, fake_gpus, host_args):
    old = fake_gpus.hold(5, mib=4000, server="renamed-away", deployment=host_args["state_dir"])
    alpha = make_server("alpha", [5])
    # Marked, but unknown to this state_dir: another deployment's server, left alone.
    result = server([alpha])
    assert result["failed"]
    assert (f"GPU 5 is held by pid {old.pid} ({old.args[0]} -c {old.args[2]}) of server 'renamed-away', which has "
            f"no state file in {host_args['state_dir']} (another deployment?); stop it first") in result["msg"]
    assert old.poll() is None
    # Recorded in this state_dir: a server that was renamed away, stopped with the rest.
    stale_state = os.path.join(host_args["state_dir"], "renamed-away.json")
    with open(stale_state, "w") as handle:
        json.dump({"name": "renamed-away", "pid": old.pid, "gpus": [5], "launch_script": "/x/renamed-away.sh"}, handle)
    result = server([alpha])
    assert not result.get("failed"), result.get("msg")
    assert result["removed"] == [{"name": "renamed-away", "launch_script": "/x/renamed-away.sh"}]
    [stale] = result["stale_killed"]
    assert (stale["pid"], stale["server"], stale["holds"], stale["signal"]) == (
        old.pid, "renamed-away", "GPU 5", "SIGTERM")
    assert old.wait(timeout=10) == -signal.SIGTERM
    assert result["servers"][0]["gpu_memory_after_mib"] == {"5": 0}
    assert not os.path.exists(stale_state)


def test_servers_sharing_files_or_a_marker_are_rejected(server, make_server):
    alpha, beta, gamma = make_server("alpha", [0]), make_server("beta", [1]), make_server("gamma", [2])
    with open(gamma["launch_script"]) as handle:
        copied = handle.read().replace("GPUOPS_SGLANG_SERVER='gamma'", "GPUOPS_SGLANG_SERVER='alpha'")
    with open(gamma["launch_script"], "w") as handle:
        handle.write(copied)
    result = server([alpha, dict(beta, log_path=alpha["log_path"]), gamma])
    assert result["failed"]
    assert result["problems"] == [
        f"log_path {alpha['log_path']} is used by both 'alpha' and 'beta'",
        (f"servers[2] (gamma).launch_script {gamma['launch_script']} exports GPUOPS_SGLANG_SERVER=alpha, "
         "not gamma: its processes would be taken for server 'alpha'"),
    ]


def test_the_systemd_launcher_without_systemd_touches_nothing(server, launched, make_server, marked, tmp_path):
    # This machine's init is not systemd (the LXC rig's containers are: molecule/systemd runs the launcher there).
    beta = make_server("beta", [6])
    pids = launched(beta)
    before = read_text(beta["launch_script"])
    unit_dir = tmp_path / "units"
    result = server([dict(beta, port=beta["port"])], state="restarted", launcher="systemd",
                    systemd={"unit_dir": str(unit_dir)})
    assert result["failed"]
    assert result["msg"] == ("launcher systemd: systemd is not the init of this host (/run/systemd/system does not "
                             "exist): use launcher detached (sglang_launcher: detached); nothing was touched")
    assert alive(pids["beta"]) and pids["beta"] in marked("beta")
    assert read_text(beta["launch_script"]) == before and not unit_dir.exists()


def test_a_path_a_unit_cannot_hold_is_refused_naming_it(server, make_server):
    beta = make_server("beta", [6])
    result = server([dict(beta, log_path="/var/log/my logs/beta.log")], launcher="systemd")
    assert result["failed"]
    assert ("servers[0] (beta).log_path '/var/log/my logs/beta.log' cannot be used in a systemd unit (an absolute "
            "path without whitespace, quotes, backslashes, ';' or '$'): choose another path or sglang_launcher: "
            "detached") in result["problems"]


def test_bad_input_is_rejected_before_anything_is_killed(server, launched, make_server, tmp_path, marked):
    beta = make_server("beta", [6])
    pids = launched(beta)
    not_executable = tmp_path / "plain.sh"
    not_executable.write_text("#!/bin/sh\n")
    alpha = make_server("alpha", [0, 6])
    result = server([
        alpha,
        dict(beta, port=alpha["port"]),
        dict(alpha, gpus=[1], port=1),
        {"name": "bad name", "port": 70000, "gpus": [2], "launch_script": str(not_executable),
         "log_path": str(tmp_path / "x.log")},
        {"name": "gamma", "gpus": [3]},
    ], state="restarted", stop_timeout=-1)
    assert result["failed"]
    assert result["problems"] == [
        "stop_timeout=-1 is out of range: use 0-3600 s",
        f"port {alpha['port']} is used by both 'alpha' and 'beta'",
        "GPU 6 is assigned to both 'alpha' and 'beta'",
        "duplicate server name 'alpha' (servers[0] and servers[2])",
        ("servers[3].name 'bad name' is invalid: use letters, digits, '.', '_' and '-' (it names files and the "
         "marker value)"),
        "servers[3] (bad name).port 70000 is out of range 1-65535",
        f"servers[3] (bad name).launch_script {not_executable} is not executable (mode 0o644); make it executable",
        "servers[4] (gamma): port, launch_script, log_path required for state=restarted",
    ]
    assert result["msg"] == "invalid request: " + "; ".join(result["problems"])

    result = server([dict(beta, gpus=[6, 8, 9])], state="restarted")
    assert result["failed"]
    assert result["msg"] == ("GPU index not present on this host (nvidia-smi lists 0, 1, 2, 3, 4, 5, 6, 7): "
                             "8 of server 'beta', 9 of server 'beta'")

    result = server([beta], state="bogus")
    assert result["failed"]
    assert result["msg"] == "value of state must be one of: started, restarted, stopped, got: bogus"
    result = server([dict(beta, gpus=["six"])])
    assert result["failed"]
    assert "six" in result["msg"] and "gpus" in result["msg"]
    assert alive(pids["beta"]) and pids["beta"] in marked("beta")


def test_concurrent_runs_wait_for_the_lock_or_name_the_holder(ansible, server, launched, make_server, host_args,
                                                              wait_until):
    alpha = make_server("alpha", [0], fault="ignore_sigterm")
    pids = launched(alpha)
    # The first run holds the lock while it waits stop_timeout for the SIGTERM-ignoring server: long enough for the
    # calls below to find it there on a loaded machine (8 s was once over before the refused call asked).
    first = ansible.start_module(MODULE, dict(host_args, servers=[alpha], state="restarted", stop_timeout=20))
    lock_file = os.path.join(host_args["state_dir"], ".lock")
    earlier = set(job_records(host_args["state_dir"]))

    def worker_holds_the_lock():
        # The lock passes from the module to the worker it starts, which names itself the holder.
        workers = [record.get("worker_pid") for name, record in job_records(host_args["state_dir"]).items()
                   if name not in earlier]
        holder = json.loads(read_text(lock_file) or "{}").get("pid")
        return holder if holder and holder in workers else None

    holder_pid = wait_until(worker_holds_the_lock, what="the first run's worker to hold the lock")
    for hang_up in (signal.SIGHUP, signal.SIGINT):  # a dropped connection or a Ctrl-C: the worker goes on
        os.kill(holder_pid, hang_up)
    second = ansible.start_module(MODULE, dict(host_args, servers=[alpha], lock_timeout=120))

    refused = server([alpha], lock_timeout=0)
    assert refused["failed"]
    assert refused["msg"].startswith(f"another run holds the host lock {lock_file}: pid {holder_pid} (")
    assert refused["msg"].endswith("; gave up after lock_timeout=0 s")

    relaunched = first.result()
    assert not relaunched.get("failed"), relaunched.get("msg")
    new_pid = relaunched["servers"][0]["pid"]
    assert new_pid != pids["alpha"]
    # The waiting run only looked once the first was done: it finds the relaunched server current.
    waited = second.result()
    assert not waited.get("failed"), waited.get("msg")
    assert waited["servers"][0]["action"] == "unchanged" and waited["servers"][0]["pid"] == new_pid


def test_launch_is_detached_and_marked(server, make_server, test_token):
    alpha = make_server("alpha", [0])
    # A bare script (no marker, no SPT_NOENV) that sleeps: its fds and environment are what the launch gave it.
    with open(alpha["launch_script"], "w") as handle:
        handle.write(f"#!/bin/sh\nexport GPUOPS_TEST_TOKEN={test_token}\nexec sleep 600\n")
    result = server([alpha])
    pid = result["servers"][0]["pid"]
    fields = stat_fields(pid)
    assert int(fields[3]) == int(fields[2]) == pid  # own session and process group
    assert fields[4] == "0"  # no controlling terminal
    links = {fd: os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    assert links == {"0": "/dev/null", "1": alpha["log_path"], "2": alpha["log_path"]}
    with open(f"/proc/{pid}/environ", "rb") as handle:
        environ = handle.read().split(b"\0")
    assert b"GPUOPS_SGLANG_SERVER=alpha" in environ and b"SPT_NOENV=1" in environ
    # Every signal at its default, none blocked (the worker that launched it keeps SIGHUP and SIGINT away from
    # itself): SGLang's own Ctrl-C and hang-up handling must work.
    assert signals_in_mask(pid, "SigIgn") == signals_in_mask(pid, "SigBlk") == set()


def signals_in_mask(pid, field):
    """Names of the standard signals (1-31) in a mask of /proc/<pid>/status (SigIgn: ignored, SigBlk: blocked).
    Not glibc's own 32 and 33 (a program cannot change them; one run saw 32 ignored from somewhere above pytest)
    nor the real-time signals, which play no part in SGLang."""
    with open(f"/proc/{pid}/status") as handle:
        mask = next(int(line.split()[1], 16) for line in handle if line.startswith(field + ":"))
    names = {sig.value: sig.name for sig in signal.Signals}
    return {names.get(number, str(number)) for number in range(1, 32) if mask >> (number - 1) & 1}
