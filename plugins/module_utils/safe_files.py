# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Files the modules write on the GPU host (logs, launch scripts, state, pid files), never through a symlink.

The modules run as root, often in directories other local users can write: a symbolic link planted
at a log or pid file name must never make them append to, truncate or chmod the file it points to.
Appends refuse a symlink (O_NOFOLLOW); whole-file writes and log rotation rename, which replaces a
symlink itself. Only the final path component is checked: a symlinked parent directory
(``/var/log -> /data/log``) is ordinary administration, and whoever can replace a parent directory
controls everything below it anyway.

Logs are private (0640 in a 0750 directory): SGLang logs its server_args, API key included.
Stdlib only: runs on the target.
"""

import errno
import json
import os
import shutil
import stat
import tempfile

from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    FIRST_CRASH_SUFFIX,
    rotated_log,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_log import parse_log

LOG_MODE = 0o640
LOG_DIRECTORY_MODE = 0o750
# Log generations kept by rotate_log; callers validate 1-100 (module option log_generations).
LOG_GENERATIONS = 5
# A crash is at the end of its log: this much of the tail is enough to see it, however long the server ran.
CRASH_SCAN_BYTES = 1024 * 1024


class SafeFileError(OSError):
    """A file refused because writing it could follow a link or reach something else; says what to do."""


def _link_target(path):
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _open_no_follow(path, flags, mode, what, remedy=None):
    """``(fd, stat)`` of the regular file ``path``; SafeFileError for a symlink or anything else."""
    try:
        # O_NONBLOCK: opening a FIFO must not hang; it is refused below like any non-regular file.
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise SafeFileError(
                f"{what} {path} is a symbolic link (to {_link_target(path)}); refusing to write through it: "
                + (remedy or f"remove it or point {what} at a regular file")) from None
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise SafeFileError(f"{what} {path} is not a regular file; refusing to use it") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SafeFileError(f"{what} {path} is not a regular file; refusing to use it")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def open_append_no_follow(path, mode=LOG_MODE, what="log_path"):
    """An fd appending to the regular file ``path`` (created with ``mode``); the caller closes it.

    Refuses a symbolic link and anything but a regular file (SafeFileError). An existing file's
    permissions are tightened to at most ``mode``, never loosened: logs written before hold the key too.
    """
    fd, info = _open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode, what)
    current = stat.S_IMODE(info.st_mode)
    if current & ~mode:
        try:
            os.fchmod(fd, current & mode)
        except BaseException:
            os.close(fd)
            raise
    return fd


def open_lock_file(path, mode=0o644):
    """An fd reading and writing the lock file ``path`` (created, never truncated); refuses a symlink."""
    fd, _info = _open_no_follow(path, os.O_RDWR | os.O_CREAT, mode, "lock file",
                                remedy="remove it (the next run creates a new one)")
    return fd


def read_no_follow(path, max_bytes=None):
    """The bytes of the regular file ``path`` (its last ``max_bytes`` when given); refuses a symlink."""
    fd, info = _open_no_follow(path, os.O_RDONLY, 0, "file", remedy="remove it")
    with os.fdopen(fd, "rb") as handle:
        if max_bytes is not None and info.st_size > max_bytes:
            handle.seek(info.st_size - max_bytes)
        return handle.read()


def read_json_object(path):
    """The JSON object in ``path``, or None when it is absent, unreadable, a symlink or not an object."""
    try:
        document = json.loads(read_no_follow(path).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def _replace_atomically(path, mode, fill):
    """Write a temporary file next to ``path`` with ``fill(handle)``, then rename it over ``path``."""
    directory = os.path.dirname(path) or "."
    # mkstemp creates exclusively (O_EXCL) with mode 0600: nothing is followed, nobody reads it half-written.
    fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            fill(handle)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        try:
            os.unlink(tmp_path)
        except FileNotFoundError:
            pass
        raise
    # The rename itself survives a power loss only once the directory is on disk.
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)


def write_atomic(path, data, mode):
    """Replace ``path`` by a file holding ``data`` (str: UTF-8) with permissions ``mode``, in one rename.

    Readers see the old file or the new one, never half of one. A symbolic link at ``path`` is
    replaced itself, never written through; the parent directory must exist.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    _replace_atomically(path, mode, lambda handle: handle.write(data))


