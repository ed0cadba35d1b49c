"""API keys and other credentials hidden from argv, launch-script diffs, joined command lines, SGLang's server_args
dumps and stored records; which names hold a credential."""

import json
import shlex
import time

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import (
    REDACTED,
    argv_credentials,
    credential_name,
    named_credentials,
    scrub_argv,
    scrub_data,
    scrub_text,
)

# Every character the issue names: , ' " ) } space and a newline.
NASTY_KEY = "sk-a,b'c\"d)e}f g\nh"


@pytest.mark.parametrize("argv, expected", [
    (["sglang", "--api-key", NASTY_KEY, "--port", "1"], ["sglang", "--api-key", REDACTED, "--port", "1"]),
    (["--admin-api-key", NASTY_KEY], ["--admin-api-key", REDACTED]),
    ([f"--api-key={NASTY_KEY}"], [f"--api-key={REDACTED}"]),
    (["--api-k", "v", "--api", "w", "--admin-api", "x", "--admin", "y"],
     ["--api-k", REDACTED, "--api", REDACTED, "--admin-api", REDACTED, "--admin", REDACTED]),
    (["--api-key", "--port", "1"], ["--api-key", REDACTED, "1"]),
    (["--ap", "v", "--api-keys", "v", "--apix", "v", "--api-key"], ["--ap", "v", "--api-keys", "v", "--apix", "v", "--api-key"]),
])
def test_scrub_argv_hides_the_element_after_every_key_flag_spelling(argv, expected):
    assert scrub_argv(argv) == expected


def test_scrub_argv_leaves_its_input_alone():
    argv = ["--api-key", "k"]
    scrub_argv(argv)
    assert argv == ["--api-key", "k"]


def launch_script(key):
    """As the launch script renderer (plugin_utils/launch_script.py) writes it: one shell-quoted flag per line."""
    args = ["python3", "-m", "sglang.launch_server", "--port", "30000", "--api-key", key, "--trust-remote-code"]
    return "#!/bin/sh\nexec" + "".join((" \\\n    " if arg.startswith("--") else " ") + shlex.quote(arg) for arg in args) + "\n"


@pytest.mark.parametrize("key", ["plain-key", NASTY_KEY, "--looks-like-a-flag", "a'b", "$HOME`x`\\"])
def test_a_launch_script_diff_hides_a_key_nobody_told_us(key):
    scrubbed = scrub_text(launch_script(key))
    assert scrubbed == launch_script(key).replace(shlex.quote(key), REDACTED)
    assert key not in scrubbed


def test_known_secrets_are_hidden_in_every_spelling_longest_first():
    text = f"raw {NASTY_KEY} quoted {shlex.quote(NASTY_KEY)} repr {NASTY_KEY!r} prefix sk-a"
    assert scrub_text(text, ["sk-a", NASTY_KEY]) == f"raw {REDACTED} quoted {REDACTED} repr '{REDACTED}' prefix {REDACTED}"
    assert scrub_text("nothing", ["", None]) == "nothing"
    assert scrub_text(None, ["x"]) is None


@pytest.mark.parametrize("text, expected", [
    ("--api-key=abc,def rest", f"--api-key={REDACTED} rest"),
    ("argv: sglang --api-k 'a b' --port 1", f"argv: sglang --api-k {REDACTED} --port 1"),
    ("'--api-key=a'\"'\"'b' '--port' '1'", f"'--api-key={REDACTED}' '--port' '1'"),
    ('--admin-api-key "x\\"y z" --port 1', f"--admin-api-key {REDACTED} --port 1"),
    ("error: argument --api-key: expected one argument", "error: argument --api-key: expected one argument"),
    ("--api-keyring x --apix y", "--api-keyring x --apix y"),
])
def test_flag_values_in_joined_command_lines(text, expected):
    assert scrub_text(text) == expected


def classic_dump(**args):
    return "server_args=ServerArgs(" + ", ".join(f"{key}={value!r}" for key, value in args.items()) + ")"


