"""Faults stay local, interruptions finish on the host, two runs never interleave, numbers are checked first.

Real ansible-playbook runs of the modules against simulated servers on a fake GPU host (docs/reliability.md
lists which fault each test covers).
"""

import http.server
import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from .conftest import (
    alive,
    descendants,
    free_port,
    http_status,
    job_records,
    read_state,
)

SERVER = "gpuops.sglang.server"
WAIT = "gpuops.sglang.wait"
LOCK = "gpuops.sglang.host_lock"


def test_a_gpu_that_is_not_freed_leaves_only_its_own_server_down(ansible, host_args, make_server, launched):
    slow = make_server("slow", [1], fault="slow_release", env={"SGLANG_SIM_RELEASE_DELAY": "60"})
    others = [make_server("a", [0]), make_server("b", [2])]
    before = launched(slow, *others)
    result = ansible.module(SERVER, dict(host_args, servers=[slow, *others], state="restarted",
                                         gpu_free_timeout=2, progress_interval=1))
    assert result["failed"], result
    assert result.get("down") == ["slow"], result
    assert "slow is down: GPU memory not freed within gpu_free_timeout=2 s" in result["msg"]
    assert "GPU 1" in result["msg"] and "The others were handled: a, b" in result["msg"]
    by_name = {server["name"]: server for server in result["servers"]}
    assert by_name["slow"]["down"] and by_name["slow"]["pid"] is None
    for spec in others:
        pid = by_name[spec["name"]]["pid"]
        assert pid != before[spec["name"]] and alive(pid), f"{spec['name']} relaunched and running"
        assert not by_name[spec["name"]]["down"]


def test_the_stop_phase_is_visible_while_a_server_ignores_sigterm(ansible, host_args, make_server, launched):
    stubborn = make_server("stubborn", [0], fault="ignore_sigterm")
    launched(stubborn)
    run = ansible.start_module(SERVER, dict(host_args, servers=[stubborn], state="restarted", stop_timeout=3,
                                            progress_interval=1))
    result = run.result(timeout=120)
    assert not result.get("failed"), result.get("msg")
    assert result["servers"][0]["killed"][0]["signal"] == "SIGKILL"
    # Seconds one after another while it stops, then why it is killed - not 3 silent seconds.
    assert any("stubborn stopping" in line and "after SIGTERM" in line for line in run.progress), run.progress
    assert "localhost: stubborn SIGKILL sent 3 s after SIGTERM: it ignored SIGTERM for the whole stop_timeout " \
        "(3 processes)" in run.progress, run.progress


