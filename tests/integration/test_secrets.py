"""API keys and other credentials never shown or stored: playbooks/relaunch.yml at -vvvv --diff with the json
callback, a crash and a rotation, then playbooks/history.yml at -vvv with the default callback.

The keys hold every character that broke redaction before (, ' " ) } space, a newline). The other credentials are
an HF_TOKEN in sglang_env, a WANDB_API_KEY in a server's env and SGLang's --admin-api-key and --ssl-keyfile-password
in sglang_extra_args. Only two things may hold them: the launch scripts (mode 0700, they pass them to SGLang) and the server logs (SGLang logs its
server_args); those must be private.
"""

import json
import os
import shlex
import stat
import subprocess

from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import REDACTED

from .conftest import PYTHON, SGLANG_SIM

FIRST_KEY = "first-k,'\")} one two"
# Newlines and other control characters are refused by the role (no HTTP header can carry them).
SECOND_KEY = "second-k,'\")} three{four}"
# Credentials besides the API key, per run (the second rotates them): sglang_env, then sglang_extra_args.
FIRST_CREDENTIALS = ("hf_first'token 91c", "first-admin-3e7", "first ssl pass'word")
SECOND_CREDENTIALS = ("hf_second-token-5d2", "second-admin-0b4", "second-ssl-password")
# One in a server's own env (sglang_servers), in both runs.
SERVER_CREDENTIAL = "wandb-server-own-4a1"


def spellings(key):
    """Every form the key could leak in: raw, shell-quoted, JSON-escaped (json callback, AWX events), both, Python
    repr."""
    return {key, shlex.quote(key), json.dumps(key)[1:-1], json.dumps(shlex.quote(key))[1:-1], repr(key)[1:-1]}


def leaks(text, keys):
    return sorted(form for key in keys for form in spellings(key) if form in text)


def files_we_wrote(sim_host):
    """Everything under the simulated host but the test's own inputs, the launch scripts (and their last good
    copies, private like them) and the server logs."""
    inputs = {str(sim_host.inventory)} | {str(path) for path in sim_host.dir.glob("extra-*.json")}
    skipped_dirs = (str(sim_host.script_dir), str(sim_host.log_dir), str(sim_host.dir / "cache"),
                    str(sim_host.dir / "state" / "last-good"))
    for root, _dirs, files in os.walk(sim_host.dir):
        if root.startswith(skipped_dirs):
            continue
        for name in files:
            path = os.path.join(root, name)
            if path not in inputs and not os.path.islink(path):
                yield path


