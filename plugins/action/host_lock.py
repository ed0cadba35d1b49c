# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Claims the host for a run: says who this run is, waits visibly, takes over runs of ours that died."""

import getpass
import os
import socket
import uuid

from ansible_collections.gpuops.sglang.plugins.plugin_utils.sliced import SlicedAction


def controller_process_alive(pid):
    """Whether ``pid`` runs on this controller (a run whose ansible-playbook is gone holds nothing)."""
    if not isinstance(pid, int) or pid <= 1:
        return True  # unknown: let its lease expire rather than guess
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ActionModule(SlicedAction):
    MODULE = "gpuops.sglang.host_lock"

    def module_args(self, task_vars):
        args = dict(self._task.args)
        if args.get("state", "acquired") == "acquired":
            # This runs in a worker process of ansible-playbook: its parent is the run's ansible-playbook.
            args["run"] = {
                "run_id": args.pop("run_id", None) or uuid.uuid4().hex,
                "controller": socket.gethostname(),
                "controller_pid": os.getppid(),
                "user": getpass.getuser(),
                "awx_job_id": str(task_vars.get("awx_job_id") or task_vars.get("tower_job_id") or "") or None,
            }
        return args

    def progress_line(self, host, answer):
        return f"{host}: waiting for the host, held by {answer['holder_text']}" if answer.get("holder_text") else None

    def next_args(self, answer, module_args):
        holder = answer.get("holder")
        # Our own controller can tell a dead run from a slow one; other controllers' runs must expire.
        if holder and holder.get("controller") == socket.gethostname() and \
                not controller_process_alive(holder.get("controller_pid")):
            return dict(module_args, take_over=holder["run_id"])
        return module_args