def test_an_interrupted_relaunch_finishes_on_the_host_and_the_next_run_reports_it(
        ansible, host_args, make_server, launched, wait_until):
    stubborn = make_server("stubborn", [0], fault="ignore_sigterm")
    other = make_server("other", [1])
    before = launched(stubborn, other)
    earlier = set(job_records(host_args["state_dir"]))
    run = ansible.start_module(SERVER, dict(host_args, servers=[stubborn, other], state="restarted",
                                            stop_timeout=4, progress_interval=1))

    def stopping():
        return any(record.get("progress") for name, record in job_records(host_args["state_dir"]).items()
                   if name not in earlier)

    wait_until(stopping, timeout=60, what="the worker to start stopping the servers")
    # The operator's Ctrl-C, or a dropped connection: ansible-playbook and the module process die.
    for pid in [run.process.pid] + descendants(run.process.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    run.process.wait(timeout=10)
    wait_until(lambda: all(read_state(host_args, name)["pid"] != before[name] for name in before),
               timeout=30, what="the worker to relaunch both servers on its own")
    for name in before:
        assert alive(read_state(host_args, name)["pid"])
    again = ansible.module(SERVER, dict(host_args, servers=[stubborn, other]))
    assert not again.get("failed"), again.get("msg")
    assert again["changed"] is False
    [interrupted] = again["interrupted_runs"]
    assert sorted(interrupted["servers"]) == ["other relaunched", "stubborn relaunched"]
    assert ansible.module(SERVER, dict(host_args, servers=[stubborn, other]))["interrupted_runs"] == [], \
        "reported once"


def test_a_second_run_waits_for_the_host_and_fails_naming_the_holder(ansible, host_args, wait_until):
    state_dir = {"state_dir": host_args["state_dir"]}
    lease = os.path.join(host_args["state_dir"], "run.json")
    first = ansible.start_playbook([{"name": "hold", LOCK: state_dir},
                                    {"name": "work", "ansible.builtin.pause": {"seconds": 20}}])
    wait_until(lambda: os.path.exists(lease), what="the first run to hold the host")
    with open(lease) as handle:
        holder = json.load(handle)
    second = ansible.module(LOCK, dict(state_dir, lock_timeout=2, progress_interval=1))
    assert second["failed"]
    assert f"host held by run {holder['run_id']} (user " in second["msg"]
    assert f"pid {first.process.pid}, since " in second["msg"]
    assert "gave up after lock_timeout=2 s" in second["msg"]
    # The first run dies without releasing the host (same controller): the next run takes its hold over at once.
    first.process.kill()
    first.process.wait()
    third = ansible.module(LOCK, dict(state_dir, lock_timeout=30, progress_interval=1))
    assert not third.get("failed"), third.get("msg")
    assert third["taken_over"]["run_id"] == holder["run_id"]


def test_a_run_whose_hold_was_taken_over_touches_nothing(ansible, host_args, make_server, launched):
    server = make_server("a", [0])
    pid = launched(server)["a"]
    state_dir = {"state_dir": host_args["state_dir"]}
    mine = ansible.module(LOCK, dict(state_dir))
    theirs = ansible.module(LOCK, dict(state_dir, take_over=mine["run_id"]))
    assert theirs["taken_over"]["run_id"] == mine["run_id"]
    result = ansible.module(SERVER, dict(host_args, servers=[server], state="restarted", run_id=mine["run_id"]))
    assert result["failed"]
    assert f"this run ({mine['run_id']}) no longer holds the host: it is now held by run {theirs['run_id']}" \
        in result["msg"]
    assert read_state(host_args, "a")["pid"] == pid and alive(pid), "nothing was killed"


def test_the_wait_reports_a_server_another_run_replaced(ansible, host_args, make_server, launched):
    server = make_server("a", [0])
    first_pid = launched(server)["a"]
    launched(server, state="restarted")
    result = ansible.module(WAIT, {"state_dir": host_args["state_dir"], "timeout": 30,
                                   "servers": [{"name": "a", "pid": first_pid}]})
    [report] = result["servers"]
    assert report["status"] == "replaced"
    assert "a replaced by another run: it now runs as pid" in report["msg"]


@pytest.mark.parametrize("module, option, value, message", [
    (WAIT, "stall_timeout", -5, "stall_timeout=-5 is out of range: use 1-86400 s, or 0 to turn it off"),
    (WAIT, "timeout", 0, "timeout=0 is out of range: use 1-604800 s"),
    (WAIT, "probe_timeout", -1, "probe_timeout=-1 is out of range: use 1-600 s"),
    (WAIT, "progress_interval", 0, "progress_interval=0 is out of range: use 0.1-600 s"),
    (SERVER, "stop_timeout", -1, "stop_timeout=-1 is out of range: use 0-3600 s"),
    (SERVER, "gpu_free_timeout", 1e9, "gpu_free_timeout=1000000000 is out of range: use 0-3600 s"),
    (SERVER, "log_generations", 0, "log_generations=0 is out of range: use 1-100"),
    (SERVER, "nvidia_smi_timeout", 0, "nvidia_smi_timeout=0 is out of range: use 1-600 s"),
    (LOCK, "lease_timeout", 5, "lease_timeout=5 is out of range: use 60-86400 s"),
])
def test_every_number_is_checked_before_any_process_is_touched(
        ansible, host_args, make_server, launched, module, option, value, message):
    server = make_server("a", [0])
    pid = launched(server)["a"]
    args = {"state_dir": host_args["state_dir"], option: value}
    if module == SERVER:
        args.update(host_args, servers=[server], state="restarted", **{option: value})
    elif module == WAIT:
        args.update(servers=[{"name": "a"}], kill_stalled=True)
    result = ansible.module(module, args)
    assert result["failed"]
    assert message in result["msg"]
    assert read_state(host_args, "a")["pid"] == pid and alive(pid), "the healthy server was left alone"


# Answers 200 to everything, but only after two seconds - like a busy server that serves. A process of its own that
# carries the server's markers: the wait believes only a listener that is the server's.
SLOW_HEALTH = """
import http.server, sys, time

class SlowHealth(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(2)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), SlowHealth).serve_forever()
"""


def test_a_server_whose_health_answers_200_is_never_stall_killed(ansible, tmp_path, wait_until):
    state_dir, port = tmp_path / "state", free_port()
    state_dir.mkdir()
    env = dict(os.environ, GPUOPS_SGLANG_SERVER="busy", GPUOPS_SGLANG_STATE_DIR=str(state_dir))
    busy = subprocess.Popen([sys.executable, "-c", SLOW_HEALTH, str(port)], env=env)
    try:
        wait_until(lambda: http_status(port, "/", timeout=5)[0] == 200, timeout=30, what="the busy server to listen")
        log = tmp_path / "silent.log"
        log.write_text("")
        result = ansible.module(WAIT, {"state_dir": str(state_dir), "timeout": 30, "stall_timeout": 1,
                                       "kill_stalled": True, "progress_interval": 1,
                                       "servers": [{"name": "busy", "port": port, "log_path": str(log)}]})
    finally:
        busy.kill()
        busy.wait()
    [report] = result["servers"]
    assert report["status"] == "ready", report["msg"]
    assert report["killed_pids"] == []


def test_a_wrong_health_path_is_said_at_once_and_kills_or_rolls_back_nothing(sim_host):
    # The audit's case: a no-op run with a health path SGLang does not serve stall-killed the whole unchanged fleet,
    # then rolled it back and killed it again. Now a 404 is a configuration error, said at once, and only that.
    fleet = {"sglang_gpu_count": 2}
    assert sim_host.run("relaunch", fleet).rc == 0
    pids = {name: read_state({"state_dir": str(sim_host.dir / "state")}, name)["pid"] for name in ("gpu0", "gpu1")}
    wrong = sim_host.run("relaunch", dict(fleet, relaunch_health_path="/health_generat", relaunch_stall_timeout=1))
    assert wrong.rc != 0
    messages = [result["msg"] for result in wrong.waits()[0]["servers"]]
    assert messages == [f"{name} answers HTTP 404 on its health path /health_generat: no such endpoint, so it can "
                        "never be seen ready; set the health path (relaunch_health_path) to one SGLang serves, e.g. "
                        "/health_generate or /health. The server was not killed." for name in ("gpu0", "gpu1")]
    assert "gpuops.sglang.server" not in wrong.module_calls(), "nothing rolled back (a rollback is a server call)"
    assert {name: read_state({"state_dir": str(sim_host.dir / "state")}, name)["pid"] for name in pids} == pids
    assert all(alive(pid) for pid in pids.values())

    no_slash = sim_host.run("relaunch", dict(fleet, relaunch_health_path="health_generate"))
    assert no_slash.rc != 0
    assert "relaunch_health_path must be a URL path starting with '/'" in repr(no_slash)
    assert {name: read_state({"state_dir": str(sim_host.dir / "state")}, name)["pid"] for name in pids} == pids


def test_scripts_that_carry_a_secret_are_never_written_readable_by_others(ansible, tmp_path):
    script = {"name": "gpu0", "path": str(tmp_path / "bin" / "gpu0.sh"), "content": "#!/bin/sh\nexec x --api-key k\n"}
    refused = ansible.module("gpuops.sglang.launch_scripts", {"scripts": [script], "secrets": ["k"], "mode": "0750"})
    assert refused["failed"] and refused["msg"].startswith("mode 0750 lets the group or others read scripts that "
                                                           "carry secrets"), refused["msg"]
    assert not (tmp_path / "bin").exists(), "nothing was written"
    # The key in the script makes it one with secrets, listed or not; a script without any may have any mode.
    unlisted = ansible.module("gpuops.sglang.launch_scripts", {"scripts": [script], "mode": "0750"})
    assert unlisted["failed"] and not (tmp_path / "bin").exists()
    plain = dict(script, content="#!/bin/sh\nexec x --port 30000\n")
    written = ansible.module("gpuops.sglang.launch_scripts", {"scripts": [plain], "mode": "0750"})
    assert written["changed"] and os.stat(script["path"]).st_mode & 0o777 == 0o750, "without secrets the mode is free"


class _Squatter(http.server.BaseHTTPRequestHandler):
    """Answers 200 to everything, and keeps every Authorization header it was sent (in its server's list)."""

    def do_GET(self):
        self.server.authorizations.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *_args):
        pass


