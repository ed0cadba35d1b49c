"""What a launch script exports and execs: flags from structured settings, env order, version switches."""

import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from ansible_collections.gpuops.sglang.plugins.module_utils.launch_settings import (
    script_credentials,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import REDACTED
from ansible_collections.gpuops.sglang.plugins.plugin_utils import flag_check
from ansible_collections.gpuops.sglang.plugins.plugin_utils.launch_script import (
    HOST_SETTINGS,
    SERVER_SETTINGS,
    LaunchScriptError,
    api_key_problem,
    cache_dirs,
    interpreter_env,
    launch_argv,
    launch_check,
    launch_credentials,
    launch_env,
    launch_script,
    launch_script_candidates,
    launch_scripts,
    local_model_paths,
    parse_version,
)

SERVER = {"name": "gpu3", "port": 30003, "gpus": [3], "tp_size": 1, "dp_size": 1}
SETTINGS = {"model_path": "/models/Qwen3-Next", "host": "127.0.0.1", "enable_metrics": True,
            "state_dir": "/var/lib/gpuops-sglang"}
ROLE_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "launch_scripts")


def test_default_command_and_core_flags():
    assert launch_argv(SERVER, SETTINGS) == [
        "python3", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-Next", "--host", "127.0.0.1",
        "--port", "30003", "--tp-size", "1", "--enable-metrics"]


@pytest.mark.parametrize("value, flagged", [(True, True), ("true", True), ("yes", True), (1, True), ("1", True),
                                            (False, False), ("false", False), ("no", False), ("0", False),
                                            (0, False)])
def test_enable_metrics_given_as_a_string_means_what_it_says(value, flagged):
    # -e sglang_enable_metrics=false hands over the string "false".
    assert ("--enable-metrics" in launch_argv(SERVER, dict(SETTINGS, enable_metrics=value))) == flagged


