"""Prometheus text exposition parsing on SGLang's /metrics output."""

import math
from pathlib import Path

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.prometheus import (
    POOL_TOKEN_GAUGES,
    parse_metrics,
    sglang_gauges,
)

METRICS = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
V0_5_9_PAGE = (METRICS / "sglang_v0.5.9_tp1.txt").read_text(encoding="utf-8")
SCHEDULER = 'engine_type="unified",model_name="qwen3-next",moe_ep_rank="0",pp_rank="0",tp_rank="0"'


def test_v0_5_9_page_gauges_counters_and_histograms():
    metrics = parse_metrics(V0_5_9_PAGE)

    assert metrics["sglang:token_usage"] == [{"labels": {"engine_type": "unified", "model_name": "qwen3-next",
                                                         "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"},
                                              "value": 0.03}]
    assert metrics["sglang:num_requests_total"][0]["value"] == 1402.0
    assert metrics["sglang:cuda_graph_passes_total"][0]["labels"]["mode"] == "decode"
    assert metrics["sglang:cache_config_info"][0]["labels"]["num_pages"] == "1539264"

    buckets = metrics["sglang:time_to_first_token_seconds_bucket"]
    assert [bucket["labels"]["le"] for bucket in buckets][-2:] == ["400.0", "+Inf"]
    assert buckets[-1]["value"] == metrics["sglang:time_to_first_token_seconds_count"][0]["value"] == 1400.0
    assert metrics["sglang:e2e_request_latency_seconds_sum"][0]["value"] == pytest.approx(7711.93321442604)
    # HELP and TYPE lines are not samples.
    assert not any(name.startswith("#") for name in metrics)
    assert len(metrics["sglang:inter_token_latency_seconds_bucket"]) == 24


def test_v0_5_9_page_sglang_gauges():
    assert sglang_gauges(V0_5_9_PAGE) == {
        "token_usage": 0.03,
        "mamba_usage": 0.05,
        "num_running_reqs": 12.0,
        "num_queue_reqs": 3.0,
        "gen_throughput": pytest.approx(1187.4312820512821),
        "num_used_tokens": 48213.0,
        "cache_hit_rate": 0.4121,
        "max_total_num_tokens": 1539264.0,
        "num_retracted_reqs": 0.0,
        "full_token_usage": None,  # v0.5.10+
        **dict.fromkeys(POOL_TOKEN_GAUGES),  # v0.5.23+
    }


def test_v0_5_23_data_parallel_page_sglang_gauges():
    # DP attention (tp 4, dp 2): attention-TP rank 0 of each DP group records, as tp_rank 0 and 2.
    page = (METRICS / "sglang_v0.5.23_dp2_hybrid_kv_bound.txt").read_text(encoding="utf-8")
    gauges = sglang_gauges(page)
    assert (gauges["num_running_reqs"], gauges["num_queue_reqs"], gauges["num_retracted_reqs"]) == (81.0, 15.0, 2.0)
    assert gauges["max_total_num_tokens"] == 824320.0
    assert (gauges["token_usage"], gauges["mamba_usage"]) == (0.97, 0.33)
    assert gauges["full_token_usage"] == pytest.approx(0.97, abs=1e-6)
    # v0.5.23's token slots of each pool, summed over the DP ranks.
    assert [gauges[name] for name in POOL_TOKEN_GAUGES] == [783104.0, 12216.0, 29000.0, 256.0, 47.0, 497.0]


@pytest.mark.parametrize("line, name, labels, value", [
    ('sglang:num_queue_reqs{model_name="m"} 3', "sglang:num_queue_reqs", {"model_name": "m"}, 3.0),
    ("process_open_fds 17.0", "process_open_fds", {}, 17.0),
    ('x{le="+Inf"} +Inf', "x", {"le": "+Inf"}, math.inf),
    ("x -Inf", "x", {}, -math.inf),
    ('x{path="C:\\\\models\\\\m",quote="say \\"hi\\"",nl="a\\nb"} 1',
     "x", {"path": "C:\\models\\m", "quote": 'say "hi"', "nl": "a\nb"}, 1.0),
    ('x{brace="}",comma="a,b",} 2.5e-3', "x", {"brace": "}", "comma": "a,b"}, 0.0025),
    ('  x{ a = "1" , b="2" }   7  ', "x", {"a": "1", "b": "2"}, 7.0),
])
def test_sample_lines(line, name, labels, value):
    assert parse_metrics(line) == {name: [{"labels": labels, "value": value}]}


def test_nan_and_timestamps():
    metrics = parse_metrics("# a comment\nx NaN\ny{a=\"b\"} 4 1723456789000\n\n# EOF\n")
    assert math.isnan(metrics["x"][0]["value"])
    assert metrics["y"] == [{"labels": {"a": "b"}, "value": 4.0, "timestamp": 1723456789000}]


def test_lines_that_are_not_samples_are_skipped():
    assert parse_metrics("garbage line here\nx{unterminated=\"1} 2\nok 1\nbad notanumber\n") == {
        "ok": [{"labels": {}, "value": 1.0}]}


def test_gauges_over_data_parallel_ranks():
    # DP-attention with --enable-metrics-for-all-schedulers: DP0 is TP0+TP1, DP1 is TP2+TP3.
    rows = [("0", "0", 10, 0.50), ("0", "1", 10, 0.50), ("1", "2", 4, 0.75), ("1", "3", 4, 0.75)]
    text = "".join(
        'sglang:num_running_reqs{{dp_rank="{0}",tp_rank="{1}"}} {2}\n'
        'sglang:token_usage{{dp_rank="{0}",tp_rank="{1}"}} {3}\n'.format(*row)
        for row in rows
    )
    gauges = sglang_gauges(text)
    assert gauges["num_running_reqs"] == 14.0
    assert gauges["token_usage"] == 0.75
    assert gauges["num_queue_reqs"] is None


def test_gauges_accept_underscore_names():
    gauges = sglang_gauges(f"sglang_num_queue_reqs{{{SCHEDULER}}} 5\nsglang_token_usage{{{SCHEDULER}}} 0.2\n")
    assert (gauges["num_queue_reqs"], gauges["token_usage"]) == (5.0, 0.2)


def test_empty_page():
    assert parse_metrics("") == {}
    assert set(sglang_gauges("").values()) == {None}
