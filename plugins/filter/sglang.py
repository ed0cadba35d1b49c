# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side Jinja filters: option checks, server topology, launch script contents, NCCL validation, reports."""

from __future__ import annotations

import functools
import importlib

from ansible.errors import AnsibleFilterError

PLUGIN_UTILS = "ansible_collections.gpuops.sglang.plugins.plugin_utils."
# name: (plugin_utils module, function, the module's user-error class or None). A task's worker process imports a
# module on the first call of one of its filters, not before: every task runs in a fresh fork of ansible-playbook,
# and importing them all (with the module_utils behind role_options and report) cost each task ~0.2 s of CPU.
FILTERS = {
    "option_errors": ("role_options", "option_problems", None),
    "unknown_variables": ("role_options", "unknown_variable_problems", None),
    "topology": ("topology", "host_servers", "TopologyError"),
    "gpu_index_errors": ("topology", "gpu_index_problems", None),
    "launch_argv": ("launch_script", "launch_argv", "LaunchScriptError"),
    "launch_env": ("launch_script", "launch_env", "LaunchScriptError"),
    "launch_scripts": ("launch_script", "launch_scripts", "LaunchScriptError"),
    "launch_script_candidates": ("launch_script", "launch_script_candidates", "LaunchScriptError"),
    "launch_credentials": ("launch_script", "launch_credentials", None),
    "launch_check": ("launch_script", "launch_check", "LaunchScriptError"),
    "server_interpreters": ("launch_script", "server_interpreters", "LaunchScriptError"),
    "interpreter_env": ("launch_script", "interpreter_env", None),
    "cache_dirs": ("launch_script", "cache_dirs", "LaunchScriptError"),
    "local_model_paths": ("launch_script", "local_model_paths", "LaunchScriptError"),
    "nccl_env": ("nccl", "resolve_nccl", "NcclError"),
    "relaunch_summary": ("report", "relaunch_summary", None),
    "relaunch_failures": ("report", "relaunch_failures", None),
    "expectation_failures": ("report", "expectation_failures", "ExpectationError"),
    "fleet_status": ("report", "fleet_status", None),
    "fleet_problems": ("report", "fleet_problems", None),
    "stop_summary": ("report", "stop_summary", None),
    "canary_report": ("report", "canary_report", None),
    "history_table": ("report", "history_table", None),
    "rollback_candidates": ("report", "rollback_candidates", None),
    "rollback_outcomes": ("report", "rollback_outcomes", None),
    "throughput_regressions": ("report", "throughput_regressions", None),
    "play_facts": ("groups", "play_facts", None),
    "flagged_members": ("groups", "flagged_members", None),
    "missing_nodes": ("groups", "missing_nodes", None),
    "complete_groups": ("groups", "complete_groups", None),
    "group_results": ("groups", "group_results", None),
}


def import_all():
    """Import the controller code of every filter now. Called in ansible-playbook itself (callback plugins preload and
    operator), so that the fork that runs each task inherits it instead of importing it again (0.3 s of a no-op
    relaunch's controller CPU: the collection loader compiles every source it imports, no bytecode is cached)."""
    for module_name in sorted({where[0] for where in FILTERS.values()}):
        importlib.import_module(PLUGIN_UTILS + module_name)


def _on_first_call(module_name, function_name, user_error):
    """The filter, imported when first called; a user error (bad settings) becomes a filter error carrying only its
    message (no Python traceback)."""

    @functools.cache
    def target():
        module = importlib.import_module(PLUGIN_UTILS + module_name)
        return getattr(module, function_name), getattr(module, user_error) if user_error else ()

    def call(*args, **kwargs):
        function, errors = target()
        try:
            return function(*args, **kwargs)
        except errors as error:
            raise AnsibleFilterError(str(error)) from None

    call.__name__ = function_name
    return call


def only_keys(dicts, keys):
    """``servers | gpuops.sglang.only_keys(['name', 'port'])``: each dict reduced to the given keys."""
    return [{key: item[key] for key in keys if key in item} for item in dicts]


class FilterModule:
    def filters(self):
        return dict({name: _on_first_call(*where) for name, where in FILTERS.items()}, only_keys=only_keys)
