# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a module of this collection in bounded slices, showing a progress line after each.

A slice returns after about ``progress_interval`` seconds with ``carry`` (what the next slice needs)
or without it when the work is done; the host side polls, the controller only reports.
"""

from __future__ import annotations

from ansible.utils.display import Display

display = Display()


def run_in_slices(action, module_name, module_args, task_vars, progress_line, next_args=None):
    """Call ``module_name`` until it returns no ``carry``; ``progress_line(result)`` -> str or None.

    ``next_args(result, module_args)``, when given, returns the arguments of the next slice.
    """
    carry = None
    try:
        while True:
            result = action._execute_module(module_name=module_name, module_args=dict(module_args, _carry=carry),
                                            task_vars=task_vars)
            line = progress_line(result)
            if line:
                display.display(line)
            carry = result.pop("carry", None)
            if carry is None:
                return result
            if next_args is not None:
                module_args = next_args(result, module_args)
    finally:
        action._remove_tmp_path(action._connection._shell.tmpdir)


def host_label(action, task_vars):
    return (task_vars or {}).get("inventory_hostname", action._play_context.remote_addr)