@pytest.mark.parametrize("text", [
    "GPU 0 is held by foreign process 7 (python3 holder.py --api-key s3cret) that has no marker; refusing",
    "port 1 is in use by foreign process 8 (x --api-key=s3cret); free the port",
    f"exec sglang --api-key {shlex.quote(NASTY_KEY)} --port 1",
    "server_args=ServerArgs(api_key='s3cret', port=1)",
])
def test_scrubbing_twice_gives_what_scrubbing_once_gave(text):
    # Command lines are scrubbed at the source and then once more as part of a message: nothing around the
    # hidden value may be eaten the second time (a ")" or ";" once was).
    once = scrub_text(text)
    assert "s3cret" not in once and NASTY_KEY not in once
    assert scrub_text(once) == once


def test_a_value_hidden_at_the_source_keeps_what_follows_it():
    assert scrub_text("(holder.py --api-key ********) that has") == "(holder.py --api-key ********) that has"
    assert scrub_text("x --api-key ********abc y") == "x --api-key ******** y", "a key that merely starts so"


@pytest.mark.parametrize("key", ["plain", NASTY_KEY, "it's", "both ' and \"", "back\\slash", "None"])
def test_server_args_dumps_of_both_dialects_hide_the_key(key):
    classic = classic_dump(model_path="/m", api_key=key, admin_api_key=key, port=1)
    assert scrub_text(classic) == classic_dump(model_path="/m", api_key=REDACTED, admin_api_key=REDACTED, port=1)
    dump = {"model_path": "/m", "api_key": key, "admin_api_key": key, "port": 1}
    scrubbed = dict(dump, api_key=REDACTED, admin_api_key=REDACTED)
    assert scrub_text(f"server_args={dump!r}") == f"server_args={scrubbed!r}"


def test_a_key_that_is_none_stays_and_json_and_unquoted_forms_are_hidden():
    assert scrub_text(classic_dump(api_key=None, port=1)) == "server_args=ServerArgs(api_key=None, port=1)"
    assert scrub_text('{"api_key": "k\\"x", "port": 1}') == f'{{"api_key": \'{REDACTED}\', "port": 1}}'
    assert scrub_text("api_key=abc port=1") == f"api_key={REDACTED} port=1"


def test_an_unterminated_literal_is_hidden_to_the_end_of_its_line():
    assert scrub_text("api_key='abc\nnext line") == f"api_key='{REDACTED}'\nnext line"


# Tells linear from catastrophic, never measures speed: a pattern that backtracks quadratically over a 1 MB line
# takes hours, a linear scrub well under a second - and a 2-core machine running the whole suite once took 2.1 s.
LINEAR_BOUND_SECONDS = 30


@pytest.mark.parametrize("line", [
    "x" * 1_000_000,
    "api_key='" * 100_000,
    'api_key="' + "\\" * 1_000_000,
    "--api-key '" * 100_000,
    "--api-key " * 100_000,
    '--api-key "' + "\\a" * 500_000,
])
def test_a_one_megabyte_line_is_scrubbed_in_linear_time(line):
    started = time.monotonic()
    scrub_text(line, ["secret"])
    assert time.monotonic() - started < LINEAR_BOUND_SECONDS


# ---- credentials besides the API key: one rule for environment variables, flags and extra args ------------------

