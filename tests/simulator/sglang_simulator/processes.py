"""The process model: children forked like SGLang's (titled ``sglang::...``, killed with their parent through
PR_SET_PDEATHSIG, or escaping the launcher's process group with the orphan_scheduler fault), descendants found
through /proc, SGLang's kill_process_tree, the waits for processes to be gone (wait_gone: dead and reaped, or a
zombie), and the detokenizer (which only sleeps).

Without the optional setproctitle a child renames only /proc/<pid>/comm (15 characters); its cmdline stays the
parent's."""

import ctypes
import os
import signal
import time

try:
    from setproctitle import setproctitle
except ImportError:  # Degrade: only /proc/<pid>/comm changes (15 chars), cmdline stays the parent's.
    def setproctitle(title):
        ctypes.CDLL(None, use_errno=True).prctl(15, title.encode()[:15], 0, 0, 0)  # PR_SET_NAME

PR_SET_PDEATHSIG = 1


def set_pdeathsig():
    """kill_itself_when_parent_died(): SIGKILL when the parent dies, as every SGLang child does."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    stat = handle.read()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_process_tree():
    """SGLang's kill_process_tree(os.getpid()): SIGKILL every descendant, then itself (exit 137)."""
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def gone(pid):
    """Whether a process has ended: no longer in /proc, or a zombie (its memory released)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def reap_children():
    """Reap every child of this process that has ended."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return


def wait_gone(pids, timeout):
    """Wait up to ``timeout`` seconds for the processes to end, reaping this process's children; the pids left."""
    deadline = time.monotonic() + timeout
    while True:
        reap_children()
        left = [pid for pid in pids if not gone(pid)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def detach():
    """Leave the parent for good: no parent-death signal, a session of its own (the unreaped_child fault)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0)
    os.setsid()


def fork_child(title, run, orphan=False):
    """Start a child running ``run()``; the child never returns into the caller's code."""
    pid = os.fork()
    if pid:
        return pid
    try:
        if orphan:
            os.setsid()  # escapes the launcher's process group, like schedulers in sglang #23627
        else:
            parent = os.getppid()
            set_pdeathsig()
            if os.getppid() != parent:
                os._exit(0)
        setproctitle(title)
        run()
    except KeyboardInterrupt:
        pass
    finally:
        os._exit(0)


def sleep_forever():
    while True:
        time.sleep(3600)


def run_detokenizer():
    sleep_forever()
