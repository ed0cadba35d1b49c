# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What limits one SGLang server now, decided by a table of rules on its live ``/metrics`` gauges.

Pure: no I/O, no clock, stdlib only, so the controller imports it too. A caller gathers a ``CapacitySnapshot``
(capacity_snapshot.py: the gauges of ``prometheus.sglang_gauges`` and what the server configured) and ``judge``s
it: the first rule that fires names the binding constraint as a plain dict (an Ansible module returns it as it is)::

    {"bound": "mamba", "evidence": "mamba_usage 0.61 vs token_usage 0.21, 32 running = max_running_requests, "
     "queue 0", "advice": "try `--mamba-scheduler-strategy no_buffer` or a larger `--max-mamba-cache-size`",
     "figures": {"num_running_reqs": 32, ...}}

``sentence`` says it on one line for status tables. The rules, their sources in SGLang and their caveats are
described in docs/capacity.md; adding a rule is one function ``rule(snapshot) -> dict | None`` and one entry in
``CAPACITY_RULES`` at the place its precedence asks for (and, for a new bound, one entry in ``BOUNDS``).
"""

from ansible_collections.gpuops.sglang.plugins.module_utils.capacity_snapshot import (
    NEW_STRATEGY_FLAG,
    OLD_STRATEGY_FLAG,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.prometheus import (
    POOL_TOKEN_GAUGES,
)

# A pool this full turns new requests away: SGLang admits a request only while the pool also holds its input
# and (up to 4096 of) its max_new_tokens on top of what the running requests reserve for their own remaining
# output (schedule_policy.py, PrefillAdder.rem_total_tokens), so admission stops short of 100 %.
KV_FULL = 0.9
# mamba_usage counts the slots of running requests only (radix-cached states are free to evict), and SGLang
# sizes 3 to 5 slots per request, so a pool this full has no slot left for another request.
MAMBA_FULL = 0.9
# A request that finished since the last decode log frees its slot only at the next prefill, so a server that
# runs this share of its request limit counts as at it.
AT_LIMIT = 0.95

# First versions read (0.5.9, 0.5.10.post1, 0.5.23) that behave so; the versions between were not read.
# --mamba-scheduler-strategy is called --mamba-radix-cache-strategy.
STRATEGY_FLAG_RENAMED = (0, 5, 23)
# The 30 s idle refresh of the gauges also refreshes mamba_usage (before, it keeps the last busy value).
IDLE_REFRESHES_MAMBA = (0, 5, 23)
# "auto" picks extra_buffer when the overlap schedule is on (before, always no_buffer).
AUTO_PICKS_EXTRA_BUFFER = (0, 5, 23)
# extra_buffer's ping-pong buffer takes 1 slot without the overlap schedule, else 2 (before: 1 slot with
# speculative decoding, else 2).
PING_PONG_FOLLOWS_OVERLAP = (0, 5, 10)

# bound -> how a status table says it.
BOUNDS = {
    "idle": "idle",
    "mamba": "mamba pool bound",
    "kv": "KV bound",
    "request_limit": "request-limit bound",
    "queueing": "queueing (load exceeds capacity)",
    "headroom": "headroom",
    "unknown": "unknown",
}


def capacity(bound, evidence, advice=None, figures=None):
    """The verdict of a rule: ``bound`` (a key of BOUNDS), the evidence and advice in words, the numbers used."""
    return {"bound": bound, "evidence": evidence, "advice": advice, "figures": dict(figures or {})}


# ---- what the rules read ----------------------------------------------------------------------------


def _gauge(snapshot, name):
    return (snapshot.gauges or {}).get(name)


def _older_than(snapshot, version):
    return snapshot.version is not None and tuple(snapshot.version) < version


def kv_usage(snapshot):
    """``(gauge name, value)`` of the full-attention KV pool's usage; value None when unknown.

    full_token_usage (v0.5.10+) is the KV pool alone. Without it token_usage is: the KV pool up to v0.5.9, hybrid
    models included (scheduler_metrics_mixin.py); from v0.5.10 the fullest pool, mamba included, while busy.
    """
    if _gauge(snapshot, "full_token_usage") is not None:
        return "full_token_usage", _gauge(snapshot, "full_token_usage")
    return "token_usage", _gauge(snapshot, "token_usage")


def is_hybrid(snapshot):
    """The model has mamba layers; SGLang reports mamba_usage 0.0 for other models too, so a size is wanted."""
    return snapshot.max_mamba_cache_size is not None or (_gauge(snapshot, "mamba_usage") or 0) > 0


def resolved_strategy(snapshot):
    """The mamba strategy the server runs, its "auto" resolved as its version does; None when unknown."""
    strategy = snapshot.mamba_strategy
    if strategy not in (None, "", "auto"):
        return strategy
    if snapshot.version is None:
        return None
    if _older_than(snapshot, AUTO_PICKS_EXTRA_BUFFER):
        return "no_buffer"
    return "no_buffer" if snapshot.overlap_disabled else "extra_buffer"


def slots_per_request(snapshot):
    """Mamba slots SGLang sizes per running request (its _calculate_mamba_ratio), for the request cap.

    An unknown strategy counts as the fewest a radix cache takes (3), so the cap is never underestimated.
    """
    if snapshot.radix_cache_disabled:
        return 1
    strategy = resolved_strategy(snapshot)
    if strategy == "extra_buffer_lazy":
        return 4
    if strategy == "extra_buffer":
        if _older_than(snapshot, PING_PONG_FOLLOWS_OVERLAP):
            return 4 if snapshot.speculative else 5
        return 4 if snapshot.overlap_disabled else 5
    return 3


def mamba_cap(snapshot):
    """Running requests per DP rank the mamba pool holds (SGLang caps max_running_requests there); None: unknown."""
    if snapshot.max_mamba_cache_size is None:
        return None
    return snapshot.max_mamba_cache_size // slots_per_request(snapshot)


def request_limit(snapshot):
    """max_running_requests over all DP ranks (the running gauge is their sum); None when unknown."""
    if snapshot.max_running_requests is None:
        return None
    return snapshot.max_running_requests * max(1, snapshot.dp_size)


def _running(snapshot):
    return _gauge(snapshot, "num_running_reqs") or 0


def _queued(snapshot):
    return _gauge(snapshot, "num_queue_reqs") or 0


def at_limit(snapshot):
    limit = request_limit(snapshot)
    return limit is not None and _running(snapshot) >= AT_LIMIT * limit


def _mamba_caps_limit(snapshot):
    cap = mamba_cap(snapshot)
    return cap is not None and snapshot.max_running_requests is not None and cap <= snapshot.max_running_requests


def figures(snapshot):
    """Every number the rules read that is known, for the verdict's ``figures``."""
    kv_name, kv = kv_usage(snapshot)
    known = {
        "num_running_reqs": _gauge(snapshot, "num_running_reqs"),
        "num_queue_reqs": _gauge(snapshot, "num_queue_reqs"),
        kv_name: kv,
        "mamba_usage": _gauge(snapshot, "mamba_usage") if is_hybrid(snapshot) else None,
        "num_retracted_reqs": _gauge(snapshot, "num_retracted_reqs"),
        "max_running_requests": snapshot.max_running_requests,
        "max_total_num_tokens": snapshot.max_total_num_tokens,
        "dp_size": snapshot.dp_size,
        "request_limit": request_limit(snapshot),
        "max_mamba_cache_size": snapshot.max_mamba_cache_size,
        "mamba_slots_per_request": slots_per_request(snapshot) if snapshot.max_mamba_cache_size else None,
        "mamba_cap": mamba_cap(snapshot),
        # v0.5.23: each pool's token slots (used, evictable, free), summed over the DP ranks.
        **{name: _gauge(snapshot, name) for name in POOL_TOKEN_GAUGES},
    }
    return {name: value for name, value in known.items() if value is not None}


