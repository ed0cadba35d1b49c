"""API keys hidden from argv, launch-script diffs, joined command lines and SGLang's server_args dumps."""

import shlex
import time

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import (
    REDACTED,
    scrub_argv,
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
    """As roles/launch_scripts/templates/launch.sh.j2 renders it: one shell-quoted flag per line."""
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
    assert time.monotonic() - started < 2
