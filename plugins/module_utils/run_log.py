# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The log of a server's current run, read as it grows: the wait (readiness.py) and server_info (server_facts.py)
look at a server through it.

Only the current run counts: a log that was not rotated still holds earlier runs, told apart by the timestamps
of its lines. Health checks in the log are not activity (a hung server still answers them).
"""

import collections
import re
import time

from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_text
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log import (
    LogFollower,
    LogState,
    phase_reached,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log_rules import (
    may_announce_crash,
)

LOG_TAIL_LINES = 30
# launched_at is taken just after the launch and log timestamps are whole seconds: a line stamped up
# to this much before launched_at may still belong to the new run.
LAUNCH_CLOCK_SLACK_SECONDS = 2


_LINE_TIMESTAMP = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
# Health checks (ours or anybody's) are not progress: a hung server still answers them with 503.
_HEALTH_NOISE = re.compile(
    r'"GET /(?:health|health_generate|get_server_info|server_info|metrics)[ ?"]|Health check (?:failed|request)')


def line_epoch(line):
    """Epoch seconds of a timestamped SGLang log line (local time, as SGLang writes it), else None."""
    match = _LINE_TIMESTAMP.match(line)
    if not match:
        return None
    try:
        return time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
    except ValueError:
        return None


def local_timestamp(epoch):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


class RunLog:
    """The log of the current run of one server, parsed incrementally.

    A log that was not rotated still holds earlier runs: a timestamped line older than the launch
    discards everything read so far, and untimestamped lines right after it (an old traceback) too.
    """

    def __init__(self, path, launched_at=None, secrets=()):
        self._follower = LogFollower(path) if path else None
        self._secrets = secrets
        self._launched_at = launched_at
        self._skipping_old_run = False
        self._start()

    def _start(self):
        self.state = LogState()
        self.tail = collections.deque(maxlen=LOG_TAIL_LINES)
        self.activity_lines = 0
        self.last_activity_line = None

    def read(self):
        if self._follower is not None:
            self.feed(self._follower.read_new())

    def feed(self, lines):
        """Parse ``lines`` as the next lines of the log."""
        # SGLang logs its server_args, API keys included.
        for line in (scrub_text(line, self._secrets) for line in lines):
            stamp = line_epoch(line)
            if self._launched_at and stamp is not None and stamp < self._launched_at - LAUNCH_CLOCK_SLACK_SECONDS:
                self._start()
                self._skipping_old_run = True
                continue
            if self._skipping_old_run and stamp is None:
                continue
            self._skipping_old_run = False
            self.state.feed_line(line)
            if line.strip():
                self.tail.append(line)
                if not _HEALTH_NOISE.search(line):
                    self.activity_lines += 1
                    self.last_activity_line = line

    def phase_reached(self):
        return phase_reached(self.state.timeline, self.state.phase)


def crash_of_current_run(path, launched_at, secrets=()):
    """The error summary of the crash the log of the run launched at ``launched_at`` shows, else None: the planner's
    question of a server whose main process still runs. Only a crash SGLang announced as its going down counts: a
    traceback alone may be a failed request's in a log read without its startup (truncated, or beyond the head and
    tail LogFollower reads)."""
    if not path:
        return None
    lines = LogFollower(path).read_new()
    # Parsing a log of weeks (its head and tail, 5 MB) takes seconds: only one where a line may announce a crash is.
    if not may_announce_crash("\n".join(lines)):
        return None
    log = RunLog(None, launched_at, secrets)
    log.feed(lines)
    # Every way into "crashed" sets the error.
    return log.state.error["summary"] if log.state.phase == "crashed" and log.state.crash_announced else None
