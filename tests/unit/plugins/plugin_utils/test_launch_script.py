"""What a launch script exports and execs: flags from structured settings, env order, version switches."""

import pytest
from ansible_collections.gpuops.sglang.plugins.plugin_utils.launch_script import (
    LaunchScriptError,
    cache_dirs,
    launch_argv,
    launch_env,
    local_model_paths,
    parse_version,
)

SERVER = {"name": "gpu3", "port": 30003, "gpus": [3], "tp_size": 1, "dp_size": 1}
SETTINGS = {"model_path": "/models/Qwen3-Next", "host": "127.0.0.1", "enable_metrics": True}


def test_default_command_and_core_flags():
    assert launch_argv(SERVER, SETTINGS) == [
        "python3", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3-Next", "--host", "127.0.0.1",
        "--port", "30003", "--tp-size", "1", "--enable-metrics"]


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


def test_server_entries_override_host_settings_and_merge_extra_args():
    server = dict(SERVER, mem_fraction_static=0.7, extra_args={"chunked_prefill_size": 4096})
    settings = dict(SETTINGS, mem_fraction_static=0.9,
                    extra_args={"--trust-remote-code": True, "disable-cuda-graph": False, "cuda_graph_bs": [1, 2]})
    argv = launch_argv(server, settings)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.7"
    assert argv[-6:] == ["--trust-remote-code", "--cuda-graph-bs", "1", "2", "--chunked-prefill-size", "4096"]
    assert "--disable-cuda-graph" not in argv


@pytest.mark.parametrize("settings, expected", [
    (dict(SETTINGS, extra_args={"port": 1}), "extra arg 'port' duplicates --port"),
    (dict(SETTINGS, speculative={"algorithm": "EAGLE3"}), "EAGLE3 needs draft_model_path"),
    (dict(SETTINGS, speculative={"algorithm": "MEDUSA"}), "speculative algorithm 'MEDUSA' is not valid"),
    (dict(SETTINGS, speculative={"algorithm": "NGRAM", "steps": 3}), "unknown speculative settings steps"),
    (dict(SETTINGS, model_path=None), "model_path is required"),
    (dict(SETTINGS, version="latest"), "sglang_version 'latest' is not a version"),
])
def test_bad_settings_are_named(settings, expected):
    with pytest.raises(LaunchScriptError, match=expected):
        launch_argv(SERVER, dict(settings, mamba_scheduler_strategy="auto"))


def test_env_order_caches_nccl_and_user_overrides():
    settings = dict(SETTINGS, cache_dir="/cache/", nccl="pcie",
                    env={"NCCL_BUFFSIZE": "8388608", "TRITON_CACHE_DIR": "/fast/triton", "X": 1})
    env = launch_env(SERVER, settings)
    names = [name for name, _value in env]
    assert names[:5] == ["GPUOPS_SGLANG_SERVER", "SPT_NOENV", "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES",
                         "SGLANG_CACHE_DIR"]
    values = dict(env)
    assert values["GPUOPS_SGLANG_SERVER"] == "gpu3" and values["CUDA_VISIBLE_DEVICES"] == "3"
    assert values["SPT_NOENV"] == "1"  # keeps the marker readable in scheduler processes
    assert values["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # CUDA's GPU numbering = nvidia-smi's
    assert values["TORCHINDUCTOR_CACHE_DIR"] == "/cache/inductor" and values["FLASHINFER_WORKSPACE_BASE"] == "/cache"
    assert values["TRITON_CACHE_DIR"] == "/fast/triton" and values["NCCL_BUFFSIZE"] == "8388608"
    assert values["NCCL_PROTO"] == "LL" and values["X"] == "1"
    assert names.count("NCCL_BUFFSIZE") == 1
    assert cache_dirs(SERVER, settings) == ["/cache", "/cache/deep_gemm", "/cache/inductor", "/cache/nv",
                                            "/cache/tilelang", "/cache/triton"]


@pytest.mark.parametrize("env, expected", [
    ({"CUDA_VISIBLE_DEVICES": "0"}, "CUDA_VISIBLE_DEVICES is managed by the role"),
    ({"BAD-NAME": "1"}, "'BAD-NAME' is not a valid shell variable name"),
    ({"NCCL_NTHREADS": "1024"}, "NCCL_NTHREADS='1024' is not valid"),
])
def test_bad_env_is_named(env, expected):
    with pytest.raises(ValueError, match=expected):
        launch_env(SERVER, dict(SETTINGS, env=env))


def test_local_model_paths_skip_hub_ids_and_include_drafts():
    servers = [SERVER, dict(SERVER, name="b", model_path="Qwen/Qwen3-8B"),
               dict(SERVER, name="c", speculative={"algorithm": "EAGLE3", "draft_model_path": "/models/draft"})]
    assert local_model_paths(servers, SETTINGS) == ["/models/Qwen3-Next", "/models/draft"]


def test_parse_version():
    assert parse_version("0.5.9.post2") == (0, 5, 9) and parse_version("0.5") == (0, 5, 0)
    assert parse_version(None) is None
