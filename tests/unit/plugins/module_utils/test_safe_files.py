"""Real files and real symbolic links in tmp_path: nothing is ever written, truncated or chmod-ed through a link."""

import os
import pathlib
import stat

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.safe_files import (
    SafeFileError,
    ensure_private_dir,
    log_dir_problem,
    log_shows_crash,
    open_append_no_follow,
    open_lock_file,
    read_no_follow,
    rotate_log,
    write_atomic,
)

CRASHED = "[2025-01-01 10:00:00] Load weight begin.\nTraceback (most recent call last):\nRuntimeError: boom\n" \
          "[2025-01-01 10:00:01] Received sigquit from a child process. It usually means the child failed.\n"
HEALTHY = "[2025-01-01 10:00:00] Load weight begin.\n[2025-01-01 10:00:09] The server is fired up and ready to roll!\n"


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def victim(tmp_path):
    """A file a planted symlink points at; it must stay exactly as it is."""
    path = tmp_path / "victim"
    path.write_text("precious\n")
    path.chmod(0o644)
    return path


def assert_untouched(victim):
    assert victim.read_text() == "precious\n" and mode_of(victim) == 0o644


def test_append_creates_a_private_log_and_appends(tmp_path):
    log = tmp_path / "gpu0.log"
    for text in (b"one\n", b"two\n"):
        fd = open_append_no_follow(str(log))
        os.write(fd, text)
        os.close(fd)
    assert log.read_bytes() == b"one\ntwo\n"
    assert mode_of(log) & ~0o640 == 0


@pytest.mark.parametrize("before, after", [(0o666, 0o640), (0o604, 0o600), (0o600, 0o600), (0o400, 0o400)])
def test_append_tightens_an_existing_log_and_never_loosens_it(tmp_path, before, after):
    log = tmp_path / "gpu0.log"
    log.write_text("old\n")
    log.chmod(before)
    os.close(open_append_no_follow(str(log)))
    assert mode_of(log) == after and log.read_text() == "old\n"


def test_append_refuses_a_symlink_and_says_where_it_points(tmp_path, victim):
    log = tmp_path / "gpu0.log"
    log.symlink_to(victim)
    with pytest.raises(SafeFileError) as refused:
        open_append_no_follow(str(log))
    assert str(refused.value) == (f"log_path {log} is a symbolic link (to {victim}); refusing to write through it: "
                                  "remove it or point log_path at a regular file")
    assert isinstance(refused.value, OSError), "existing `except OSError` handlers report it"
    assert_untouched(victim)


def test_append_refuses_a_dangling_symlink_without_creating_its_target(tmp_path):
    log = tmp_path / "gpu0.log"
    log.symlink_to(tmp_path / "created-elsewhere")
    with pytest.raises(SafeFileError, match="is a symbolic link"):
        open_append_no_follow(str(log))
    assert not (tmp_path / "created-elsewhere").exists()


def test_append_refuses_a_fifo_and_a_directory_without_hanging(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SafeFileError, match="is not a regular file"):
        open_append_no_follow(str(fifo))
    with pytest.raises(OSError):
        open_append_no_follow(str(tmp_path))


def test_lock_file_is_created_kept_and_never_followed(tmp_path, victim):
    lock = tmp_path / ".lock"
    lock.write_text('{"pid": 1}')
    fd = open_lock_file(str(lock))
    assert os.read(fd, 100) == b'{"pid": 1}', "opening does not truncate what the holder wrote"
    os.close(fd)
    lock.unlink()
    lock.symlink_to(victim)
    with pytest.raises(SafeFileError, match="lock file .* is a symbolic link .*remove it"):
        open_lock_file(str(lock))
    assert_untouched(victim)


def test_read_no_follow_reads_the_tail_and_refuses_a_symlink(tmp_path, victim):
    path = tmp_path / "log"
    path.write_bytes(b"0123456789")
    assert read_no_follow(str(path)) == b"0123456789"
    assert read_no_follow(str(path), max_bytes=3) == b"789"
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(SafeFileError):
        read_no_follow(str(tmp_path / "link"))


def test_write_atomic_replaces_a_symlink_instead_of_writing_through_it(tmp_path, victim):
    target = tmp_path / "gpu0.pid"
    target.symlink_to(victim)
    write_atomic(str(target), "123\n", 0o644)
    assert not target.is_symlink() and target.read_text() == "123\n" and mode_of(target) == 0o644
    assert_untouched(victim)


def test_write_atomic_writes_bytes_or_text_with_the_mode_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "gpu0.sh"
    write_atomic(str(target), "#!/bin/sh\n--api-key 'k'\n", 0o700)
    assert target.read_text() == "#!/bin/sh\n--api-key 'k'\n" and mode_of(target) == 0o700
    write_atomic(str(target), b"\x00bytes", 0o600)
    assert target.read_bytes() == b"\x00bytes" and mode_of(target) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["gpu0.sh"]


def test_write_atomic_failing_leaves_the_old_file_and_no_temporary_file(tmp_path):
    (tmp_path / "dir").mkdir()
    with pytest.raises(IsADirectoryError):
        write_atomic(str(tmp_path / "dir"), "x", 0o644)
    assert sorted(os.listdir(tmp_path)) == ["dir"]


def test_private_dir_is_created_or_tightened_never_loosened(tmp_path):
    created = tmp_path / "new" / "logs"
    ensure_private_dir(str(created))
    assert mode_of(created) == 0o750
    existing = tmp_path / "existing"
    existing.mkdir()
    existing.chmod(0o777)
    ensure_private_dir(str(existing))
    assert mode_of(existing) == 0o770
    existing.chmod(0o700)
    ensure_private_dir(str(existing))
    assert mode_of(existing) == 0o700


