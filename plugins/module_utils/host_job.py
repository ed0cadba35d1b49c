# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run the kill -> verify -> launch sequence of a host detached from the module that started it.

A Ctrl-C on the controller or a dropped SSH/pct connection kills the module process; if the sequence
ran in it, servers stopped by then would stay down. So the module forks a worker in a session of its
own (no terminal, stdin/stdout/stderr on /dev/null, deaf to SIGHUP and SIGINT) that runs the sequence
to the end and records its progress and result in ``<state_dir>/jobs/<job_id>.json``. The module - and
any later call, of this run or of the next one - only reads that record.
"""

import json
import os
import signal
import time
import traceback
import uuid

from ansible_collections.gpuops.sglang.plugins.module_utils import procfs, run_lock
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    JOB_SUFFIX,
    job_file,
    jobs_dir,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.safe_files import (
    read_json_object,
    write_atomic,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import (
    scrub_data,
    scrub_text,
)


class JobError(Exception):
    """The record of a job is gone (its state dir was removed or replaced)."""


# Finished records kept for the next run to report; older ones are removed.
KEEP_RECORDS = 20
# How soon the caller sees the job's end: a read of a small file, cheap enough to look often.
POLL_SECONDS = 0.05


def new_job_id():
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


def write_record(state_dir, record):
    # A file on the host, returned to the controller by whoever reads it next: no credential may reach it.
    write_atomic(job_file(state_dir, record["job_id"]), json.dumps(scrub_data(record), sort_keys=True), 0o600)


def read_record(state_dir, job_id):
    return read_json_object(job_file(state_dir, job_id))


class WorkerNotStarted(Exception):
    """The worker did not say it runs; the message says where its record is."""


def _worker_alive(record):
    """The worker runs: its pid with its recorded start time (a zombie or a reused pid is not it)."""
    return bool(record.get("worker_pid")) and procfs.pid_alive(record["worker_pid"], record.get("worker_starttime"))


def start(state_dir, job_id, work, meta, keep_fds=()):
    """Fork ``work(progress)`` into a detached worker; returns once the worker runs.

    ``progress(snapshot)`` stores a progress snapshot in the record; the return value of ``work`` is
    stored as the result (an exception as an error). ``keep_fds`` stay open in the worker (the host
    lock: it is released when the worker exits).
    """
    os.makedirs(jobs_dir(state_dir), 0o700, exist_ok=True)
    record = dict(meta, job_id=job_id, status="running", started=time.time(), progress=None, result=None,
                  reported=False, worker_pid=None)
    write_record(state_dir, record)
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            current = read_record(state_dir, job_id) or record
            if current.get("worker_pid") or current["status"] != "running":
                return current
            time.sleep(0.01)
        raise WorkerNotStarted(f"the worker of job {job_id} did not say it started within 10 s; it may still run: "
                               f"see {job_file(state_dir, job_id)} before relaunching again")
    # First child: new session, then fork again so the worker is not a session leader (no terminal).
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        _run_worker(state_dir, record, work, keep_fds)
    finally:
        os._exit(0)


def _set_worker_signals():
    """The worker outlives a hang-up or Ctrl-C of the connection that started it, yet every process it starts (a
    server above all: SGLang's own Ctrl-C and hang-up handling) begins with SIGHUP and SIGINT at their defaults.
    So it catches them with a handler that does nothing instead of ignoring them: exec resets a caught signal to
    its default but keeps an ignored one ignored. What it inherited ignored or blocked (nohup, a shell's background
    job) goes back to the default too; SIGPIPE and SIGXFSZ, which Python ignores for itself, subprocess restores in
    each child (restore_signals)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())  # before any thread: every later one and every child inherit it
    for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ}:
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _do_nothing)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def _do_nothing(signum, frame):
    pass


