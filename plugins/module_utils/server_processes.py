# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one owner of a server's processes: which processes are ours, and signalling them.

Every module that finds, judges or kills a server's processes (server, wait's stall kill,
server_info's discovery) goes through ``ServerProcesses``, so they all keep the same rules:

- a process is ours when it carries the ownership marker AND the deployment variable naming this
  ``state_dir``, in our own PID namespace; a marker without a deployment variable (or with an empty
  one) is foreign - launch scripts export both, so a server started by hand or at boot from its
  script still belongs to its deployment;
- a recorded pid (and its process group) counts only while it still has the recorded start time: a
  state file without a valid ``pid_starttime`` never makes a live process ours;
- the caller's own lineage (the module, ansible-playbook on a local connection, the operator's
  shell) is never signalled, whatever it carries.
"""

import collections
import contextlib
import os
import signal

from ansible_collections.gpuops.sglang.plugins.module_utils import naming, procfs

# verdict: "ours", "foreign" (no marker, or no deployment variable) or "other_deployment".
Owner = collections.namedtuple("Owner", ["verdict", "server", "deployment"])


def own_lineage(proc_root=procfs.PROC_ROOT):
    """This process and its ancestors."""
    lineage, pid = set(), os.getpid()
    while pid > 1 and pid not in lineage:
        lineage.add(pid)
        info = procfs.read_process(pid, proc_root)
        pid = info.ppid if info else 0
    return lineage


def recorded_starttime(recorded):
    """The recorded pid start time as an int, or None when absent or not a number."""
    value = (recorded or {}).get("pid_starttime")
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


class ServerProcesses:
    """Finds and signals the processes of the servers of the deployment of ``state_dir``."""

    def __init__(self, state_dir, proc_root=procfs.PROC_ROOT):
        self.state_dir = os.path.realpath(state_dir)
        self.proc_root = proc_root
        self.protected = own_lineage(proc_root)
        self._namespace = procfs.pid_namespace("self", proc_root)
        self._look = None

    @contextlib.contextmanager
    def one_look(self):
        """Within it, the processes and their owners are read from /proc once, however many servers are looked at:
        a plan of the host is made from one picture of it (of_server read every process once per server). Only for
        reading: signal() and kill_now() refuse to run inside one."""
        if self._look is not None:
            raise RuntimeError("one_look inside one_look: the inner one would end the outer one's picture")
        self._look = {"owners": {}}
        try:
            yield
        finally:
            self._look = None

    def _processes(self):
        if self._look is None:
            return procfs.list_processes(self.proc_root)
        if "processes" not in self._look:
            self._look["processes"] = procfs.list_processes(self.proc_root)
        return self._look["processes"]

    def owner(self, pid, starttime=None):
        """Who ``pid`` belongs to, from one read of its environment; inside a look, one read per process - known by
        its pid and ``starttime``, so that a pid reused since is read again (without a start time: always read)."""
        if self._look is None or starttime is None:
            return self._read_owner(pid)
        owners = self._look["owners"]
        if (pid, starttime) not in owners:
            owners[pid, starttime] = self._read_owner(pid)
        return owners[pid, starttime]

    def _refuse_inside_a_look(self):
        if self._look is not None:
            raise RuntimeError("signalling inside one_look: its picture of the processes may be stale")

    def _read_owner(self, pid):
        if procfs.pid_namespace(pid, self.proc_root) != self._namespace:
            return Owner("foreign", None, None)  # a container's process seen from its host
        environ = procfs.read_environ(pid, self.proc_root)
        server = environ.get(naming.MARKER_VAR) or None
        deployment = environ.get(naming.DEPLOYMENT_VAR) or None
        if server is None or deployment is None:
            return Owner("foreign", server, deployment)
        if os.path.realpath(deployment) != self.state_dir:
            return Owner("other_deployment", server, deployment)
        return Owner("ours", server, deployment)

    def foreign_listener(self, name, port, likely=(), sockets=None):
        """Why ``port`` is not server ``name``'s own, or None when nothing listens on it or only processes of the
        server do (its marker and deployment, run by this user). Checked before a request carries the API key and
        before a 200 counts: SGLang binds its port only after loading the weights, and anyone may bind it first.
        ``sockets``: a procfs.ListeningSockets shared by the servers of one look (the kernel's tables read once)."""
        listening, pids = procfs.port_listener_pids(port, self.proc_root, likely,
                                                    sockets.table() if sockets is not None else None)
        if not listening:
            return None
        if not pids:
            return f"port {port} is answered by a process this user cannot see, not by {name}"
        for pid in pids:
            owner = self.owner(pid)
            user = procfs.user_of(pid, self.proc_root)
            if owner.verdict != "ours" or owner.server != name or user != procfs.user_of("self", self.proc_root):
                return f"port {port} is answered by foreign process {pid} (user {user}), not by {name}"
        return None

    def main_process(self, recorded):
        """The recorded main process while it still runs with its recorded start time, else None."""
        pid, starttime = (recorded or {}).get("pid"), recorded_starttime(recorded)
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1 or starttime is None:
            return None
        info = procfs.read_process(pid, self.proc_root)
        if info is None or info.state in ("Z", "X") or info.starttime != starttime:
            return None
        return info

    def alive(self, pid, starttime):
        return procfs.pid_alive(pid, starttime, self.proc_root)

    def of_server(self, name, recorded=None):
        """``(processes, group)``: live processes of server ``name`` by marker, plus the members of its
        recorded process group while the group's leader is the very process we launched."""
        found = {}
        for info in self._processes():
            if info.state in ("Z", "X") or info.pid in self.protected:
                continue
            owner = self.owner(info.pid, info.starttime)
            if owner.verdict == "ours" and owner.server == name:
                found[info.pid] = info
        group, members = None, []
        leader = self.main_process(recorded)
        # A leaderless group with that number may be a stranger's (after a reboot or pid wrap-around).
        if leader is not None and leader.pgid == leader.pid == recorded.get("pgid"):
            members = procfs.group_members(leader.pid, self.proc_root, self._processes())
            if members:
                group = leader.pid
                found.update((info.pid, info) for info in members if info.pid not in self.protected)
        if self.protected & {info.pid for info in members}:
            group = None  # we run inside that group: signal its members one by one, never the group
        return found, group

    def signal(self, processes, groups, sig):
        """Send ``sig`` to ``groups`` and to every process of ``processes`` ({pid: info}) not in them.

        Returns the processes that were alive (with their recorded start time) before the signal.
        """
        self._refuse_inside_a_look()
        alive = {pid: info for pid, info in processes.items()
                 if pid not in self.protected and self.alive(pid, info.starttime)}
        signalled_groups = set()
        for group in groups:
            # Only a group still led by a process of ours (same start time): its number may be a stranger's now.
            if group and group not in self.protected and group in alive:
                try:
                    os.killpg(group, sig)
                    signalled_groups.add(group)
                except OSError:
                    pass
        for pid, info in list(alive.items()):
            current = procfs.read_process(pid, self.proc_root)
            if current is not None and current.pgid in signalled_groups:
                continue  # reached by the group signal (read now: it may have changed its group since)
            try:
                os.kill(pid, sig)
            except OSError:
                del alive[pid]
        return alive

    def still_alive(self, processes):
        return {pid: info for pid, info in processes.items() if self.alive(pid, info.starttime)}

    def kill_now(self, name, recorded=None):
        """SIGKILL every process of server ``name`` at once (a stalled startup has nothing to drain)."""
        self._refuse_inside_a_look()
        processes, group = self.of_server(name, recorded)
        return sorted(self.signal(processes, [group] if group else [], signal.SIGKILL))