def test_private_dir_refuses_a_symlink_a_file_and_a_shared_sticky_dir(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(SafeFileError, match=r"log directory .*link is a symbolic link \(to .*real\)"):
        ensure_private_dir(str(tmp_path / "link"))
    assert mode_of(real) == 0o755
    (tmp_path / "file").write_text("")
    with pytest.raises(SafeFileError, match="is not a directory"):
        ensure_private_dir(str(tmp_path / "file"))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(SafeFileError, match="is shared with other files and users"):
        ensure_private_dir(str(shared))
    assert mode_of(shared) == 0o1777


def write_log(path, text):
    pathlib.Path(path).write_text(text)


def content(path):
    return pathlib.Path(path).read_text()


def test_rotation_shifts_generations_and_drops_the_oldest(tmp_path):
    log = str(tmp_path / "gpu0.log")
    assert rotate_log(log, 3) is None
    for run in range(5):
        write_log(log, f"run {run}\n")
        assert rotate_log(log, 3) == log + ".1"
    assert sorted(os.listdir(tmp_path)) == ["gpu0.log.1", "gpu0.log.2", "gpu0.log.3"]
    assert [content(f"{log}.{n}") for n in (1, 2, 3)] == ["run 4\n", "run 3\n", "run 2\n"]


def test_rotation_with_one_generation_keeps_only_the_previous_log(tmp_path):
    log = str(tmp_path / "gpu0.log")
    for run in range(3):
        write_log(log, f"run {run}\n")
        rotate_log(log, 1)
    assert sorted(os.listdir(tmp_path)) == ["gpu0.log.1"]


def test_rotation_never_truncates_a_file_a_reader_still_follows(tmp_path):
    log = str(tmp_path / "gpu0.log")
    write_log(log, "still being read\n")
    with open(log) as follower:
        rotate_log(log)
        assert follower.read() == "still being read\n"
    assert not os.path.exists(log)


def test_rotation_moves_symlinks_themselves_and_never_follows_them(tmp_path, victim):
    log = str(tmp_path / "gpu0.log")
    os.symlink(victim, log + ".2")
    os.symlink(victim, log + ".3")  # the name the previous .2 is renamed over
    write_log(log + ".1", "previous\n")
    os.symlink(victim, log)
    assert rotate_log(log, 3) == log + ".1"
    assert os.path.islink(log + ".1") and os.readlink(log + ".1") == str(victim)
    assert content(log + ".2") == "previous\n" and not os.path.islink(log + ".2")
    assert os.path.islink(log + ".3")
    assert not os.path.lexists(log)
    assert_untouched(victim)


def test_log_shows_crash_parses_the_tail_and_is_false_for_what_it_cannot_read(tmp_path, victim):
    crashed, healthy = tmp_path / "crashed.log", tmp_path / "healthy.log"
    crashed.write_text("x" * 3 * 1024 * 1024 + "\n" + CRASHED)
    healthy.write_text(HEALTHY)
    assert log_shows_crash(str(crashed)) and not log_shows_crash(str(healthy))
    (tmp_path / "link.log").symlink_to(crashed)
    assert not log_shows_crash(str(tmp_path / "link.log"))
    assert not log_shows_crash(str(tmp_path / "missing.log"))


def test_a_crash_loop_longer_than_the_generations_keeps_its_first_crash(tmp_path):
    log = str(tmp_path / "gpu0.log")
    write_log(log, HEALTHY)
    rotate_log(log, 2)
    for attempt in range(5):
        write_log(log, f"attempt {attempt}\n" + CRASHED)
        rotate_log(log, 2)
    assert content(log + ".first-crash").startswith("attempt 0\n")
    assert sorted(os.listdir(tmp_path)) == ["gpu0.log.1", "gpu0.log.2", "gpu0.log.first-crash"]
    assert content(log + ".1").startswith("attempt 4\n")


def test_a_new_crash_after_a_healthy_run_replaces_the_first_crash(tmp_path):
    log = str(tmp_path / "gpu0.log")
    for text in ("old crash\n" + CRASHED, HEALTHY, "new crash\n" + CRASHED):
        write_log(log, text)
        rotate_log(log)
    assert content(log + ".first-crash").startswith("new crash\n")
    assert os.stat(log + ".first-crash").st_ino == os.stat(log + ".1").st_ino, "a hard link, not a copy"


def test_a_first_crash_is_copied_where_hard_links_are_impossible(tmp_path, monkeypatch):
    log = str(tmp_path / "gpu0.log")
    write_log(log, "only crash\n" + CRASHED)

    def no_links(*_args, **_kwargs):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "link", no_links)
    rotate_log(log)
    assert content(log + ".first-crash") == content(log + ".1")
    assert os.stat(log + ".first-crash").st_ino != os.stat(log + ".1").st_ino
    assert mode_of(log + ".first-crash") == 0o640


def test_is_crash_is_the_callers_choice(tmp_path):
    log = str(tmp_path / "gpu0.log")
    write_log(log, "no SGLang crash marker here\n")
    rotate_log(log, is_crash=lambda path: path == log)
    assert content(log + ".first-crash") == "no SGLang crash marker here\n"


@pytest.mark.parametrize("directory", ["/var/log", "/tmp", "/"])
def test_system_directories_are_never_made_private(directory):
    assert "cannot be made private" in log_dir_problem(directory)