# SGLang 0.5.23's own flags and variables whose names hold a credential word, and what they hold.
SGLANG_NAMES = {
    "--api-key": True, "--admin-api-key": True, "--ssl-keyfile-password": True,
    "--ssl-keyfile": False, "--ssl-certfile": False, "--speculative-token-map": False, "--kv-cache-dtype": False,
    "--bucket-time-to-first-token": False, "--bucket-inter-token-latency": False,
    "--kt-max-deferred-experts-per-token": False, "--max-total-tokens": False, "--tokenizer-path": False,
    "SGLANG_USE_AITER_FP8_PER_TOKEN": False, "SGLANG_LOG_DECODE_GRAPH_KEY": False,
    "SGLANG_INIT_NEW_TOKEN_RATIO": False, "SGLANG_MAX_NEW_TOKENS_LIMIT": False, "TOKENIZERS_PARALLELISM": False,
}
OTHER_NAMES = {
    "HF_TOKEN": True, "HUGGING_FACE_HUB_TOKEN": True, "OPENAI_API_KEY": True, "AWS_SECRET_ACCESS_KEY": True,
    "AZURE_CLIENT_SECRET": True, "DB_PASSWORD": True, "PGPASSWORD": True, "SMB_PASSWD": True, "wandb_api_key": True,
    "--hf-token": True, "hf_token": True, "--HF-Token": True, "admin_api_key": True,
    # Argparse prefixes of SGLang's key flags, as flags or extra args' keys.
    "--admin": True, "admin": True, "--ssl-keyfile-pass": True, "ssl_keyfile_pass": True,
    "HF_TOKEN_PATH": False, "NCCL_PROTO": False, "--api-keyring": False, "KEYBOARD": False, "--apix": False,
    "bucket_time_to_first_token": False,
}


@pytest.mark.parametrize("name, holds", [*SGLANG_NAMES.items(), *OTHER_NAMES.items()])
def test_which_names_hold_a_credential(name, holds):
    assert credential_name(name) is holds


def test_credential_flags_in_argv_are_hidden_and_found():
    argv = ["sglang", "--hf-token", "hf_a", "--ssl-keyfile-password=p w", "--admin-api-key", "adm",
            "--bucket-time-to-first-token", "0.1", "--kv-cache-dtype", "fp8_e4m3", "--ssl-keyfile", "/k.pem"]
    assert scrub_argv(argv) == ["sglang", "--hf-token", REDACTED, f"--ssl-keyfile-password={REDACTED}",
                                "--admin-api-key", REDACTED, "--bucket-time-to-first-token", "0.1",
                                "--kv-cache-dtype", "fp8_e4m3", "--ssl-keyfile", "/k.pem"]
    assert argv_credentials(argv) == ["hf_a", "p w", "adm"]
    assert scrub_argv(["env", "HF_TOKEN=hf_b", "NOTE=x", "HF_TOKEN", "sglang"]) == [
        "env", f"HF_TOKEN={REDACTED}", "NOTE=x", "HF_TOKEN", "sglang"]
    assert argv_credentials(["--api-key=", "--port", "1"]) == []


def script_with_credentials(token, admin_key):
    """As the launch script renderer writes credentials of sglang_env and sglang_extra_args."""
    return (f"#!/bin/sh\nset -e\nexport TOKENIZERS_PARALLELISM=false\nexport HF_TOKEN={shlex.quote(token)}\n"
            f"export SGLANG_LOG_DECODE_GRAPH_KEY=1\nexec python3 -m sglang.launch_server \\\n"
            f"    --port 30000 \\\n    --admin-api-key {shlex.quote(admin_key)} \\\n"
            f"    --bucket-time-to-first-token 0.1 0.5\n")


@pytest.mark.parametrize("token", ["hf_plain", NASTY_KEY, "it's", "$HOME`x`\\", "--looks-like-a-flag"])
def test_a_launch_script_diff_hides_credentials_nobody_told_us_and_keeps_the_rest(token):
    script = script_with_credentials(token, token + "-admin")
    scrubbed = scrub_text(script)
    assert scrubbed == (script.replace(shlex.quote(token + "-admin"), REDACTED)
                        .replace(f"HF_TOKEN={shlex.quote(token)}", f"HF_TOKEN={REDACTED}"))
    assert scrub_text(scrubbed) == scrubbed
    assert f"export HF_TOKEN={REDACTED}\n" in scrubbed and f"--admin-api-key {REDACTED} \\\n" in scrubbed


PREFILL_LINE = "Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.01"


