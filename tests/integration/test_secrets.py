"""API keys never shown or stored: playbooks/relaunch.yml at -vvvv with the json callback, a crash and a key rotation.

The keys hold every character that broke redaction before (, ' " ) } space, a newline). Only two
things may hold it: the launch scripts (mode 0700, they pass it to SGLang) and the server logs
(SGLang logs its server_args); those must be private.
"""

import json
import os
import shlex
import stat
import subprocess

from .conftest import PYTHON, SGLANG_SIM

FIRST_KEY = "first-k,'\")} one two"
# Newlines and other control characters are refused by the role (no HTTP header can carry them).
SECOND_KEY = "second-k,'\")} three{four}"


def spellings(key):
    """Every form the key could leak in: raw, shell-quoted, JSON-escaped (json callback, AWX events), Python repr."""
    return {key, shlex.quote(key), json.dumps(key)[1:-1], repr(key)[1:-1]}


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


def test_api_keys_stay_out_of_every_output_and_file_through_a_crash_and_a_rotation(sim_host, tmp_path):
    draft = tmp_path / "draft"
    subprocess.run([PYTHON, SGLANG_SIM, "--make-model", str(draft), "--arch", "LlamaForCausalLMEagle3",
                    "--shards", "1", "--weights-gib", "1"], check=True)
    servers = [
        {"name": "healthy", "port": sim_host.port(0), "gpus": [0]},
        {"name": "crasher", "port": sim_host.port(1), "gpus": [1], "env": {"SGLANG_SIM_FAULT": "draft_crash"},
         "speculative": {"algorithm": "EAGLE3", "draft_model_path": str(draft)}},
    ]

    def relaunch(key):
        return sim_host.run("relaunch", {"sglang_servers": servers, "sglang_api_key": key}, args=("-vvvv", "--diff"))

    first = relaunch(FIRST_KEY)
    assert first.rc != 0, "the crashing server fails the relaunch"
    assert first.task("every server is ready")[0]["msg"][0].startswith("crasher crashed")
    healthy_pid = json.loads((sim_host.dir / "state" / "healthy.json").read_text())["pid"]
    with open(f"/proc/{healthy_pid}/cmdline", "rb") as handle:
        assert FIRST_KEY.encode() in handle.read(), "the running server's argv holds the first key"
    assert_nothing_leaks(sim_host, [first], [FIRST_KEY])
    assert_logs_private(sim_host)

    # Rotation: the new scripts differ (the diff's before side holds the first key) and the servers
    # are killed and relaunched (their command lines held the first key).
    second = relaunch(SECOND_KEY)
    assert second.task("Bring servers")[0]["changed"]
    assert second.rc != 0 and second.task("every server is ready")[0]["msg"][0].startswith("crasher crashed")
    assert_nothing_leaks(sim_host, [second], [FIRST_KEY, SECOND_KEY])
    assert_logs_private(sim_host)
    logs = "".join(log.read_text(errors="replace") for log in sim_host.log_dir.glob("healthy.log*"))
    assert repr(SECOND_KEY)[1:-1] in logs, "SGLang itself logs the key: why its logs must be private"
