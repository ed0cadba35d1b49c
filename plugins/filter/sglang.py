# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side Jinja filters: option checks, server topology, launch script contents, NCCL validation, reports."""

from __future__ import annotations

import functools

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.sglang.plugins.plugin_utils import (
    groups,
    launch_script,
    nccl,
    report,
    role_options,
    topology,
)


def _user_errors(function):
    """Report validation errors as a filter error carrying only the message (no Python traceback)."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except (topology.TopologyError, nccl.NcclError, launch_script.LaunchScriptError,
                report.ExpectationError) as error:
            raise AnsibleFilterError(str(error)) from None

    return wrapper


def sglang_topology(servers, gpu_count=8, tp_size=1, dp_size=1, base_port=30000, host_gpu_count=None,
                    script_dir=None, log_dir=None, groups=None, host=None, play_hosts=None):
    """``sglang_servers | gpuops.sglang.topology(gpu_count=8, ...)`` -> validated server list.

    With script_dir and log_dir each server also gets its ``launch_script`` and ``log_path``; with ``groups``
    (sglang_groups), ``host`` (inventory_hostname) and ``play_hosts``, the host's ranks of multi-node groups too.
    """
    servers = topology.expand_topology(servers or None, gpu_count=gpu_count, tp_size=tp_size, dp_size=dp_size,
                                       base_port=base_port, host_gpu_count=host_gpu_count, groups=groups,
                                       host=host, play_hosts=play_hosts)
    if script_dir and log_dir:
        topology.add_paths(servers, script_dir, log_dir)
    return servers


def only_keys(dicts, keys):
    """``servers | gpuops.sglang.only_keys(['name', 'port'])``: each dict reduced to the given keys."""
    return [{key: item[key] for key in keys if key in item} for item in dicts]


class FilterModule:
    def filters(self):
        return {
            "option_errors": role_options.option_problems,
            "topology": _user_errors(sglang_topology),
            "gpu_index_errors": topology.gpu_index_problems,
            "launch_argv": _user_errors(launch_script.launch_argv),
            "launch_env": _user_errors(launch_script.launch_env),
            "launch_credentials": launch_script.launch_credentials,
            "cache_dirs": _user_errors(launch_script.cache_dirs),
            "local_model_paths": _user_errors(launch_script.local_model_paths),
            "nccl_env": _user_errors(nccl.resolve_nccl),
            "only_keys": only_keys,
            "relaunch_summary": report.relaunch_summary,
            "relaunch_failures": report.relaunch_failures,
            "expectation_failures": _user_errors(report.expectation_failures),
            "fleet_status": report.fleet_status,
            "fleet_problems": report.fleet_problems,
            "stop_summary": report.stop_summary,
            "history_table": report.history_table,
            "rollback_candidates": report.rollback_candidates,
            "rollback_outcomes": report.rollback_outcomes,
            "throughput_regressions": report.throughput_regressions,
            "play_facts": groups.play_facts,
            "flagged_members": groups.flagged_members,
            "missing_nodes": groups.missing_nodes,
            "complete_groups": groups.complete_groups,
            "group_results": groups.group_results,
        }