# ---- how the rules say it ---------------------------------------------------------------------------


def _count(value):
    return f"{value:.0f}"


def _running_words(snapshot):
    """``32 running = max_running_requests``, ``20 running of max_running_requests 32 × 2 DP ranks``."""
    running = _running(snapshot)
    if snapshot.max_running_requests is None:
        return f"{_count(running)} running"
    if snapshot.dp_size > 1:
        limit = f"max_running_requests {snapshot.max_running_requests} × {snapshot.dp_size} DP ranks"
    else:
        limit = f"max_running_requests {snapshot.max_running_requests}"
    if running == request_limit(snapshot):
        # "32 running = max_running_requests": the number is said once.
        return f"{_count(running)} running = " + (limit if snapshot.dp_size > 1 else "max_running_requests")
    return f"{_count(running)} running of {limit}"


def _pool_words(snapshot, binding=None):
    """The pools' usage; the binding one ("kv" or "mamba") first, against the other."""
    kv_name, kv = kv_usage(snapshot)
    pools = {"kv": None if kv is None else f"{kv_name} {kv:.2f}"}
    mamba = _gauge(snapshot, "mamba_usage")
    if is_hybrid(snapshot) and mamba is not None:
        pools["mamba"] = f"mamba_usage {mamba:.2f}"
    if binding in pools and pools[binding] is not None:
        others = [words for name, words in pools.items() if name != binding and words is not None]
        return " vs ".join([pools[binding]] + others)
    return ", ".join(words for words in pools.values() if words is not None)


