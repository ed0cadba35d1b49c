# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs gpuops.sglang.wait in bounded slices and prints one progress line per host after each."""

from ansible_collections.gpuops.sglang.plugins.module_utils.argument_specs import (
    WAIT_ARGUMENT_SPEC,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.progress import (
    format_wait_progress,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.sliced import SlicedAction


class ActionModule(SlicedAction):
    MODULE = "gpuops.sglang.wait"

    def module_args(self, task_vars):
        _validation, module_args = self.validate_argument_spec(argument_spec=WAIT_ARGUMENT_SPEC)
        return module_args

    def progress_line(self, host, answer):
        return format_wait_progress(host, answer["servers"]) if answer.get("servers") else None
