# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The throughput probe's figures, from the records of its requests (load_probe.py makes the load).

Pure: no I/O, no clock, stdlib only. A record is one finished request, ``{ok, ttft_s, e2e_s, error}``;
``summarize`` turns those of one server, or of the whole host, into the figures the probe returns and journals.
"""

import math

ERROR_EXAMPLES = 3
# The figures of a probe that its run journal keeps, per server and for the host.
FIGURES = ("output_tok_s", "requests_s", "ttft_p50_s", "ttft_p90_s", "e2e_p50_s", "e2e_p90_s")


def percentile(values, fraction):
    """Nearest-rank percentile of ``values`` (None when empty)."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, min(len(ordered), math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]


def summarize(requests, tokens_in_window, window_s, concurrency):
    """The figures of one server or of the host: ``requests`` are the finished ones, ``{ok, ttft_s, e2e_s, error}``."""
    done = [request for request in requests if request["ok"]]
    errors = [request for request in requests if not request["ok"]]

    def rounded(value):
        return None if value is None else round(value, 3)

    figures = {
        "concurrency": concurrency,
        "window_s": round(window_s, 2),
        "requests": len(done),
        "errors": len(errors),
        "error_examples": sorted({request["error"] for request in errors})[:ERROR_EXAMPLES],
        "output_tokens": tokens_in_window,
        "output_tok_s": round(tokens_in_window / window_s, 1) if window_s > 0 else None,
        "requests_s": round(len(done) / window_s, 2) if window_s > 0 else None,
    }
    for name, key in (("ttft", "ttft_s"), ("e2e", "e2e_s")):
        values = [request[key] for request in done if request.get(key) is not None]
        figures[f"{name}_p50_s"] = rounded(percentile(values, 0.5))
        figures[f"{name}_p90_s"] = rounded(percentile(values, 0.9))
    return figures
