# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs gpuops.sglang.wait in bounded slices and prints one progress line per host after each."""

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness import (
    WAIT_ARGUMENT_SPEC,
    format_progress,
)

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)

        _validation, module_args = self.validate_argument_spec(argument_spec=WAIT_ARGUMENT_SPEC)
        host = (task_vars or {}).get("inventory_hostname", self._play_context.remote_addr)
        carry = None
        try:
            while True:
                # Each call is one slice: it returns when every server is decided or after about
                # progress_interval seconds, with the trackers' state to hand to the next call.
                slice_result = self._execute_module(
                    module_name="gpuops.sglang.wait", module_args=dict(module_args, _carry=carry),
                    task_vars=task_vars)
                servers = slice_result.get("servers")
                if servers:
                    display.display(format_progress(host, servers))
                carry = slice_result.pop("carry", None)
                if carry is None:
                    result.update(slice_result)
                    return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
