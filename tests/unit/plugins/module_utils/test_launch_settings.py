"""Settings read from launch scripts: flags, environment, keys hidden, changes between two scripts."""

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.launch_settings import (
    change_text,
    model_of,
    read_settings,
    script_credentials,
    setting_changes,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import REDACTED

# The shape the launch script renderer (plugin_utils/launch_script.py) writes.
SCRIPT = """#!/bin/sh
# Ansible managed
set -e
export GPUOPS_SGLANG_SERVER=gpu3
export NCCL_PROTO=LL
export HF_TOKEN='hf_abcdef'
export NOTE='two words'
mkdir -p /var/cache/sglang
exec /usr/bin/python3 -m sglang.launch_server \\
    --model-path /models/Qwen3-Next \\
    --port 30003 \\
    --mamba-scheduler-strategy extra_buffer \\
    --api-key 's3cr3t key' \\
    --cuda-graph-bs 1 2 4 \\
    --enable-metrics
"""


def test_reads_flags_env_and_command():
    settings = read_settings(SCRIPT)
    assert settings["command"] == ["/usr/bin/python3", "-m", "sglang.launch_server"]
    flags = settings["flags"]
    assert flags["--model-path"] == "/models/Qwen3-Next"
    assert flags["--port"] == "30003"
    assert flags["--cuda-graph-bs"] == "1 2 4"
    assert flags["--enable-metrics"] is True
    assert settings["env"]["NCCL_PROTO"] == "LL"
    assert settings["env"]["NOTE"] == "two words"
    assert model_of(settings) == "/models/Qwen3-Next"


def test_keys_are_hidden():
    settings = read_settings(SCRIPT.replace("NOTE='two words'", "NOTE='uses s3cr3t key here'"),
                             secrets=["s3cr3t key"])
    assert settings["flags"]["--api-key"] == REDACTED
    assert settings["env"]["HF_TOKEN"] == REDACTED
    assert "s3cr3t" not in repr(settings)


def test_credentials_of_env_and_extra_args_are_hidden_and_found():
    script = SCRIPT.replace("    --enable-metrics\n", "    --enable-metrics \\\n    --admin-api-key 'adm in' \\\n"
                            "    --hf-token=hf_flag \\\n    --bucket-time-to-first-token 0.1\n")
    script = script.replace("export NOTE=", "export TOKENIZERS_PARALLELISM=false\nexport NOTE=")
    settings = read_settings(script)
    assert settings["flags"]["--admin-api-key"] == settings["flags"]["--hf-token"] == REDACTED
    assert settings["flags"]["--bucket-time-to-first-token"] == "0.1"
    assert settings["env"]["TOKENIZERS_PARALLELISM"] == "false", "a name with TOKEN inside is no credential"
    assert script_credentials(script) == ["hf_abcdef", "s3cr3t key", "adm in", "hf_flag"]
    assert script_credentials("#!/bin/sh\nexport HF_TOKEN=\n") == []


def test_flag_with_equals_sign():
    settings = read_settings("exec sglang serve --tp-size=8 --api-key=abc\n")
    assert settings["command"] == ["sglang", "serve"]
    assert settings["flags"]["--tp-size"] == "8"
    assert "abc" not in repr(settings)


@pytest.mark.parametrize("text", ["#!/bin/sh\necho no exec here\n", "exec python3 'unterminated\n"])
def test_scripts_we_cannot_read(text):
    assert read_settings(text) is None


def test_changes_flags_then_env():
    before = read_settings(SCRIPT)
    after = read_settings(SCRIPT.replace("extra_buffer", "no_buffer").replace("    --enable-metrics\n", "")
                          .replace("NCCL_PROTO=LL", "NCCL_PROTO=Simple") + "")
    changes = setting_changes(before, after)
    assert [change["setting"] for change in changes] == ["--enable-metrics", "--mamba-scheduler-strategy",
                                                         "NCCL_PROTO"]
    assert [change_text(change) for change in changes] == [
        "--enable-metrics on -> (unset)", "--mamba-scheduler-strategy extra_buffer -> no_buffer",
        "NCCL_PROTO LL -> Simple"]
    assert setting_changes(before, before) == []
    assert setting_changes(None, before)[0] == {"setting": "--api-key", "before": None, "after": REDACTED}
