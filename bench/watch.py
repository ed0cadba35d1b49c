"""Follows the servers' logs from outside the playbook, on this machine's clock.

For each server's log it notes when a new generation of the log appeared (the server was launched: ours
rotates the log, a shell's ``>`` truncates it) and when that generation reached ``ready`` or ``crashed``,
as module_utils/sglang_log.py reads the phases. A server's own startup is ``ready - launched``; the
moments are this machine's clock at the poll that saw them (``POLL_S`` resolution), not the log's
one-second timestamps, so they compare with the playbook's task times.
"""

import codecs
import os
import threading
import time

from bench.collection import module_util

sglang_log = module_util("sglang_log")

POLL_S = 0.1


HEAD_BYTES = 32


def file_generation(path):
    """``((dev, inode), size, head)`` of a log, or None while it does not exist; NULs left by a writer
    whose file was truncated under it do not count as content."""
    try:
        with open(path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            head = handle.read(HEAD_BYTES).strip(b"\0")
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino), stat.st_size, head


class ServerLog:
    """One server's log. The generation there when the watch starts is the previous server's: skipped.

    A new generation is a new file (rotated), a shorter one (truncated) or another first line; a first line
    written into an empty (or truncated) file continues the generation but is parsed again from the start,
    since a killed server may still have written behind the new one's back.
    """

    def __init__(self, host, name, path):
        self.host, self.name, self.path = host, name, path
        self.generation = file_generation(path) or (None, 0, b"")
        self.state = None
        self.offset = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.launched = self.ready = self.crashed = None

    def poll(self, now):
        generation = file_generation(self.path)
        if generation is None:
            return
        (identity, size, head), (last_identity, last_size, last_head) = generation, self.generation
        self.generation = generation
        if identity != last_identity or size < last_size or (last_head and head != last_head):
            self.launched, self.ready, self.crashed = now, None, None
            self._parse_from_start()
        elif head != last_head and self.state is not None:
            self._parse_from_start()
        if self.state is not None:
            self._read(now)

    def _parse_from_start(self):
        self.state, self.offset = sglang_log.LogState(), 0
        self.decoder.reset()

    def _read(self, now):
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return
        self.offset += len(data)
        self.state.feed_text(self.decoder.decode(data))
        if self.state.phase == "ready" and self.ready is None:
            self.ready = now
        elif self.state.phase == "crashed" and self.crashed is None:
            self.crashed = now

    @property
    def startup_s(self):
        return self.ready - self.launched if self.ready is not None else None

    def as_dict(self):
        return {"host": self.host, "name": self.name, "launched": self.launched, "ready": self.ready,
                "crashed": self.crashed, "startup_s": self.startup_s,
                "phase": self.state.phase if self.state else None}


class LogWatcher:
    """Polls every log in a thread while a playbook runs: ``with LogWatcher(logs) as watcher: ...``."""

    def __init__(self, logs):
        self.logs = logs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            now = time.time()
            for log in self.logs:
                log.poll(now)
            self._stop.wait(POLL_S)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()
        now = time.time()
        for log in self.logs:
            log.poll(now)
