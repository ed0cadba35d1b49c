# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The AnsiballZ payloads of this collection's modules, kept from one ansible-playbook run to the next.

Ansible builds a module's payload (the module and every module_utils it imports, found by compiling each of them)
once per run, in the run's own temp dir (``C.DEFAULT_LOCAL_TMP/ansiballz_cache``), which goes at exit. For our
modules that is about a quarter of a second of controller CPU per module and run: a relaunch of one host builds
three, a no-op one (the hold) - against a floor of about one second for a whole playbook. Here a run seeds its
cache with the payloads an earlier run built from the very same sources, and keeps the ones it builds for the next.

Kept under the local temp base (``ANSIBLE_LOCAL_TEMP``, ``~/.ansible/tmp``), one directory per digest of what a
payload is built from: ansible-core's version and every module and module_utils file of the collection. Any change
to a source is another digest, so a payload of other sources is never used: only what a call built is kept, and only
while the sources still have the digest the call began with. The newest KEPT_DIGESTS directories stay.
Payloads hold code only (the module's arguments travel beside them), which Ansible unpickles and runs on the hosts:
the cache is used only where this user alone can write it (owned, mode 0700, no symlink), else Ansible builds the
payload as it always does - as it does whenever the cache cannot be read or written.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import stat
import tempfile

import ansible
from ansible import constants as C

# The payload files of our modules in a run's cache: "<module fqn>-<compression>-<extensions>" (module_common).
OUR_PAYLOADS = "ansible_collections.gpuops.sglang.plugins.modules."
CACHE_DIR_NAME = "gpuops-sglang-ansiballz"
# A checkout whose sources change often (a developer's) leaves one directory per version; the newest few stay.
KEPT_DIGESTS = 8
PLUGINS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def sources_digest(plugins_dir=PLUGINS_DIR):
    """What every payload of ours is built from, as one digest: ansible-core's version and our modules' sources."""
    digest = hashlib.sha256(f"ansible-core {ansible.__version__} {os.path.dirname(ansible.__file__)}".encode())
    for kind in ("modules", "module_utils"):
        for root, dirs, files in os.walk(os.path.join(plugins_dir, kind)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    digest.update(os.path.relpath(path, plugins_dir).encode() + b"\0")
                    with open(path, "rb") as handle:
                        digest.update(handle.read() + b"\0")
    return digest.hexdigest()


class KeptPayloads:
    """This run's payload cache and the kept payloads of the same sources: ``seed`` before a module call, ``keep``
    after it."""

    def __init__(self, run_dir, kept, digest_now):
        self.run_dir = run_dir
        self.kept = kept
        # The sources' digest as it is when the call ends: a payload built across an edit of them is not kept.
        self._digest_now = digest_now
        # The run's payloads before the call: only what the call built is kept (older ones may be of older sources).
        self._before = _ours(run_dir)

    @classmethod
    def of_this_run(cls):
        """None when the sources cannot be read (nothing is kept then)."""
        try:
            digest = sources_digest()
        except OSError:
            return None
        return cls(os.path.join(C.DEFAULT_LOCAL_TMP, "ansiballz_cache"),
                   os.path.join(os.path.dirname(C.DEFAULT_LOCAL_TMP), CACHE_DIR_NAME, digest),
                   sources_digest.__wrapped__)

    def seed(self):
        """Copy the kept payloads this run has not built yet into its cache, where Ansible looks first."""
        if not (_private(os.path.dirname(self.kept)) and _private(self.kept)):
            return
        missing = _ours(self.kept) - self._before
        if not missing:
            return
        try:
            os.makedirs(self.run_dir, exist_ok=True)
        except OSError:
            return
        for name in missing:
            _copy(self.kept, self.run_dir, name)
        self._before |= missing

    def keep(self):
        """Keep the payloads this call built that are not kept yet; the first of new sources prunes the oldest."""
        new = _ours(self.run_dir) - self._before - _ours(self.kept)
        if not new or not self._same_sources():
            return
        root = os.path.dirname(self.kept)
        if not _private_root(root):
            return
        first = not os.path.isdir(self.kept)
        try:
            # Not makedirs: a root another call just emptied is not made again with the umask's mode.
            os.mkdir(self.kept, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return
        if not _private(self.kept):
            return
        for name in new:
            _copy(self.run_dir, self.kept, name)
        if first:
            prune(root)

    def _same_sources(self):
        try:
            return self._digest_now() == os.path.basename(self.kept)
        except OSError:
            return False


def _ours(directory):
    try:
        names = os.listdir(directory)
    except OSError:
        return set()
    # Not Ansible's lock files, nor its "-part" files being written.
    return {name for name in names if name.startswith(OUR_PAYLOADS) and not name.endswith((".lock", "-part"))}


def _copy(source_dir, target_dir, name):
    """Copy one payload so that nobody reads it half written (a temp file, then a rename)."""
    try:
        handle, temp_path = tempfile.mkstemp(dir=target_dir, prefix=".partial-")
    except OSError:
        return
    try:
        with os.fdopen(handle, "wb") as target, open(os.path.join(source_dir, name), "rb") as source:
            shutil.copyfileobj(source, target)
        os.replace(temp_path, os.path.join(target_dir, name))
    except OSError:
        try:
            os.unlink(temp_path)
        except OSError:
            pass


def _private_root(root):
    """Make ``root`` a private directory of ours; False where it cannot be (another user's, a link). One of ours that
    others could write to (left so by an earlier version) would otherwise turn the cache off for good: it is emptied -
    its payloads may have been planted - and made again."""
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        status = os.lstat(root)
    except OSError:
        return False
    if _our_directory(status) and status.st_mode & 0o077:
        shutil.rmtree(root, ignore_errors=True)
        try:
            os.mkdir(root, 0o700)
        except OSError:
            return False
    return _private(root)


def _our_directory(status):
    """``status`` (an lstat) is of a directory of this user, not a link to one."""
    return stat.S_ISDIR(status.st_mode) and status.st_uid == os.getuid()


def _private(directory):
    """A directory (not a link to one) that only this user can write to or read."""
    try:
        status = os.lstat(directory)
    except OSError:
        return False
    return _our_directory(status) and not status.st_mode & 0o077


def prune(cache_root, kept_digests=KEPT_DIGESTS):
    """Remove all but the newest ``kept_digests`` directories of payloads."""
    try:
        entries = [os.path.join(cache_root, name) for name in os.listdir(cache_root)]
        entries.sort(key=os.path.getmtime, reverse=True)
    except OSError:
        return
    for stale in entries[kept_digests:]:
        shutil.rmtree(stale, ignore_errors=True)