def assert_nothing_leaks(sim_host, runs, keys):
    for number, run in enumerate(runs, 1):
        assert leaks(run.stdout, keys) == [], f"run {number}: key in stdout"
        assert leaks(run.stderr, keys) == [], f"run {number}: key in stderr"
    state_files = list((sim_host.dir / "state").iterdir())
    assert state_files, "the server module wrote its state"
    for path in (sim_host.dir / "state" / "last-good").glob("*.sh"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, f"{path} holds the key: only root may read it"
    for path in files_we_wrote(sim_host):
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
        assert leaks(text, keys) == [], f"key in {path}"


def assert_logs_private(sim_host):
    assert stat.S_IMODE(os.stat(sim_host.log_dir).st_mode) & 0o007 == 0, "log directory not world-accessible"
    logs = list(sim_host.log_dir.iterdir())
    assert logs
    for log in logs:
        assert not log.is_symlink()
        assert stat.S_IMODE(log.stat().st_mode) & ~0o640 == 0, f"{log} is 0640 or stricter"


def test_api_keys_and_credentials_stay_out_of_every_output_and_file_through_a_crash_and_a_rotation(sim_host, tmp_path):
    draft = tmp_path / "draft"
    subprocess.run([PYTHON, SGLANG_SIM, "--make-model", str(draft), "--arch", "LlamaForCausalLMEagle3",
                    "--shards", "1", "--weights-gib", "1"], check=True)
    servers = [
        {"name": "healthy", "port": sim_host.port(0), "gpus": [0], "env": {"WANDB_API_KEY": SERVER_CREDENTIAL}},
        {"name": "crasher", "port": sim_host.port(1), "gpus": [1], "env": {"SGLANG_SIM_FAULT": "draft_crash"},
         "speculative": {"algorithm": "EAGLE3", "draft_model_path": str(draft)}},
    ]

    def relaunch(key, credentials):
        hf_token, admin_key, ssl_password = credentials
        return sim_host.run("relaunch", {
            "sglang_servers": servers, "sglang_api_key": key,
            # --ssl-keyfile-password is an option from SGLang 0.5.10 on: the simulated host runs the newest (0.5.23).
            "sglang_env": dict(sim_host.host_vars["sglang_env"], HF_TOKEN=hf_token),
            "sglang_extra_args": {"admin_api_key": admin_key, "ssl_keyfile_password": ssl_password},
        }, args=("-vvvv", "--diff"))

    first = relaunch(FIRST_KEY, FIRST_CREDENTIALS)
    assert first.rc != 0, "the crashing server fails the relaunch"
    assert first.task("every server is ready")[0]["msg"][0].startswith("crasher crashed")
    healthy_pid = json.loads((sim_host.dir / "state" / "healthy.json").read_text())["pid"]
    with open(f"/proc/{healthy_pid}/cmdline", "rb") as handle:
        assert FIRST_KEY.encode() in handle.read(), "the running server's argv holds the first key"
    assert_nothing_leaks(sim_host, [first], [FIRST_KEY, *FIRST_CREDENTIALS, SERVER_CREDENTIAL])
    assert_logs_private(sim_host)
    script = sim_host.script("healthy")
    assert shlex.quote(FIRST_CREDENTIALS[0]) in script.read_text(), "the script holds what the server needs"
    assert stat.S_IMODE(script.stat().st_mode) == 0o700
    # --diff stays useful: the new lines are shown, each credential masked where it stood.
    [script_diff] = [diff for diff in first.task("Bring servers")[0]["diff"] if diff.get("after_header") == str(script)]
    for line in (f"export HF_TOKEN={REDACTED}", f"export WANDB_API_KEY={REDACTED}", f"--admin-api-key {REDACTED}",
                 f"--ssl-keyfile-password {REDACTED}", "export SGLANG_SIM_TIME_SCALE=0.05"):
        assert line in script_diff["after"]

    # Rotation: the new scripts differ (the diff's before side holds the first key) and the servers
    # are killed and relaunched (their command lines held the first key).
    second = relaunch(SECOND_KEY, SECOND_CREDENTIALS)
    assert second.task("Bring servers")[0]["changed"]
    assert second.rc != 0 and second.task("every server is ready")[0]["msg"][0].startswith("crasher crashed")
    assert_nothing_leaks(sim_host, [second], [FIRST_KEY, SECOND_KEY, *FIRST_CREDENTIALS, *SECOND_CREDENTIALS,
                                              SERVER_CREDENTIAL])
    assert_logs_private(sim_host)
    logs = "".join(log.read_text(errors="replace") for log in sim_host.log_dir.glob("healthy.log*"))
    assert repr(SECOND_KEY)[1:-1] in logs, "SGLang itself logs the key: why its logs must be private"

    # A journal line written before these names counted as credentials is scrubbed when read.
    old_line = json.dumps({"v": 1, "time": 1.0, "run_id": "old-run", "job": "relaunch", "by": {}, "servers": {
        "healthy": {"outcome": "ready", "settings": {
            "command": ["sglang", "--admin-api-key", "old-admin-key"],
            "flags": {"--ssl-keyfile-password": "old-ssl-password"}, "env": {"HF_TOKEN": "hf_old-token"}},
            "changed": [{"setting": "HF_TOKEN", "before": "hf_older-token", "after": "hf_old-token"}]}}})
    journal = sim_host.dir / "state" / "journal.jsonl"
    journal.write_text(old_line + "\n" + journal.read_text())
    history = sim_host.run("history", {"relaunch_history_last": 10}, json_output=False, args=("-vvv",))
    assert history.rc == 0, history.stdout
    assert "healthy" in history.stdout
    old_values = ["old-admin-key", "old-ssl-password", "hf_old-token", "hf_older-token"]
    assert leaks(history.stdout + history.stderr,
                 [*old_values, *FIRST_CREDENTIALS, *SECOND_CREDENTIALS, SERVER_CREDENTIAL]) == []


def test_a_script_holding_a_credential_is_a_script_with_secrets(ansible, tmp_path):
    # No `secrets` given: launch_scripts finds the HF_TOKEN and the --hf-token in the scripts themselves.
    content = "#!/bin/sh\nexport HF_TOKEN=hf_in-the-env\nexec sglang --hf-token hf_in-a-flag\n"
    script = {"name": "gpu0", "path": str(tmp_path / "bin" / "gpu0.sh"), "content": content}
    refused = ansible.module("gpuops.sglang.launch_scripts", {"scripts": [script], "mode": "0750"})
    assert refused["failed"] and refused["msg"].startswith("mode 0750 lets the group or others read scripts that "
                                                           "carry secrets"), refused["msg"]
    assert not (tmp_path / "bin").exists(), "nothing was written"
    written = ansible.module("gpuops.sglang.launch_scripts", {"scripts": [script]}, diff=True)
    assert stat.S_IMODE(os.stat(script["path"]).st_mode) == 0o700
    assert written["diff"][0]["after"] == f"#!/bin/sh\nexport HF_TOKEN={REDACTED}\nexec sglang --hf-token {REDACTED}\n"
    assert leaks(json.dumps(written), ["hf_in-the-env", "hf_in-a-flag"]) == []
