"""/proc parsing against a real child process: its environ, fds, listening socket and process group."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import naming, procfs

# Holds <dir>/nvidia2 open and listens on a TCP port, like an SGLang process holding GPU 2.
CHILD = textwrap.dedent("""
    import socket, sys, time
    device = open(sys.argv[1], "rb")
    listener = socket.socket(socket.AF_INET6)
    listener.bind(("::", 0))
    listener.listen()
    print(listener.getsockname()[1], flush=True)
    time.sleep(600)
""")


@pytest.fixture
def device_dir(tmp_path):
    directory = tmp_path / "dev"
    directory.mkdir()
    for index in range(4):
        (directory / f"nvidia{index}").touch()
    return directory


def spawn(executable, device, marker="unit-a"):
    env = dict(os.environ)
    env.pop(naming.MARKER_VAR, None)
    if marker:
        env[naming.MARKER_VAR] = marker
    child = subprocess.Popen([str(executable), "-c", CHILD, str(device)], stdout=subprocess.PIPE, text=True,
                             env=env, start_new_session=True)
    port = int(child.stdout.readline())
    return child, port


@pytest.fixture
def child(device_dir):
    process, port = spawn(sys.executable, device_dir / "nvidia2")
    yield process, port
    process.kill()
    process.wait()


def test_read_process_fields(child):
    process, _port = child
    info = procfs.read_process(process.pid)
    assert info.pid == process.pid
    assert info.ppid == os.getpid()
    # start_new_session: leader of its own session and process group.
    assert info.pgid == process.pid and info.sid == process.pid
    assert info.state in ("S", "R")
    assert info.argv[0] == sys.executable and info.argv[1] == "-c"
    assert info.cmdline.startswith(sys.executable + " -c ")
    with open(f"/proc/{process.pid}/stat") as handle:
        assert str(info.starttime) == handle.read().rsplit(")", 1)[1].split()[19]


def test_comm_with_spaces_and_parentheses(tmp_path, device_dir):
    # comm is the executable's name; ') ' inside it must not shift the fields after it.
    odd = tmp_path / "odd) (name x"
    odd.symlink_to(sys.executable)
    process, _port = spawn(odd, device_dir / "nvidia1")
    try:
        info = procfs.read_process(process.pid)
        assert (info.pid, info.ppid, info.pgid) == (process.pid, os.getpid(), process.pid)
    finally:
        process.kill()
        process.wait()


def test_marker_and_environ(child, device_dir):
    process, _port = child
    assert procfs.read_environ(process.pid)[naming.MARKER_VAR] == "unit-a"
    assert procfs.marker_of(process.pid) == "unit-a"
    foreign, _port = spawn(sys.executable, device_dir / "nvidia3", marker=None)
    try:
        assert procfs.marker_of(foreign.pid) is None
    finally:
        foreign.kill()
        foreign.wait()


def test_group_members(child):
    process, _port = child
    assert [info.pid for info in procfs.group_members(process.pid)] == [process.pid]


def test_pid_alive_checks_starttime_and_zombies(child):
    process, _port = child
    starttime = procfs.read_process(process.pid).starttime
    assert procfs.pid_alive(process.pid)
    assert procfs.pid_alive(process.pid, starttime)
    assert not procfs.pid_alive(process.pid, starttime + 1)
    process.send_signal(signal.SIGKILL)
    # Not reaped yet: a zombie, which holds nothing and counts as dead.
    while procfs.read_process(process.pid).state != "Z":
        time.sleep(0.01)
    assert not procfs.pid_alive(process.pid, starttime)
    process.wait()
    assert procfs.read_process(process.pid) is None
    assert procfs.read_environ(process.pid) == {}
    assert not procfs.pid_alive(process.pid)


def test_gpu_holders(child, device_dir, tmp_path):
    process, _port = child
    assert procfs.gpu_holders(str(device_dir)) == {2: [process.pid]}
    assert procfs.gpu_holders(str(device_dir), minors={2: 2, 3: 3}) == {2: [process.pid]}
    assert procfs.gpu_holders(str(device_dir), minors={0: 0, 1: 1}) == {}
    # A container given host GPUs 2 and 3 calls them 0 and 1; the node of GPU 0 is nvidia2.
    assert procfs.gpu_holders(str(device_dir), minors={0: 2, 1: 3}) == {0: [process.pid]}
    # A device dir reached through a symlink names the same files.
    alias = tmp_path / "dev-alias"
    alias.symlink_to(device_dir)
    assert procfs.gpu_holders(str(alias), minors={2: 2}) == {2: [process.pid]}


def test_port_listeners(child):
    process, port = child
    assert procfs.port_listeners(port) == [process.pid]
    process.kill()
    process.wait()
    assert procfs.port_listeners(port) == []


def test_one_read_of_the_listening_sockets_answers_for_every_port_of_a_look(child):
    process, port = child
    sockets = procfs.ListeningSockets()
    table = sockets.table()
    assert table[port] and sockets.table() is table
    assert procfs.port_listener_pids(port, listening=table) == (True, [process.pid])
    assert procfs.port_listener_pids(port, likely=[process.pid], listening=table) == (True, [process.pid])
    # What the look read is what it answers: a port absent from its read is not listening, whatever binds it since.
    assert procfs.port_listener_pids(port, listening={}) == (False, [])
    process.kill()
    process.wait()
    assert port not in procfs.listening_sockets()


def test_describe(child):
    process, _port = child
    assert procfs.describe(process.pid) == {
        "pid": process.pid, "cmdline": procfs.read_process(process.pid).cmdline, "server": "unit-a"}


@pytest.mark.parametrize("code, expected", [("raise SystemExit(3)", 3),
                                            ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 137)])
def test_exit_status_of_an_unreaped_process(code, expected):
    process = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while (procfs.read_process(process.pid).state != "Z") and time.monotonic() < deadline:
            time.sleep(0.02)
        info = procfs.read_process(process.pid)
        assert (info.state, info.exit_status) == ("Z", expected)
    finally:
        process.wait()
    assert procfs.read_process(process.pid) is None


def test_command_lines_are_read_without_api_keys():
    # As its own argument, and inside one (`sh -c "... --api-key K"`).
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--api-key", "S3CRET-a",
                                "python3 -m sglang.launch_server --api-key S3CRET-b --port 1"])
    try:
        deadline = time.monotonic() + 10
        info = procfs.read_process(process.pid)
        while "time.sleep(60)" not in info.cmdline and time.monotonic() < deadline:  # until the exec is visible
            time.sleep(0.01)
            info = procfs.read_process(process.pid)
        assert "S3CRET" not in info.cmdline and not any("S3CRET" in arg for arg in info.argv)
        assert info.argv[-1] == "python3 -m sglang.launch_server --api-key ******** --port 1"
    finally:
        process.kill()
        process.wait()
