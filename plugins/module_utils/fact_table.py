# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an SGLang server configured, one row per fact: where it is read and where it is shown.

Pure, stdlib only: the host-side module utils (readiness, server_facts, journal) and the controller's report
import it. A fact is read from the startup log (a parser in ``sglang_log``) and/or ``/get_server_info``; the rows
only server_info reports are plain fields of ``/get_server_info`` (version, parallel sizes, strategies). Every
list of facts in use is derived from ``FACTS`` in row order - the order of the wait's facts, of server_info's
fields and of the journal's comparisons, which is why each row sits where it does - except the report's columns,
which are numbered. Adding a fact is one row (and, for one read from the log, its parser); test_fact_table.py
holds every derived list as written out.
"""

import collections

Fact = collections.namedtuple("Fact", (
    "name",
    # Read from the startup log (sglang_log sets it).
    "log",
    # A field of /get_server_info that the server_info module reports.
    "server_info",
    # /get_server_info's top level holds the value the server resolved, not the launch argument: when the server
    # is ready it replaces the log's.
    "resolved",
    # In the wait's facts when the server is ready.
    "ready",
    # Compared with the last good run (the summary's deltas, relaunch_expect's max_drop_percent).
    "compared",
    # Kept from the log with each relaunch in the journal, besides the ready facts (pool sizes, memory).
    "pool",
    # Its place among the fact columns of the relaunch summary / the journal's history table (the header is
    # its name); None: no column.
    "summary_column",
    "history_column",
), defaults=(False, False, False, False, False, False, None, None))

FACTS = (
    Fact("version", server_info=True),
    Fact("model_path", server_info=True),
    Fact("served_model_name", server_info=True),
    Fact("tp_size", server_info=True),
    Fact("dp_size", server_info=True),
    Fact("pp_size", server_info=True),
    Fact("mem_fraction_static", server_info=True),
    Fact("max_total_num_tokens", log=True, server_info=True, resolved=True, ready=True, compared=True,
         summary_column=1, history_column=2),
    Fact("max_running_requests", log=True, server_info=True, resolved=True, ready=True, compared=True,
         summary_column=2, history_column=1),
    Fact("max_req_input_len", server_info=True, resolved=True, ready=True),
    # The same limit under two names: the log's is resolved, /get_server_info's is the launch argument.
    Fact("context_length", server_info=True),
    Fact("context_len", log=True, ready=True, compared=True),
    Fact("chunked_prefill_size", log=True, server_info=True, resolved=True, ready=True),
    Fact("max_prefill_tokens", log=True, server_info=True, resolved=True, ready=True),
    Fact("available_gpu_mem", log=True, ready=True),
    Fact("cuda_graph_max_bs", server_info=True),
    Fact("kv_cache_tokens", log=True, pool=True),
    Fact("kv_cache_dtype", log=True, server_info=True, pool=True),
    Fact("attention_backend", server_info=True),
    Fact("speculative_algorithm", server_info=True),
    # /get_server_info's top level holds the launch argument; server_info reports internal_states' instead.
    Fact("max_mamba_cache_size", log=True, server_info=True, ready=True, compared=True),
    Fact("kv_cache_size_gb", log=True, compared=True, pool=True),
    Fact("mamba_conv_state_gb", log=True, pool=True),
    Fact("mamba_ssm_state_gb", log=True, pool=True),
    Fact("mamba_scheduler_strategy", server_info=True),
    Fact("mamba_radix_cache_strategy", server_info=True),
    Fact("disable_radix_cache", server_info=True),
    Fact("disable_overlap_schedule", server_info=True),
    Fact("weight_load_mem_usage", log=True, pool=True),
    Fact("cuda_graph_mem_usage", log=True, pool=True),
)


def _names(selected):
    return tuple(fact.name for fact in selected)


# What the server configured, reported when it is ready: read from its log ...
CONFIGURED_FACTS = _names(fact for fact in FACTS if fact.ready and fact.log)
# ... and from /get_server_info, whose values win: those the log also has first (each takes the log's place in the
# facts), then those only /get_server_info has.
SERVER_INFO_FACTS = _names(sorted((fact for fact in FACTS if fact.ready and fact.resolved),
                                  key=lambda fact: not fact.log))
SERVER_INFO_FIELDS = _names(fact for fact in FACTS if fact.server_info)
COMPARED_FACTS = _names(fact for fact in FACTS if fact.compared)
POOL_FACTS = _names(fact for fact in FACTS if fact.pool)


def _columns(place):
    """The facts with a column in a table (``place``: the field that numbers them), in column order."""
    numbered = [fact for fact in FACTS if getattr(fact, place) is not None]
    return _names(sorted(numbered, key=lambda fact: getattr(fact, place)))


SUMMARY_COLUMNS = _columns("summary_column")
HISTORY_COLUMNS = _columns("history_column")
