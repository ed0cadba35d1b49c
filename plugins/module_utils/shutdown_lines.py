# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang's own word, at shutdown (0.5.23), that GPU memory of a server is not - or may not be - freed, naming the
pids: schedulers killed before they released it, and processes the kernel did not reap after SIGKILL (stuck in the
driver). Read by the log parser (sglang_log_rules) and by the stop (steps.py: the log written since the server's
SIGTERM), from one table."""

import collections
import re

# ``freed``: whether the memory may still come back once the kill is through (killed before releasing it) or not
# (not reaped: stuck in the driver, it holds the memory until the node is fixed).
ShutdownLine = collections.namedtuple("ShutdownLine", ["pattern", "why", "freed"])

SHUTDOWN_LINES = (
    ShutdownLine(re.compile(r"Schedulers still alive (\d+)s after ShutdownReq, killing them before they released: "
                            r"\[([\d, ]*)\]", re.ASCII),
                 "schedulers still alive {0} s after the shutdown request, SIGKILLed before they released their GPU "
                 "memory", True),
    ShutdownLine(re.compile(r"kill_process_tree: \d+ process\(es\) not reaped within ([\d.]+)s after SIGKILL; "
                            r"pids=\[([\d, ]*)\]", re.ASCII),
                 "not reaped within {0} s of SIGKILL (stuck in the driver: their GPU memory is not freed)", False),
)


def entry(line, match):
    """``{"pids", "why", "freed"}`` of a match of ``line``'s pattern."""
    return {"pids": [int(pid) for pid in re.findall(r"\d+", match.group(2))], "why": line.why.format(match.group(1)),
            "freed": line.freed}


def unreleased(lines):
    """Every such entry in ``lines`` (log lines, prefixes and all), in order."""
    found = []
    for text in lines:
        for line in SHUTDOWN_LINES:
            match = line.pattern.search(text)
            if match:
                found.append(entry(line, match))
    return found
