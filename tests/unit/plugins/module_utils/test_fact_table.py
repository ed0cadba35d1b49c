"""The one table of facts: the lists derived from it, and what its rows claim about each fact."""

from pathlib import Path

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import fact_table
from ansible_collections.gpuops.sglang.plugins.module_utils.fact_table import FACTS
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log import (
    parse_log,
)

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"

# Written out so that a change to what is reported, compared or shown, or to its order, is a deliberate one.
DERIVED = {
    "CONFIGURED_FACTS": ("max_total_num_tokens", "max_running_requests", "context_len", "chunked_prefill_size",
                         "max_prefill_tokens", "available_gpu_mem", "max_mamba_cache_size"),
    "SERVER_INFO_FACTS": ("max_total_num_tokens", "max_running_requests", "chunked_prefill_size",
                          "max_prefill_tokens", "max_req_input_len"),
    "SERVER_INFO_FIELDS": (
        "version", "model_path", "served_model_name", "tp_size", "dp_size", "pp_size", "mem_fraction_static",
        "max_total_num_tokens", "max_running_requests", "max_req_input_len", "context_length",
        "chunked_prefill_size", "max_prefill_tokens", "cuda_graph_max_bs", "kv_cache_dtype", "attention_backend",
        "speculative_algorithm", "max_mamba_cache_size", "mamba_scheduler_strategy", "mamba_radix_cache_strategy",
        "disable_radix_cache", "disable_overlap_schedule",
    ),
    "COMPARED_FACTS": ("max_total_num_tokens", "max_running_requests", "context_len", "max_mamba_cache_size",
                       "kv_cache_size_gb"),
    "POOL_FACTS": ("kv_cache_tokens", "kv_cache_dtype", "kv_cache_size_gb", "mamba_conv_state_gb",
                   "mamba_ssm_state_gb", "weight_load_mem_usage", "cuda_graph_mem_usage"),
    "SUMMARY_COLUMNS": ("max_total_num_tokens", "max_running_requests"),
    "HISTORY_COLUMNS": ("max_running_requests", "max_total_num_tokens"),
}


def names(predicate):
    return {fact.name for fact in FACTS if predicate(fact)}


def facts_the_logs_give():
    """Every fact sglang_log sets from the real-format logs of tests/unit/fixtures/logs."""
    found = set()
    for path in LOGS.glob("**/*.log"):
        found |= set(parse_log(path.read_text(encoding="utf-8"))["facts"])
    return found


@pytest.mark.parametrize("constant", sorted(DERIVED))
def test_each_derived_list_is_the_one_in_use(constant):
    assert getattr(fact_table, constant) == DERIVED[constant]


def test_a_fact_has_one_row():
    assert len(names(lambda fact: True)) == len(FACTS)


def test_every_fact_read_from_the_log_has_a_parser():
    """And a fact the table reads only elsewhere is one the log does not say (else the log's would be lost)."""
    given = facts_the_logs_give()
    assert names(lambda fact: fact.log) - given == set()
    assert names(lambda fact: not fact.log) & given == set()


def test_a_ready_fact_is_read_from_the_log_or_resolved_by_get_server_info():
    assert names(lambda fact: fact.ready and not (fact.log or fact.resolved)) == set()


def test_a_pool_fact_comes_from_the_log():
    """The journal takes pool facts from the log's facts."""
    assert names(lambda fact: fact.pool and not fact.log) == set()


def test_a_compared_fact_is_shown_when_ready_or_kept_in_the_journal():
    """The comparison reads the journal entry's facts: the ready ones and the pool ones."""
    assert names(lambda fact: fact.compared and not (fact.ready or fact.pool)) == set()


def test_a_summary_column_is_a_ready_fact_and_a_history_column_one_the_journal_keeps():
    assert names(lambda fact: fact.summary_column is not None and not fact.ready) == set()
    assert names(lambda fact: fact.history_column is not None and not (fact.ready or fact.pool)) == set()


@pytest.mark.parametrize("place", ["summary_column", "history_column"])
def test_the_columns_of_a_table_are_numbered_1_to_n(place):
    numbers = sorted(getattr(fact, place) for fact in FACTS if getattr(fact, place) is not None)
    assert numbers == list(range(1, len(numbers) + 1))
