import os

import pytest
from ansible_collections.gpuops.sglang.plugins.plugin_utils import payload_cache
from ansible_collections.gpuops.sglang.plugins.plugin_utils.payload_cache import (
    KeptPayloads,
    prune,
    sources_digest,
)

HOLD = "ansible_collections.gpuops.sglang.plugins.modules.host_lock-ZIP_DEFLATED-none"
WAIT = "ansible_collections.gpuops.sglang.plugins.modules.wait-ZIP_DEFLATED-none"
SERVER = "ansible_collections.gpuops.sglang.plugins.modules.server-ZIP_DEFLATED-none"
PING = "ansible.modules.ping-ZIP_DEFLATED-none"


def plugins(tmp_path, **files):
    for relative, text in files.items():
        path = tmp_path / "plugins" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path / "plugins")


def test_the_digest_changes_with_any_module_or_module_utils_source_and_nothing_else(tmp_path):
    tree = plugins(tmp_path, **{"modules/wait.py": "A", "module_utils/readiness.py": "B",
                                "module_utils/_lifecycle/plan.py": "C", "action/wait.py": "D"})
    before = sources_digest(tree)
    assert sources_digest(tree) == before
    for relative in ("modules/wait.py", "module_utils/readiness.py", "module_utils/_lifecycle/plan.py"):
        path = tmp_path / "plugins" / relative
        original = path.read_text()
        path.write_text(original + "# changed")
        assert sources_digest.__wrapped__(tree) != before, relative
        path.write_text(original)
    (tmp_path / "plugins" / "action" / "wait.py").write_text("runs on the controller, not in a payload")
    assert sources_digest.__wrapped__(tree) == before
    assert sources_digest() == sources_digest(payload_cache.PLUGINS_DIR), "this collection's own"


def payloads(tmp_path, digest_now=lambda: "digest"):
    run_dir, kept = tmp_path / "ansible-local-1" / "ansiballz_cache", tmp_path / "kept" / "digest"
    return KeptPayloads(str(run_dir), str(kept), digest_now), run_dir, kept


def private_dir(path):
    path.mkdir(parents=True, exist_ok=True)
    for directory in (path.parent, path):
        directory.chmod(0o700)
    return path


def test_a_run_keeps_the_payloads_of_our_modules_it_built_and_the_next_run_finds_them(tmp_path):
    cache, run_dir, kept = payloads(tmp_path)
    cache.seed()  # nothing kept yet
    assert not run_dir.exists() and not kept.exists()

    run_dir.mkdir(parents=True)
    for name in (HOLD, f"{HOLD}.lock", PING):
        (run_dir / name).write_bytes(b"payload of " + name.encode())
    cache.keep()
    assert sorted(os.listdir(kept)) == [HOLD], "ours only, never a lock or another collection's module"
    assert (kept / HOLD).read_bytes() == b"payload of " + HOLD.encode()

    next_run = KeptPayloads(str(tmp_path / "next" / "ansible-local-1" / "ansiballz_cache"), str(kept),
                            lambda: "digest")
    next_run.seed()
    assert os.listdir(next_run.run_dir) == [HOLD]
    assert (tmp_path / "next" / "ansible-local-1" / "ansiballz_cache" / HOLD).read_bytes() == b"payload of " + HOLD.encode()


def test_a_payload_the_run_has_is_not_replaced_and_a_new_one_joins_the_kept(tmp_path):
    run_dir = tmp_path / "ansible-local-1" / "ansiballz_cache"
    run_dir.mkdir(parents=True)
    (run_dir / HOLD).write_bytes(b"built by this run")
    cache, _run_dir, kept = payloads(tmp_path)
    private_dir(kept)
    (kept / HOLD).write_bytes(b"kept")
    cache.seed()
    assert (run_dir / HOLD).read_bytes() == b"built by this run"
    (run_dir / WAIT).write_bytes(b"wait")
    (run_dir / f"{WAIT}-part").write_bytes(b"being written")
    cache.keep()
    assert sorted(os.listdir(kept)) == sorted([HOLD, WAIT]) and (kept / HOLD).read_bytes() == b"kept"


def test_only_what_a_call_built_while_the_sources_kept_their_digest_is_kept(tmp_path):
    run_dir = tmp_path / "ansible-local-1" / "ansiballz_cache"
    run_dir.mkdir(parents=True)
    # Built by an earlier task of the run - perhaps from the sources before an edit: not this call's to keep.
    (run_dir / HOLD).write_bytes(b"older")
    cache, _run_dir, kept = payloads(tmp_path)
    (run_dir / WAIT).write_bytes(b"built by this call")
    cache.keep()
    assert os.listdir(kept) == [WAIT]

    edited, _run_dir, _kept = payloads(tmp_path, digest_now=lambda: "another digest")
    (run_dir / SERVER).write_bytes(b"built while the sources changed")
    edited.keep()
    assert os.listdir(kept) == [WAIT]


def test_a_cache_another_user_could_write_is_never_used_and_is_made_anew(tmp_path):
    cache, run_dir, kept = payloads(tmp_path)
    private_dir(kept)
    (kept / HOLD).write_bytes(b"planted?")
    kept.parent.chmod(0o777)
    cache.seed()
    assert not run_dir.exists()
    run_dir.mkdir(parents=True)
    (run_dir / WAIT).write_bytes(b"wait")
    cache.keep()
    # Ours but open to others (an earlier version left it 0755): emptied and made private again, not given up on.
    assert os.listdir(kept) == [WAIT] and (kept.parent.stat().st_mode & 0o777) == 0o700

    elsewhere = private_dir(tmp_path / "elsewhere" / "digest")
    (elsewhere / HOLD).write_bytes(b"through a link")
    linked, linked_run_dir, _kept = payloads(tmp_path / "linked")
    private_dir(tmp_path / "linked" / "kept")
    os.symlink(elsewhere, tmp_path / "linked" / "kept" / "digest")
    linked.seed()
    assert not linked_run_dir.exists()


@pytest.mark.skipif(os.getuid() != 0, reason="giving a directory to another user needs root")
def test_another_users_cache_directory_is_left_alone(tmp_path):
    (tmp_path / "theirs").mkdir(mode=0o755)
    os.chown(tmp_path / "theirs", 65534, 65534)
    theirs, theirs_run_dir, _kept = payloads(tmp_path / "x")
    theirs.kept = str(tmp_path / "theirs" / "digest")
    theirs_run_dir.mkdir(parents=True)
    (theirs_run_dir / WAIT).write_bytes(b"wait")
    theirs.keep()
    assert os.listdir(tmp_path / "theirs") == []


def test_only_the_newest_digests_stay(tmp_path):
    for index in range(5):
        directory = tmp_path / f"digest{index}"
        directory.mkdir()
        os.utime(directory, (1000 + index, 1000 + index))
    prune(str(tmp_path), kept_digests=2)
    assert sorted(os.listdir(tmp_path)) == ["digest3", "digest4"]
