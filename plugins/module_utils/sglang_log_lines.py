# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The line format of SGLang server logs: physical lines, and the record each one holds.

Text is split on ``\\n``, ``\\r\\n`` and tqdm's ``\\r``. A line is normalised (ANSI colours and a ``name-1  | ``
container prefix removed) and its ``[YYYY-MM-DD HH:MM:SS(.mmm)( DP0 TP0 EP0...)]`` logging prefix split off into a
``LogRecord``. Every pattern matches in time linear in the line's length.
"""

import collections
import re

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
# "... 50/51 [00:00<00:00, 180.28it/s][2026-12-01 20:04:23 TP1] Load weight begin. ...". tqdm pads a refresh shorter
# than the previous one with spaces ("bs=8" after "bs=10"): "... 41.61it/s] [2026-...". Split before such a record,
# dropping the padding.
GLUED_RECORD = re.compile(r"(?<=it/s\]|s/it\]) *(?=\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})")

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
