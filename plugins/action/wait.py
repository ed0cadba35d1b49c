# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs gpuops.sglang.wait in bounded slices and prints one progress line per host after each."""

from ansible.plugins.action import ActionBase
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness import (
    WAIT_ARGUMENT_SPEC,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.progress import (
    format_wait_progress,
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
        _validation, module_args = self.validate_argument_spec(argument_spec=WAIT_ARGUMENT_SPEC)
        host = host_label(self, task_vars)

        def progress_line(answer):
            return format_wait_progress(host, answer["servers"]) if answer.get("servers") else None

        result.update(run_in_slices(self, "gpuops.sglang.wait", module_args, task_vars, progress_line))
        return result
