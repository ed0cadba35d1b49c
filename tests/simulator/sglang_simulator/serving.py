"""The serving side of the main process: Serving (SGLang's tokenizer manager: checks a request, hands it to a DP
rank round robin, follows it for the HTTP handler, ticks every rank's scheduler, renders /metrics and /v1/loads)
and the Streamer that writes every stream's chunks when they are due. A stream whose client went away is aborted;
what is in flight at SIGTERM is drained (server.py). /metrics has each version's names: v0.5.23 adds the token counts
of the KV pool (and of the mamba pool on a hybrid model) and startup_time_seconds{phase}."""

import heapq
import itertools
import threading
import time

from .metrics import TokenizerStats, render_labels
from .rank_scheduler import RankScheduler, Request
from .routes import RequestError


class Streamer:
    """Writes the chunks of every stream of the server from one thread, each when it is due (every
    --stream-interval tokens, at most once per tick, the last when the request is finished), as SGLang's
    detokenizer pushes outputs; waking each handler's thread per chunk cost half as much CPU again."""

    def __init__(self, stream_interval, tick):
        self.stream_interval, self.tick = stream_interval, tick
        self.condition = threading.Condition()
        self.due = []  # heap of (due time, sequence, state)
        self.sequence = itertools.count()
        threading.Thread(target=self.write_forever, daemon=True).start()

    def stream(self, request, render, write):
        """Block until an admitted request is streamed: render(sent, count, finished) gives the events of a
        chunk, write(events, finished) sends them. False when a write failed."""
        state = {"request": request, "render": render, "write": write, "sent": 0, "last": 0.0,
                 "done": threading.Event(), "ok": True}
        self.schedule(state)
        state["done"].wait()
        return state["ok"]

    def schedule(self, state):
        request = state["request"]
        due = request.token_time(min(state["sent"] + self.stream_interval, request.max_new_tokens))
        with self.condition:
            heapq.heappush(self.due, (max(due, state["last"] + self.tick), next(self.sequence), state))
            self.condition.notify()

    def write_forever(self):
        while True:
            with self.condition:
                while not self.due or self.due[0][0] > time.monotonic():
                    self.condition.wait(self.due[0][0] - time.monotonic() if self.due else None)
                state = heapq.heappop(self.due)[2]
            self.write(state)

    def write(self, state):
        request, now = state["request"], time.monotonic()
        count = request.generated(now)
        finished = now >= request.first_token_at and count >= request.max_new_tokens
        state["last"] = now
        try:
            if count > state["sent"] or finished:
                state["write"](state["render"](state["sent"], count, finished), finished)
                state["sent"] = count
        except OSError:  # the client went away
            state["ok"], finished = False, True
        if finished:
            state["done"].set()
        else:
            self.schedule(state)


