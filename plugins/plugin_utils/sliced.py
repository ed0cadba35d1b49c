# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugins that run a module of this collection in bounded slices, with a progress line after each.

A slice returns after about ``progress_interval`` seconds with ``carry`` (what the next slice needs)
or without it when the work is done; the host side polls, the controller only reports. Each slice is one
module call, pipelined where the connection allows (pipelining.py). A worker whose ansible-playbook is gone
stops after the slice in flight: Ansible's workers lead process groups of their own, so killing the run's group
(ansible-runner's cancel, a kill -9) leaves them running, calling the host for nobody.
"""

from __future__ import annotations

import multiprocessing
import os

from ansible.utils.display import Display
from ansible_collections.gpuops.sglang.plugins.plugin_utils.pipelining import (
    PipelinedAction,
)

display = Display()
# The tasks that print progress lines about their servers while they run, for minutes: the stdout callback shows
# their banner first (host_lock's: who holds the host, or - a relaunch with nothing to change - the wait's lines).
PROGRESS_ACTIONS = frozenset(f"gpuops.sglang.{name}" for name in ("host_lock", "server", "wait", "probe"))


class SlicedAction(PipelinedAction):
    """Subclasses name ``MODULE`` and say what a slice's answer means in ``progress_line``."""

    TRANSFERS_FILES = False
    _requires_connection = True
    MODULE = None

    def module_args(self, task_vars):
        return dict(self._task.args)

    def progress_line(self, host, answer):
        """The line to show after a slice, or None."""
        raise NotImplementedError

    def next_args(self, answer, module_args):
        """The arguments of the next slice."""
        return module_args

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        host = task_vars.get("inventory_hostname", self._play_context.remote_addr)
        module_args, carry = self.module_args(task_vars), None
        # This runs in a worker that ansible-playbook forked through multiprocessing, which recorded its pid before
        # the fork: getppid() here would already name init if ansible-playbook died before this line.
        parent = multiprocessing.parent_process()
        controller_pid = parent.pid if parent is not None else os.getppid()
        try:
            while True:
                answer = self._execute_module(module_name=self.MODULE, module_args=dict(module_args, _carry=carry),
                                              task_vars=task_vars)
                line = self.progress_line(host, answer)
                if line:
                    display.display(line)
                carry = answer.pop("carry", None)
                if carry is None:
                    result.update(answer)
                    return result
                if os.getppid() != controller_pid:
                    result.update(failed=True, msg=f"ansible-playbook (pid {controller_pid}) is gone: stopped after "
                                                   "this slice; the host keeps what the run did so far")
                    return result
                module_args = self.next_args(answer, module_args)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