def _join(*parts):
    return ", ".join(part for part in parts if part)


def _either(options):
    """``try a, b or c``."""
    return "try " + (", ".join(options[:-1]) + " or " + options[-1] if len(options) > 1 else options[0])


def _no_buffer_words(snapshot):
    """The flags that switch to no_buffer, in the spelling of the server's version (both when it is unknown).

    no_buffer never runs with the overlap schedule: up to v0.5.10 SGLang turns it off itself, v0.5.23 asserts
    that --disable-overlap-schedule is given.
    """
    new = f"{NEW_STRATEGY_FLAG} no_buffer" + ("" if snapshot.overlap_disabled else " --disable-overlap-schedule")
    if snapshot.version is None:
        return f"`{OLD_STRATEGY_FLAG} no_buffer` (`{new}` from v0.5.23)"
    return f"`{OLD_STRATEGY_FLAG} no_buffer`" if _older_than(snapshot, STRATEGY_FLAG_RENAMED) else f"`{new}`"


# ---- rules ----------------------------------------------------------------------------------------


def no_metrics(snapshot):
    """Nothing to judge: no /metrics, or none of the scheduler's gauges."""
    if snapshot.gauges is None:
        return capacity("unknown", "no /metrics gauges", "SGLang serves /metrics only with `--enable-metrics`",
                        figures(snapshot))
    if _gauge(snapshot, "num_running_reqs") is None or _gauge(snapshot, "num_queue_reqs") is None:
        return capacity("unknown", "/metrics has no num_running_reqs or num_queue_reqs gauge", None,
                        figures(snapshot))
    return None


def idle(snapshot):
    """Nothing runs, nothing waits. Its mamba_usage is the last busy value up to v0.5.10: never trusted here."""
    if _running(snapshot) or _queued(snapshot):
        return None
    evidence = "0 running, queue 0"
    mamba = _gauge(snapshot, "mamba_usage")
    if is_hybrid(snapshot) and mamba and (snapshot.version is None or _older_than(snapshot, IDLE_REFRESHES_MAMBA)):
        evidence += f" (mamba_usage {mamba:.2f} is stale: SGLang before v0.5.23 does not refresh it while idle)"
    return capacity("idle", evidence, None, figures(snapshot))


def kv_bound(snapshot):
    """The KV pool is full while requests wait or the limit is reached, or decode ran out of it (retraction)."""
    _kv_name, kv = kv_usage(snapshot)
    retracted = _gauge(snapshot, "num_retracted_reqs") or 0
    full = kv is not None and kv >= KV_FULL and (_queued(snapshot) or at_limit(snapshot))
    if not (full or retracted):
        return None
    evidence = _join(_pool_words(snapshot, "kv"), _running_words(snapshot), f"queue {_count(_queued(snapshot))}",
                     f"num_retracted_reqs {_count(retracted)}" if retracted else "")
    mem_fraction = snapshot.mem_fraction_static
    options = ["a higher `--mem-fraction-static`" + (f" than {mem_fraction:g}" if mem_fraction else "")]
    if not (snapshot.kv_cache_dtype or "").startswith(("fp8", "fp4")):
        options.append("an fp8 KV cache (`--kv-cache-dtype fp8_e4m3`)")
    mamba = _gauge(snapshot, "mamba_usage") or 0
    if is_hybrid(snapshot) and mamba < MAMBA_FULL and not _mamba_caps_limit(snapshot):
        options.append("a smaller mamba pool (a lower `--mamba-full-memory-ratio` or `--max-mamba-cache-size`)")
    return capacity("kv", evidence, _either(options), figures(snapshot))


