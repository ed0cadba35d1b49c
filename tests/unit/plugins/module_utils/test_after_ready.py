"""What the wait does with a decided server (after_ready.py): the stall kill says why it killed nothing."""

import subprocess
import sys

from ansible_collections.gpuops.sglang.plugins.module_utils import after_ready, procfs
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    write_state,
)


def test_a_stalled_server_whose_processes_are_gone_is_reported_not_killed_with_why(tmp_path):
    # Its process exited between the verdict and the kill: nothing to kill, and the report says so instead of
    # reading like a kill.
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    starttime = procfs.read_process(process.pid).starttime
    process.communicate()
    recorded = {"pid": process.pid, "pgid": process.pid, "pid_starttime": starttime, "launcher": "detached"}
    write_state(str(tmp_path), "s1", recorded)
    options = {"state_dir": str(tmp_path), "kill_stalled": True, "check_mode": False}
    assert after_ready.kill_stuck(options, "s1", process.pid, "relaunched", recorded) == (
        [], f"no process of s1 was found to kill (its pid {process.pid} is gone)")
