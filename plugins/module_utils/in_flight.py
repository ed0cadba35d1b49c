# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How many requests a running SGLang server still has in flight: what a drain waits for.

``GET /v1/loads`` (SGLang since January 2026, with or without ``--enable-metrics``) gives the schedulers' live
counts per DP rank: ``num_running_reqs + num_waiting_reqs``. Older releases only have the ``/metrics`` gauges
``num_running_reqs + num_queue_reqs``, which SGLang refreshes when it logs a batch: they can lag behind.
The parsers are pure; ``requests_in_flight`` does the HTTP.
"""

import json

from ansible_collections.gpuops.sglang.plugins.module_utils.http_probe import (
    http_get,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.prometheus import (
    sglang_gauges,
)


def count_from_loads(body):
    """Requests running or waiting over every DP rank of a ``/v1/loads`` answer, or None if it has none."""
    try:
        loads = json.loads(body).get("loads")
    except (ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(loads, list) or not loads:
        return None
    total = 0
    for load in loads:
        if not isinstance(load, dict):
            return None
        counts = [load.get("num_running_reqs"), load.get("num_waiting_reqs")]
        if not all(isinstance(count, int) and not isinstance(count, bool) and count >= 0 for count in counts):
            return None
        total += sum(counts)
    return total


def count_from_metrics(text):
    """``num_running_reqs + num_queue_reqs`` from ``/metrics`` text, or None without those gauges."""
    gauges = sglang_gauges(text)
    counts = [gauges.get("num_running_reqs"), gauges.get("num_queue_reqs")]
    if any(count is None for count in counts):
        return None
    return int(sum(counts))


def requests_in_flight(base_url, timeout, api_key=None):
    """``(count, error)``: count None (and error why) when the server does not say."""
    status, body, error = http_get(base_url + "/v1/loads", timeout, api_key)
    if status is None:
        return None, error
    count = count_from_loads(body) if status == 200 else None
    if count is not None:
        return count, None
    if status not in (200, 404):
        return None, f"GET /v1/loads: HTTP {status}"
    # A release without /v1/loads (404), or an answer without the counts: the gauges.
    status, body, error = http_get(base_url + "/metrics", timeout, api_key)
    if status != 200:
        return None, "GET /metrics: " + (error or f"HTTP {status}")
    count = count_from_metrics(body)
    return (count, None) if count is not None else (None, "GET /metrics has no num_running_reqs/num_queue_reqs")