@pytest.mark.parametrize("text, expected", [
    ("'--hf-token=a'\"'\"'b' '--port' '1'", f"'--hf-token={REDACTED}' '--port' '1'"),
    ("error: unrecognized arguments: --hf-token hf_x", f"error: unrecognized arguments: --hf-token {REDACTED}"),
    ("  export AWS_SECRET_ACCESS_KEY=\"a b\"", f"  export AWS_SECRET_ACCESS_KEY={REDACTED}"),
    # SGLang's log lines the parsers read keep their figures.
    (PREFILL_LINE, PREFILL_LINE),
    ("echo HF_TOKEN=x; export NOTE_TOKENS=5", "echo HF_TOKEN=x; export NOTE_TOKENS=5"),
])
def test_credentials_in_command_lines_and_scripts(text, expected):
    assert scrub_text(text) == expected


def test_the_ssl_keyfile_password_of_a_server_args_dump_is_hidden():
    dump = classic_dump(ssl_keyfile="/k.pem", ssl_keyfile_password="pw'd", watermark_key=None, port=1)
    assert scrub_text(dump) == classic_dump(ssl_keyfile="/k.pem", ssl_keyfile_password=REDACTED, watermark_key=None,
                                            port=1)


def test_stored_records_hide_credentials_by_name_and_as_text():
    record = {"servers": {"gpu0": {
        "settings": {"command": ["sglang", "--hf-token", "hf_a"], "flags": {"--admin-api-key": "adm_key", "--port": "1"},
                     "env": {"HF_TOKEN": "hf_b", "NCCL_PROTO": "LL", "GPUOPS_TEST_TOKEN": 5}},
        "changed": [{"setting": "HF_TOKEN", "before": "hf_c", "after": None},
                    {"setting": "NCCL_PROTO", "before": "LL", "after": "Simple"}],
        "error": "exited: sglang --api-key k --hf-token=hf_d", "flags_on": {"--hf-token": True}}}}
    scrubbed = scrub_data(record)
    assert not [value for value in ("hf_a", "hf_b", "hf_c", "hf_d", "adm_key") if value in json.dumps(scrubbed)]
    gpu0 = scrubbed["servers"]["gpu0"]
    assert gpu0["settings"]["command"] == ["sglang", "--hf-token", REDACTED]
    assert gpu0["settings"]["flags"] == {"--admin-api-key": REDACTED, "--port": "1"}
    assert gpu0["settings"]["env"] == {"HF_TOKEN": REDACTED, "NCCL_PROTO": "LL", "GPUOPS_TEST_TOKEN": 5}
    assert gpu0["changed"] == [{"setting": "HF_TOKEN", "before": REDACTED, "after": None},
                               {"setting": "NCCL_PROTO", "before": "LL", "after": "Simple"}]
    assert gpu0["error"] == f"exited: sglang --api-key {REDACTED} --hf-token={REDACTED}"
    assert gpu0["flags_on"] == {"--hf-token": True}
    assert scrub_data(scrubbed) == scrubbed
    assert scrub_data(["gpu0", "gpu1"]) == ["gpu0", "gpu1"] and scrub_data(None) is None


def test_credentials_named_in_settings_are_found_everywhere():
    settings = {"api_key": "k", "env": {"HF_TOKEN": "hf", "NCCL_PROTO": "LL"}, "state_dir": "/s",
                "extra_args": {"admin_api_key": "adm", "hf-token": ["t1", 2], "some_secret": True, "tp": 2},
                "speculative": {"num_draft_tokens": 4}}
    groups = [{"name": "g", "env": {"X_PASSWORD": "pw"}, "nodes": [{"host": "a", "env": {"NODE_TOKEN": "nt"}}]}]
    assert named_credentials([settings, groups]) == ["k", "hf", "adm", "t1", "2", "pw", "nt"]
    assert named_credentials([None, "text", [{"env": None}]]) == []


@pytest.mark.parametrize("line", [
    "export A_TOKEN='" * 100_000,
    "--x-token " * 100_000,
    "--" + "a-" * 500_000,
    "\nexport " + "A" * 1_000_000,
])
def test_a_one_megabyte_line_of_credential_names_is_scrubbed_in_linear_time(line):
    started = time.monotonic()
    scrub_text(line)
    assert time.monotonic() - started < LINEAR_BOUND_SECONDS
