# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ranges and types of the roles' variables, checked on the controller before any host is touched.

Role argument specs check types only, and not at all for ``-e name=value`` strings; this table is the
one place the roles' numeric ranges live (a variable handed to a module takes the module's range).
"""

from __future__ import annotations

import difflib

from ansible.utils.display import Display
from ansible_collections.gpuops.sglang.plugins.module_utils.argument_specs import (
    LOCK_RANGES,
    PROBE_RANGES,
    PROBE_ROUTES,
    SERVER_RANGES,
    SYSTEMD_RANGES,
    WAIT_RANGES,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.draining import (
    router_problems,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.option_ranges import (
    as_boolean,
    boolean_problem,
    count,
    fraction,
    kind,
    percent,
    range_problem,
    url_path_problem,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.launch_script import (
    api_key_problem,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.report import (
    expectation_problems,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.role_variables import (
    KNOWN_VARIABLES,
)

ROLE_OPTION_RANGES = {
    # Topology of the generated layout (explicit servers are checked entry by entry by the topology).
    "sglang_gpu_count": count(1, 1024),
    "sglang_tp_size": count(1, 1024),
    "sglang_dp_size": count(1, 1024),
    "sglang_base_port": count(1, 65535),
    # SGLang flags; a sglang_servers entry overriding one (without the sglang_ prefix) gets the same range.
    "sglang_base_gpu_id": count(0, 1023),
    "sglang_mem_fraction_static": fraction(0, 1),
    "sglang_max_running_requests": count(1, 1048576),
    "sglang_context_length": count(1, 16777216),
    "sglang_max_mamba_cache_size": count(1, 1048576),
    "sglang_mamba_full_memory_ratio": fraction(0, 10),
    # gpuops.sglang.relaunch: the variables passed to a module take that module's range, so the role never
    # accepts what the module would refuse on the host.
    "relaunch_batch_size": count(0, 4096),
    "relaunch_expect_min_running_requests": count(1, 10 ** 12),
    "relaunch_expect_min_total_tokens": count(1, 10 ** 12),
    "relaunch_stop_timeout": SERVER_RANGES["stop_timeout"],
    "relaunch_drain_timeout": SERVER_RANGES["drain_timeout"],
    "relaunch_router_timeout": SERVER_RANGES["router_timeout"],
    "relaunch_gpu_free_timeout": SERVER_RANGES["gpu_free_timeout"],
    "relaunch_gpu_free_threshold_mib": SERVER_RANGES["gpu_free_threshold_mib"],
    "relaunch_lock_timeout": SERVER_RANGES["lock_timeout"],
    "relaunch_lock_lease_timeout": LOCK_RANGES["lease_timeout"],
    "relaunch_log_generations": SERVER_RANGES["log_generations"],
    "sglang_nvidia_smi_timeout": SERVER_RANGES["nvidia_smi_timeout"],
    "relaunch_wait_timeout": WAIT_RANGES["timeout"],
    "relaunch_stall_timeout": WAIT_RANGES["stall_timeout"],
    "relaunch_probe_timeout": WAIT_RANGES["probe_timeout"],
    "relaunch_progress_interval": WAIT_RANGES["progress_interval"],
    "relaunch_history_last": count(1, 1000),
    "relaunch_canary_max_drop_percent": percent(),
}

# relaunch_canary: a number of servers, or auto.
CANARY_RANGE = count(0, 4096)

# The roles read them with `| bool`; anything but true/false, yes/no, 1/0 is refused (a typo is no silent "true").
BOOLEAN_OPTIONS = ("sglang_enable_metrics", "sglang_flag_check", "relaunch_halt_on_failure", "relaunch_force_kill_gpu_holders",
                   "relaunch_kill_stalled", "relaunch_rollback", "relaunch_strict_vars")

# Numeric keys of sglang_speculative (and of a server's speculative override).
SPECULATIVE_RANGES = {
    "num_steps": count(1, 64),
    "eagle_topk": count(1, 64),
    "num_draft_tokens": count(1, 1024),
}

# Keys of relaunch_probe: the probe module's ranges (duration_s is its duration).
PROBE_KEYS = {"concurrency": PROBE_RANGES["concurrency"], "duration_s": PROBE_RANGES["duration"],
              "input_len": PROBE_RANGES["input_len"], "output_len": PROBE_RANGES["output_len"],
              "max_requests": PROBE_RANGES["max_requests"], "route": None}

# A wrong collection type is named here instead of failing deep in a filter.
COLLECTION_TYPES = {
    "sglang_servers": (list, "a list of servers ({name, port, gpus, ...})"),
    "sglang_env": (dict, "a dict {NAME: value}"),
    "sglang_extra_args": (dict, "a dict {flag_name: value}"),
    "sglang_speculative": (dict, "a dict {algorithm, draft_model_path, num_steps, eagle_topk, num_draft_tokens}"),
    "relaunch_expect": (dict, "a dict {fact: {min: N, max: N, max_drop_percent: P}} or {fact: N}"),
    "relaunch_probe": (dict, "a dict {concurrency, duration_s, input_len, output_len, route, max_requests} ({} for none)"),
    "sglang_systemd": (dict, "a dict {enabled, restart, restart_sec, start_limit_burst, start_limit_interval, ...}"),
}


def _number(value):
    """Numbers as they are, numeric strings (``-e name=5`` passes strings) as numbers; anything else unchanged."""
    if isinstance(value, str):
        text = value.strip()
        for convert in (int, float):
            try:
                return convert(text)
            except ValueError:
                pass
    return value


def value_problem(name, value, option_range):
    """``range_problem`` for a role variable, which may hold a numeric string."""
    return range_problem(name, _number(value), option_range)


def speculative_problems(speculative, name):
    """Range problems of the numeric keys of a speculative dict, named ``<name>.<key>``."""
    return [problem for key, option_range in SPECULATIVE_RANGES.items()
            if speculative.get(key) not in (None, "")
            for problem in [value_problem(f"{name}.{key}", speculative[key], option_range)] if problem]


def probe_problems(probe):
    """Problems of relaunch_probe: unknown keys, ranges, the route."""
    problems = [f"relaunch_probe: unknown key {key!r} (known: {', '.join(sorted(PROBE_KEYS))})"
                for key in sorted(set(probe) - set(PROBE_KEYS))]
    problems += [problem for key, option_range in PROBE_KEYS.items()
                 if option_range and probe.get(key) not in (None, "")
                 for problem in [value_problem(f"relaunch_probe.{key}", probe[key], option_range)] if problem]
    if probe.get("route") not in (None, *PROBE_ROUTES):
        problems.append(f"relaunch_probe.route must be one of {', '.join(sorted(PROBE_ROUTES))}, got {probe['route']!r}")
    return problems


def override_problems(server, label):
    """Range problems of the settings a sglang_servers entry overrides, prefixed with ``label``."""
    problems = [f"{label}: {problem}" for key, value in server.items() if f"sglang_{key}" in BOOLEAN_OPTIONS
                for problem in [boolean_problem(key, value)] if problem]
    for key, value in server.items():
        option_range = ROLE_OPTION_RANGES.get(f"sglang_{key}")
        # Port and parallelism of an entry are the topology's to check (against its GPUs).
        if option_range and key not in ("port", "tp_size", "dp_size") and value is not None:
            problem = value_problem(key, value, option_range)
            if problem:
                problems.append(f"{label}: {problem}")
    if isinstance(server.get("speculative"), dict):
        problems += [f"{label}: {problem}" for problem in speculative_problems(server["speculative"], "speculative")]
    return problems


def unknown_variables(names):
    """``[(name, closest known name or None)]`` of the sglang_*/relaunch_* ``names`` that no role or playbook of the
    collection uses: a typo (``sglang_tp_szie``) that would otherwise do nothing."""
    unknown = sorted(set(names) - KNOWN_VARIABLES)
    return [(name, next(iter(difflib.get_close_matches(name, KNOWN_VARIABLES, n=1, cutoff=0.75)), None))
            for name in unknown]


def unknown_variable_problems(names, strict=False):
    """With ``strict`` (relaunch_strict_vars), a sentence per unknown variable, to fail on before anything is
    touched; without, each is a warning and nothing fails."""
    strict = as_boolean(strict) if boolean_problem("relaunch_strict_vars", strict) is None else True
    sentences = [f"{name} is not a variable of gpuops.sglang, so it does nothing"
                 + (f" (did you mean {closest}?)" if closest else "")
                 for name, closest in unknown_variables(names)]
    if strict:
        return [sentence + "; relaunch_strict_vars is true" for sentence in sentences]
    for sentence in sentences:
        Display().warning(sentence + " (relaunch_strict_vars: true fails the run instead)")
    return []


def option_problems(values):
    """Every problem of the role variables in ``values`` (absent or null ones are skipped), one message each."""
    problems = []
    for name, option_range in ROLE_OPTION_RANGES.items():
        if values.get(name) is not None:
            problem = value_problem(name, values[name], option_range)
            if problem:
                problems.append(problem)
    canary = values.get("relaunch_canary")
    if (canary is not None and str(canary).strip().lower() != "auto"
            and value_problem("relaunch_canary", canary, CANARY_RANGE)):
        problems.append(f"relaunch_canary must be auto (a canary only for a configuration new to the host) or a "
                        f"number of servers 0-4096, got {canary!r}")
    if values.get("relaunch_health_path") is not None:
        problems += [problem for problem in [url_path_problem("relaunch_health_path", values["relaunch_health_path"])]
                     if problem]
    problems += [problem for name in BOOLEAN_OPTIONS if values.get(name) is not None
                 for problem in [boolean_problem(name, values[name])] if problem]
    for name, (expected_type, shape) in COLLECTION_TYPES.items():
        value = values.get(name)
        if value is not None and not isinstance(value, expected_type):
            # Only the type is named: the value may hold secrets (an env, a key in extra args).
            problems.append(f"{name} must be {shape}, got a {kind(value)}")
    if isinstance(values.get("sglang_speculative"), dict):
        problems += speculative_problems(values["sglang_speculative"], "sglang_speculative")
    if isinstance(values.get("relaunch_probe"), dict):
        problems += probe_problems(values["relaunch_probe"])
    if isinstance(values.get("sglang_systemd"), dict):
        problems += [f"sglang_systemd.{problem}" for name, option_range in SYSTEMD_RANGES.items()
                     if values["sglang_systemd"].get(name) is not None
                     for problem in [value_problem(name, values["sglang_systemd"][name], option_range)] if problem]
    cache_dir = values.get("sglang_cache_dir")
    if cache_dir not in (None, "") and not (isinstance(cache_dir, str) and cache_dir.startswith("/")):
        problems.append(f"sglang_cache_dir must be an absolute path (e.g. /var/cache/sglang), or null to leave "
                        f"SGLang's defaults; got {cache_dir!r}")
    if isinstance(values.get("relaunch_expect"), dict):
        problems += expectation_problems(values["relaunch_expect"])
    api_key = api_key_problem(values.get("sglang_api_key"))
    if api_key:
        problems.append(api_key)
    problems += router_problems(values.get("sglang_router_url"), values.get("sglang_host") or "127.0.0.1",
                                values.get("sglang_router_worker_host"),
                                names=("sglang_router_url", "sglang_router_worker_host"))
    return problems
