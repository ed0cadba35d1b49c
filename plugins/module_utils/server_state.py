# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-server state files and the per-host lock, both under ``state_dir``.

``<state_dir>/<name>.json`` records what gpuops.sglang.server launched (see docs/architecture.md);
``<state_dir>/.lock`` (their names: naming.py) is flocked for the whole kill -> verify -> launch sequence of one host.
"""

import errno
import fcntl
import json
import os
import time

from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    host_lock_file,
    state_file,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.procfs import read_process
from ansible_collections.gpuops.sglang.plugins.module_utils.safe_files import (
    open_lock_file,
    read_json_object,
    write_atomic,
)

_LOCK_POLL_SECONDS = 0.2


class LockTimeout(Exception):
    """The host lock stayed held by another run; the message names the holder."""


def read_state(state_dir, name):
    """The recorded state of server ``name``, or None when there is none (or it is unreadable)."""
    return read_json_object(state_file(state_dir, name))


def write_state(state_dir, name, data):
    """Write the state file atomically: readers see the old or the new file, never half of one.

    A symbolic link at its name is replaced, never written through.
    """
    if not os.path.isdir(state_dir):
        os.makedirs(state_dir, 0o755)
    write_atomic(state_file(state_dir, name), json.dumps(data, indent=2, sort_keys=True) + "\n", 0o644)


def remove_state(state_dir, name):
    try:
        os.unlink(state_file(state_dir, name))
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise


def _describe_holder(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        holder = json.loads(os.read(fd, 4096).decode("utf-8", "replace") or "{}")
    except ValueError:
        holder = {}
    pid = holder.get("pid") if isinstance(holder, dict) else None
    info = read_process(pid) if isinstance(pid, int) else None
    if info is None:
        return "an unknown process"
    return "pid {} ({}), holding it since {}".format(
        pid, info.cmdline, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("since", 0))))


def acquire_host_lock(state_dir, timeout):
    """Take the per-host flock, waiting up to ``timeout`` seconds (0 = do not wait): ``(fd, seconds waited)``.

    Whoever signals or launches server processes holds it. The fd may be handed to a forked worker:
    the lock lasts while any copy of the fd is open (never LOCK_UN it: that would end it for all copies),
    and the kernel releases it when the last holder exits, even after a crash. The holder writes its
    pid into the file so that a run that gives up can say who holds it.
    """
    if not os.path.isdir(state_dir):
        os.makedirs(state_dir, 0o755)
    path = host_lock_file(state_dir)
    # A symlink planted at the lock's name is refused, never written through.
    fd = open_lock_file(path)
    started = time.monotonic()
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() - started >= timeout:
                raise LockTimeout(f"another run holds the host lock {path}: {_describe_holder(fd)}; "
                                  f"gave up after lock_timeout={timeout:g} s")
            time.sleep(_LOCK_POLL_SECONDS)
        mark_lock_holder(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd, time.monotonic() - started


def mark_lock_holder(fd):
    """Record this process as the holder (also called by a worker the lock was handed to)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "since": time.time()}).encode(), 0)


def release_host_lock(fd):
    """Close this copy of the lock fd; the lock ends when no process holds a copy any more."""
    os.close(fd)
