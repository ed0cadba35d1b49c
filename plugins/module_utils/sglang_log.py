# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsing SGLang server logs (stdout+stderr of ``sglang.launch_server``) into phase, progress and facts.

Both log dialects are understood: "classic" (up to about v0.5.10) and "new" (2026 nightlies, v0.5.23).
A line is first normalised (ANSI colours and a ``name-1  | `` container prefix removed, then the
``[YYYY-MM-DD HH:MM:SS(.mmm)( DP0 TP0 EP0...)]`` logging prefix split off), then matched against
``RULES``, a table of (regex, phase, handler). Python tracebacks, which span many unprefixed lines,
are collected by a small state machine beside the table.

``LogState`` is incremental: feeding a log in arbitrary chunks gives the same result as
``parse_log`` on the whole text, so a waiter can follow a growing log with ``LogFollower``.

Speculative decoding: SGLang loads the draft model after the target ("Load weight begin" again on a
rank that finished a load; v0.5.x after the target's graph capture, some 0.4.x releases right after the
target's load) and captures the draft's graphs ("Capture draft ... graph"). The draft's load and capture
are reported with the usual phase names and ``component`` "draft" (on the state, in ``as_dict()`` and on
each timeline entry; "target" for every other step, including ``warming_up`` and ``ready``). Phases only
move forward within a component, so the timeline may go from the target's ``capturing_cuda_graph`` to
the draft's ``loading_weights``, and a draft that fails to load crashed in ``loading_weights``.

Crashes are recognised in every release's wording (the parent's SIGQUIT message, also as Python's
logging prints it when the handler's own log call fails; scheduler and tokenizer exceptions; tracebacks
without their ``Traceback`` header). A traceback about SGLang tearing itself down (frames in its
SIGQUIT handler or ``kill_process_tree``, e.g. the RecursionError of early 2025 releases, or a
``--- Logging error ---``) never replaces the exception that caused the crash.