def mamba_bound(snapshot):
    """A hybrid model runs as many requests as its mamba pool holds, or that pool is full while requests wait."""
    if not is_hybrid(snapshot):
        return None
    mamba = _gauge(snapshot, "mamba_usage") or 0
    capped = at_limit(snapshot) and _mamba_caps_limit(snapshot)
    full = mamba >= MAMBA_FULL and (_queued(snapshot) or at_limit(snapshot))
    if not (capped or full):
        return None
    evidence = _join(_pool_words(snapshot, "mamba"), _running_words(snapshot), f"queue {_count(_queued(snapshot))}")
    larger = "a larger `--max-mamba-cache-size`"
    if snapshot.radix_cache_disabled:
        # One slot per request already; without an explicit size, --max-running-requests sizes the pool.
        options = [larger, "a higher `--max-running-requests` (with `--disable-radix-cache` it sizes the pool)"]
    elif resolved_strategy(snapshot) in ("extra_buffer", "extra_buffer_lazy") and not snapshot.speculative:
        # no_buffer takes 3 slots per request instead of 4 or 5. Never with speculative decoding: a ValueError
        # from v0.5.10, the radix cache silently off in v0.5.9.
        options = [_no_buffer_words(snapshot), larger]
    else:
        options = [larger, "a higher `--mamba-full-memory-ratio`"]
    return capacity("mamba", evidence, _either(options), figures(snapshot))


def request_limit_bound(snapshot):
    """As many requests run as max_running_requests allows, and neither pool is full (rules above)."""
    if not at_limit(snapshot):
        return None
    evidence = _join(_running_words(snapshot), f"queue {_count(_queued(snapshot))}", _pool_words(snapshot))
    notes = []
    if snapshot.dp_size > 1:
        notes.append(f"with `--enable-dp-attention` SGLang divides it among the {snapshot.dp_size} DP ranks")
    cap = mamba_cap(snapshot)
    if cap is not None:
        notes.append(f"the mamba pool holds {cap} requests" + (" per rank" if snapshot.dp_size > 1 else ""))
    elif is_hybrid(snapshot):
        notes.append("SGLang caps it at what the mamba pool holds: see max_mamba_cache_size in the boot log")
    advice = "try a higher `--max-running-requests`" + (f" ({'; '.join(notes)})" if notes else "")
    return capacity("request_limit", evidence, advice, figures(snapshot))


def queueing(snapshot):
    """Requests wait although request slots and pools have room."""
    if not _queued(snapshot):
        return None
    evidence = _join(f"queue {_count(_queued(snapshot))}", _running_words(snapshot), _pool_words(snapshot))
    advice = ("if it lasts, add servers or DP ranks (a request also waits for the per-step prefill budget, "
              "`--max-prefill-tokens`, and for KV room beyond what running requests reserve for their max_new_tokens)")
    return capacity("queueing", evidence, advice, figures(snapshot))


def headroom(snapshot):
    """It serves what comes, below every limit."""
    evidence = _join(_running_words(snapshot), "queue 0", _pool_words(snapshot))
    return capacity("headroom", evidence, None, figures(snapshot))


# A full pool explains a reached limit (raising the limit would not help), so the pools come first; the KV pool
# before the mamba pool, since a larger mamba share would take from a full KV pool.
CAPACITY_RULES = (no_metrics, idle, kv_bound, mamba_bound, request_limit_bound, queueing, headroom)


def judge(snapshot, rules=CAPACITY_RULES):
    """The verdict of the first rule that fires; "unknown" when none does."""
    for rule in rules:
        verdict = rule(snapshot)
        if verdict is not None:
            return verdict
    return capacity("unknown", "no rule applies to these gauges", figures=figures(snapshot))


def sentence(verdict):
    """``mamba pool bound: <evidence>: <advice>``, the one-line form of a verdict."""
    text = f"{BOUNDS[verdict['bound']]}: {verdict['evidence']}"
    return text + (f": {verdict['advice']}" if verdict["advice"] else "")
