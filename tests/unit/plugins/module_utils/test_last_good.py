"""The last good configuration of a server: kept only as the script that came up, read back only intact."""

import os
import stat

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