Nothing in a log makes the parser raise: a malformed number leaves its fact unknown, and every pattern
matches in time linear in the line's length.
"""

import codecs
import collections
import copy
import math
import os
import re

PHASES = (
    "launching",
    "initializing",
    "loading_weights",
    "allocating_memory",
    "capturing_cuda_graph",
    "warming_up",
    "ready",
    "crashed",
    "stopping",
)
STARTUP_PHASES = PHASES[:PHASES.index("ready")]
_PHASE_RANK = {phase: rank for rank, phase in enumerate(PHASES)}

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# `docker compose logs` / `up` prefixes every line with the padded service name: "llm0-1  | ".
_CONTAINER_PREFIX = re.compile(r"^[A-Za-z0-9][\w.-]*\s+\| ")
# SGLang's logging format: "[%(asctime)s{.msecs}{ DP0 PP0 ATTN_CP0 MOE_DP0 TP0 EP0}] message".
_LOG_PREFIX = re.compile(
    r"^\[(?P<timestamp>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{3})?)"
    r"(?P<ranks>(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] ?(?P<message>.*)$"
)
_RANK = re.compile(r"([A-Z_]+?)(\d+)", re.ASCII)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# A progress bar (tqdm) ends without a line break, so another rank's record written meanwhile is glued to it:
# "... 50/51 [00:00<00:00, 180.28it/s][2026-12-01 20:04:23 TP1] Load weight begin. ...". Split before such a record.
_GLUED_RECORD = re.compile(r"(?<=it/s\])(?=\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})|"
                           r"(?<=s/it\])(?=\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})")

# tqdm bars (stderr, no logging prefix). Weight loading uses a fixed BAR_FORMAT with several
# descriptions; graph capture uses the default format with "Capturing batches/num tokens (...)".
WEIGHTS_BAR = re.compile(r"^(?P<desc>[^:|]+): +\d+% Completed \| (?P<done>\d+)/(?P<total>\d+)\b")
CUDA_GRAPH_BAR = re.compile(r"^Capturing [^:|]*: *\d+%\|[^|]*\| *(?P<done>\d+)/(?P<total>\d+)\b")
# What a shell prints when the server dies by SIGKILL ("Killed" or "script: line 9: 123 Killed  cmd").
SHELL_KILLED = re.compile(r"^(?:.*: line \d+: +\d+ )?Killed(?:\s|$)")
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

# Lines only one dialect writes; a "new" marker wins because early 2026 nightlies mixed both.
_DIALECT_MARKERS = (
    (re.compile(r"^server_args=\{"), "new"),
    (re.compile(r"^Init parallel begin"), "new"),
    (re.compile(r"^Memory baseline taken"), "new"),
    (re.compile(r"^Capture (?:target|draft) \w+ CUDA graph"), "new"),
    (re.compile(r"KV Cache is allocated\. dtype: "), "new"),
    (re.compile(r"^Engine startup timings"), "new"),
    (re.compile(r"^Tree cache initialized"), "new"),
    (re.compile(r"^server_args=ServerArgs\("), "classic"),
    (re.compile(r"^Init torch distributed begin"), "classic"),
    (re.compile(r"^Load weight end\..*\bdtype="), "classic"),
    (re.compile(r"^Capture (?:[\w ]+ )?(?:cuda|cpu|npu) graph begin"), "classic"),
)

# Fields of "Load weight end. [elapsed=12.02 s, ]type=..., [dtype=..., ][quant=..., ]avail mem=.. GB,
# mem usage=.. GB." and of "Draft model loaded. type=..., mem usage=.. GB".
# A decimal number; followed by its unit, or matched whole ("12x3", "1.2.3" are none), a malformed one leaves
# its fact unknown.
_DECIMAL = r"(\d+(?:\.\d+)?)"
_WEIGHT_FIELDS = (
    ("seconds", re.compile(r"\belapsed=" + _DECIMAL + r" ?s\b", re.ASCII), float),
    ("type", re.compile(r"\btype=([\w.]+)", re.ASCII), str),
    ("dtype", re.compile(r"\bdtype=([\w.]+)", re.ASCII), str),
    ("quant", re.compile(r"\bquant=([\w.]+)", re.ASCII), str),
    ("avail_mem", re.compile(r"\bavail mem=" + _DECIMAL + r" ?GB", re.ASCII), float),
    ("mem_usage", re.compile(r"\bmem usage=" + _DECIMAL + r" ?GB", re.ASCII), float),
)
# "Capture cuda graph end. Time elapsed: 35.20 s. mem usage=2.10 GB. ..." (classic) or
# "Capture target decode CUDA graph end. bs=[...], elapsed=1.56 s, mem usage=0.38 GB, ..." (new).
_CAPTURE_SECONDS = re.compile(r"(?:Time elapsed: |\belapsed=)" + _DECIMAL + r" ?s\b", re.ASCII)
_CAPTURE_MEM_USAGE = re.compile(r"\bmem usage=" + _DECIMAL + r" ?GB", re.ASCII)
_KV_FIELDS = (
    ("kv_cache_tokens", re.compile(r"#tokens: (\d+)(?![\w.])", re.ASCII), int),
    ("kv_cache_dtype", re.compile(r"\bdtype: ([\w.]+)", re.ASCII), str),
)
_KV_SIZES = re.compile(r"\b(?:K|V|KV) size: " + _DECIMAL + r" ?GB", re.ASCII)
_MAMBA_SIZES = re.compile(r"\b(\w+) size: " + _DECIMAL + r" ?GB", re.ASCII)
_NUMBER_ASSIGNMENT = re.compile(r"\b(\w+)=(-?\d+(?:\.\d+)?)(?![\w.])", re.ASCII)
# "cuda_graph={decode=35.12, ...}" or "{'decode': 35.12}"; [^{}] keeps a run of unclosed "{" linear.
_STARTUP_GRAPH_TIMINGS = re.compile(r"cuda_graph=\{([^{}]*)\}")
_GRAPH_TIMING = re.compile(r"\b(\w+)['\"]?\s*[:=]\s*" + _DECIMAL + r"(?![\w.])", re.ASCII)


def _number(text):
    """int or float of a matched number; None for one no server reports (thousands of digits)."""
    try:
        value = float(text) if "." in text else int(text)
    except ValueError:  # int() refuses more than sys.get_int_max_str_digits() digits
        return None
    return value if math.isfinite(value) else None


def _set_fact(state, record, key, value):
    # Every rank logs its own copy: rank 0's value wins, else the first one reported.
    if value is None:
        return
    primary = _is_primary_rank(record.ranks)
    if key not in state.facts or (primary and key not in state._primary_facts):
        state.facts[key] = value
        if primary:
            state._primary_facts.add(key)


def _is_primary_rank(ranks):
    return all(index == 0 for index in ranks.values())


def _bar_progress(match):
    done, total = _number(match.group("done")), _number(match.group("total"))
    return None if done is None or total is None else {"done": done, "total": total}


def _on_weights_bar(state, match, record):
    state.progress["weights"] = _bar_progress(match) or state.progress["weights"]


def _on_cuda_graph_bar(state, match, record):
    state.progress["cuda_graph"] = _bar_progress(match) or state.progress["cuda_graph"]


def _record_weight_facts(state, record, prefix):
    for name, pattern, convert in _WEIGHT_FIELDS:
        found = pattern.search(record.message)
        if found:
            _set_fact(state, record, prefix + "weight_load_" + name, convert(found.group(1)))


def _rank_key(record):
    return tuple(sorted(record.ranks.items()))


def _on_load_weight_begin(state, match, record):
    # A rank that already finished a load is loading the draft model now.
    if state._weight_loads[_rank_key(record)]:
        state._loading_component = "draft"


def _on_load_weight_end(state, match, record):
    # With speculative decoding each rank loads the target first and the draft model second.
    state._loading_component = "target"
    rank_key = _rank_key(record)
    loads_before = state._weight_loads[rank_key]
    state._weight_loads[rank_key] += 1
    _record_weight_facts(state, record, "draft_" if loads_before else "")


def _on_draft_model_loaded(state, match, record):
    state._loading_component = "target"
    _record_weight_facts(state, record, "draft_")


def _on_kv_cache(state, match, record):
    for key, pattern, convert in _KV_FIELDS:
        found = pattern.search(record.message)
        if found:
            _set_fact(state, record, key, convert(found.group(1)))
    sizes = [float(size) for size in _KV_SIZES.findall(record.message)]
    if sizes:
        _set_fact(state, record, "kv_cache_size_gb", round(sum(sizes), 2))


def _on_kv_cache_dtype(state, match, record):
    _set_fact(state, record, "kv_cache_dtype", match.group(1))


def _on_mamba_cache(state, match, record):
    _set_fact(state, record, "max_mamba_cache_size", _number(match.group(1)))
    # "conv_state size: 1.20GB, ssm_state size: 30.00GB [intermediate_ssm_state_cache size: ...GB ...]"
    for name, size in _MAMBA_SIZES.findall(record.message):
        _set_fact(state, record, f"mamba_{name}_gb", float(size))


def _on_capture_begin(state, match, record):
    # v0.4.10/v0.5.9 "Capture draft [extend ]cuda graph", v0.5.23 "Capture draft decode CUDA graph"; the
    # target's capture says "cuda graph" or "target".
    state._capture_component = "draft" if "draft" in match.group(0).lower() else "target"


def _on_capture_end(state, match, record):
    # Several graphs may be captured (piecewise, decode, draft); rank 0's totals are reported.
    if not _is_primary_rank(record.ranks):
        return
    prefix = "draft_" if "draft" in match.group(0) else ""
    for key, pattern in (("cuda_graph_seconds", _CAPTURE_SECONDS), ("cuda_graph_mem_usage", _CAPTURE_MEM_USAGE)):
        found = pattern.search(record.message)
        if found:
            key = prefix + key
            state.facts[key] = round(state.facts.get(key, 0.0) + float(found.group(1)), 2)


def _on_scheduler_summary(state, match, record):
    # "max_total_num_tokens=.., chunked_prefill_size=.., max_prefill_tokens=.., max_running_requests=..,
    # context_len=.., available_gpu_mem=.. GB" (available_cpu_mem on CPU); newer versions add keys.
    for key, value in _NUMBER_ASSIGNMENT.findall(record.message):
        _set_fact(state, record, key, _number(value))


def _on_startup_timings(state, match, record):
    # "load_weight=12.01, kv_cache_allocation=0.52, scheduler_e2e=60.10, cuda_graph={...}, tokenizer_e2e=65.82";
    # the cuda_graph part maps capture phases to seconds ("decode=35.12" or "'decode': 35.12").
    body = match.group(1)
    timings = {}
    graph = _STARTUP_GRAPH_TIMINGS.search(body)
    if graph:
        body = body.replace(graph.group(0), "")
        timings["cuda_graph"] = {name: float(seconds) for name, seconds in _GRAPH_TIMING.findall(graph.group(1))}
    timings.update((key, float(value)) for key, value in _NUMBER_ASSIGNMENT.findall(body))
    _set_fact(state, record, "startup_timings", timings)


def _on_crash_marker(state, match, record):
    if state._error_summary is None:
        state._error_summary = record.message


Rule = collections.namedtuple("Rule", ["pattern", "phase", "handler"])


def _rule(pattern, phase=None, handler=None):
    return Rule(pattern if hasattr(pattern, "search") else re.compile(pattern, re.ASCII), phase, handler)


# Every matching rule applies, in this order. Patterns are searched in the message (prefix removed).
RULES = (
    _rule(r"^server_args=", "initializing"),
    _rule(r"^Init (?:torch distributed|parallel) begin", "initializing"),
    _rule(r"^Load weight begin", "loading_weights", _on_load_weight_begin),
    _rule(WEIGHTS_BAR, "loading_weights", _on_weights_bar),
    _rule(r"^Load weight end\.", None, _on_load_weight_end),
    _rule(r"^Draft model loaded\.", None, _on_draft_model_loaded),
    _rule(r"^Using KV cache dtype: ([\w.]+)", "allocating_memory", _on_kv_cache_dtype),
    _rule(r"^The available memory for KV cache is", "allocating_memory"),
    _rule(r"^Mamba Cache is allocated\. max_mamba_cache_size: (\d+)", "allocating_memory", _on_mamba_cache),
    _rule(r"\bKV Cache (?:is allocated|VA upper bound)", "allocating_memory", _on_kv_cache),
    _rule(r"^SWAKVPool mem usage", "allocating_memory"),
    _rule(r"^Memory pool end", "allocating_memory"),
    # "Capture cuda graph begin", "Capture npu graph begin.", "Capture piecewise CUDA graph begin",
    # "Capture draft extend cuda graph begin", "Capture target decode CUDA graph begin. backend=full, ..."
    _rule(re.compile(r"^Capture [\w ]*?graph begin", re.IGNORECASE | re.ASCII), "capturing_cuda_graph",
          _on_capture_begin),
    _rule(CUDA_GRAPH_BAR, "capturing_cuda_graph", _on_cuda_graph_bar),
    _rule(re.compile(r"^Capture [\w ]*?graph end", re.IGNORECASE | re.ASCII), None, _on_capture_end),
    _rule(r"^max_total_num_tokens=\d+", "warming_up", _on_scheduler_summary),
    _rule(r"^INFO: +(?:Uvicorn running on|Application startup complete)", "warming_up"),
    _rule(r"^Engine startup timings \(s\): (.*)$", None, _on_startup_timings),
    _rule(r"^The server is fired up and ready to roll!", "ready"),
    # A node of a multi-node group other than rank 0: its schedulers are ready, its health endpoint a placeholder.
    _rule(r"^Dummy health check server started", "ready"),
    # ~v0.4.2 spelled it "child proces."; when the handler's log call itself failed (0.4.x, #3685) Python's
    # logging printed it as "Message: 'Received sigquit ...'"; v0.5.23's watchdog path says "SIGQUIT received. ...".
    _rule(r"^(?:Message: ')?Received sigquit from a child proces", "crashed", _on_crash_marker),
    _rule(r"^SIGQUIT received\..*It usually means one child failed", "crashed", _on_crash_marker),
    _rule(r"Scheduler hit an exception", "crashed", _on_crash_marker),
    _rule(r"\bRank \d+ scheduler (?:died during initialization|is dead)", "crashed", _on_crash_marker),
    _rule(r"^Initialization failed", "crashed", _on_crash_marker),
    _rule(r"^Subprocess \S+ \(pid=\d+\) crashed with exit code", "crashed", _on_crash_marker),
    _rule(r"^Child process unexpectedly failed with an exit code", "crashed", _on_crash_marker),
    _rule(r"^TokenizerManager hit an exception", "crashed", _on_crash_marker),
    # A node other than rank 0 blocks over its schedulers and says when one ends.
    _rule(r"^Scheduler or DataParallelController \d+ terminated with", "crashed", _on_crash_marker),
    _rule(SHELL_KILLED, "crashed", _on_crash_marker),
    # argparse rejecting a flag: "launch_server.py: error: unrecognized arguments: --tp-szie 2".
    _rule(r"^[\w. /-]+: error: ", "crashed", _on_crash_marker),
    _rule(r"^SIGTERM received\..*Draining requests and shutting down", "stopping"),
    _rule(r"^Gracefully exiting", "stopping"),
    _rule(r"^Signal SIGTERM received while .*Force exiting", "stopping"),
)

LogRecord = collections.namedtuple("LogRecord", ["line", "timestamp", "ranks", "message"])


def parse_record(raw_line):
    """Split one physical line into a ``LogRecord`` (timestamp None and ranks {} when unprefixed)."""
    line = _CONTAINER_PREFIX.sub("", _ANSI_ESCAPE.sub("", raw_line), count=1).rstrip()
    prefixed = _LOG_PREFIX.match(line)
    if not prefixed:
        return LogRecord(line, None, {}, line)
    # Rank numbers are short (the prefix regex allows any length; int() refuses thousands of digits).
    ranks = {name: int(index[:18]) for name, index in _RANK.findall(prefixed.group("ranks"))}
    return LogRecord(line, prefixed.group("timestamp"), ranks, prefixed.group("message"))


def split_lines(text):
    """Split on ``\\n``, ``\\r\\n`` and tqdm's ``\\r``; return (complete lines, unterminated rest).

    A trailing ``\\r`` stays in the rest: it may be the first half of a ``\\r\\n`` split across reads.
    """
    pieces = _LINE_BREAK.split(text)
    rest = pieces.pop()
    if text.endswith("\r"):
        rest = pieces.pop() + "\r"
    return pieces, rest


def continue_lines(pending, text):
    """``split_lines(pending + text)``, scanning only ``text``: a long unterminated line fed in small
    chunks stays linear."""
    if pending.endswith("\r"):
        pending, text = pending[:-1], "\r" + text
    lines, rest = split_lines(text)
    if not lines:
        return [], pending + rest
    lines[0] = pending + lines[0]
    return lines, rest


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
        for piece in _GLUED_RECORD.split(line):
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
        for pattern, dialect in _DIALECT_MARKERS:
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
