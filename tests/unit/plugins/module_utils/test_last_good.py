"""The last good configuration of a server: kept only as the script that came up, read back only intact."""

import os
import re
import stat

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import last_good
from ansible_collections.gpuops.sglang.plugins.module_utils.script_files import (
    sha256_text,
)

SCRIPT = "#!/bin/sh\nexport GPUOPS_SGLANG_SERVER=gpu0\nexec python3 -m sglang.launch_server --api-key k\n"


def state_for(tmp_path, text):
    path = tmp_path / "gpu0.sh"
    path.write_text(text)
    return {"launch_script": str(path), "script_sha256": sha256_text(text)}


def test_the_script_that_came_up_is_kept_private_and_read_back(tmp_path):
    state_dir = str(tmp_path / "state")
    assert last_good.keep(state_dir, "gpu0", state_for(tmp_path, SCRIPT), "run1", now=10.0) is None
    assert last_good.script(state_dir, "gpu0") == SCRIPT
    assert last_good.record(state_dir, "gpu0") == {"run_id": "run1", "time": 10.0, "script_sha256": sha256_text(SCRIPT),
                                                   "launch_script": str(tmp_path / "gpu0.sh")}
    mode = stat.S_IMODE(os.stat(os.path.join(state_dir, "last-good", "gpu0.sh")).st_mode)
    assert mode == 0o700, "it may hold the API key"


def test_a_script_edited_since_the_launch_is_not_what_came_up(tmp_path):
    state = state_for(tmp_path, SCRIPT)
    (tmp_path / "gpu0.sh").write_text(SCRIPT + "# edited by hand\n")
    problem = last_good.keep(str(tmp_path / "state"), "gpu0", state, "run1")
    assert "changed since the launch" in problem
    assert last_good.script(str(tmp_path / "state"), "gpu0") is None


def test_a_tampered_copy_is_not_used(tmp_path):
    state_dir = str(tmp_path / "state")
    last_good.keep(state_dir, "gpu0", state_for(tmp_path, SCRIPT), "run1")
    with open(os.path.join(state_dir, "last-good", "gpu0.sh"), "a") as handle:
        handle.write("rm -rf /\n")
    assert last_good.script(state_dir, "gpu0") is None
    assert last_good.record(state_dir, "missing") is None


def test_a_rollback_never_goes_back_to_the_script_it_leaves(tmp_path):
    state_dir = str(tmp_path / "state")
    old, new = SCRIPT, SCRIPT.replace("--api-key k", "--api-key k --max-running-requests 4")
    last_good.keep(state_dir, "gpu0", state_for(tmp_path, old), "run1")
    last_good.keep(state_dir, "gpu0", state_for(tmp_path, new), "run2")  # came up, then regressed
    assert last_good.script(state_dir, "gpu0") == new
    found, text = last_good.rollback_target(state_dir, "gpu0", leaving_sha256=sha256_text(new))
    assert (found["run_id"], text) == ("run1", old)
    found, text = last_good.rollback_target(state_dir, "gpu0", leaving_sha256=sha256_text(new), run_id="run2")
    assert (found["run_id"], text) == ("run1", old), "this run made it last good: not back to it"
    # A later run leaves the same script for another reason (a multi-node group's peer failed): it is good.
    found, text = last_good.rollback_target(state_dir, "gpu0", leaving_sha256=sha256_text(new), run_id="run3")
    assert (found["run_id"], text) == ("run2", new)
    found, text = last_good.rollback_target(state_dir, "gpu0", leaving_sha256=sha256_text("something else"))
    assert (found["run_id"], text) == ("run2", new)
    assert last_good.rollback_target(state_dir, "gpu1") == (None, None)


RENDERED = ("#!/bin/sh\nset -e\nexport GPUOPS_SGLANG_SERVER=gpu0\nexec python3 -m sglang.launch_server \\\n"
            "    --model-path /models/m \\\n    --api-key 'old k'\"'\"'ey' \\\n    --port 30000\n")


