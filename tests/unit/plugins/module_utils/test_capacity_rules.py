"""Capacity advice: every rule, their order, and real-format /metrics pages judged end to end."""

import dataclasses
import json
from pathlib import Path

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import capacity_rules
from ansible_collections.gpuops.sglang.plugins.module_utils.capacity_rules import (
    judge,
    sentence,
    slots_per_request,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.capacity_snapshot import (
    CapacitySnapshot,
    snapshot_of,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.prometheus import (
    sglang_gauges,
)

METRICS = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
ISSUE_EXAMPLE = ("mamba pool bound: mamba_usage 0.61 vs token_usage 0.21, 32 running = max_running_requests, "
                 "queue 0: try `--mamba-scheduler-strategy no_buffer` or a larger `--max-mamba-cache-size`")
KV_ADVICE = "try a higher `--mem-fraction-static` or an fp8 KV cache (`--kv-cache-dtype fp8_e4m3`)"


def page(name):
    return sglang_gauges((METRICS / name).read_text(encoding="utf-8"))


def gauges(running, queue, token_usage=0.3, mamba_usage=0.0, **more):
    """sglang_gauges() of a server; mamba_usage 0.0 is what SGLang reports for a model without mamba layers."""
    return dict({"num_running_reqs": float(running), "num_queue_reqs": float(queue), "token_usage": token_usage,
                 "mamba_usage": mamba_usage, "full_token_usage": None, "num_retracted_reqs": 0.0}, **more)


def server(running, queue, token_usage=0.3, mamba_usage=0.0, gauge_extra=None, **facts):
    return CapacitySnapshot(gauges=gauges(running, queue, token_usage, mamba_usage, **(gauge_extra or {})),
                            **facts)


# The issue's server: Qwen3-Next on v0.5.9, extra_buffer (5 slots a request), a 160-slot mamba pool: 32 requests.
HYBRID = {"max_running_requests": 32, "max_mamba_cache_size": 160, "mamba_strategy": "extra_buffer",
          "version": (0, 5, 9)}


def said(snapshot):
    return sentence(judge(snapshot))


# ---- the issue's example, and real pages -----------------------------------------------------------


def test_issue_example_verbatim():
    verdict = judge(server(32, 0, token_usage=0.21, mamba_usage=0.61, **HYBRID))
    assert sentence(verdict) == ISSUE_EXAMPLE
    assert verdict["bound"] == "mamba"
    assert verdict["figures"] == {
        "num_running_reqs": 32.0, "num_queue_reqs": 0.0, "token_usage": 0.21, "mamba_usage": 0.61,
        "num_retracted_reqs": 0.0, "max_running_requests": 32, "dp_size": 1, "request_limit": 32,
        "max_mamba_cache_size": 160, "mamba_slots_per_request": 5, "mamba_cap": 32}
    assert json.loads(json.dumps(verdict)) == verdict


V0_5_9_SERVER_INFO = {
    # /get_server_info: the arguments as launched on top, what the scheduler resolved in internal_states.
    "version": "0.5.9", "dp_size": 1, "max_running_requests": None, "max_mamba_cache_size": None,
    "max_total_num_tokens": 1100304, "mamba_scheduler_strategy": "extra_buffer", "speculative_algorithm": None,
    "disable_radix_cache": False, "disable_overlap_schedule": False, "kv_cache_dtype": "auto",
    "mem_fraction_static": 0.83,
    "internal_states": [{"effective_max_running_requests_per_dp": 32, "max_mamba_cache_size": 160,
                         "mamba_scheduler_strategy": "extra_buffer", "disable_overlap_schedule": False}],
}


def test_v0_5_9_page_of_the_issue_example():
    snapshot = snapshot_of(page("sglang_v0.5.9_hybrid_mamba_bound.txt"), V0_5_9_SERVER_INFO)
    assert said(snapshot) == ISSUE_EXAMPLE


def test_v0_5_9_idle_page_does_not_trust_its_stale_mamba_usage():
    snapshot = snapshot_of(page("sglang_v0.5.9_hybrid_idle.txt"), V0_5_9_SERVER_INFO)
    assert said(snapshot) == ("idle: 0 running, queue 0 (mamba_usage 0.61 is stale: SGLang before v0.5.23 does not "
                              "refresh it while idle)")


def test_v0_5_9_page_queueing_without_configured_facts():
    assert said(CapacitySnapshot(gauges=page("sglang_v0.5.9_tp1.txt"))) == (
        "queueing (load exceeds capacity): queue 3, 12 running, token_usage 0.03, mamba_usage 0.05: if it lasts, "
        "add servers or DP ranks (a request also waits for the per-step prefill budget, `--max-prefill-tokens`, "
        "and for KV room beyond what running requests reserve for their max_new_tokens)")


def test_v0_5_23_data_parallel_page_is_kv_bound():
    server_info = {
        "version": "0.5.23", "dp_size": 2, "mamba_radix_cache_strategy": "auto", "speculative_algorithm": None,
        "disable_radix_cache": False, "disable_overlap_schedule": False, "kv_cache_dtype": "auto",
        "mem_fraction_static": 0.87,
        "internal_states": [{"effective_max_running_requests_per_dp": 64, "max_mamba_cache_size": 400}] * 2,
    }
    verdict = judge(snapshot_of(page("sglang_v0.5.23_dp2_hybrid_kv_bound.txt"), server_info))
    assert sentence(verdict) == (
        "KV bound: full_token_usage 0.97 vs mamba_usage 0.33, 81 running of max_running_requests 64 × 2 DP ranks, "
        "queue 15, num_retracted_reqs 2: try a higher `--mem-fraction-static` than 0.87, an fp8 KV cache "
        "(`--kv-cache-dtype fp8_e4m3`) or a smaller mamba pool (a lower `--mamba-full-memory-ratio` or "
        "`--max-mamba-cache-size`)")
    # v0.5.23 resolves auto to extra_buffer with the overlap schedule: 5 slots, 80 requests a rank.
    assert (verdict["figures"]["mamba_slots_per_request"], verdict["figures"]["mamba_cap"]) == (5, 80)
    assert verdict["figures"]["request_limit"] == 128
    # v0.5.23 counts each pool's token slots: the figures carry them.
    assert (verdict["figures"]["kv_used_tokens"], verdict["figures"]["mamba_available_tokens"]) == (783104.0, 497.0)


# ---- each rule ------------------------------------------------------------------------------------


def test_no_metrics():
    verdict = judge(CapacitySnapshot(gauges=None, max_running_requests=48))
    assert sentence(verdict) == "unknown: no /metrics gauges: SGLang serves /metrics only with `--enable-metrics`"
    assert verdict["figures"] == {"max_running_requests": 48, "dp_size": 1, "request_limit": 48}


def test_page_without_the_scheduler_gauges():
    verdict = judge(CapacitySnapshot(gauges=sglang_gauges('sglang:prompt_tokens_total{model_name="m"} 7\n')))
    assert (verdict["bound"], verdict["advice"]) == ("unknown", None)
    assert verdict["evidence"] == "/metrics has no num_running_reqs or num_queue_reqs gauge"


def test_idle():
    assert said(server(0, 0, token_usage=0.0, max_running_requests=48)) == "idle: 0 running, queue 0"


def test_idle_mamba_usage_is_trusted_from_v0_5_23_and_doubted_when_the_version_is_unknown():
    assert said(server(0, 0, mamba_usage=0.4, **{**HYBRID, "version": (0, 5, 23)})) == "idle: 0 running, queue 0"
    assert "mamba_usage 0.40 is stale" in said(server(0, 0, mamba_usage=0.4, **{**HYBRID, "version": None}))


def test_kv_bound_while_requests_wait():
    assert said(server(30, 7, token_usage=0.95, max_running_requests=48)) == (
        f"KV bound: token_usage 0.95, 30 running of max_running_requests 48, queue 7: {KV_ADVICE}")


def test_kv_bound_at_the_request_limit_even_without_a_queue():
    verdict = judge(server(48, 0, token_usage=0.92, max_running_requests=48))
    assert verdict["bound"] == "kv"


def test_kv_bound_on_a_retraction_whatever_the_usage():
    # The gauge counts the requests retracted since the previous log: decode ran out of KV cache.
    assert said(server(20, 0, token_usage=0.55, gauge_extra={"num_retracted_reqs": 3.0})) == (
        f"KV bound: token_usage 0.55, 20 running, queue 0, num_retracted_reqs 3: {KV_ADVICE}")


def test_kv_advice_names_the_current_fraction_and_no_fp8_when_the_cache_is_fp8():
    verdict = judge(server(30, 7, token_usage=0.95, mem_fraction_static=0.85, kv_cache_dtype="fp8_e4m3"))
    assert verdict["advice"] == "try a higher `--mem-fraction-static` than 0.85"


def test_kv_advice_on_a_hybrid_model_leaves_a_mamba_pool_alone_that_caps_the_limit():
    # 160 slots / 5 = 32 requests = max_running_requests: a smaller mamba pool would lower the limit.
    verdict = judge(server(32, 4, token_usage=0.96, mamba_usage=0.6, **HYBRID))
    assert (verdict["bound"], verdict["advice"]) == ("kv", KV_ADVICE)


def test_a_full_kv_pool_is_not_bound_while_everything_is_admitted():
    assert judge(server(12, 0, token_usage=0.93, max_running_requests=48))["bound"] == "headroom"


def test_full_token_usage_is_the_kv_pool_when_token_usage_is_the_fullest_pool():
    # v0.5.10+ on a hybrid model: token_usage = max(KV, mamba) while busy.
    snapshot = server(32, 0, token_usage=0.61, mamba_usage=0.61, gauge_extra={"full_token_usage": 0.21}, **HYBRID)
    assert judge(snapshot)["evidence"].startswith("mamba_usage 0.61 vs full_token_usage 0.21")


def test_mamba_bound_with_no_buffer_asks_for_a_bigger_pool():
    verdict = judge(server(48, 2, token_usage=0.3, mamba_usage=0.35, max_running_requests=48,
                           max_mamba_cache_size=144, mamba_strategy="no_buffer", version=(0, 5, 9)))
    assert (verdict["bound"], verdict["figures"]["mamba_cap"]) == ("mamba", 48)
    assert verdict["advice"] == "try a larger `--max-mamba-cache-size` or a higher `--mamba-full-memory-ratio`"


def test_mamba_bound_never_suggests_no_buffer_with_speculative_decoding():
    # extra_buffer with speculative decoding on v0.5.9: 4 slots a request, 128 / 4 = 32.
    verdict = judge(server(32, 0, token_usage=0.2, mamba_usage=0.5, speculative=True,
                           **{**HYBRID, "max_mamba_cache_size": 128}))
    assert verdict["bound"] == "mamba"
    assert "no_buffer" not in verdict["advice"]


def test_mamba_bound_names_the_flag_of_the_version():
    v0_5_23 = judge(server(32, 0, token_usage=0.2, mamba_usage=0.6, **{**HYBRID, "version": (0, 5, 23)}))
    assert v0_5_23["advice"] == ("try `--mamba-radix-cache-strategy no_buffer --disable-overlap-schedule` or a "
                                 "larger `--max-mamba-cache-size`")
    unknown = judge(server(32, 0, token_usage=0.2, mamba_usage=0.6, **{**HYBRID, "version": None}))
    assert unknown["advice"] == ("try `--mamba-scheduler-strategy no_buffer` (`--mamba-radix-cache-strategy "
                                 "no_buffer --disable-overlap-schedule` from v0.5.23) or a larger "
                                 "`--max-mamba-cache-size`")


def test_mamba_bound_without_overlap_or_with_extra_buffer_lazy_suggests_no_buffer():
    # extra_buffer without the overlap schedule: 4 slots, 128 / 4 = 32; the overlap is already off.
    verdict = judge(server(32, 0, token_usage=0.2, mamba_usage=0.4, max_running_requests=32,
                           max_mamba_cache_size=128, mamba_strategy="extra_buffer", overlap_disabled=True,
                           version=(0, 5, 23)))
    assert verdict["advice"] == "try `--mamba-radix-cache-strategy no_buffer` or a larger `--max-mamba-cache-size`"
    lazy = judge(server(32, 0, token_usage=0.2, mamba_usage=0.4, max_running_requests=32,
                        max_mamba_cache_size=128, mamba_strategy="extra_buffer_lazy", version=(0, 5, 23)))
    assert lazy["advice"].startswith("try `--mamba-radix-cache-strategy no_buffer --disable-overlap-schedule`")


def test_mamba_bound_without_radix_cache():
    verdict = judge(server(32, 0, token_usage=0.2, mamba_usage=0.98, max_running_requests=32,
                           max_mamba_cache_size=32, radix_cache_disabled=True, version=(0, 5, 9)))
    assert (verdict["bound"], verdict["figures"]["mamba_slots_per_request"]) == ("mamba", 1)
    assert verdict["advice"] == ("try a larger `--max-mamba-cache-size` or a higher `--max-running-requests` "
                                 "(with `--disable-radix-cache` it sizes the pool)")


def test_mamba_bound_by_a_full_pool_without_configured_facts():
    assert said(server(20, 5, token_usage=0.4, mamba_usage=0.95)) == (
        "mamba pool bound: mamba_usage 0.95 vs token_usage 0.40, 20 running, queue 5: try a larger "
        "`--max-mamba-cache-size` or a higher `--mamba-full-memory-ratio`")


def test_request_limit_bound():
    assert said(server(48, 5, token_usage=0.42, max_running_requests=48)) == (
        "request-limit bound: 48 running = max_running_requests, queue 5, token_usage 0.42: "
        "try a higher `--max-running-requests`")


def test_request_limit_counts_a_request_finished_since_the_last_log():
    verdict = judge(server(46, 2, token_usage=0.42, max_running_requests=48))
    assert verdict["bound"] == "request_limit"
    assert verdict["evidence"].startswith("46 running of max_running_requests 48,")


def test_request_limit_on_a_hybrid_model_says_what_its_mamba_pool_holds():
    # 200 slots / 5 = 40 requests: the pool is not what caps max_running_requests 32.
    verdict = judge(server(32, 3, token_usage=0.21, mamba_usage=0.5, **{**HYBRID, "max_mamba_cache_size": 200}))
    assert sentence(verdict) == (
        "request-limit bound: 32 running = max_running_requests, queue 3, token_usage 0.21, mamba_usage 0.50: "
        "try a higher `--max-running-requests` (the mamba pool holds 40 requests)")
    unknown_pool = judge(server(32, 3, token_usage=0.21, mamba_usage=0.5, max_running_requests=32))
    assert unknown_pool["advice"] == ("try a higher `--max-running-requests` (SGLang caps it at what the mamba pool "
                                      "holds: see max_mamba_cache_size in the boot log)")


def test_queueing():
    assert said(server(20, 4, token_usage=0.5, max_running_requests=48)).startswith(
        "queueing (load exceeds capacity): queue 4, 20 running of max_running_requests 48, token_usage 0.50: "
        "if it lasts, add servers or DP ranks")


def test_headroom():
    assert said(server(12, 0, token_usage=0.3, max_running_requests=48)) == (
        "headroom: 12 running of max_running_requests 48, queue 0, token_usage 0.30")


@pytest.mark.parametrize("on_it, below, bound", [
    # 95 of 100 running is AT_LIMIT (0.95) of the limit.
    ({"running": 95, "token_usage": 0.4}, {"running": 94}, "request_limit"),
    ({"running": 20, "token_usage": 0.9}, {"token_usage": 0.89}, "kv"),
    ({"running": 20, "token_usage": 0.4, "mamba_usage": 0.9}, {"mamba_usage": 0.89}, "mamba"),
], ids=["at the request limit", "KV full", "mamba full"])
def test_a_gauge_exactly_on_its_threshold_counts_as_reaching_it(on_it, below, bound):
    assert judge(server(queue=3, max_running_requests=100, **on_it))["bound"] == bound
    assert judge(server(queue=3, max_running_requests=100, **dict(on_it, **below)))["bound"] == "queueing"


def test_kv_advice_leaves_a_mamba_pool_alone_that_is_exactly_full():
    assert judge(server(30, 7, token_usage=0.95, mamba_usage=0.9))["advice"] == KV_ADVICE
    assert "a smaller mamba pool" in judge(server(30, 7, token_usage=0.95, mamba_usage=0.89))["advice"]


def test_missing_pool_gauges_leave_them_out():
    snapshot = CapacitySnapshot(gauges={"num_running_reqs": 12.0, "num_queue_reqs": 0.0}, max_mamba_cache_size=400)
    assert said(snapshot) == "headroom: 12 running, queue 0"


# ---- data parallelism ------------------------------------------------------------------------------


def test_the_request_limit_is_per_dp_rank():
    at_limit = server(64, 2, token_usage=0.4, max_running_requests=32, dp_size=2)
    assert said(at_limit) == ("request-limit bound: 64 running = max_running_requests 32 × 2 DP ranks, queue 2, "
                              "token_usage 0.40: try a higher `--max-running-requests` (with `--enable-dp-attention` "
                              "SGLang divides it among the 2 DP ranks)")
    below = server(40, 0, token_usage=0.4, max_running_requests=32, dp_size=2)
    assert said(below) == "headroom: 40 running of max_running_requests 32 × 2 DP ranks, queue 0, token_usage 0.40"


def test_mamba_cap_per_dp_rank():
    snapshot = server(64, 0, token_usage=0.3, mamba_usage=0.6, **dict(HYBRID, dp_size=2))
    verdict = judge(snapshot)
    assert verdict["bound"] == "mamba"
    assert "64 running = max_running_requests 32 × 2 DP ranks" in verdict["evidence"]


# ---- precedence ------------------------------------------------------------------------------------


def test_a_full_kv_pool_comes_before_the_mamba_cap_and_the_request_limit():
    assert judge(server(32, 0, token_usage=0.95, mamba_usage=0.6, **HYBRID))["bound"] == "kv"


def test_the_mamba_cap_comes_before_the_request_limit():
    assert judge(server(32, 5, token_usage=0.2, mamba_usage=0.6, **HYBRID))["bound"] == "mamba"
    # The same numbers without the pool's size: the cap cannot be told apart from the limit.
    assert judge(server(32, 5, token_usage=0.2, mamba_usage=0.6, max_running_requests=32))["bound"] == "request_limit"


def test_idle_comes_before_a_stale_full_mamba_pool():
    assert judge(server(0, 0, token_usage=0.0, mamba_usage=0.97, **HYBRID))["bound"] == "idle"


def test_a_model_without_mamba_layers_is_never_mamba_bound():
    # SGLang reports mamba_usage 0.0 for it; a pool size is what makes a model hybrid.
    assert judge(server(48, 2, token_usage=0.4, mamba_usage=0.0, max_running_requests=48))["bound"] == "request_limit"
    assert not capacity_rules.is_hybrid(server(48, 2, mamba_usage=0.0))


def test_judge_falls_back_to_unknown_when_no_rule_fires():
    verdict = judge(server(12, 0), rules=(capacity_rules.no_metrics, capacity_rules.idle))
    assert (verdict["bound"], verdict["evidence"]) == ("unknown", "no rule applies to these gauges")


def test_every_bound_has_words():
    assert set(capacity_rules.BOUNDS) == {"idle", "mamba", "kv", "request_limit", "queueing", "headroom", "unknown"}


# ---- mamba slots per request ------------------------------------------------------------------------


@pytest.mark.parametrize("settings, slots", [
    ({"mamba_strategy": "no_buffer"}, 3),
    ({"mamba_strategy": "extra_buffer", "version": (0, 5, 10)}, 5),
    ({"mamba_strategy": "extra_buffer", "version": (0, 5, 10), "overlap_disabled": True}, 4),
    ({"mamba_strategy": "extra_buffer", "version": (0, 5, 10), "speculative": True}, 5),
    ({"mamba_strategy": "extra_buffer", "version": (0, 5, 9), "speculative": True}, 4),
    ({"mamba_strategy": "extra_buffer", "version": (0, 5, 9), "overlap_disabled": True}, 5),
    ({"mamba_strategy": "extra_buffer_lazy", "version": (0, 5, 23)}, 4),
    ({"mamba_strategy": "extra_buffer", "radix_cache_disabled": True}, 1),
    ({"mamba_strategy": "auto", "version": (0, 5, 9)}, 3),
    ({"mamba_strategy": None, "version": (0, 5, 23)}, 5),
    ({"mamba_strategy": None, "version": (0, 5, 23), "overlap_disabled": True}, 3),
    ({"mamba_strategy": None, "version": None}, 3),
])
def test_slots_per_request(settings, slots):
    assert slots_per_request(CapacitySnapshot(gauges={}, **settings)) == slots


# ---- snapshot_of ------------------------------------------------------------------------------------


def test_snapshot_of_server_facts_selection_launch_flags_and_log_facts():
    # server_facts' selection: the top level as launched, effective_max_running_requests_per_dp resolved.
    selection = {"version": "0.5.10.post1", "dp_size": 2, "max_running_requests": 96,
                 "max_mamba_cache_size": 480, "speculative_algorithm": None, "kv_cache_dtype": "fp8_e4m3",
                 "mem_fraction_static": 0.8, "effective_max_running_requests_per_dp": 48}
    settings = {"command": ["python3", "-m", "sglang.launch_server"],
                "flags": {"--mamba-scheduler-strategy": "extra_buffer", "--disable-overlap-schedule": True,
                          "--dp-size": "4"}}
    log_facts = {"max_running_requests": 40, "max_mamba_cache_size": 240, "max_total_num_tokens": 700000}
    snapshot = snapshot_of({"num_running_reqs": 1.0}, selection, settings, log_facts)
    assert dataclasses.asdict(snapshot) == {
        "gauges": {"num_running_reqs": 1.0}, "max_running_requests": 48, "max_total_num_tokens": 700000,
        "max_mamba_cache_size": 240, "mamba_strategy": "extra_buffer", "speculative": False,
        "radix_cache_disabled": False, "overlap_disabled": True, "dp_size": 2, "version": (0, 5, 10),
        "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.8}


def test_snapshot_of_reads_radix_cache_and_overlap_schedule_from_get_server_info():
    server_info = {"version": "0.5.23", "disable_radix_cache": True, "disable_overlap_schedule": True}
    snapshot = snapshot_of({}, server_info)
    assert (snapshot.radix_cache_disabled, snapshot.overlap_disabled) == (True, True)
    # What the server runs with beats the launch script's flags.
    settings = {"flags": {"--disable-radix-cache": True, "--disable-overlap-schedule": True}}
    snapshot = snapshot_of({}, {"disable_radix_cache": False, "disable_overlap_schedule": False}, settings)
    assert (snapshot.radix_cache_disabled, snapshot.overlap_disabled) == (False, False)


def test_snapshot_of_nothing_known():
    assert snapshot_of(None, None) == CapacitySnapshot(gauges=None)


def test_snapshot_of_a_v0_5_23_launch_with_speculative_decoding():
    settings = {"flags": {"--mamba-radix-cache-strategy": "extra_buffer", "--speculative-algorithm": "EAGLE",
                          "--disable-radix-cache": True}}
    snapshot = snapshot_of({}, {"version": "0.5.23"}, settings)
    assert (snapshot.mamba_strategy, snapshot.speculative, snapshot.radix_cache_disabled) == ("extra_buffer", True, True)
