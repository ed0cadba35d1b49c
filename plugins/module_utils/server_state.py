# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-server state files and the per-host lock, both under ``state_dir``.

``<state_dir>/<name>.json`` records what gpuops.sglang.server launched (see docs/architecture.md);
``<state_dir>/.lock`` is flocked for the whole kill -> verify -> launch sequence of one host.
"""

import contextlib
import errno
import fcntl
import json
import os
import tempfile
import time

from ansible_collections.gpuops.sglang.plugins.module_utils.procfs import read_process

DEFAULT_STATE_DIR = "/var/lib/gpuops-sglang"
LOCK_NAME = ".lock"
_LOCK_POLL_SECONDS = 0.2


class LockTimeout(Exception):
    """The host lock stayed held by another run; the message names the holder."""


def state_path(state_dir, name):
    return os.path.join(state_dir, f"{name}.json")


def read_state(state_dir, name):
    """The recorded state of server ``name``, or None when there is none (or it is unreadable)."""
    try:
        with open(state_path(state_dir, name)) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_state(state_dir, name, data):
    """Write the state file atomically: readers see the old or the new file, never half of one."""
    if not os.path.isdir(state_dir):
        os.makedirs(state_dir, 0o755)
    fd, tmp_path = tempfile.mkstemp(prefix=f".{name}.", dir=state_dir)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.chmod(tmp_path, 0o644)
        os.replace(tmp_path, state_path(state_dir, name))
    except BaseException:
        os.unlink(tmp_path)
        raise


def remove_state(state_dir, name):
    try:
        os.unlink(state_path(state_dir, name))
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise


def _describe_holder(lock_file):
    lock_file.seek(0)
    try:
        holder = json.loads(lock_file.read() or "{}")
    except ValueError:
        holder = {}
    pid = holder.get("pid")
    info = read_process(pid) if pid else None
    if info is None:
        return "an unknown process"
    return "pid {} ({}), holding it since {}".format(
        pid, info.cmdline, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("since", 0))))


@contextlib.contextmanager
def host_lock(state_dir, timeout):
    """Hold the per-host flock, waiting up to ``timeout`` seconds (0 = do not wait).

    Yields the seconds spent waiting. The holder writes its pid into the lock file so that a run
    that gives up can say who holds it; flock itself is released by the kernel even if we crash.
    """
    if not os.path.isdir(state_dir):
        os.makedirs(state_dir, 0o755)
    path = os.path.join(state_dir, LOCK_NAME)
    started = time.monotonic()
    # "a+" creates the file without truncating what the current holder wrote.
    with open(path, "a+") as lock_file:
        while True:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() - started >= timeout:
                raise LockTimeout(
                    f"another run holds the host lock {path}: {_describe_holder(lock_file)}; gave up after lock_timeout={timeout} s")
            time.sleep(_LOCK_POLL_SECONDS)
        waited = time.monotonic() - started
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(json.dumps({"pid": os.getpid(), "since": time.time()}))
        lock_file.flush()
        try:
            yield waited
        finally:
            lock_file.seek(0)
            lock_file.truncate()
            fcntl.flock(lock_file, fcntl.LOCK_UN)
