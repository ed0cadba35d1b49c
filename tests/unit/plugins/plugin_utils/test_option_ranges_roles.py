"""Ranges and types of the roles' variables: refused outside, accepted on the boundary, documented in the specs;
the shared settings defined once; the action groups the roles set module options through."""

import glob
import importlib.util
import os
import re

import pytest
import yaml
from ansible_collections.gpuops.sglang.plugins.doc_fragments import common
from ansible_collections.gpuops.sglang.plugins.module_utils.option_ranges import (
    describe,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.role_options import (
    BOOLEAN_OPTIONS,
    ROLE_OPTION_RANGES,
    SPECULATIVE_RANGES,
    option_problems,
    unknown_variable_problems,
    unknown_variables,
)

REPO_ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
ROLES_DIR = os.path.join(REPO_ROOT, "roles")
ROLES = ("settings", "launch_scripts", "relaunch")
# The GPU count of the host when known; bounded by what the host has, not by a documented range.
INTERNAL = {"launch_scripts_host_gpu_count"}


def _load(role, *path):
    with open(os.path.join(ROLES_DIR, role, *path)) as handle:
        return yaml.safe_load(handle)


def _argument_specs():
    """(role, entry point, option name, option spec) of every role."""
    for role in ROLES:
        for entry, spec in _load(role, "meta", "argument_specs.yml")["argument_specs"].items():
            for name, option in spec["options"].items():
                yield role, entry, name, option


def _step(option_range):
    return 1 if option_range.integer else 0.001


@pytest.mark.parametrize("name", sorted(ROLE_OPTION_RANGES))
def test_values_outside_the_range_are_refused_naming_variable_and_range(name):
    option_range = ROLE_OPTION_RANGES[name]
    for outside in (option_range.low - _step(option_range), option_range.high + _step(option_range)):
        if outside == option_range.off:
            continue
        problems = option_problems({name: outside})
        assert len(problems) == 1 and problems[0].startswith(f"{name}=")
        assert problems[0].endswith(f"is out of range: use {describe(option_range)}")


@pytest.mark.parametrize("name", sorted(ROLE_OPTION_RANGES))
def test_boundaries_and_numeric_strings_are_accepted(name):
    option_range = ROLE_OPTION_RANGES[name]
    if option_range.exclusive:
        inside = [option_range.low + 0.001, option_range.high - 0.001]
        assert option_problems({name: option_range.low}) and option_problems({name: option_range.high})
    else:
        inside = [option_range.low, option_range.high]
    for value in inside:
        assert option_problems({name: value}) == []
        # -e name=value passes a string.
        assert option_problems({name: str(value)}) == []


@pytest.mark.parametrize("value, message", [
    (-5, "relaunch_stall_timeout=-5 is out of range: use 1-86400 s, or 0 to turn it off"),
    ("-5", "relaunch_stall_timeout=-5 is out of range: use 1-86400 s, or 0 to turn it off"),
    ("abc", "relaunch_stall_timeout must be a number (1-86400 s, or 0 to turn it off), got 'abc'"),
    (True, "relaunch_stall_timeout must be a number (1-86400 s, or 0 to turn it off), got True"),
    (float("nan"), "relaunch_stall_timeout must be a number"),
    (float("inf"), "relaunch_stall_timeout=inf is out of range"),
])
def test_wrong_values_of_a_timeout_are_named(value, message):
    assert option_problems({"relaunch_stall_timeout": value})[0].startswith(message)


def test_the_canary_is_a_number_of_servers_or_auto():
    for fine in ("auto", "AUTO", 0, "3", 4096):
        assert option_problems({"relaunch_canary": fine}) == [], fine
    for wrong in ("sometimes", 5000, -1, 1.5):
        assert option_problems({"relaunch_canary": wrong}) == [
            (f"relaunch_canary must be auto (a canary only for a configuration new to the host) or a number of servers "
             f"0-4096, got {wrong!r}")]


def test_zero_turns_the_stall_timeout_off():
    assert option_problems({"relaunch_stall_timeout": 0}) == []
    assert option_problems({"relaunch_stall_timeout": "0"}) == []


@pytest.mark.parametrize("values, message", [
    ({"relaunch_batch_size": 1.5}, "relaunch_batch_size must be an integer (0-4096), got 1.5"),
    ({"sglang_gpu_count": "2.5"}, "sglang_gpu_count must be an integer (1-1024), got 2.5"),
    ({"sglang_base_port": 0}, "sglang_base_port=0 is out of range: use 1-65535"),
    ({"sglang_mem_fraction_static": 1}, "sglang_mem_fraction_static=1 is out of range: use 0-1 (exclusive)"),
    ({"relaunch_gpu_free_threshold_mib": -1}, "relaunch_gpu_free_threshold_mib=-1 is out of range: use 0-1048576"),
    ({"relaunch_wait_timeout": 0}, "relaunch_wait_timeout=0 is out of range: use 1-604800 s"),
    ({"sglang_speculative": {"algorithm": "EAGLE3", "num_draft_tokens": 2000}},
     "sglang_speculative.num_draft_tokens=2000 is out of range: use 1-1024"),
    ({"sglang_servers": {"name": "a"}}, "sglang_servers must be a list of servers ({name, port, gpus, ...}), got a dict"),
    ({"sglang_env": ["A=1"]}, "sglang_env must be a dict {NAME: value}, got a list"),
    ({"sglang_extra_args": "--tp 2"}, "sglang_extra_args must be a dict {flag_name: value}, got a string"),
    ({"sglang_speculative": "EAGLE3"}, "sglang_speculative must be a dict"),
    ({"relaunch_expect": [1]}, "relaunch_expect must be a dict"),
    ({"sglang_api_key": " \t"}, "sglang_api_key is empty or only whitespace"),
    ({"sglang_api_key": ""}, "sglang_api_key is empty or only whitespace"),
    ({"sglang_api_key": {"k": 1}}, "sglang_api_key must be a string, got a dict"),
])
def test_bad_values_are_named(values, message):
    problems = option_problems(values)
    assert len(problems) == 1 and problems[0].startswith(message), problems


def test_unset_variables_are_skipped_and_every_problem_is_listed():
    assert option_problems({"sglang_context_length": None, "relaunch_wait_timeout": None}) == []
    assert len(option_problems({"relaunch_wait_timeout": 0, "relaunch_probe_timeout": 601})) == 2


def test_a_key_never_appears_in_a_message():
    assert all("secret" not in problem for problem in option_problems({"sglang_api_key": ["secret"]}))


def test_every_numeric_variable_of_the_roles_has_a_range_documented_in_its_spec():
    for role, entry, name, option in _argument_specs():
        if option["type"] in ("int", "float") and name not in INTERNAL:
            assert name in ROLE_OPTION_RANGES, f"{role} {entry}: {name} has no range"
        if name in ROLE_OPTION_RANGES:
            assert f"Range {describe(ROLE_OPTION_RANGES[name])}." in option["description"], f"{role} {entry}: {name}"
        if name == "sglang_speculative":
            for key, option_range in SPECULATIVE_RANGES.items():
                assert f"C({key}) ({describe(option_range)})" in option["description"]


def test_every_ranged_variable_has_a_default_in_a_role():
    defaults = {}
    for role in ROLES:
        defaults.update(_load(role, "defaults", "main.yml"))
    assert set(ROLE_OPTION_RANGES) <= set(defaults)
    assert option_problems(defaults) == [], "the defaults are inside their ranges"


@pytest.mark.parametrize("role", ROLES)
def test_every_default_of_a_role_is_documented_with_its_value(role):
    # A default may belong to another entry point of the role (relaunch_history_* to history).
    options = {name: option for entry in _load(role, "meta", "argument_specs.yml")["argument_specs"].values()
               for name, option in entry["options"].items()}
    defaults = _load(role, "defaults", "main.yml")
    for name, value in defaults.items():
        assert name in options, f"{role}: {name} has a default but no documentation"
        assert options[name].get("default") == value, f"{role}: {name} is documented with another default"
    # The settings role holds the defaults of the shared settings, the other roles only their own.
    shared = _load("settings", "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    expected = set(shared) if role == "settings" else set(options) - set(shared)
    assert {name for name in expected if options[name].get("default") is not None} <= set(defaults), role


def test_every_entry_point_carries_the_shared_settings_as_the_settings_role_defines_them():
    spec = importlib.util.spec_from_file_location("role_argument_specs",
                                                  os.path.join(REPO_ROOT, "scripts", "role_argument_specs.py"))
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    drifted = [os.path.relpath(path, REPO_ROOT) for path in generator.drifted()]
    assert drifted == [], "the shared settings drifted: run scripts/role_argument_specs.py"
    shared = generator.shared_options()
    for role, entry, name, option in _argument_specs():
        if name.startswith("sglang_"):
            assert option == shared.get(name), f"{role} {entry}: {name} is not the shared setting of role settings"


def _module_options():
    """Module name -> the options its documentation lists (doc fragments of gpuops.sglang.common included)."""
    fragments = {}
    for fragment, text in vars(common.ModuleDocFragment).items():
        if fragment.isupper():
            fragments[f"gpuops.sglang.common.{fragment.lower()}"] = yaml.safe_load(text).get("options", {})
    options = {}
    for path in glob.glob(os.path.join(REPO_ROOT, "plugins", "modules", "*.py")):
        with open(path) as handle:
            source = handle.read()
        documentation = yaml.safe_load(re.search(r'DOCUMENTATION = r?"""(.*?)"""', source, re.DOTALL).group(1))
        extended = [fragments.get(name, {}) for name in documentation.get("extends_documentation_fragment", [])]
        options[documentation["module"]] = set(documentation["options"]).union(*extended)
    return options


def test_each_action_group_holds_exactly_the_modules_that_take_the_options_set_through_it():
    with open(os.path.join(REPO_ROOT, "meta", "runtime.yml")) as handle:
        groups = yaml.safe_load(handle)["action_groups"]
    options = _module_options()
    assert sorted(groups["sglang"]) == sorted(options)
    with open(os.path.join(ROLES_DIR, "relaunch", "tasks", "run.yml")) as handle:
        [job] = [task for task in yaml.safe_load(handle) if "module_defaults" in task]
    with open(os.path.join(ROLES_DIR, "relaunch", "vars", "main.yml")) as handle:
        role_vars = yaml.safe_load(handle)
    for key, defaults in job["module_defaults"].items():
        # A module's defaults may be a role variable (plus the run's run_id): its options are the variable's keys.
        named = re.fullmatch(r"\{\{ (\w+) \| combine\(\{'(\w+)'.*", defaults.strip()) if isinstance(defaults, str) else None
        wanted = set(role_vars[named.group(1)]) | {named.group(2)} if named else set(defaults)
        if key.startswith("group/gpuops.sglang."):
            members = groups[key.removeprefix("group/gpuops.sglang.")]
            assert sorted(members) == sorted(name for name, taken in options.items() if wanted <= taken), key
        else:
            assert wanted <= options[key.removeprefix("gpuops.sglang.")], key


def test_every_boolean_role_variable_is_checked_as_one():
    # The roles read these with `| bool`; a new boolean option joins BOOLEAN_OPTIONS or this fails.
    booleans = {name for _role, _entry, name, option in _argument_specs()
                if option.get("type") == "bool" and re.match(r"(sglang|relaunch)_", name)}
    assert booleans == set(BOOLEAN_OPTIONS)


@pytest.mark.parametrize("value", [True, False, "true", "False", "yes", "no", "1", "0", 1, 0])
def test_booleans_accept_what_bool_means(value):
    assert option_problems({"relaunch_rollback": value}) == []


@pytest.mark.parametrize("value", ["flase", "on", "", 2, [True], {"x": 1}])
def test_anything_else_is_no_boolean(value):
    assert option_problems({"relaunch_rollback": value}) == [
        f"relaunch_rollback must be true or false (also yes/no, 1/0), got {value!r}"]


@pytest.mark.parametrize("path", ["health_generate", "/health generate", "/health?x=1", "/h#x", "", 5])
def test_a_health_path_that_is_no_url_path_is_refused(path):
    expected = ("relaunch_health_path must be a URL path starting with '/' (e.g. /health_generate), without spaces, "
                f"'?' or '#'; got {path!r}")
    assert option_problems({"relaunch_health_path": path}) == [expected]


@pytest.mark.parametrize("path", ["/health", "/health_generate", "/v1/models"])
def test_url_paths_pass(path):
    assert option_problems({"relaunch_health_path": path}) == []


def test_a_router_url_with_credentials_is_refused_without_showing_them():
    [problem] = option_problems({"sglang_router_url": "http://admin:s3cret@10.0.0.5:30000",
                                 "sglang_router_worker_host": "10.0.0.7"})
    assert "must not carry credentials" in problem and "s3cret" not in problem and "admin" not in problem


@pytest.mark.parametrize("expect, message", [
    ({"max_running_requests": {"mni": 5}}, "relaunch_expect: expectation for max_running_requests must be {min: N}"),
    ({"max_running_requests": "many"}, "relaunch_expect: expectation for max_running_requests must be numbers"),
    ({"output_tok_s": {"max_drop_percent": 150}}, "relaunch_expect: max_drop_percent for output_tok_s must be 0-100"),
])
def test_an_expectation_that_cannot_be_checked_is_refused_before_the_run(expect, message):
    # Checked with the other settings, before the host is held: not after a relaunch that then fails on it.
    [problem] = option_problems({"relaunch_expect": expect})
    assert problem.startswith(message), problem
    assert option_problems({"relaunch_expect": {"max_running_requests": {"min": 8}, "context_len": 4096}}) == []


@pytest.mark.parametrize("values, message", [
    ({"sglang_cache_dir": 5},
     "sglang_cache_dir must be an absolute path (e.g. /var/cache/sglang), or null to leave SGLang's defaults; got 5"),
    ({"sglang_cache_dir": "cache"}, "sglang_cache_dir must be an absolute path"),
    ({"sglang_router_url": "http://10.0.0.5:30000", "sglang_router_worker_host": 5},
     "sglang_router_worker_host must be a host name or IP address (a string), got 5"),
    ({"sglang_systemd": {"restart_sec": -1}}, "sglang_systemd.restart_sec=-1 is out of range: use 0.1-3600 s"),
    ({"sglang_systemd": {"start_limit_burst": "x"}}, "sglang_systemd.start_limit_burst must be a number (1-1000)"),
    ({"sglang_systemd": "yes"}, "sglang_systemd must be a dict"),
])
def test_the_last_type_gaps_of_the_audit_are_named_before_anything_is_touched(values, message):
    [problem] = option_problems(values)
    assert problem.startswith(message), problem


def test_unknown_variables_are_named_with_the_closest_known_one():
    assert unknown_variables(["sglang_tp_size", "relaunch_batch_size", "sglang_tp_szie", "sglang_zzz_qqq"]) == [
        ("sglang_tp_szie", "sglang_tp_size"), ("sglang_zzz_qqq", None)]
    assert unknown_variable_problems(["sglang_tp_szie"], strict="yes") == [
        ("sglang_tp_szie is not a variable of gpuops.sglang, so it does nothing (did you mean sglang_tp_size?); "
         "relaunch_strict_vars is true")]
    assert unknown_variable_problems(["sglang_tp_szie"], strict=False) == [], "a warning, not a failure"
    assert unknown_variable_problems(["sglang_tp_szie"], strict="maybe") != [], "no boolean: strict, fails closed"
