# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hold of one whole run (relaunch, stop) on a host, across all of its module calls.

A run is several module calls (scripts and servers, the wait slices); the flock of ``host_lock``
lives only as long as one of them. So a run claims a *lease*, ``<state_dir>/run.json``: the run id
and who runs it (controller host and pid, user, AWX job), renewed by every call of that run. Another
run waits until the lease is released, or expired (its run died without releasing it), or its
controller says the holder is dead (same controller host, pid gone: see the host_lock action plugin).
Reading and writing the lease happens under a short flock of its own, ``.run.lock``, so two claims
never interleave; the long flock ``.lock`` stays with whoever signals processes.
"""

import contextlib
import errno
import fcntl
import json
import os
import time

from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    RUN_LEASE_NAME,
    run_lease_file,
    run_lease_lock_file,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.safe_files import (
    open_lock_file,
    read_json_object,
    write_atomic,
)

# The lease's file name, as callers outside (tests/integration/test_roles.py) know it.
LEASE_NAME = RUN_LEASE_NAME
_LEASE_LOCK_SECONDS = 10
# Options of gpuops.sglang.host_lock (the roles check their variables against the same table).


class RunLockError(Exception):
    """The host is held by another run, or this run's hold was taken over; the message says by whom."""


@contextlib.contextmanager
def _lease_file_lock(state_dir):
    if not os.path.isdir(state_dir):
        os.makedirs(state_dir, 0o755)
    fd = open_lock_file(run_lease_lock_file(state_dir))
    try:
        # Held for a read-modify-write only (milliseconds): a holder stuck longer (a hung file system, a
        # stopped process) must not hang every call of every run.
        deadline = time.monotonic() + _LEASE_LOCK_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise RunLockError(f"{run_lease_lock_file(state_dir)} stayed locked for "
                                       f"{_LEASE_LOCK_SECONDS} s: is {state_dir} on a hung file system?") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def read_lease(state_dir):
    lease = read_json_object(run_lease_file(state_dir))
    return lease if lease and lease.get("run_id") else None


def _write_lease(state_dir, lease):
    write_atomic(run_lease_file(state_dir), json.dumps(lease, sort_keys=True), 0o644)


def _remove_lease(state_dir):
    try:
        os.unlink(run_lease_file(state_dir))
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise


def describe_holder(lease, now=None):
    """``run 3f2a... (AWX job 42, user ops on controller awx-1 pid 812, since 10:02:11, renewed 12 s ago)``."""
    now = time.time() if now is None else now
    who = []
    if lease.get("awx_job_id"):
        who.append(f"AWX job {lease['awx_job_id']}")
    who.append(f"user {lease.get('user') or '?'} on controller {lease.get('controller') or '?'} "
               f"pid {lease.get('controller_pid') or '?'}")
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(lease.get("since") or 0))
    renewed = max(0, now - (lease.get("renewed") or 0))
    return f"run {lease['run_id']} ({', '.join(who)}, since {since}, renewed {renewed:.0f} s ago)"


def _expired(lease, now):
    return now - (lease.get("renewed") or 0) > (lease.get("lease_seconds") or 0)


def try_claim(state_dir, run, lease_seconds, take_over=None, now=None):
    """Claim the host for ``run`` ({run_id, controller, controller_pid, user, awx_job_id}).

    Returns ``(claimed, holder)``: ``holder`` is the lease that was in the way (None when the host was
    free), reported also when it was taken over. ``take_over`` is the run id of a holder the caller
    knows to be dead; it is replaced only while it still holds the lease.
    """
    now = time.time() if now is None else now
    with _lease_file_lock(state_dir):
        holder = read_lease(state_dir)
        if holder is not None and holder["run_id"] != run["run_id"] and not _expired(holder, now) \
                and holder["run_id"] != take_over:
            return False, holder
        since = holder["since"] if holder is not None and holder["run_id"] == run["run_id"] else now
        _write_lease(state_dir, dict(run, since=since, renewed=now, lease_seconds=lease_seconds))
        return True, holder if holder is not None and holder["run_id"] != run["run_id"] else None


def renew(state_dir, run_id, now=None):
    """Confirm this run still holds the host and renew its lease; raise RunLockError when it does not."""
    now = time.time() if now is None else now
    with _lease_file_lock(state_dir):
        lease = read_lease(state_dir)
        if lease is None or lease["run_id"] != run_id:
            taken = f"it is now held by {describe_holder(lease, now)}" if lease else "it was released"
            raise RunLockError(f"this run ({run_id}) no longer holds the host: {taken}; stopping here so the two "
                               "runs do not act on the same servers")
        lease["renewed"] = now
        _write_lease(state_dir, lease)
        return lease


def release(state_dir, run_id):
    """Give the host back; a lease of another run (ours was taken over) is left alone. True when released."""
    with _lease_file_lock(state_dir):
        lease = read_lease(state_dir)
        if lease is None or lease["run_id"] != run_id:
            return False
        _remove_lease(state_dir)
        return True
