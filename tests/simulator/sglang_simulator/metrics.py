"""Prometheus metrics: the tokenizer's counters and histograms (TokenizerStats, with TokenizerMetricsCollector's
default buckets) and the label rendering; the scheduler gauges come from rank_scheduler.py and Serving.metrics
writes the text."""

import bisect

# TokenizerMetricsCollector's default buckets (s)
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = TTFT_BUCKETS + (600, 1200, 1800, 2400)


class TokenizerStats:
    """The tokenizer's counters and histograms, observed when a request finishes."""

    def __init__(self):
        self.prompt_tokens = self.generation_tokens = self.requests = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)

    def finished(self, request):
        self.prompt_tokens += request.prompt_tokens
        self.generation_tokens += request.max_new_tokens
        self.requests += 1
        self.ttft.observe(request.first_token_at - request.arrival)
        self.e2e.observe(request.finished_at - request.arrival)


class Histogram:
    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value):
        self.sum += value
        self.counts[bisect.bisect_left(self.buckets, value)] += 1  # the first bucket with value <= bound


def render_labels(labels):
    return "{" + ",".join(f'{name}="{value}"' for name, value in sorted(labels.items())) + "}"