def test_a_process_squatting_the_port_is_never_believed_nor_sent_the_key(ansible, host_args, make_server):
    # SGLang binds its port only after loading its weights: until then anyone may bind it and answer 200.
    # Slow to load (its own bind comes minutes later): the squatter is found first however loaded the machine is.
    server = make_server("gpu0", [0], time_scale=60)
    launched = ansible.module(SERVER, dict(host_args, servers=[server], state="restarted"))
    assert not launched.get("failed"), launched.get("msg")
    squatter = http.server.ThreadingHTTPServer(("127.0.0.1", server["port"]), _Squatter)
    squatter.authorizations = []
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    try:
        wait = ansible.module(WAIT, {"state_dir": host_args["state_dir"], "servers": [{"name": "gpu0"}],
                                     "api_key": "sk-never-to-a-squatter", "timeout": 60, "progress_interval": 1})
        info = ansible.module("gpuops.sglang.server_info", {"state_dir": host_args["state_dir"],
                                                            "servers": [{"name": "gpu0"}],
                                                            "api_key": "sk-never-to-a-squatter"})
    finally:
        squatter.shutdown()
        squatter.server_close()
    [report] = wait["servers"]
    assert wait["failed"] and report["status"] == "foreign_listener", report["msg"]
    assert report["msg"].startswith(f"port {server['port']} is answered by foreign process {os.getpid()} (user "), \
        report["msg"]
    assert ", not by gpu0: no request was sent to it" in report["msg"]
    [described] = info["servers"]
    assert described["status"] == "foreign_listener" and described["metrics"] is None
    assert squatter.authorizations == [], "no request, let alone the key, went to the squatter"
