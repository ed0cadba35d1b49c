"""One DP rank's scheduler under load (RankScheduler), and the Request whose timeline it fixes, as SGLang's:
  * a FIFO waiting queue; a request is admitted while fewer than ``max_running_requests`` run and its
    prompt + max_new_tokens fit in what the KV pool (``max_total_num_tokens``) has not reserved for others;
  * prefill is serial per rank at SGLANG_SIM_PREFILL_TOKENS_PER_S and yields the first token; every running
    request then decodes one token per 1/SGLANG_SIM_DECODE_TOKENS_PER_S seconds, on its own clock;
  * there is no EOS: every request generates exactly its max_new_tokens (``ignore_eos`` changes nothing);
  * ``/metrics`` gauges are published when SGLang publishes them: at each prefill batch (the state before the
    batch joins), every ``--decode-log-interval`` decode steps (with the ``Decode batch`` line; at most once a
    tick) and, after SGLANG_SIM_IDLE_REFRESH_S without a batch, as the idle refresh (which leaves mamba_usage
    stale); counters and histograms count requests as they finish (metrics.py);
  * an aborted request (a stream whose client went away) frees its slot at once.
So a saturated rank outputs max_running_requests x SGLANG_SIM_DECODE_TOKENS_PER_S tokens/s and a request's
time to first token is its queue wait + the prefills ahead of it + prompt_tokens / SGLANG_SIM_PREFILL_TOKENS_PER_S."""

import collections
import heapq
import threading
import time
import uuid

from .log import Logger, scheduler_prefix


class Request:
    """One sequence. Once admitted its whole timeline is fixed (time.monotonic() seconds): the first token
    comes when its prefill ends, then one every 1 / SGLANG_SIM_DECODE_TOKENS_PER_S seconds."""

    def __init__(self, prompt_tokens, max_new_tokens, sim):
        self.sim = sim
        self.rid = uuid.uuid4().hex
        self.prompt_tokens, self.max_new_tokens = prompt_tokens, max_new_tokens
        self.arrival = time.monotonic()
        self.admitted = threading.Event()
        self.first_token_at = self.finished_at = None
        self.released = False

    @property
    def kv_reservation(self):
        return self.prompt_tokens + self.max_new_tokens

    def schedule(self, prefill_start):
        self.first_token_at = prefill_start + self.prompt_tokens / self.sim.prefill_rate
        self.finished_at = self.token_time(self.max_new_tokens)

    def token_time(self, count):
        """When the count-th output token exists (the 0th: when the prefill ends)."""
        return self.first_token_at + max(count - 1, 0) / self.sim.decode_rate

    def generated(self, now):
        end = None if self.first_token_at is None else min(now, self.finished_at)  # an abort moves finished_at
        if end is None or end < self.first_token_at:
            return 0
        # The tolerance covers rounding in token_time's sum: on a clock hours past boot, first_token_at + k / rate
        # - first_token_at can come out a few 1e-8 tokens short of k, and the last token would never exist.
        return min(self.max_new_tokens, 1 + int((end - self.first_token_at) * self.sim.decode_rate + 1e-6))

    def decoded(self, now):
        """Tokens from decode steps (the first one comes from the prefill): what gen_throughput counts."""
        return max(self.generated(now) - 1, 0)


