# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Running a host command that may hang (nvidia-smi on a hung driver, systemctl on a busy manager) with a deadline.

Not ``AnsibleModule.run_command``: it has no timeout, and one hung command must not stall a whole run.
"""

import os
import shlex
import signal
import subprocess

# After SIGKILL, how long to wait for the process to be reaped: one stuck in the driver (state D) dies
# only when the driver lets go, and must not keep the module waiting.
_REAP_SECONDS = 2


class CommandNotRun(Exception):
    """The command could not be started (missing binary, not executable)."""


class CommandTimedOut(Exception):
    """The command did not finish in time; its whole process group was SIGKILLed."""


def run_bounded(argv, timeout, env=None):
    """``(rc, stdout, stderr)`` of ``argv``, given ``timeout`` seconds in a session of its own (``env``: its whole
    environment, else this process's)."""
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                   stderr=subprocess.PIPE, start_new_session=True, env=env)
    except OSError as exc:
        raise CommandNotRun(f"cannot run {shlex.join(argv)}: {exc}")
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise CommandTimedOut(f"{shlex.join(argv)} did not answer within {timeout:g} s")
    return process.returncode, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")


def _kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass  # already gone
    try:
        process.wait(timeout=_REAP_SECONDS)
    except subprocess.TimeoutExpired:
        pass  # stuck in the driver; the kernel reaps it once the driver lets go
    for pipe in (process.stdout, process.stderr):
        pipe.close()
