# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs gpuops.sglang.server_info once, like ansible.builtin.normal, pipelined where the connection allows; tells
the module who runs it, for the run journal (a status run holds no run lease that would say it)."""

from ansible_collections.gpuops.sglang.plugins.plugin_utils.pipelining import (
    ModuleAction,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.run_identity import run_by


class ActionModule(ModuleAction):
    def run(self, tmp=None, task_vars=None):
        self._task.args = dict(self._task.args, _run_by=run_by(task_vars or {}))
        return super().run(tmp, task_vars)
