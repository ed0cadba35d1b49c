# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Claims the host for a run: says who this run is, waits visibly, takes over runs of ours that died."""

import getpass
import os
import socket
import uuid

from ansible_collections.gpuops.sglang.plugins.plugin_utils.progress import (
    format_server_progress,
    format_wait_progress,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.run_identity import (
    awx_job_id,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.sliced import SlicedAction


def machine_id():
    """Tells this controller from another with the same host name (cloned images, localhost.localdomain)."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path) as handle:
                return handle.read().strip() or None
        except OSError:
            continue
    return None


def process_starttime(pid):
    """Field 22 of /proc/<pid>/stat on this controller, or None where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def holder_is_dead_here(holder):
    """The holder ran on this very controller and its ansible-playbook process is gone (not reused)."""
    pid = holder.get("controller_pid")
    if holder.get("controller") != socket.gethostname() or not holder.get("machine_id") or \
            holder["machine_id"] != machine_id() or not isinstance(pid, int) or pid <= 1:
        return False  # not ours to judge: let its lease expire
    starttime = process_starttime(pid)
    if starttime is None:  # gone, or a controller without /proc (macOS)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False
    return holder.get("controller_pid_starttime") not in (None, starttime)


class ActionModule(SlicedAction):
    MODULE = "gpuops.sglang.host_lock"

    def module_args(self, task_vars):
        args = dict(self._task.args)
        if args.get("state", "acquired") == "acquired":
            # This runs in a worker process of ansible-playbook: its parent is the run's ansible-playbook.
            args["run"] = {
                "run_id": args.pop("run_id", None) or uuid.uuid4().hex,
                "controller": socket.gethostname(),
                "machine_id": machine_id(),
                "controller_pid": os.getppid(),
                "controller_pid_starttime": process_starttime(os.getppid()),
                "user": getpass.getuser(),
                "awx_job_id": awx_job_id(task_vars),
            }
        return args

    def progress_line(self, host, answer):
        converged = answer.get("converged")
        if converged:  # the server and wait calls' lines, as their own calls would print them
            waited = (converged.get("wait") or {}).get("servers")
            lines = [format_server_progress(host, converged.pop("progress", None)),
                     format_wait_progress(host, waited) if waited else None]
            return "\n".join(line for line in lines if line) or None
        return f"{host}: waiting for the host, held by {answer['holder_text']}" if answer.get("holder_text") else None

    def next_args(self, answer, module_args):
        holder = answer.get("holder")
        # Our own controller can tell a dead run from a slow one; other controllers' runs must expire.
        if holder and holder_is_dead_here(holder):
            return dict(module_args, take_over=holder["run_id"])
        return module_args