def test_a_last_good_script_is_rekeyed_in_the_form_the_role_renders():
    text, rekeyed = last_good.with_api_key(RENDERED, "new")
    assert rekeyed and text == RENDERED.replace("    --api-key 'old k'\"'\"'ey' \\\n    --port 30000\n",
                                                "    --port 30000 \\\n    --api-key new\n")
    assert last_good.with_api_key(text, "new") == (text, False), "already the current key: untouched"
    assert last_good.with_api_key(RENDERED, "old k'ey") == (RENDERED, False)
    removed, rekeyed = last_good.with_api_key(RENDERED, None)
    assert rekeyed and "--api-key" not in removed and removed.endswith("    --port 30000\n")
    added, rekeyed = last_good.with_api_key(removed, "k2")
    assert rekeyed and added.endswith("    --port 30000 \\\n    --api-key k2\n")
    # Not rewritten blindly: an abbreviated key flag (SGLang's argparse takes --api), or no exec line.
    assert last_good.with_api_key(RENDERED.replace("--api-key", "--api"), "new") == (None, False)
    assert last_good.with_api_key("#!/bin/sh\nsglang serve\n", "new") == (None, False)
    assert last_good.with_api_key("#!/bin/sh\nexec python3 'unbalanced\n", "new") == (None, False)


def test_the_generation_before_never_keeps_a_key_rotated_away(tmp_path):
    state_dir = str(tmp_path / "state")
    first = RENDERED
    rotated = last_good.with_api_key(RENDERED.replace("/models/m", "/models/m2"), "new")[0]
    last_good.keep(state_dir, "gpu0", state_for(tmp_path, first), "run1")
    assert last_good.keep(state_dir, "gpu0", state_for(tmp_path, rotated), "run2") is None
    found, text = last_good.rollback_target(state_dir, "gpu0", leaving_sha256=sha256_text(rotated), run_id="run2")
    assert found["run_id"] == "run1" and "/models/m \\" in text
    assert "old k" not in text and "--api-key new" in text
    assert "old k" not in (tmp_path / "state" / "last-good" / "gpu0.previous.sh").read_text()
    # A generation whose key cannot be replaced is dropped rather than kept with the old key.
    last_good.keep(state_dir, "gpu0", state_for(tmp_path, first.replace("--api-key", "--api")), "run3")
    last_good.keep(state_dir, "gpu0", state_for(tmp_path, rotated), "run4")
    assert last_good.record(state_dir, "gpu0", ".previous") is None
    assert not (tmp_path / "state" / "last-good" / "gpu0.previous.sh").exists()


def test_last_good_files_another_user_could_have_written_are_never_used(tmp_path):
    state_dir = str(tmp_path / "state")
    directory = tmp_path / "state" / "last-good"
    last_good.keep(state_dir, "gpu0", state_for(tmp_path, SCRIPT), "run1")
    assert last_good.rollback_target(state_dir, "gpu0")[1] == SCRIPT
    for path, change, problem in (
            (directory, lambda: os.chmod(directory, 0o777), "writable by group or others (mode 0o777)"),
            (directory / "gpu0.sh", lambda: os.chmod(directory / "gpu0.sh", 0o720), "writable by group or others"),
            (directory / "gpu0.json", lambda: os.chown(directory / "gpu0.json", 4242, -1),
             f"owned by uid 4242, not by uid {os.geteuid()} that runs the servers")):
        state = os.stat(path)
        change()
        with pytest.raises(last_good.UntrustedFile, match=re.escape(f"{path} is {problem}")):
            last_good.rollback_target(state_dir, "gpu0")
        assert "refusing to use a last good configuration there" in last_good.keep(
            state_dir, "gpu0", state_for(tmp_path, SCRIPT), "run2")
        os.chmod(path, stat.S_IMODE(state.st_mode))
        os.chown(path, state.st_uid, -1)
    # A directory swapped for a link to another one.
    os.rename(directory, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", directory)
    with pytest.raises(last_good.UntrustedFile, match="is a symbolic link"):
        last_good.rollback_target(state_dir, "gpu0")
