# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs gpuops.sglang.journal once, like ansible.builtin.normal, pipelined where the connection allows."""

from ansible_collections.gpuops.sglang.plugins.plugin_utils.pipelining import (
    ModuleAction,
)


class ActionModule(ModuleAction):
    pass
