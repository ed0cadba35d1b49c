"""The one owner of a server's processes, on real child processes: who is ours, and who is never signalled."""

import os
import signal
import subprocess
import sys

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import naming, procfs
from ansible_collections.gpuops.sglang.plugins.module_utils.server_processes import (
    ServerProcesses,
)

SLEEPER = "import time; print('up', flush=True); time.sleep(600)"


@pytest.fixture
def spawn(tmp_path):
    """``spawn(server=None, deployment=None, new_session=True)`` -> Popen of a sleeping python with that environment."""
    children = []

    def start(server=None, deployment=None, new_session=True):
        env = {key: value for key, value in os.environ.items()
               if key not in (naming.MARKER_VAR, naming.DEPLOYMENT_VAR)}
        if server is not None:
            env[naming.MARKER_VAR] = server
        if deployment is not None:
            env[naming.DEPLOYMENT_VAR] = deployment
        child = subprocess.Popen([sys.executable, "-c", SLEEPER], env=env, stdout=subprocess.PIPE, text=True,
                                 start_new_session=new_session)
        assert child.stdout.readline().strip() == "up"
        children.append(child)
        return child

    yield start
    for child in children:
        child.kill()
        child.wait()


def recorded(child, **changes):
    info = procfs.read_process(child.pid)
    return dict({"pid": child.pid, "pgid": child.pid, "pid_starttime": info.starttime}, **changes)


def test_a_marker_counts_only_with_this_deployment(tmp_path, spawn):
    state_dir = str(tmp_path / "state")
    owner = ServerProcesses(state_dir)
    ours = spawn("gpu0", state_dir)
    by_hand = spawn("gpu0")  # a marker without a deployment: started outside any deployment
    empty = spawn("gpu0", "")
    elsewhere = spawn("gpu0", str(tmp_path / "other"))
    assert owner.owner(ours.pid).verdict == "ours"
    assert owner.owner(by_hand.pid).verdict == "foreign"
    assert owner.owner(empty.pid).verdict == "foreign"
    assert owner.owner(elsewhere.pid) == ("other_deployment", "gpu0", str(tmp_path / "other"))
    found, group = owner.of_server("gpu0")
    assert sorted(found) == [ours.pid] and group is None
    # The same directory spelled differently is the same deployment.
    assert ServerProcesses(state_dir + "/").owner(ours.pid).verdict == "ours"


def test_a_recorded_pid_is_ours_only_with_its_start_time(tmp_path, spawn):
    owner = ServerProcesses(str(tmp_path / "state"))
    stranger = spawn()  # no marker: only the state file could make it ours
    assert owner.main_process(recorded(stranger)).pid == stranger.pid
    assert owner.of_server("gpu0", recorded(stranger))[1] == stranger.pid, "the recorded group, led by it"
    for broken in ({"pid_starttime": None}, {"pid_starttime": "123"}, {"pid_starttime": True},
                   {"pid_starttime": recorded(stranger)["pid_starttime"] + 1}, {"pid": 1}):
        assert owner.main_process(recorded(stranger, **broken)) is None, broken
        assert owner.of_server("gpu0", recorded(stranger, **broken)) == ({}, None), broken


def test_the_callers_lineage_is_never_signalled(tmp_path, spawn):
    state_dir = str(tmp_path / "state")
    # A marked child in our own process group: the group must not be signalled, or pytest would die with it.
    child = spawn("gpu0", state_dir, new_session=False)
    owner = ServerProcesses(state_dir)
    assert os.getpid() in owner.protected and os.getppid() in owner.protected
    me = procfs.read_process(os.getpid())
    assert owner.signal({os.getpid(): me}, [me.pgid], signal.SIGTERM) == {}
    processes, group = owner.of_server("gpu0", {"pid": os.getpid(), "pgid": me.pgid, "pid_starttime": me.starttime})
    assert sorted(processes) == [child.pid] and group is None
    assert owner.kill_now("gpu0") == [child.pid]
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_one_look_reads_the_processes_once_for_every_server_and_only_for_its_length(tmp_path, spawn, monkeypatch):
    state_dir = str(tmp_path / "state")
    owner = ServerProcesses(state_dir)
    first, second = spawn("gpu0", state_dir), spawn("gpu1", state_dir)
    scans = []
    real_list_processes = procfs.list_processes
    monkeypatch.setattr(procfs, "list_processes", lambda *args: scans.append(args) or real_list_processes(*args))
    with owner.one_look():
        assert sorted(owner.of_server("gpu0", recorded(first))[0]) == [first.pid]
        assert sorted(owner.of_server("gpu1", recorded(second))[0]) == [second.pid]
        assert owner.of_server("gpu1", recorded(second))[1] == second.pid
    assert len(scans) == 1
    # After the look every question reads /proc again: a server started since is seen.
    third = spawn("gpu2", state_dir)
    assert sorted(owner.of_server("gpu2")[0]) == [third.pid] and len(scans) == 2


def test_a_look_reads_each_owner_once_knows_a_reused_pid_and_never_signals(tmp_path, spawn, monkeypatch):
    state_dir = str(tmp_path / "state")
    owner = ServerProcesses(state_dir)
    child = spawn("gpu0", state_dir)
    starttime = procfs.read_process(child.pid).starttime
    reads = []
    real_read_environ = procfs.read_environ
    monkeypatch.setattr(procfs, "read_environ", lambda pid, *args: reads.append(pid) or real_read_environ(pid, *args))
    with owner.one_look():
        assert owner.owner(child.pid, starttime).verdict == "ours"
        assert owner.owner(child.pid, starttime).verdict == "ours" and reads == [child.pid]
        # The same pid with another start time is another process: read again.
        owner.owner(child.pid, starttime + 1)
        assert reads == [child.pid, child.pid]
        with pytest.raises(RuntimeError, match="signalling inside one_look"):
            owner.kill_now("gpu0")
        with pytest.raises(RuntimeError, match="one_look inside one_look"), owner.one_look():
            pass
    assert child.poll() is None, "nothing was signalled inside the look"
    with pytest.raises(ValueError), owner.one_look():
        raise ValueError("a failed plan")
    # The look ends with the plan, failed or not.
    assert owner.kill_now("gpu0") == [child.pid]
