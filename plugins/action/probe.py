# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs gpuops.sglang.probe in bounded slices and prints the load's progress after each."""

from ansible_collections.gpuops.sglang.plugins.module_utils.argument_specs import (
    PROBE_ARGUMENT_SPEC,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.progress import (
    format_probe_progress,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.sliced import SlicedAction


class ActionModule(SlicedAction):
    MODULE = "gpuops.sglang.probe"

    def module_args(self, task_vars):
        _validation, module_args = self.validate_argument_spec(argument_spec=PROBE_ARGUMENT_SPEC)
        return module_args

    def progress_line(self, host, answer):
        return format_probe_progress(host, answer.pop("progress", None))
