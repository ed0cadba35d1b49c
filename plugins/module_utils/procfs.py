# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading /proc: ownership markers, process groups, GPU device holders and port owners.

Stdlib only; runs on the target. Every function takes ``proc_root`` so tests can point it elsewhere,
but the normal caller reads the live ``/proc``. A process can vanish between any two reads, so every
reader treats a missing or unreadable entry as "no such process" instead of raising.
"""

import collections
import os
import pwd
import re

from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    MARKER_VAR,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import (
    scrub_argv,
    scrub_text,
)

PROC_ROOT = "/proc"

# exit_status: shell style (128+signal when killed) for a dead but unreaped process (a zombie), else None.
ProcessInfo = collections.namedtuple(
    "ProcessInfo", ["pid", "ppid", "pgid", "sid", "state", "starttime", "cmdline", "argv", "exit_status"]
)

_TCP_LISTEN = "0A"
_SOCKET_LINK = re.compile(r"^socket:\[(\d+)\]$", re.ASCII)
_GPU_DEVICE_NAME = re.compile(r"^nvidia(\d+)$", re.ASCII)


def _read_bytes(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _pid_dirs(proc_root):
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isascii() and name.isdigit())


def _exit_status(fields):
    # Field 52 of /proc/<pid>/stat (Linux >= 3.5) holds the wait status while the process is a zombie.
    if len(fields) < 50 or fields[0] != "Z":
        return None
    wait_status = int(fields[49])
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def read_process(pid, proc_root=PROC_ROOT):
    """Return a ProcessInfo for ``pid``, or None when it does not exist (or vanished meanwhile).

    A stat file that does not have the shape proc(5) describes counts as no such process.
    """
    stat = _read_bytes(os.path.join(proc_root, str(pid), "stat"))
    if not stat:
        return None
    text = stat.decode("utf-8", "replace")
    # comm (field 2) is in parentheses and may itself contain spaces and ')': split at the last one.
    open_paren, close_paren = text.find("("), text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        return None
    comm = text[open_paren + 1:close_paren]
    fields = text[close_paren + 2:].split()
    # fields[0] is field 3 (state) of proc(5); starttime is field 22.
    try:
        numbers = {"pid": int(pid), "ppid": int(fields[1]), "pgid": int(fields[2]), "sid": int(fields[3]),
                   "starttime": int(fields[19]), "exit_status": _exit_status(fields)}
    except (IndexError, ValueError):
        return None
    raw_cmdline = _read_bytes(os.path.join(proc_root, str(pid), "cmdline")) or b""
    # Credentials are scrubbed here, at the source: every message and result shows command lines from here.
    # One can also hide inside one argument (`sh -c "python3 ... --api-key K"`): scrub each as text too.
    argv = [scrub_text(arg)
            for arg in scrub_argv([arg.decode("utf-8", "replace") for arg in raw_cmdline.split(b"\0") if arg])]
    return ProcessInfo(state=fields[0], cmdline=" ".join(argv) if argv else f"[{comm}]", argv=argv, **numbers)


def start_epoch(info, proc_root=PROC_ROOT):
    """Epoch seconds at which the process of ``info`` started (boot time + its start time in clock ticks)."""
    for line in (_read_bytes(os.path.join(proc_root, "stat")) or b"").decode().splitlines():
        if line.startswith("btime "):
            return int(line.split()[1]) + info.starttime / os.sysconf("SC_CLK_TCK")
    return None


def read_environ(pid, proc_root=PROC_ROOT):
    """Environment of ``pid`` as a dict; empty when unreadable (gone, or not ours to read)."""
    raw = _read_bytes(os.path.join(proc_root, str(pid), "environ")) or b""
    environ = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            environ[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return environ


def pid_namespace(pid, proc_root=PROC_ROOT):
    """The PID namespace of ``pid`` (``"self"`` for ours), or None when unreadable."""
    try:
        return os.readlink(os.path.join(proc_root, str(pid), "ns", "pid"))
    except OSError:
        return None


def marker_of(pid, proc_root=PROC_ROOT):
    """Name of the gpuops.sglang server that owns ``pid``, or None for a foreign process.

    A process in another PID namespace (a container seen from its host) belongs to that container's
    deployment even when it carries a marker with the same name, so it counts as foreign here.
    """
    if pid_namespace(pid, proc_root) != pid_namespace("self", proc_root):
        return None
    return read_environ(pid, proc_root).get(MARKER_VAR) or None


def list_processes(proc_root=PROC_ROOT):
    processes = (read_process(pid, proc_root) for pid in _pid_dirs(proc_root))
    return [info for info in processes if info is not None]


def group_members(pgid, proc_root=PROC_ROOT, processes=None):
    """Live processes whose process group is ``pgid``, among ``processes`` (list_processes()) or read now."""
    processes = list_processes(proc_root) if processes is None else processes
    return [info for info in processes if info.pgid == pgid and info.state not in ("Z", "X")]


def pid_alive(pid, starttime=None, proc_root=PROC_ROOT):
    """True when ``pid`` runs (zombies are dead) and, if given, still has ``starttime`` (no PID reuse)."""
    if not pid:
        return False
    info = read_process(pid, proc_root)
    if info is None or info.state in ("Z", "X"):
        return False
    return starttime is None or info.starttime == int(starttime)


def _fd_targets(pid, proc_root):
    """Yield the link target of every open fd of ``pid`` (skipping fds closed while we look)."""
    fd_dir = os.path.join(proc_root, str(pid), "fd")
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return
    for fd in fds:
        try:
            yield os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue


def gpu_holders(device_dir="/dev", minors=None, proc_root=PROC_ROOT):
    """Map GPU index -> sorted pids holding its device node ``<device_dir>/nvidia<minor>`` open.

    ``minors`` maps GPU index -> device minor (nvidia_smi.device_minors); None takes every ``nvidia<N>``
    node for GPU N. NVML cannot list processes inside containers (it is not PID-namespace aware), but every
    CUDA process keeps the device node open, so /proc/<pid>/fd is the reliable source.
    """
    # fd links are resolved absolute paths, so compare against the resolved device dir.
    real_dir = os.path.realpath(device_dir)
    index_of = None if minors is None else {int(minor): int(index) for index, minor in minors.items()}
    holders = {}
    for pid in _pid_dirs(proc_root):
        for target in set(_fd_targets(pid, proc_root)):
            directory, base = os.path.split(target)
            match = _GPU_DEVICE_NAME.match(base)
            if not match or directory != real_dir:
                continue
            minor = int(match.group(1))
            index = minor if index_of is None else index_of.get(minor)
            if index is not None:
                holders.setdefault(index, []).append(pid)
    return holders


def listening_sockets(proc_root=PROC_ROOT):
    """``{port: {socket inode, ...}}`` of every TCP socket that listens (any address, IPv4 or IPv6), from one read of
    the kernel's tables: a read costs milliseconds whatever the number of sockets, so a look at many ports reads
    them once and passes this to port_listener_pids."""
    listening = {}
    for table in ("tcp", "tcp6"):
        raw = _read_bytes(os.path.join(proc_root, "net", table))
        if not raw:
            continue
        for line in raw.decode("ascii", "replace").splitlines()[1:]:
            columns = line.split()
            if len(columns) < 10 or columns[3] != _TCP_LISTEN or columns[9] == "0":
                continue
            _address, _sep, local_port = columns[1].rpartition(":")
            try:
                listening.setdefault(int(local_port, 16), set()).add(columns[9])
            except ValueError:  # not a line of the kernel's format
                continue
    return listening


class ListeningSockets:
    """The listening sockets of one look at several ports: listening_sockets(), read at the first question."""

    def __init__(self, proc_root=PROC_ROOT):
        self.proc_root = proc_root
        self._table = None

    def table(self):
        if self._table is None:
            self._table = listening_sockets(self.proc_root)
        return self._table


def port_listener_pids(port, proc_root=PROC_ROOT, likely=(), listening=None):
    """``(listening, pids)``: whether a TCP socket listens on ``port`` (any address, IPv4 or IPv6), and the pids
    owning it that this user can see (none when another user's process holds it and /proc hides its fds).

    ``likely``: pids to look at first; when they own every listening socket of the port, no other is read (a scan of
    every process's descriptors costs milliseconds per look). ``listening``: the sockets of listening_sockets() when
    the caller read them for several ports, else they are read here."""
    inodes = (listening_sockets(proc_root) if listening is None else listening).get(int(port), set())
    if not inodes:
        return False, []
    owned_by_likely = {pid: _socket_inodes(pid, proc_root) & inodes for pid in likely if pid}
    if owned_by_likely and set().union(*owned_by_likely.values()) == inodes:
        return True, [pid for pid, owned in owned_by_likely.items() if owned]
    owners = []
    for pid in _pid_dirs(proc_root):
        for target in _fd_targets(pid, proc_root):
            match = _SOCKET_LINK.match(target)
            if match and match.group(1) in inodes:
                owners.append(pid)
                break
    return True, owners


def _socket_inodes(pid, proc_root):
    return {match.group(1) for match in map(_SOCKET_LINK.match, _fd_targets(pid, proc_root)) if match}


def port_listeners(port, proc_root=PROC_ROOT):
    """Pids owning a TCP socket that listens on ``port`` (any address, IPv4 or IPv6)."""
    return port_listener_pids(port, proc_root)[1]


def user_of(pid, proc_root=PROC_ROOT):
    """The name (or uid) of the user a process runs as; None when it is gone."""
    try:
        uid = os.stat(os.path.join(proc_root, str(pid))).st_uid
    except OSError:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def describe(pid, proc_root=PROC_ROOT):
    """User-facing summary of ``pid``: command line and owning server (None = foreign)."""
    info = read_process(pid, proc_root)
    return {
        "pid": int(pid),
        "cmdline": info.cmdline if info else None,
        "server": marker_of(pid, proc_root),
    }
