# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Claims the host for a run: says who this run is, waits visibly, takes over runs of ours that died."""

import getpass
import os
import socket
import uuid

from ansible.plugins.action import ActionBase
from ansible_collections.gpuops.sglang.plugins.plugin_utils.sliced import (
    host_label,
    run_in_slices,
)


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


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        if args.get("state", "acquired") == "acquired":
            # The worker process of ansible-playbook: its parent is the ansible-playbook process of this run.
            args["run"] = {
                "run_id": args.pop("run_id", None) or uuid.uuid4().hex,
                "controller": socket.gethostname(),
                "controller_pid": os.getppid(),
                "user": getpass.getuser(),
                "awx_job_id": str(task_vars.get("awx_job_id") or task_vars.get("tower_job_id") or "") or None,
            }
        host = host_label(self, task_vars)

        def progress_line(answer):
            return f"{host}: waiting for the host, held by {answer['holder_text']}" if answer.get("holder") else None

        def next_args(answer, module_args):
            holder = answer.get("holder")
            # Our own controller can tell a dead run from a slow one; other controllers' runs must expire.
            if holder and holder.get("controller") == socket.gethostname() and \
                    not controller_process_alive(holder.get("controller_pid")):
                return dict(module_args, take_over=holder["run_id"])
            return module_args

        result.update(run_in_slices(self, "gpuops.sglang.host_lock", args, task_vars, progress_line, next_args))
        return result