class RankScheduler:
    """One DP rank's scheduler; every method runs under Serving.lock."""

    def __init__(self, config, ready, dp_rank, stats):
        args = config.args
        self.sim = config.sim
        self.stats = stats
        self.max_running = ready["max_running_requests"]
        self.pool_tokens = ready["max_total_num_tokens"]
        self.mamba_slots = ready.get("max_mamba_cache_size")
        self.mamba_per_request = config.mamba_slots_per_request
        self.cuda_graph_max_bs = 0 if args.disable_cuda_graph else args.cuda_graph_max_bs
        self.decode_log_s = args.decode_log_interval / self.sim.decode_rate  # decode steps at the decode rate
        self.log = Logger(scheduler_prefix(args, dp_rank, 0))
        self.log.quiet = args.log_level in ("warning", "error", "critical")
        self.waiting = collections.deque()
        self.running = {}
        self.finishing = []  # heap of (finished_at, rid, request)
        self.reserved_tokens = 0
        self.prefill_free_at = 0.0
        self.released_decoded = 0  # decode tokens of requests no longer running
        now = time.monotonic()
        self.busy_until = self.last_decode_log = self.last_publish = now
        self.decode_busy_s = 0.0  # time with requests running since the last decode log: decode steps / rate
        self.decoded_at_last_log = 0
        self.gauges = {"num_running_reqs": 0, "num_used_tokens": 0, "token_usage": 0.0, "full_token_usage": 0.0,
                       "mamba_usage": 0.0, "gen_throughput": 0.0, "num_queue_reqs": 0}

    # state ------------------------------------------------------------------------------------
    def usage(self, now, running):
        """(KV tokens held, KV usage, mamba usage) of the given running requests."""
        used = sum(request.prompt_tokens + request.generated(now) for request in running)
        mamba = len(running) * self.mamba_per_request / self.mamba_slots if self.mamba_slots else 0.0
        return used, used / self.pool_tokens, mamba

    def publish(self, now, running, used, kv_usage, mamba_usage=None, **extra):
        """Set the gauges as SGLang's log_stats does; mamba_usage None leaves it as it was."""
        # A hybrid model's token_usage is the fuller of its two pools from v0.5.10 on; v0.5.9 publishes the KV pool
        # alone there (scheduler_metrics_mixin.py; see docs/capacity.md).
        token_usage = max(kv_usage, mamba_usage or 0.0) if self.sim.at_least("0.5.10") else kv_usage
        self.gauges.update(num_running_reqs=running, num_used_tokens=used, full_token_usage=kv_usage,
                           token_usage=token_usage, num_queue_reqs=len(self.waiting), **extra)
        if self.mamba_slots and mamba_usage is not None:
            self.gauges["mamba_usage"] = mamba_usage
        self.last_publish = now

    def account(self, at):
        """Count the time up to ``at`` (never earlier than the last call) as decoding if requests run."""
        if self.running:
            self.decode_busy_s += max(at - self.busy_until, 0.0)
        self.busy_until = max(at, self.busy_until)

    # scheduling -------------------------------------------------------------------------------
    def submit(self, request, now):
        self.advance(now)
        self.waiting.append(request)
        self.admit(now)

    def abort(self, request, now):
        if request in self.waiting:
            self.waiting.remove(request)
        elif request.rid in self.running:
            request.finished_at = min(request.finished_at, now)
            self.release(request)
            self.admit(now)

    def advance(self, now):
        """Retire every request finished by now, admitting waiting ones at the moment each slot frees."""
        while self.finishing and self.finishing[0][0] <= now:
            finished_at, _rid, request = heapq.heappop(self.finishing)
            if not request.released:
                self.release(request)
                self.stats.finished(request)
                self.admit(finished_at)

    def release(self, request):
        self.account(request.finished_at)
        request.released = True
        del self.running[request.rid]
        self.reserved_tokens -= request.kv_reservation
        self.released_decoded += request.decoded(request.finished_at)

    def admit(self, at):
        """One prefill batch of the waiting requests that fit, first come first served."""
        self.account(at)
        before = list(self.running.values())
        batch = []
        while self.waiting and len(self.running) < self.max_running \
                and self.reserved_tokens + self.waiting[0].kv_reservation <= self.pool_tokens:
            request = self.waiting.popleft()
            request.schedule(max(at, request.arrival, self.prefill_free_at))
            self.prefill_free_at = request.first_token_at
            self.running[request.rid] = request
            self.reserved_tokens += request.kv_reservation
            heapq.heappush(self.finishing, (request.finished_at, request.rid, request))
            batch.append(request)
        if not batch:
            return
        # log_prefill_stats sees the pools before the batch is allocated
        used, kv_usage, mamba_usage = self.usage(at, before)
        self.log.info(f"Prefill batch. #new-seq: {len(batch)}, #new-token: {sum(r.prompt_tokens for r in batch)}, "
                      f"#cached-token: 0, token usage: {kv_usage:.2f}, #running-req: {len(before)}, "
                      f"#queue-req: {len(self.waiting)}, ")
        self.publish(time.monotonic(), len(before), used, kv_usage, mamba_usage)
        for request in batch:
            request.admitted.set()

    def tick(self, now):
        self.advance(now)
        self.account(now)
        if self.running:
            if self.decode_busy_s >= self.decode_log_s:  # at most once a tick
                self.decode_busy_s %= self.decode_log_s
                self.log_decode(now)
        elif not self.waiting and now - self.last_publish >= self.sim.idle_refresh:
            # the idle refresh looks at the KV pool only: mamba_usage keeps its last busy value
            self.publish(now, 0, 0, 0.0, gen_throughput=0.0)

    def log_decode(self, now):
        running = list(self.running.values())
        used, kv_usage, mamba_usage = self.usage(now, running)
        decoded = self.released_decoded + sum(request.decoded(now) for request in running)
        throughput = (decoded - self.decoded_at_last_log) / max(now - self.last_decode_log, 1e-9)
        self.decoded_at_last_log, self.last_decode_log = decoded, now
        graph = len(running) <= self.cuda_graph_max_bs
        if self.sim.new:
            usage = f"#token: {used}, token usage: {kv_usage:.2f}, "
            if self.mamba_slots:
                usage = (f"#full token: {used}, full token usage: {kv_usage:.2f}, "
                         f"mamba num: {len(running) * self.mamba_per_request}, mamba usage: {mamba_usage:.2f}, ")
        else:
            usage = f"#token: {used}, token usage: {kv_usage:.2f}, " + \
                (f"mamba usage: {mamba_usage:.2f}, " if self.mamba_slots else "")
        self.log.info(f"Decode batch, #running-req: {len(running)}, {usage}cuda graph: {graph}, "
                      f"gen throughput (token/s): {throughput:.2f}, #queue-req: {len(self.waiting)}, ")
        self.publish(now, len(running), used, kv_usage, mamba_usage, gen_throughput=throughput)
