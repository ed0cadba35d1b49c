# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One look at one SGLang server's load, for capacity_rules to judge: ``CapacitySnapshot`` and ``snapshot_of``.

Pure: no I/O, no clock, stdlib only, so the controller imports it too. ``snapshot_of`` gathers, from what a
server reports (its ``/metrics`` gauges, ``/get_server_info``, its launch flags and boot log), the plain values
the rules read. A new input of a rule is one field of ``CapacitySnapshot``, filled in ``snapshot_of``.
"""

from __future__ import annotations

import dataclasses
import re

# The mamba strategy's flag, renamed in v0.5.23 (capacity_rules.STRATEGY_FLAG_RENAMED); a launch may use either.
OLD_STRATEGY_FLAG = "--mamba-scheduler-strategy"
NEW_STRATEGY_FLAG = "--mamba-radix-cache-strategy"


@dataclasses.dataclass(frozen=True)
class CapacitySnapshot:
    """One look at one server's load: its gauges and what it configured, plain values.

    gauges: ``prometheus.sglang_gauges()`` of its ``/metrics`` (counts summed over DP ranks, ratios of the
    fullest rank, None where absent); None when ``/metrics`` gave nothing.
    The configured facts are per DP rank, as the scheduler resolved them (``/get_server_info``'s
    ``internal_states[0]``: ``effective_max_running_requests_per_dp``, ``max_mamba_cache_size``; the boot log's
    ``max_running_requests=`` and ``Mamba Cache is allocated. max_mamba_cache_size:``); None when unknown.
    max_mamba_cache_size is None for a model without mamba layers.
    The launch settings are those the server runs: mamba_strategy as resolved (None or "auto": capacity_rules resolves it
    as SGLang does for its version), version as ``(0, 5, 23)`` (None: unknown), kv_cache_dtype (None: unknown or
    auto), mem_fraction_static (None: unknown). ``snapshot_of`` builds one from what a server reports.
    """

    gauges: dict | None
    max_running_requests: int | None = None
    max_total_num_tokens: int | None = None
    max_mamba_cache_size: int | None = None
    mamba_strategy: str | None = None
    speculative: bool = False
    radix_cache_disabled: bool = False
    overlap_disabled: bool = False
    dp_size: int = 1
    version: tuple | None = None
    kv_cache_dtype: str | None = None
    mem_fraction_static: float | None = None


def _version(text):
    """``"0.5.10.post1"`` -> (0, 5, 10); None when it is not a version."""
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", str(text or ""))
    return tuple(int(number) for number in match.groups()) if match else None


def snapshot_of(gauges, server_info, settings=None, log_facts=None):
    """The CapacitySnapshot of a server from what it reports.

    server_info: its ``/get_server_info`` (the scheduler's resolved values in ``internal_states[0]`` win over
    the top level, which holds the arguments as launched), or server_facts' selection of it. settings: the
    launch script's ``launch_settings.read_settings()``, for what server_info does not say. log_facts: the boot
    log's facts (``sglang_log``), for the pool sizes and the request limit when server_info lacks them.
    """
    server_info, log_facts = server_info or {}, log_facts or {}
    internal = (server_info.get("internal_states") or [{}])[0]
    resolved = dict(server_info, **internal)
    flags = (settings or {}).get("flags") or {}

    def launched(key, *flag_names):
        if resolved.get(key) is not None:
            return resolved[key]
        return next((flags[name] for name in flag_names if name in flags), None)

    def resolved_count(key, fact, launched_on_top=False):
        # launched_on_top: the top level holds the launch argument (a total over DP-attention ranks), not what the
        # scheduler resolved: the log's value comes first.
        on_top = server_info.get(key)
        found = (internal.get(key), log_facts.get(fact), on_top) if launched_on_top else (
            internal.get(key), on_top, log_facts.get(fact))
        value = next((value for value in found if value is not None), None)
        return None if value is None else int(value)

    mem_fraction = launched("mem_fraction_static", "--mem-fraction-static")
    return CapacitySnapshot(
        gauges=gauges,
        max_running_requests=resolved_count("effective_max_running_requests_per_dp", "max_running_requests"),
        max_total_num_tokens=resolved_count("max_total_num_tokens", "max_total_num_tokens"),
        max_mamba_cache_size=resolved_count("max_mamba_cache_size", "max_mamba_cache_size", launched_on_top=True),
        mamba_strategy=(launched("mamba_radix_cache_strategy", NEW_STRATEGY_FLAG)
                        or launched("mamba_scheduler_strategy", OLD_STRATEGY_FLAG)),
        speculative=launched("speculative_algorithm", "--speculative-algorithm") not in (None, "", False),
        radix_cache_disabled=launched("disable_radix_cache", "--disable-radix-cache") in (True, "true", "True"),
        overlap_disabled=launched("disable_overlap_schedule", "--disable-overlap-schedule") in (True, "true", "True"),
        dp_size=int(launched("dp_size", "--dp-size", "--data-parallel-size") or 1),
        version=_version(resolved.get("version")),
        kv_cache_dtype=launched("kv_cache_dtype", "--kv-cache-dtype"),
        mem_fraction_static=None if mem_fraction is None else float(mem_fraction),
    )