class Serving:
    """The tokenizer side: checks a request like SGLang, hands it to a DP rank (round robin), and lets the
    HTTP handler follow it; one thread ticks every rank's scheduler."""

    def __init__(self, config, ready_infos):
        self.args, self.sim = config.args, config.sim
        self.lock = threading.Lock()
        self.stats = TokenizerStats()
        self.ranks = [RankScheduler(config, ready, dp_rank, self.stats)
                      for dp_rank, ready in enumerate(ready_infos[::self.args.tp_size])]
        self.context_len = ready_infos[0]["context_len"]
        self.max_req_len = ready_infos[0]["max_req_input_len"]
        self.pending = {}  # rid -> rank, until the handler has answered (SGLang's rid_to_state)
        self.next_rank = 0
        self.streamer = Streamer(self.args.stream_interval, self.sim.tick)
        self.wakeup = threading.Event()
        self.startup_phases = {}  # v0.5.23's startup_time_seconds{phase} (Server.run)
        self.wake_at = 0.0
        threading.Thread(target=self.tick_forever, daemon=True).start()

    def tick_forever(self):
        """Tick every rank, and wake up when a request finishes too: the next waiting one is told at once."""
        while True:
            with self.lock:
                now = time.monotonic()
                for rank in self.ranks:
                    rank.tick(now)
                finishes = [rank.finishing[0][0] for rank in self.ranks if rank.finishing]
                self.wake_at = min([now + self.sim.tick] + finishes)
                self.wakeup.clear()
            self.wakeup.wait(max(self.wake_at - time.monotonic(), 0))

    def submit(self, prompt_tokens, max_new_tokens):
        """One Request per prompt; every prompt is checked before any is queued."""
        for prompt in prompt_tokens:
            self.check(prompt, max_new_tokens)
        requests = []
        with self.lock:
            for prompt in prompt_tokens:
                # the scheduler trims max_new_tokens to what the context and the KV pool can hold
                request = Request(prompt, min(max_new_tokens, self.max_req_len - prompt - 1), self.sim)
                rank = self.ranks[self.next_rank]
                self.next_rank = (self.next_rank + 1) % len(self.ranks)
                self.pending[request.rid] = rank
                rank.submit(request, request.arrival)
                if request.finished_at is not None and request.finished_at < self.wake_at:
                    self.wakeup.set()
                requests.append(request)
        return requests

    def check(self, prompt, max_new_tokens):
        if prompt >= self.context_len:
            raise RequestError(f"The input ({prompt} tokens) is longer than the model's context length "
                               f"({self.context_len} tokens).")
        if prompt + max_new_tokens >= self.context_len:
            raise RequestError(f"Requested token count exceeds the model's maximum context length of "
                               f"{self.context_len} tokens. You requested a total of {prompt + max_new_tokens} "
                               f"tokens: {prompt} tokens from the input messages and {max_new_tokens} tokens for "
                               "the completion. Please reduce the number of tokens in the input messages or the "
                               "completion to fit within the limit.")
        if prompt >= self.max_req_len:
            raise RequestError(f"Input length ({prompt}) exceeds the maximum allowed length ({self.max_req_len}). "
                               "Use a shorter input or enable --allow-auto-truncate.")

    def stream(self, request, render, write):
        """Stream a request (see Streamer.stream); False when the client went away, and it was aborted."""
        request.admitted.wait()
        if self.streamer.stream(request, render, write):
            return True
        with self.lock:
            self.pending[request.rid].abort(request, time.monotonic())
        return False

    def wait(self, request):
        request.admitted.wait()
        delay = request.finished_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def answered(self, request):
        with self.lock:
            self.pending.pop(request.rid, None)

    def in_flight(self):
        with self.lock:
            return list(self.pending)

    def last_gen_throughput(self, dp_rank):
        with self.lock:
            return self.ranks[dp_rank].gauges["gen_throughput"]

    def loads(self):
        with self.lock:
            now = time.monotonic()
            loads = []
            for dp_rank, rank in enumerate(self.ranks):
                rank.advance(now)
                used, kv_usage, _mamba = rank.usage(now, list(rank.running.values()))
                loads.append({"dp_rank": dp_rank, "num_running_reqs": len(rank.running),
                              "num_waiting_reqs": len(rank.waiting), "num_used_tokens": used,
                              "max_total_num_tokens": rank.pool_tokens, "token_usage": round(kv_usage, 4),
                              "gen_throughput": rank.gauges["gen_throughput"], "max_running_requests": rank.max_running})
            return loads

    def metrics(self, labels):
        """The Prometheus text: per-rank scheduler gauges, then the tokenizer's counters and histograms."""
        hybrid = self.ranks[0].mamba_slots is not None
        gauges = [
            ("num_running_reqs", "The number of running requests."),
            ("num_used_tokens", "The number of used tokens."),
            ("token_usage", "The token usage."),
            ("gen_throughput", "The generation throughput (token/s)."),
            ("num_queue_reqs", "The number of requests in the waiting queue."),
            ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
            ("cache_hit_rate", "The prefix cache hit rate."),
            ("spec_accept_length", "The average acceptance length of speculative decoding."),
            ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
        ]
        if self.sim.new:
            gauges.append(("full_token_usage", "The token usage for full attention layers."))
        if hybrid:
            gauges.append(("mamba_usage", "The token usage for Mamba layers."))
        if self.sim.new:  # token counts (nothing is evictable: the simulator caches no prefix)
            gauges += [("kv_used_tokens", "The number of used tokens in the KV cache."),
                       ("kv_available_tokens", "The number of available tokens in the KV cache."),
                       ("kv_evictable_tokens", "The number of evictable tokens in the KV cache.")]
            if hybrid:
                gauges += [("mamba_used_tokens", "The number of used Mamba states."),
                           ("mamba_available_tokens", "The number of available Mamba states."),
                           ("mamba_evictable_tokens", "The number of evictable Mamba states.")]
        with self.lock:
            per_rank = []
            now = time.monotonic()
            for dp_rank, rank in enumerate(self.ranks):
                rank.advance(now)  # requests finished since the last tick count as served
                values = dict(rank.gauges, max_total_num_tokens=rank.pool_tokens)
                if self.sim.new:
                    used = values["num_used_tokens"]
                    values.update(kv_used_tokens=used, kv_available_tokens=rank.pool_tokens - used)
                    if hybrid:
                        mamba_used = round(values["mamba_usage"] * rank.mamba_slots)
                        values.update(mamba_used_tokens=mamba_used,
                                      mamba_available_tokens=rank.mamba_slots - mamba_used)
                rank_labels = dict(labels, dp_rank=str(dp_rank)) if len(self.ranks) > 1 else labels
                per_rank.append((rank_labels, values))
            stats = self.stats
            counters = [("prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens),
                        ("generation_tokens", "Number of generation tokens processed.", stats.generation_tokens),
                        ("num_requests", "Number of requests processed.", stats.requests)]
            histograms = [("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                           stats.ttft),
                          ("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                           stats.e2e)]
            lines = []
            for name, help_text in gauges:
                lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} gauge"]
                lines += [f"sglang:{name}{render_labels(rank_labels)} {float(values.get(name, 0))}"
                          for rank_labels, values in per_rank]
            if self.sim.new and self.startup_phases:
                lines += ["# HELP sglang:startup_time_seconds Time spent in each startup phase, in seconds.",
                          "# TYPE sglang:startup_time_seconds gauge"]
                lines += [f"sglang:startup_time_seconds{render_labels(dict(labels, phase=phase))} {float(seconds)}"
                          for phase, seconds in self.startup_phases.items()]
            for name, help_text, value in counters:
                lines += [f"# HELP sglang:{name}_total {help_text}", f"# TYPE sglang:{name}_total counter",
                          f"sglang:{name}_total{render_labels(labels)} {float(value)}"]
            for name, help_text, histogram in histograms:
                lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} histogram",
                          f"sglang:{name}_sum{render_labels(labels)} {histogram.sum}"]
                cumulative = 0
                for bound, count in zip(histogram.buckets + (float("inf"),), histogram.counts):
                    cumulative += count
                    le = "+Inf" if bound == float("inf") else repr(float(bound))
                    lines.append(f"sglang:{name}_bucket{render_labels(dict(labels, le=le))} {float(cumulative)}")
                lines.append(f"sglang:{name}_count{render_labels(labels)} {float(cumulative)}")
        return "\n".join(lines) + "\n"