def _run_worker(state_dir, record, work, keep_fds):
    _set_worker_signals()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    # Nothing of the module's (its pipe to the connection above all) may stay open in the worker.
    first = 3
    for fd in sorted(keep_fds) + [min(os.sysconf("SC_OPEN_MAX"), 65536)]:
        os.closerange(first, fd)
        first = fd + 1
    record["worker_pid"] = os.getpid()
    record["worker_starttime"] = procfs.read_process(os.getpid()).starttime
    write_record(state_dir, record)

    def progress(snapshot):
        record["progress"] = snapshot
        write_record(state_dir, record)

    try:
        record["result"] = work(progress)
        record["status"] = "done"
    # Whatever went wrong, the record is the only place left to say it.
    except Exception as exc:  # noqa: BLE001  # pylint: disable=broad-except
        record["status"] = "error"
        # The record is a file on the host: an exception quoting a command line must not put a key there.
        record["result"] = {"failed": True, "msg": scrub_text(f"the host-side sequence failed: {exc}"),
                            "traceback": scrub_text(traceback.format_exc())}
    record["finished"] = time.time()
    write_record(state_dir, record)
    _prune(state_dir)


def follow(state_dir, job_id, until):
    """The record once the job is done, or its latest state at ``until`` (epoch seconds)."""
    while True:
        record = read_record(state_dir, job_id)
        if record is None:
            return None
        if record["status"] != "running":
            return record
        if not _worker_alive(record):
            # It may have written its result and exited since we read the record.
            record = read_record(state_dir, job_id) or record
            if record["status"] != "running":
                return record
            # Killed (SIGKILL, OOM, reboot) before it could write its result.
            record.update(status="lost", result={
                "failed": True, "msg": f"the worker (pid {record.get('worker_pid')}) of job {job_id} died before "
                                       "it finished; servers it was stopping or launching may be down"})
            return record
        if time.time() >= until:
            return record
        time.sleep(POLL_SECONDS)


def mark_reported(state_dir, record):
    record["reported"] = True
    write_record(state_dir, record)


def unreported(state_dir):
    """Finished records whose result no caller picked up (an interrupted run), oldest first."""
    records = []
    for job_id in _job_ids(state_dir):
        record = read_record(state_dir, job_id)
        if record and not record.get("reported") and (record["status"] != "running" or not _worker_alive(record)):
            if record["status"] == "running":
                record["status"] = "lost"  # its worker died before it could write a result
            records.append(record)
    return records


def _job_ids(state_dir):
    try:
        names = os.listdir(jobs_dir(state_dir))
    except OSError:
        return []
    return sorted(name[:-len(JOB_SUFFIX)] for name in names if name.endswith(JOB_SUFFIX))


def _prune(state_dir):
    for job_id in _job_ids(state_dir)[:-KEEP_RECORDS]:
        record = read_record(state_dir, job_id)
        if record is not None and record.get("reported"):
            try:
                os.unlink(job_file(state_dir, job_id))
            except OSError:
                pass


def follow_result(state_dir, job_id, until, events_seen=0, run_id=None):
    """The job's final result (marked reported), or a progress result with ``carry`` while it runs.

    Either carries ``progress``: the latest snapshot, with only the events the caller has not seen.
    Each call renews the run's lease (``run_id``): the sequence may outlast it otherwise.
    """
    if run_id:
        try:
            run_lock.renew(state_dir, run_id)
        except run_lock.RunLockError:
            pass  # the worker holds the host flock to the end; the next call of the run will say it
    record = follow(state_dir, job_id, until)
    if record is None:
        raise JobError(f"the record of job {job_id} is gone from {state_dir}")
    progress = dict(record.get("progress") or {})
    events = progress.get("events") or []
    progress["events"] = events[events_seen:]
    if record["status"] == "running":
        return {"changed": True, "carry": {"job": job_id, "events_seen": len(events)}, "progress": progress}
    mark_reported(state_dir, record)
    return dict(record["result"], progress=progress)
