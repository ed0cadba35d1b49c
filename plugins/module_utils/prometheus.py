# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsing the Prometheus text exposition format served by SGLang's ``/metrics`` (``--enable-metrics``)."""

import re

# name{label="value",...} value [timestamp]; a quoted label value may hold "}", "," and escapes.
# Every repetition below has exactly one way to match a character, so matching stays linear.
_LABEL_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\]|\\.)*"'
_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{[ \t]*(?P<labels>" + _LABEL_PAIR + r"(?:[ \t]*,[ \t]*" + _LABEL_PAIR + r")*)?(?:[ \t]*,)?[ \t]*\})?"
    r"[ \t]+(?P<value>[^ \t]+)(?:[ \t]+(?P<timestamp>-?[0-9]+))?[ \t]*$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")

# Gauges reported by sglang_gauges(). Counts add up over data-parallel ranks; ratios are given for
# the fullest rank, since that is the one that limits the server. num_retracted_reqs: requests retracted
# since the previous log, because decode ran out of KV; full_token_usage (v0.5.10+): the full-attention KV
# pool alone, where token_usage may be the fullest of several pools (capacity_rules.kv_usage). v0.5.23 also counts
# each pool's token slots: used by running requests, evictable (radix-cached) and free.
POOL_TOKEN_GAUGES = tuple(f"{pool}_{kind}_tokens" for pool in ("kv", "mamba")
                          for kind in ("used", "evictable", "available"))
SUMMED_GAUGES = ("num_running_reqs", "num_queue_reqs", "num_used_tokens", "gen_throughput", "max_total_num_tokens",
                 "num_retracted_reqs") + POOL_TOKEN_GAUGES
RATIO_GAUGES = ("token_usage", "full_token_usage", "mamba_usage", "cache_hit_rate")
# `sglang:` is SGLang's own prefix; exporters that sanitise names (e.g. gRPC sidecars) write `sglang_`.
_PREFIXES = ("sglang:", "sglang_")


def _unescape(value):
    return _ESCAPE.sub(lambda escaped: "\n" if escaped.group(1) == "n" else escaped.group(1), value)


def parse_metrics(text):
    """Parse exposition text into ``{sample_name: [{"labels": {...}, "value": float}]}``.

    Histogram and summary series keep their sample names (``*_bucket``, ``*_sum``, ``*_count``);
    ``+Inf``, ``-Inf`` and ``NaN`` become floats; a sample timestamp (ms) is kept as ``timestamp``.
    HELP/TYPE/comment lines, lines that are not samples (malformed labels, a value that is not a number,
    a line cut short) are skipped.
    """
    metrics = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        sample = _SAMPLE.match(line)
        if not sample:
            continue
        try:
            value = float(sample.group("value"))
            timestamp = None if sample.group("timestamp") is None else int(sample.group("timestamp"))
        except ValueError:  # not a number, or more digits than int() accepts
            continue
        labels = {name: _unescape(raw) for name, raw in _LABEL.findall(sample.group("labels") or "")}
        entry = {"labels": labels, "value": value}
        if timestamp is not None:
            entry["timestamp"] = timestamp
        metrics.setdefault(sample.group("name"), []).append(entry)
    return metrics


def _per_dp_rank(samples):
    # With --enable-metrics-for-all-schedulers every TP rank of a DP group reports the same batch:
    # keep the lowest tp_rank of each dp_rank so nothing is counted twice.
    chosen = {}
    for sample in samples:
        labels = sample["labels"]
        dp_rank = labels.get("dp_rank", "0")
        try:
            tp_rank = int(labels.get("tp_rank") or 0)
        except ValueError:  # tp_rank="x": not a sample SGLang wrote
            continue
        if dp_rank not in chosen or tp_rank < chosen[dp_rank][0]:
            chosen[dp_rank] = (tp_rank, sample["value"])
    return [value for _tp_rank, value in chosen.values()]


def sglang_gauges(text):
    """Current SGLang gauges from ``/metrics`` text, keyed without the ``sglang:`` prefix (None if absent)."""
    metrics = parse_metrics(text)
    gauges = {}
    for name in SUMMED_GAUGES + RATIO_GAUGES:
        samples = next((metrics[prefix + name] for prefix in _PREFIXES if prefix + name in metrics), None)
        if not samples:
            gauges[name] = None
            continue
        values = _per_dp_rank(samples)
        if not values:
            gauges[name] = None
        else:
            gauges[name] = sum(values) if name in SUMMED_GAUGES else max(values)
    return gauges
