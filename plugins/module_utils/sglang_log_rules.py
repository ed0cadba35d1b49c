# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the lines of an SGLang server log mean: the phase each one starts, the progress and facts it reports, the
crash it announces.

``RULES`` is a table of (regex, phase, handler), searched in a record's message (``sglang_log_lines`` splits the
logging prefix off). Every matching rule applies, in the table's order: its handler first, since it may tell whose
step the phase is (the target's or the draft model's), then its phase. The handlers are the parser's own: they
write into its ``LogState`` (``sglang_log``), private fields included.

Both log dialects are understood: "classic" (up to about v0.5.10) and "new" (2026 nightlies, v0.5.23);
``DIALECT_MARKERS`` tell them apart. Crash markers are matched in every release's wording (the parent's SIGQUIT
message, also as Python's logging prints it when the handler's own log call fails; scheduler and tokenizer
exceptions). A malformed number leaves its fact unknown, and every pattern matches in time linear in the line's
length.
"""

import collections
import math
import re

from ansible_collections.gpuops.sglang.plugins.module_utils import shutdown_lines

# In order; a log's phase only moves forward through them (sglang_log.LogState).
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

# tqdm bars (stderr, no logging prefix). Weight loading uses a fixed BAR_FORMAT with several
# descriptions; graph capture uses the default format with "Capturing batches/num tokens (...)".
WEIGHTS_BAR = re.compile(r"^(?P<desc>[^:|]+): +\d+% Completed \| (?P<done>\d+)/(?P<total>\d+)\b")
CUDA_GRAPH_BAR = re.compile(r"^Capturing [^:|]*: *\d+%\|[^|]*\| *(?P<done>\d+)/(?P<total>\d+)\b")
# What a shell prints when the server dies by SIGKILL ("Killed" or "script: line 9: 123 Killed  cmd").
SHELL_KILLED = re.compile(r"^(?:.*: line \d+: +\d+ )?Killed(?:\s|$)")

# Lines only one dialect writes; a "new" marker wins because early 2026 nightlies mixed both.
DIALECT_MARKERS = (
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
    state.crash_announced = True
    if state._error_summary is None:
        state._error_summary = record.message


def _on_unreleased(line):
    def handler(state, match, record):
        state.unreleased.append({key: value for key, value in shutdown_lines.entry(line, match).items()
                                 if key != "freed"})
    return handler


Rule = collections.namedtuple("Rule", ["pattern", "phase", "handler"])


def _rule(pattern, phase=None, handler=None):
    return Rule(pattern if hasattr(pattern, "search") else re.compile(pattern, re.ASCII), phase, handler)


# 0.5.23's shutdown: schedulers that ignored the shutdown request (a warning), then processes the kernel did not reap
# (a RuntimeError, so also the exception line of a traceback: the parser applies these to those lines too).
UNRELEASED_RULES = tuple(_rule(line.pattern, "stopping", _on_unreleased(line)) for line in shutdown_lines.SHUTDOWN_LINES)


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
    *UNRELEASED_RULES,
    _rule(r"^Signal SIGTERM received while .*Force exiting", "stopping"),
)

# A word every line that announces a crash (the rules of _on_crash_marker) holds: scanning a text for them tells a log
# of weeks without any from one worth parsing in milliseconds (a regular expression of the rules takes seconds on
# 5 MB). test_sglang_log.py checks each crash marker's sample line against them.
CRASH_MARKER_WORDS = ("Received sigquit", "SIGQUIT received", "hit an exception", " scheduler ",
                      "Initialization failed", "crashed with exit code", "unexpectedly failed", "DataParallelController",
                      "Killed", ": error: ")


def may_announce_crash(text):
    """False when no line of ``text`` can announce a crash; True when one may (the parser tells)."""
    return any(word in text for word in CRASH_MARKER_WORDS)
