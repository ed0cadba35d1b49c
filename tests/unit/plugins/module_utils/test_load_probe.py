"""The probe's pure parts: percentiles, figures from request records, request bodies, chunk token counts; and
what its journal entry is compared with."""

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import journal
from ansible_collections.gpuops.sglang.plugins.module_utils.load_probe import (
    _journal_probe,
    completion_tokens,
    request_body,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.probe_figures import (
    FIGURES,
    percentile,
    summarize,
)


def test_nearest_rank_percentiles():
    values = [0.5, 0.1, 0.3, 0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert percentile(values, 0.5) == 0.5
    assert percentile(values, 0.9) == 0.9
    assert percentile([2.0], 0.9) == 2.0
    assert percentile([], 0.5) is None


def test_figures_count_tokens_in_the_window_and_keep_errors_apart():
    requests = [{"ok": True, "ttft_s": 0.1 * index, "e2e_s": 1.0 + index, "error": None} for index in range(1, 11)]
    requests += [{"ok": False, "ttft_s": None, "e2e_s": None, "error": "HTTP 503"},
                 {"ok": False, "ttft_s": None, "e2e_s": None, "error": "the stream ended without [DONE]"},
                 {"ok": False, "ttft_s": None, "e2e_s": None, "error": "HTTP 503"}]
    figures = summarize(requests, tokens_in_window=6400, window_s=5.0, concurrency=32)
    assert figures["output_tok_s"] == 1280.0 and figures["requests_s"] == 2.0
    assert figures["requests"] == 10 and figures["errors"] == 3
    assert figures["error_examples"] == ["HTTP 503", "the stream ended without [DONE]"]
    assert figures["ttft_p50_s"] == pytest.approx(0.5) and figures["ttft_p90_s"] == pytest.approx(0.9)
    assert figures["e2e_p50_s"] == 6.0 and figures["concurrency"] == 32


def test_nothing_finished_gives_no_latencies():
    figures = summarize([], tokens_in_window=0, window_s=2.0, concurrency=4)
    assert figures["output_tok_s"] == 0.0 and figures["ttft_p50_s"] is None and figures["errors"] == 0


def test_request_bodies_ask_for_exact_lengths_streamed():
    generate = request_body("generate", 5, 64)
    assert len(generate["input_ids"]) == 5 and generate["stream"] is True
    assert generate["sampling_params"] == {"max_new_tokens": 64, "ignore_eos": True, "temperature": 0}
    completions = request_body("completions", 3, 16)
    assert len(completions["prompt"]) == 3 and completions["max_tokens"] == 16 and completions["ignore_eos"]
    assert completions["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_running_token_totals_from_both_routes():
    assert completion_tokens("generate", {"text": "ab", "meta_info": {"completion_tokens": 7}}) == 7
    assert completion_tokens("completions", {"choices": [{"text": "b"}], "usage": {"completion_tokens": 9}}) == 9
    assert completion_tokens("completions", {"choices": [{"text": "b"}]}) is None


def test_a_renamed_server_is_probed_against_what_ran_under_its_old_name(tmp_path):
    """The same model on the same GPUs under a new name (a new topology): its throughput is compared with the old
    name's last good probe, as the wait compares its startup."""
    state_dir = str(tmp_path)
    settings = {"flags": {"--model-path": "/models/m"}, "env": {"CUDA_VISIBLE_DEVICES": "0,1"}}
    figures = {key: 1.0 for key in FIGURES}
    earlier = {"gpu0-1": {"action": "launched", "outcome": "ready", "settings": settings}}
    journal.append(state_dir, journal.run_header(state_dir, "relaunch", "r1", now=1000.0), earlier)
    journal.append(state_dir, journal.run_header(state_dir, "probe", "r1", now=1010.0),
                   {"gpu0-1": {"probe": dict(figures, output_tok_s=1280.0)}})
    params = {"state_dir": state_dir, "run_id": "r2", "route": "generate", "input_len": 128, "output_len": 64}
    result = dict(figures, name="main", status="probed", output_tok_s=1920.0, requests=10, errors=0, concurrency=8,
                  window_s=5.0)
    assert _journal_probe(params, [result], dict(figures), {"main": {"settings": settings}}) is None
    assert result["since_last_good"]["name"] == "gpu0-1"
    assert result["since_last_good"]["probe"]["output_tok_s"] == {"before": 1280.0, "after": 1920.0}
