# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsing SGLang server logs (stdout+stderr of ``sglang.launch_server``) into phase, progress and facts.

Each line is split into records (``sglang_log_lines``: ANSI colours, container and logging prefixes), whose
messages are matched against ``RULES`` (``sglang_log_rules``: what each line means, in both log dialects). Python
tracebacks, which span many unprefixed lines, are collected by a small state machine beside the table.

``LogState`` is incremental: feeding a log in arbitrary chunks gives the same result as
``parse_log`` on the whole text, so a waiter can follow a growing log with ``LogFollower``.

Speculative decoding: SGLang loads the draft model after the target ("Load weight begin" again on a
rank that finished a load; v0.5.x after the target's graph capture, some 0.4.x releases right after the
target's load) and captures the draft's graphs ("Capture draft ... graph"). The draft's load and capture
are reported with the usual phase names and ``component`` "draft" (on the state, in ``as_dict()`` and on
each timeline entry; "target" for every other step, including ``warming_up`` and ``ready``). Phases only
move forward within a component, so the timeline may go from the target's ``capturing_cuda_graph`` to
the draft's ``loading_weights``, and a draft that fails to load crashed in ``loading_weights``.

Crashes are recognised by the table's crash markers and by tracebacks, also without their ``Traceback``
header. A traceback about SGLang tearing itself down (frames in its SIGQUIT handler or ``kill_process_tree``,
e.g. the RecursionError of early 2025 releases, or a ``--- Logging error ---``) never replaces the exception
that caused the crash.

Nothing in a log makes the parser raise: a malformed number leaves its fact unknown, and every pattern
matches in time linear in the line's length.
"""

import codecs
import collections
import copy
import os
import re

from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log_lines import (
    GLUED_RECORD,
    continue_lines,
    parse_record,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log_rules import (
    CUDA_GRAPH_BAR,
    DIALECT_MARKERS,
    PHASES,
    RULES,
    SHELL_KILLED,
    UNRELEASED_RULES,
    WEIGHTS_BAR,
)

STARTUP_PHASES = PHASES[:PHASES.index("ready")]
_PHASE_RANK = {phase: rank for rank, phase in enumerate(PHASES)}

# Unprefixed output that stands on its own and therefore ends an open traceback.
_STANDALONE_OUTPUT = (WEIGHTS_BAR, CUDA_GRAPH_BAR, SHELL_KILLED)

_TRACEBACK_START = "Traceback (most recent call last):"
# A frame line; a pasted traceback may have lost its header, its indentation or both.
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+', re.ASCII)
# The exception line that ends a traceback without header: "RuntimeError: ...", "torch.OutOfMemoryError: ...".
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)(?::|$)", re.ASCII)
# "^^^^^^" / "~~~~^^^^" markers under a frame's source line (Python >= 3.11).
_CARETS = re.compile(r"^[~^ ]+$")
# Frames of SGLang tearing itself down: such a traceback is a consequence of the crash, not its cause.
_TEARDOWN_FRAME = re.compile(r"\bin (?:\w*sigquit_handler|kill_process_tree)$")
# Python's logging prints this, then a traceback, when a log call itself fails (e.g. inside a signal handler).
_LOGGING_ERROR = "--- Logging error ---"
# Sentences Python prints between the parts of a chained traceback.
_TRACEBACK_CHAIN = re.compile(
    r"^(?:During handling of the above exception, another exception occurred:"
    r"|The above exception was the direct cause of the following exception:)$"
)


class LogState:
    """Incremental SGLang log parser; ``as_dict()`` gives the current view."""

    def __init__(self):
        self.phase = "launching"
        # Whose weights are loading, whose graphs are captured ("target" | "draft").
        self._loading_component = "target"
        self._capture_component = "target"
        # Per component, the rank (in PHASES) of the furthest phase reached.
        self._reached = {"target": 0, "draft": -1}
        self.progress = {"weights": None, "cuda_graph": None}
        self.facts = {}
        self.last_line = None
        self.timeline = []
        self.log_format = None
        self._pending = ""
        self._weight_loads = collections.Counter()
        self._primary_facts = set()
        # Open traceback: its lines, its state ("frames" | "exception"), the record that started it, whether
        # it had a "Traceback" header, whether the previous line was a frame, whether it is about teardown.
        self._traceback = None
        self._traceback_state = None
        self._traceback_origin = None
        self._traceback_has_header = False
        self._after_frame = False
        self._traceback_is_teardown = False
        self._logging_error_announced = False
        # The error: its summary, and the traceback (list of lines, of which the first _error_line_count
        # belong to it) it comes from; the traceback is None while the error comes from a crash marker.
        self._error_summary = None
        self._error_traceback = None
        self._error_line_count = 0
        self._error_is_teardown = False
        # A line by which SGLang says the server is going down after a crash ("Received sigquit from a child
        # process", ...), not only a traceback (one after startup may be a failed request's, read without startup).
        self.crash_announced = False
        # Processes SGLang itself said it could not stop cleanly at shutdown (0.5.23): their GPU memory outlives the
        # stop. [{"pids", "why"}], in the log's order.
        self.unreleased = []

    @property
    def error(self):
        """None, or ``{"summary", "traceback"}`` (traceback None when only a crash marker was seen)."""
        if self._error_summary is None:
            return None
        lines = self._error_traceback
        traceback = "\n".join(lines[:self._error_line_count]).rstrip() if lines is not None else None
        return {"summary": self._error_summary, "traceback": traceback}

    def feed_text(self, text):
        """Feed a chunk of log text; an unterminated last line waits for the next chunk or ``flush()``."""
        lines, self._pending = continue_lines(self._pending, text)
        for line in lines:
            self.feed_line(line)

    def flush(self):
        """Parse a pending unterminated line (end of input)."""
        pending, self._pending = self._pending.rstrip("\r"), ""
        if pending:
            self.feed_line(pending)

    def feed_line(self, line):
        for piece in GLUED_RECORD.split(line):
            self._feed_record(piece)

    def _feed_record(self, line):
        record = parse_record(line)
        if self._traceback is not None and self._continues_traceback(record):
            self._add_traceback_line(record)
        else:
            self._traceback = None
            if record.message:
                self._apply_rules(record)
        if record.line.strip():
            self.last_line = record.line

    def _apply_rules(self, record):
        message = record.message
        for pattern, dialect in DIALECT_MARKERS:
            if pattern.search(message) and self.log_format != "new":
                self.log_format = dialect
        for rule in RULES:
            match = rule.pattern.search(message)
            if match:
                # The handler first: it may tell which component the phase belongs to.
                if rule.handler:
                    rule.handler(self, match, record)
                if rule.phase:
                    self._enter(rule.phase, record)
        start = message.find(_TRACEBACK_START)
        if start >= 0:
            self._open_traceback([message[start:]], record, has_header=True)
        elif record.timestamp is None and _FRAME.match(message):
            # A traceback pasted without its header: its first frame opens it.
            self._open_traceback([message], record, has_header=False)
            self._after_frame = True
            self._traceback_is_teardown = bool(_TEARDOWN_FRAME.search(message))
        self._logging_error_announced = message.startswith(_LOGGING_ERROR)

    def _open_traceback(self, lines, record, has_header):
        self._traceback = lines
        self._traceback_state = "frames"
        self._traceback_origin = record
        self._traceback_has_header = has_header
        self._after_frame = False
        self._traceback_is_teardown = self._logging_error_announced

    def _continues_traceback(self, record):
        if record.timestamp is not None:
            return False
        text = record.line
        if (not self._traceback_has_header and self._traceback_state == "frames" and text[:1].strip()
                and not self._after_frame and not _FRAME.match(text) and not _EXCEPTION_LINE.match(text)):
            return False  # a headerless traceback ends at an unindented line that is no part of it
        return not any(pattern.search(record.message) for pattern in _STANDALONE_OUTPUT)

    def _add_traceback_line(self, record):
        text = record.line
        self._traceback.append(text)
        stripped = text.strip()
        if text.startswith(_TRACEBACK_START) or _TRACEBACK_CHAIN.match(text):
            self._traceback_state = "frames"
            self._after_frame = False
            self._traceback_is_teardown = self._traceback_is_teardown and not _TRACEBACK_CHAIN.match(text)
        elif self._traceback_state == "frames" and _FRAME.match(text):
            self._after_frame = True
            self._traceback_is_teardown = self._traceback_is_teardown or bool(_TEARDOWN_FRAME.search(stripped))
        elif self._traceback_state == "frames" and self._is_exception_line(text, stripped):
            self._traceback_state = "exception"
            self._on_exception_line(stripped)
        elif self._traceback_state == "frames":
            self._after_frame = False  # a frame's source line or its carets
        elif self._traceback_state == "exception" and self._error_traceback is self._traceback:
            # Continuation of a multi-line message, e.g. the "Possible solutions:" block.
            self._error_line_count = len(self._traceback)

    def _is_exception_line(self, text, stripped):
        # The first unindented line after the frames is the exception ("RuntimeError: ..."). Where the
        # paste lost indentation, an unindented line right after a frame is that frame's source line.
        if not stripped or text[0].isspace() or _CARETS.match(stripped):
            return False
        if _EXCEPTION_LINE.match(text):
            return True
        return self._traceback_has_header and not self._after_frame

    def _on_exception_line(self, summary):
        for rule in UNRELEASED_RULES:
            match = rule.pattern.search(summary)
            if match:
                rule.handler(self, match, None)
        # The first traceback explains a crash; later ones (other ranks, the parent) are consequences.
        # A crash marker seen before it (the parent's "Received sigquit" often comes first) is replaced,
        # and so is the earlier exception of a chained traceback, and a traceback about the teardown.
        teardown = self._traceback_is_teardown
        replaces = (self._error_traceback is None or self._error_traceback is self._traceback
                    or self._error_is_teardown)
        if replaces and not (teardown and self._error_traceback is not None and not self._error_is_teardown):
            self._error_summary = summary
            self._error_traceback = self._traceback
            self._error_line_count = len(self._traceback)
            self._error_is_teardown = teardown
        # A traceback after startup (e.g. one failed request) does not by itself mean the server died.
        if self.phase in STARTUP_PHASES:
            self._enter("crashed", self._traceback_origin._replace(line=summary))

    def _enter(self, phase, record):
        if self.phase in ("crashed", "stopping"):
            return
        if phase in ("crashed", "stopping"):
            component = self.component
        else:
            component = {"loading_weights": self._loading_component,
                         "capturing_cuda_graph": self._capture_component}.get(phase, "target")
            rank = _PHASE_RANK[phase]
            # Forward only, within the component; no startup step once the server is warming up (a weight
            # update at run time logs "Load weight begin" too).
            if rank <= self._reached[component] or (
                    phase in STARTUP_PHASES and self._reached["target"] >= _PHASE_RANK["warming_up"]):
                return
            self._reached[component] = rank
        self.phase = phase
        self.timeline.append({"phase": phase, "component": component, "timestamp": record.timestamp,
                              "line": record.line})

    @property
    def component(self):
        """"draft" while the phase is a step of the draft model, else "target"."""
        return self.timeline[-1]["component"] if self.timeline else "target"

    def as_dict(self):
        return {
            "phase": self.phase,
            "component": self.component,
            "progress": {name: dict(value) if value else None for name, value in self.progress.items()},
            "facts": copy.deepcopy(self.facts),
            "error": self.error,
            "last_line": self.last_line,
            "timeline": [dict(entry) for entry in self.timeline],
            "log_format": self.log_format,
            "unreleased": [dict(entry, pids=list(entry["pids"])) for entry in self.unreleased],
        }


# What a crash or a stop interrupted is the phase before them.
_NOT_A_PHASE_REACHED = ("crashed", "stopping")


def phase_reached(timeline, phase):
    """``(phase, component)`` of the last startup step a log reached (what a crash interrupted), not 'crashed'."""
    for entry in reversed(timeline or []):
        if entry.get("phase") not in _NOT_A_PHASE_REACHED:
            return entry["phase"], entry.get("component") or "target"
    return (phase if phase and phase not in _NOT_A_PHASE_REACHED else "launching"), "target"


def parse_log(text):
    """Parse a whole log text; see ``LogState.as_dict()`` for the result."""
    state = LogState()
    state.feed_text(text)
    state.flush()
    return state.as_dict()


class LogFollower:
    """Reads the lines appended to a log file since the previous call.

    An unterminated last line is kept until it is completed. When the file is replaced (another
    inode, e.g. rotated to ``.1`` at relaunch) or shrinks (truncated), reading restarts at offset 0.
    A log that is already larger than ``head_bytes + tail_bytes`` when reading starts (a server that has
    been serving for weeks) is read as its head (the startup: phases and facts) and its tail (the latest
    lines), not whole. A path that cannot be read (missing, a directory, no permission) gives no lines;
    ``read_error`` then says why (None while the file is missing or readable).
    """

    def __init__(self, path, head_bytes=4 * 1024 * 1024, tail_bytes=1024 * 1024):
        self.path = path
        self.offset = 0
        self.read_error = None
        self._identity = None
        self._pending = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head_bytes = head_bytes
        self._tail_bytes = tail_bytes

    def read_new(self):
        """Return the complete lines appended since the last call ([] while the file does not exist)."""
        try:
            with open(self.path, "rb") as handle:
                data = self._read_from_offset(handle)
        except (FileNotFoundError, NotADirectoryError):
            self.read_error = None
            return []
        except OSError as exc:
            self.read_error = f"cannot read {self.path}: {exc.strerror or exc}"
            return []
        self.read_error = None
        lines, self._pending = continue_lines(self._pending, self._decoder.decode(data))
        return lines

    def _read_from_offset(self, handle):
        stat = os.fstat(handle.fileno())
        identity = (stat.st_dev, stat.st_ino)
        if identity != self._identity or stat.st_size < self.offset:
            self._restart(identity)
        if self.offset == 0 and stat.st_size > self._head_bytes + self._tail_bytes:
            head = handle.read(self._head_bytes)
            handle.seek(stat.st_size - self._tail_bytes)
            tail = handle.read(self._tail_bytes)
            self.offset = stat.st_size
            # Whole lines on both sides of the gap.
            return head[:head.rfind(b"\n") + 1] + tail[tail.find(b"\n") + 1:]
        handle.seek(self.offset)
        data = handle.read()
        self.offset += len(data)
        return data

    def _restart(self, identity):
        self._identity = identity
        self.offset = 0
        self._pending = ""
        self._decoder.reset()