def test_tp8_eagle3_with_every_structured_flag():
    server = {"name": "gpu0-7", "port": 30000, "gpus": list(range(8)), "tp_size": 8, "dp_size": 1}
    settings = dict(SETTINGS, command="sglang serve", served_model_name="llama", mem_fraction_static=0.85,
                    max_running_requests=64, context_length=32768, api_key="k", enable_metrics=False,
                    speculative={"algorithm": "eagle3", "draft_model_path": "/models/draft", "num_steps": 3,
                                 "eagle_topk": 1, "num_draft_tokens": 4})
    assert launch_argv(server, settings) == [
        "sglang", "serve", "--model-path", "/models/Qwen3-Next", "--served-model-name", "llama",
        "--host", "127.0.0.1", "--port", "30000", "--tp-size", "8", "--mem-fraction-static", "0.85",
        "--max-running-requests", "64", "--context-length", "32768", "--api-key", "k",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/draft",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


@pytest.mark.parametrize("version, flag", [
    (None, "--mamba-scheduler-strategy"), ("0.5.9", "--mamba-scheduler-strategy"),
    ("v0.5.23", "--mamba-radix-cache-strategy"), ("0.6", "--mamba-radix-cache-strategy"),
])
def test_mamba_strategy_flag_follows_the_version(version, flag):
    argv = launch_argv(SERVER, dict(SETTINGS, mamba_scheduler_strategy="extra_buffer", version=version))
    assert argv[-2:] == [flag, "extra_buffer"]


def test_mamba_strategy_is_validated_per_version():
    with pytest.raises(LaunchScriptError, match="extra_buffer_lazy needs sglang_version >= 0.5.23"):
        launch_argv(SERVER, dict(SETTINGS, mamba_scheduler_strategy="extra_buffer_lazy"))
    argv = launch_argv(SERVER, dict(SETTINGS, mamba_scheduler_strategy="extra_buffer_lazy", version="0.5.23"))
    assert argv[-1] == "extra_buffer_lazy"


def test_no_buffer_from_0_5_23_turns_the_overlap_schedule_off_as_earlier_versions_did_themselves():
    def strategy_flags(version, extra_args=None):
        argv = launch_argv(SERVER, dict(SETTINGS, mamba_scheduler_strategy="no_buffer", version=version,
                                        extra_args=extra_args or {}))
        return argv[argv.index("--mamba-scheduler-strategy" if "--mamba-scheduler-strategy" in argv
                               else "--mamba-radix-cache-strategy"):]

    assert strategy_flags("0.5.10") == ["--mamba-scheduler-strategy", "no_buffer"]
    assert strategy_flags("0.5.23") == ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
    # Given by the user: rendered once, as an extra arg.
    assert strategy_flags("0.5.23", {"disable-overlap-schedule": True}) == [
        "--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
    with pytest.raises(LaunchScriptError, match="no_buffer needs the overlap schedule off from SGLang 0.5.23 on .*"
                                                "drop disable_overlap_schedule: False from sglang_extra_args"):
        strategy_flags("0.5.23", {"disable_overlap_schedule": False})


def test_server_entries_override_host_settings_and_merge_extra_args():
    server = dict(SERVER, mem_fraction_static=0.7, extra_args={"chunked_prefill_size": 4096})
    settings = dict(SETTINGS, mem_fraction_static=0.9,
                    extra_args={"--trust-remote-code": True, "disable-cuda-graph": False, "cuda_graph_bs": [1, 2]})
    argv = launch_argv(server, settings)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.7"
    assert argv[-6:] == ["--trust-remote-code", "--cuda-graph-bs", "1", "2", "--chunked-prefill-size", "4096"]
    assert "--disable-cuda-graph" not in argv


@pytest.mark.parametrize("settings, expected", [
    (dict(SETTINGS, speculative={"algorithm": "EAGLE3"}), "EAGLE3 needs draft_model_path"),
    (dict(SETTINGS, speculative={"algorithm": "MEDUSA"}), "speculative algorithm 'MEDUSA' is not valid"),
    (dict(SETTINGS, speculative={"algorithm": "NGRAM", "steps": 3}), "unknown speculative settings steps"),
    (dict(SETTINGS, model_path=None), "model_path is required"),
    (dict(SETTINGS, version="latest"), "sglang_version 'latest' is not a version"),
    (dict(SETTINGS, enable_metrics="flase"), "enable_metrics must be true or false"),
])
def test_bad_settings_are_named(settings, expected):
    with pytest.raises(LaunchScriptError, match=expected):
        launch_argv(SERVER, dict(settings, mamba_scheduler_strategy="auto"))


def test_env_order_caches_nccl_and_user_overrides():
    settings = dict(SETTINGS, cache_dir="/cache/", nccl="pcie",
                    env={"NCCL_BUFFSIZE": "8388608", "TRITON_CACHE_DIR": "/fast/triton", "X": 1})
    env = launch_env(SERVER, settings)
    names = [name for name, _value in env]
    assert names[:6] == ["GPUOPS_SGLANG_SERVER", "GPUOPS_SGLANG_STATE_DIR", "SPT_NOENV", "CUDA_DEVICE_ORDER",
                         "CUDA_VISIBLE_DEVICES", "SGLANG_CACHE_DIR"]
    values = dict(env)
    assert values["GPUOPS_SGLANG_SERVER"] == "gpu3" and values["CUDA_VISIBLE_DEVICES"] == "3"
    # A server started from its script by hand or at boot still belongs to its deployment.
    assert values["GPUOPS_SGLANG_STATE_DIR"] == "/var/lib/gpuops-sglang"
    assert values["SPT_NOENV"] == "1"  # keeps the marker readable in scheduler processes
    assert values["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # CUDA's GPU numbering = nvidia-smi's
    assert values["TORCHINDUCTOR_CACHE_DIR"] == "/cache/inductor" and values["FLASHINFER_WORKSPACE_BASE"] == "/cache"
    assert values["TRITON_CACHE_DIR"] == "/fast/triton" and values["NCCL_BUFFSIZE"] == "8388608"
    assert values["NCCL_PROTO"] == "LL" and values["X"] == "1"
    assert names.count("NCCL_BUFFSIZE") == 1
    assert cache_dirs(SERVER, settings) == ["/cache", "/cache/deep_gemm", "/cache/inductor", "/cache/nv",
                                            "/cache/tilelang", "/cache/triton"]


@pytest.mark.parametrize("env, expected", [
    ({"CUDA_VISIBLE_DEVICES": "0"}, "sglang_env: CUDA_VISIBLE_DEVICES is managed by the role"),
    ({"BAD-NAME": "1"}, "sglang_env: 'BAD-NAME' is not a valid shell variable name"),
    ({"NAME\n": "1"}, r"sglang_env: 'NAME\\n' is not a valid shell variable name"),
    ({"NCCL_NTHREADS": "1024"}, "NCCL_NTHREADS='1024' is not valid"),
    ({"GPUOPS_SGLANG_SERVER": "other"}, "sglang_env: GPUOPS_SGLANG_SERVER is an ownership marker the role sets"),
    ({"GPUOPS_SGLANG_STATE_DIR": "/tmp"}, "sglang_env: GPUOPS_SGLANG_STATE_DIR is an ownership marker the role sets"),
    ({"X": {"nested": 1}}, "sglang_env: X must be a string or number, got a dict"),
])
def test_bad_env_is_named(env, expected):
    with pytest.raises(ValueError, match=expected):
        launch_env(SERVER, dict(SETTINGS, env=env))


def test_markers_cannot_be_set_through_a_servers_env():
    with pytest.raises(LaunchScriptError, match="env of server 'gpu3': GPUOPS_SGLANG_STATE_DIR is an ownership marker"):
        launch_env(dict(SERVER, env={"GPUOPS_SGLANG_STATE_DIR": "/elsewhere"}), SETTINGS)


def test_a_script_needs_the_state_dir_of_its_deployment():
    with pytest.raises(LaunchScriptError, match="state_dir is required \\(sglang_state_dir\\)"):
        launch_env(SERVER, dict(SETTINGS, state_dir=None))


@pytest.mark.parametrize("extra_args, expected", [
    ({"port": 1}, "extra arg 'port' is --port, which is rendered from its own variable; set sglang_base_port"),
    ({"--port": 1}, "extra arg '--port' is --port"),
    ({"por": 1}, "extra arg 'por' abbreviates \\(argparse prefix\\) --port, .*; set sglang_base_port"),
    ({"tp": 2}, "extra arg 'tp' abbreviates \\(argparse prefix\\) --tp-size, .*; set sglang_tp_size"),
    ({"tensor_parallel_size": 2}, "extra arg 'tensor_parallel_size' is --tensor-parallel-size, .*sglang_tp_size"),
    ({"dp": 2}, "extra arg 'dp' abbreviates .* --dp-size, .*; set sglang_dp_size"),
    ({"model": "/m"}, "extra arg 'model' is --model, .*; set sglang_model_path"),
    ({"model_pa": "/m"}, "extra arg 'model_pa' abbreviates .* --model-path, .*; set sglang_model_path"),
    ({"mem_fraction": 0.8}, "extra arg 'mem_fraction' abbreviates .* --mem-fraction-static, .*sglang_mem_fraction_static"),
    ({"api_key": "k"}, "extra arg 'api_key' is --api-key, .*; set sglang_api_key"),
    ({"served_model_name": "m"}, "extra arg 'served_model_name' is --served-model-name, .*sglang_served_model_name"),
    ({"speculative_draft_model": "/d"}, "is --speculative-draft-model, .*sglang_speculative.draft_model_path"),
    ({"speculative_num": 3}, "abbreviates .* --speculative-num-steps, .*sglang_speculative.num_steps"),
    ({"mamba_radix_cache_strategy": "auto"}, "--mamba-radix-cache-strategy, .*sglang_mamba_scheduler_strategy"),
    ({"port=31000": True}, "extra arg 'port=31000' is not a flag name"),
    ({"trust remote code": True}, "extra arg 'trust remote code' is not a flag name"),
    ({"cuda_graph_bs": [1, "--port=31000"]}, "extra arg 'cuda_graph_bs': value '--port=31000' would be parsed as a flag"),
    ({"chat_template": "--host"}, "extra arg 'chat_template': value '--host' would be parsed as a flag"),
    ({"chat_template": "-h"}, "extra arg 'chat_template': value '-h' would be parsed as a flag"),
    ({"json_model_override_args": {"a": 1}}, "extra arg 'json_model_override_args': \\{'a': 1\\} is not a string or number"),
    ({"cuda_graph_bs": [1], "cuda-graph-bs": [2]}, "extra args 'cuda_graph_bs' and 'cuda-graph-bs' both render --cuda-graph-bs"),
])
def test_extra_args_cannot_smuggle_a_rendered_flag(extra_args, expected):
    with pytest.raises(LaunchScriptError, match=expected):
        launch_argv(SERVER, dict(SETTINGS, extra_args=extra_args))


def test_extra_args_that_only_share_a_beginning_with_a_rendered_flag_pass():
    extra_args = {"enable_metrics_for_all_schedulers": True, "chunked_prefill_size": -1, "hostname_check": "-0.5"}
    argv = launch_argv(SERVER, dict(SETTINGS, extra_args=extra_args))
    assert argv[-5:] == ["--enable-metrics-for-all-schedulers", "--chunked-prefill-size", "-1",
                         "--hostname-check", "-0.5"]


@pytest.mark.parametrize("api_key", ["", "   ", "\n\t"])
def test_an_empty_api_key_is_refused_without_showing_it(api_key):
    with pytest.raises(LaunchScriptError, match="sglang_api_key is empty or only whitespace"):
        launch_argv(SERVER, dict(SETTINGS, api_key=api_key))


@pytest.mark.parametrize("api_key", ["line one\nline two", "tab\there", "bell\x07"])
def test_an_api_key_no_http_client_could_send_is_refused_without_showing_it(api_key):
    with pytest.raises(LaunchScriptError, match="contains a newline or another control character") as refused:
        launch_argv(SERVER, dict(SETTINGS, api_key=api_key))
    assert api_key not in str(refused.value)


def test_an_api_key_sglang_would_take_for_an_option_is_refused_without_showing_it():
    with pytest.raises(LaunchScriptError, match="sglang_api_key starts with '-'") as refused:
        launch_argv(SERVER, dict(SETTINGS, api_key="-Xsecretkey123"))
    assert "Xsecretkey123" not in str(refused.value)


@pytest.mark.parametrize("character, refused", [
    ("\x00", True), ("\x1f", True), (" ", False), ("~", False), ("\x7f", True),
], ids=["NUL", "US (31)", "space (32)", "tilde (126)", "DEL (127)"])
def test_control_characters_end_below_space_and_at_del(character, refused):
    problem = api_key_problem(f"sk-{character}key")
    assert (problem is not None and "control character" in problem) is refused


def _render_script(server, settings):
    return launch_script(server, settings, "managed")


@pytest.mark.parametrize("api_key", [
    "sk-,'\")}} $HOME `id` $(id) a b",
    "--port 1",
    "'",
])
def test_an_api_key_reaches_the_server_byte_exact_through_sh(tmp_path, api_key):
    printer = [sys.executable, "-c", "import json, os, sys; print(json.dumps([sys.argv[1:], dict(os.environ)]))"]
    settings = dict(SETTINGS, command=printer, api_key=api_key, cache_dir=str(tmp_path / "cache"))
    script = tmp_path / "gpu3.sh"
    script.write_text(_render_script(SERVER, settings))
    started = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=True, env={"PATH": os.defpath})
    argv, env = json.loads(started.stdout)
    assert argv[argv.index("--api-key") + 1] == api_key and argv.count("--api-key") == 1
    assert env["GPUOPS_SGLANG_SERVER"] == "gpu3" and env["GPUOPS_SGLANG_STATE_DIR"] == "/var/lib/gpuops-sglang"


def test_the_role_hides_the_credentials_the_host_finds_in_the_scripts():
    # One rule on both sides: what the role keeps out of its output (no_log) is what the modules hide by value.
    settings = dict(SETTINGS, api_key="k1", env={"HF_TOKEN": "hf_1", "TOKENIZERS_PARALLELISM": "false"},
                    extra_args={"admin_api_key": "adm", "hf_token": ["t1"], "bucket_time_to_first_token": [0.1, 0.5]})
    server = dict(SERVER, env={"WANDB_API_KEY": "w1"}, extra_args={"ssl_keyfile_password": "pw"})
    script = _render_script(server, settings)
    assert "--admin-api-key adm \\\n" in script, "--admin-api-key is an extra arg like any other"
    assert launch_credentials([server], settings) == sorted(script_credentials(script)) == sorted(
        ["k1", "hf_1", "w1", "adm", "t1", "pw"])
    assert launch_credentials([server]) == ["pw", "w1"], "the servers' own"
    assert launch_credentials(None) == []


@pytest.mark.parametrize("value, expected", [
    ("-hf_secret", f"extra arg 'hf_token': value {re.escape(REDACTED)} would be parsed as a flag"),
    ({"hf_secret": 1}, f"extra arg 'hf_token': {re.escape(REDACTED)} is not a string or number"),
    (["hf_secret", "hf_secret2"], "extra arg 'hf_token' is a credential: give it one value, not a list"),
])
def test_a_refused_credential_extra_arg_is_not_repeated(value, expected):
    with pytest.raises(LaunchScriptError, match=expected) as refused:
        launch_argv(SERVER, dict(SETTINGS, extra_args={"hf_token": value}))
    assert "hf_secret" not in str(refused.value)


def test_the_role_hands_over_every_setting_a_server_may_override():
    with open(os.path.join(ROLE_DIR, "vars", "main.yml")) as handle:
        role_settings = yaml.safe_load(handle)["launch_scripts_settings"]
    assert set(role_settings) == set(SERVER_SETTINGS) | set(HOST_SETTINGS)


def test_local_model_paths_skip_hub_ids_and_include_drafts():
    servers = [SERVER, dict(SERVER, name="b", model_path="Qwen/Qwen3-8B"),
               dict(SERVER, name="c", speculative={"algorithm": "EAGLE3", "draft_model_path": "/models/draft"})]
    assert local_model_paths(servers, SETTINGS) == ["/models/Qwen3-Next", "/models/draft"]


def test_parse_version():
    assert parse_version("0.5.9.post2") == (0, 5, 9) and parse_version("0.5") == (0, 5, 0)
    assert parse_version(None) is None


def test_a_render_without_the_host_sglang_says_what_it_did_not_check():
    notes = launch_check([SERVER], dict(SETTINGS, version=None, installed_sglang=[]))["notes"]
    assert notes == [("the SGLang of python3 on the host was not read (nothing held the host) and "
                      "sglang_version is unset: the flags are rendered for no particular version and not checked; a "
                      "real run reads it and may render or refuse otherwise")]
    installed = [{"interpreter": "python3", "version": "0.5.23"}]
    assert launch_check([SERVER], dict(SETTINGS, version=None, installed_sglang=installed))["notes"] == []


def test_the_version_reader_gets_only_the_variables_that_choose_the_python_never_a_secret():
    env = {"PATH": "/opt/venv/bin:/usr/bin", "PYTHONPATH": "/opt/site", "VIRTUAL_ENV": "/opt/venv", "HF_TOKEN": "hf_x",
           "NCCL_PROTO": "LL", "SGLANG_SIM_DECODE_TOKENS_PER_S": 40}
    assert interpreter_env(env) == {"PATH": "/opt/venv/bin:/usr/bin", "PYTHONPATH": "/opt/site",
                                    "VIRTUAL_ENV": "/opt/venv"}
    assert interpreter_env(None) == {}


SCRIPTED = dict(SERVER, launch_script="/opt/gpuops-sglang/bin/gpu3.sh")


def test_candidates_are_the_scripts_the_run_renders_for_each_version_with_a_flag_table():
    settings = dict(SETTINGS, mamba_scheduler_strategy="extra_buffer")
    candidates = launch_script_candidates([SCRIPTED], settings, "managed")
    assert [candidate["sglang"] for candidate in candidates] == [
        [{"interpreter": "python3", "version": version}] for version in flag_check.known_versions()]
    for candidate in candidates:
        # Exactly what the render after the hold writes when the hold reads that version.
        assert candidate["scripts"] == launch_scripts([SCRIPTED], dict(settings, installed_sglang=candidate["sglang"]),
                                                      "managed")
    flags = {candidate["sglang"][0]["version"]: "--mamba-radix-cache-strategy" in candidate["scripts"][0]["content"]
             for candidate in candidates}
    assert flags["0.5.23"] and not flags["0.5.10"], "each rendered for its own version's flag names"


def test_a_version_that_would_refuse_a_flag_has_no_candidate_and_sglang_version_narrows_them_to_one():
    # --cuda-graph-max-bs-decode exists from 0.5.23 on: the older versions' parsers refuse it.
    settings = dict(SETTINGS, extra_args={"cuda_graph_max_bs_decode": 64})
    assert [candidate["sglang"][0]["version"] for candidate in launch_script_candidates([SCRIPTED], settings)] == [
        version for version in flag_check.known_versions() if parse_version(version) >= (0, 5, 23)]
    pinned = launch_script_candidates([SCRIPTED], dict(SETTINGS, version="0.5.10"))
    assert [candidate["sglang"] for candidate in pinned] == [[{"interpreter": "python3", "version": "0.5.10"}]]
