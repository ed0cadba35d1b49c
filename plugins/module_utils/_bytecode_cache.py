# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Our module_utils compiled once per host, not in every module call.

A module runs from its AnsiballZ payload, a zip on ``sys.path``, which Python's zipimport reads as source: it compiles
every module it imports, each twice (once to name the module's file, ``get_filename``, once to run it), and never
keeps the result. Our modules import most of module_utils: about 0.1 s of the host's CPU per module call. Here the
importer of our package inside the payload names the file without compiling it and keeps the compiled code in a cache
of the module's user, one file per (Python bytecode version, optimization level, SHA-256 of the source text): a changed
source is another file, never stale code, and a file is only read when its header names that very key.

Where: ``~/.cache/gpuops-sglang-bytecode`` of the effective user, or the directory GPUOPS_SGLANG_BYTECODE_CACHE names
in the module's environment (an absolute path; anything else, ``off`` say: no cache). Compiled code runs as the
module's user (often root), so the cache is used only where this user alone can write: the directory is this user's
own, mode 0700, not a link, and opened once (every file in it through that handle, never following a link); a file in
it must be this user's, writable by nobody else and not a hard link. Anything else - another owner, a link, an
unreadable or damaged file, a full disk - compiles as zipimport does, silently; only our own files are ever removed. PYTHONDONTWRITEBYTECODE
(``sys.dont_write_bytecode``) is honoured: nothing is written. Outside a payload (the controller, the unit tests)
nothing is installed: Python's own importer reads the files there, with its own ``__pycache__``.

Python 3.10 or later (zipimport's exec_module); on older hosts nothing changes. Every module imports this first of our
module_utils (Ansible ships the package's own ``__init__.py`` empty): being imported installs it.
"""

import functools
import hashlib
import importlib.util
import marshal
import os
import pwd
import re
import stat
import sys
import types
import zipimport

try:
    from _imp import _fix_co_filename
except ImportError:  # not CPython: tracebacks then name the payload of the call that compiled the file
    def _fix_co_filename(code, filename):
        return None

CACHE_DIR_NAME = "gpuops-sglang-bytecode"
# The module's environment (the task's ``environment``) may name another directory, or turn the cache off.
CACHE_DIR_VARIABLE = "GPUOPS_SGLANG_BYTECODE_CACHE"
# A collection upgraded many times leaves the files of each version; past this many the directory is emptied.
MAX_FILES = 2000
_HEADER = b"gpuops-sglang bytecode 1\n"
# O_NONBLOCK: a FIFO planted at a name never blocks the open.
_OPEN_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
# Our files (a key, or a key being written): only those are ever removed from the directory.
_OUR_NAMES = re.compile(r"\.?[0-9a-f]{64}(\.[0-9]+)?")


def install(package_spec):
    """Import everything under the package of ``package_spec`` (our module_utils) through the caching importer - only
    when it is loaded from a payload's zip."""
    loader = getattr(package_spec, "loader", None)
    if not isinstance(loader, zipimport.zipimporter) or not hasattr(zipimport.zipimporter, "exec_module"):
        return False
    roots = tuple(path + os.sep for path in package_spec.submodule_search_locations or ())
    if not roots:
        return False
    cache = _Cache(_default_cache_dir())

    def hook(path):
        if not (path + os.sep).startswith(roots):
            raise ImportError("not our package")
        return CachingZipImporter(path, cache)

    for path in [path for path in sys.path_importer_cache if (path + os.sep).startswith(roots)]:
        del sys.path_importer_cache[path]
    sys.path_hooks.insert(0, hook)
    return True


def _default_cache_dir():
    """GPUOPS_SGLANG_BYTECODE_CACHE (empty or ``off``: none), else ``~/.cache/gpuops-sglang-bytecode`` of the
    effective user (not $HOME: become may keep the caller's); None for a user whose home is / or does not exist."""
    chosen = os.environ.get(CACHE_DIR_VARIABLE)
    if chosen is not None:  # an absolute path (a relative one would depend on the module's working directory)
        return chosen if os.path.isabs(chosen) else None
    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        return None
    return os.path.join(home, ".cache", CACHE_DIR_NAME) if home not in ("", "/") and os.path.isdir(home) else None


class CachingZipImporter(zipimport.zipimporter):
    """zipimport, with the file named without compiling and the compiled code kept in ``cache``."""

    def __init__(self, path, cache):
        super().__init__(path)
        self._cache = cache

    def _source_path(self, fullname):
        name = fullname.rpartition(".")[2]
        return os.path.join(self.archive, self.prefix + name + ("/__init__.py" if self.is_package(fullname) else ".py"))

    def get_filename(self, fullname):
        return self._source_path(fullname)  # is_package raises ZipImportError for a module not in the zip

    def get_code(self, fullname):
        try:
            source = self.get_source(fullname)
            if source is not None:  # else only compiled code in the zip (not in our payloads)
                filename = self._source_path(fullname)
                code = self._cache.compiled(source.encode(), filename)
                _fix_co_filename(code, filename)
                return code
        except Exception:  # noqa: BLE001, S110  # pylint: disable=broad-except
            pass  # the cache never fails an import: zipimport's own way (a source not in UTF-8, a damaged file, ...)
        return super().get_code(fullname)


def cache_key(source):
    """The name of the compiled code of ``source`` (bytes) for this Python: its bytecode version, its optimization
    level and the source text."""
    return hashlib.sha256(importlib.util.MAGIC_NUMBER + bytes([sys.flags.optimize]) + source).hexdigest()


def _header(key):
    return _HEADER + key.encode() + b"\n"


class _Cache:
    """Compiled code by its source, in a directory only this user can write; compiles when it cannot be used."""

    def __init__(self, directory):
        self._directory = directory
        self._files = None  # how many of our files the directory holds, counted at the first write of the call

    def compiled(self, source, filename):
        key = cache_key(source)
        fd = self._dir_fd
        if fd is not None:
            code = self._read(fd, key)
            if code is not None:
                return code
        code = compile(source.replace(b"\r\n", b"\n").replace(b"\r", b"\n"), filename, "exec", dont_inherit=True)
        if fd is not None and not sys.dont_write_bytecode:
            self._write(fd, key, code)
        return code

    @functools.cached_property
    def _dir_fd(self):
        """The cache directory, opened once per module call, or None when it is not this user's alone."""
        return _private_dir_fd(self._directory) if self._directory else None

    @staticmethod
    def _read(fd, key):
        try:
            file_fd = os.open(key, os.O_RDONLY | _OPEN_FLAGS, dir_fd=fd)
        except OSError:
            return None
        with os.fdopen(file_fd, "rb") as handle:
            status = os.fstat(handle.fileno())
            # Ours alone: not a hard link to a file elsewhere, writable by nobody else.
            if not stat.S_ISREG(status.st_mode) or status.st_uid != os.geteuid() or status.st_nlink != 1 \
                    or status.st_mode & 0o022:
                return None
            data = handle.read()
        header = _header(key)
        if not data.startswith(header):
            return None
        try:
            code = marshal.loads(data[len(header):])
        except (EOFError, ValueError, TypeError):
            return None
        return code if isinstance(code, types.CodeType) else None

    def _write(self, fd, key, code):
        temporary = f".{key}.{os.getpid()}"
        try:
            if self._files is None:
                self._files = sum(1 for name in os.listdir(fd) if _OUR_NAMES.fullmatch(name))
            if self._files >= MAX_FILES:
                _empty(fd)
                self._files = 0
            file_fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600, dir_fd=fd)
            with os.fdopen(file_fd, "wb") as handle:
                handle.write(_header(key) + marshal.dumps(code))
            os.replace(temporary, key, src_dir_fd=fd, dst_dir_fd=fd)
            self._files += 1
        except OSError:
            try:
                os.unlink(temporary, dir_fd=fd)
            except OSError:
                pass


def _private_dir_fd(directory):
    """An open handle of ``directory`` (made when missing, its parent too), when it is this user's alone."""
    try:
        for path in (os.path.dirname(directory), directory):
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _OPEN_FLAGS)
    except OSError:
        return None
    status = os.fstat(fd)
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.geteuid() or status.st_mode & 0o077:
        os.close(fd)
        return None
    return fd


def _empty(fd):
    """Our files gone from the directory (a directory named by GPUOPS_SGLANG_BYTECODE_CACHE may hold others')."""
    for name in os.listdir(fd):
        if _OUR_NAMES.fullmatch(name):
            try:
                os.unlink(name, dir_fd=fd)
            except OSError:
                pass


install(sys.modules[__spec__.parent].__spec__)
