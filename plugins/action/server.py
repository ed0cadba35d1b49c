# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs gpuops.sglang.server in slices and prints which servers are still stopping, and why."""

from ansible_collections.gpuops.sglang.plugins.plugin_utils.progress import (
    format_server_progress,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.sliced import SlicedAction


class ActionModule(SlicedAction):
    MODULE = "gpuops.sglang.server"

    def progress_line(self, host, answer):
        # The snapshot is for these lines only, not part of the task's result.
        return format_server_progress(host, answer.pop("progress", None))
