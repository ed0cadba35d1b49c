# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs gpuops.sglang.server in slices and prints which servers are still stopping, and why."""

from ansible.plugins.action import ActionBase
from ansible_collections.gpuops.sglang.plugins.plugin_utils.progress import (
    format_server_progress,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.sliced import (
    host_label,
    run_in_slices,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        host = host_label(self, task_vars)
        result.update(run_in_slices(self, "gpuops.sglang.server", self._task.args, task_vars,
                                    lambda answer: format_server_progress(host, answer.get("progress"))))
        return result