# Directories that hold others' files: making one private would change the host beyond our own files.
SHARED_DIRECTORIES = frozenset(("/", "/tmp", "/var/tmp", "/var", "/var/log", "/var/lib", "/home", "/root", "/etc",
                                "/opt", "/srv", "/usr", "/dev/shm", "/run", "/mnt", "/media"))


def log_dir_problem(path):
    """Why ``path`` cannot be a private log directory (checked before anything is touched), or None.

    It may not exist yet (it is then created 0750). A symbolic link, a file, a sticky directory shared by
    everybody (like /tmp) and a system directory such as /var/log are refused.
    """
    if os.path.islink(path):
        return (f"log directory {path} is a symbolic link (to {_link_target(path)}); refusing to use it: point "
                "log_path into a real directory")
    if not os.path.lexists(path):
        return None
    if not os.path.isdir(path):
        return f"log directory {path} is not a directory"
    if os.path.realpath(path) in SHARED_DIRECTORIES or os.stat(path).st_mode & stat.S_ISVTX:
        return (f"log directory {path} is shared with other files and users and cannot be made private (the logs "
                "hold the API key); point log_path into a directory of its own, e.g. /var/log/gpuops-sglang")
    return None


def ensure_private_dir(path, mode=LOG_DIRECTORY_MODE):
    """Create directory ``path`` with ``mode``, or take every access of others from an existing one.

    Never loosens; refuses what ``log_dir_problem`` refuses.
    """
    problem = log_dir_problem(path)
    if problem:
        raise SafeFileError(problem)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        os.makedirs(path, mode)
        return
    try:
        current = stat.S_IMODE(os.fstat(fd).st_mode)
        if current & 0o007:
            os.fchmod(fd, current & ~0o007)
    finally:
        os.close(fd)


def log_shows_crash(path):
    """Whether the log at ``path`` ends in a crash; False when it is missing, a symlink or unreadable."""
    try:
        text = read_no_follow(path, CRASH_SCAN_BYTES).decode("utf-8", "replace")
    except OSError:
        return False
    return parse_log(text)["phase"] == "crashed"


def rotate_log(log_path, generations=LOG_GENERATIONS, is_crash=log_shows_crash):
    """Shift ``log`` -> ``log.1`` -> ... -> ``log.<generations>`` (the oldest is dropped) before a launch.

    ``generations``: 1-100, validated by the caller. Returns the path the previous log now has, or
    None when there was none. Renames only: never truncates (a reader following the old file keeps
    its data) and never follows a symbolic link (a link at any of these names is moved or replaced
    itself). Generations beyond ``generations`` left by a larger earlier setting stay untouched.

    A crash loop would rotate its first crash away: when the log being rotated shows a crash
    (``is_crash(path)``, called on existing paths) and the previous run's (``log.1``) did not, it is
    also kept as ``<log_path>.first-crash`` (a hard link, or a copy where links are impossible),
    replacing an older one.
    """
    if not os.path.lexists(log_path):
        return None
    previous = rotated_log(log_path, 1)
    first_crash = is_crash(log_path) and not (os.path.lexists(previous) and is_crash(previous))
    for generation in range(generations - 1, 0, -1):
        older = rotated_log(log_path, generation)
        if os.path.lexists(older):
            os.replace(older, rotated_log(log_path, generation + 1))
    os.replace(log_path, previous)
    if first_crash:
        try:
            _keep_as(previous, log_path + FIRST_CRASH_SUFFIX)
        except OSError:
            pass  # a full disk may refuse the copy: the crash is still in log.1, and the launch must go on
    return previous


def _keep_as(source, target):
    """Make ``target`` a second name of ``source`` (a copy where hard links are not possible)."""
    staging = f"{target}.{os.getpid()}"
    try:
        os.unlink(staging)  # left by a run that died between link and rename
    except FileNotFoundError:
        pass
    try:
        os.link(source, staging, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP):
            raise
        fd, _info = _open_no_follow(source, os.O_RDONLY, 0, "log_path")
        with os.fdopen(fd, "rb") as log:
            _replace_atomically(target, LOG_MODE, lambda handle: shutil.copyfileobj(log, handle))
        return
    os.replace(staging, target)
