# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible's default output with each failure said once, as its own sentence."""

from __future__ import annotations

DOCUMENTATION = r"""
name: operator
type: stdout
short_description: Ansible's default output, with each failure said once as its own sentence
description:
  - The output of C(ansible.builtin.default) (same options), except for failed tasks.
  - ansible-core prints every failure twice, an C([ERROR]) block with the task's origin and then the result;
    this callback prints the result only.
  - The words Ansible wraps around a message raised while templating or in an action (C(Task failed:),
    C(Finalization of task args for ... failed:), C(The filter plugin ... failed:)) are removed, leaving the
    sentence.
  - Keys that restate a failure for Ansible's own use are left out - a failed role argument validation's whole
    argument spec, an assert's expression, a failed_when's verdict.
  - At C(-vvv) and above, failures are shown exactly as C(ansible.builtin.default) shows them.
  - The repository's C(ansible.cfg) sets it; set C(stdout_callback = gpuops.sglang.operator) in yours for the
    same output (AWX uses its own callback).
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - set as the stdout callback in the configuration
"""

from ansible.plugins.callback.default import CallbackModule as DefaultCallback
from ansible_collections.gpuops.sglang.plugins.plugin_utils.failure_text import (
    operator_failure,
)


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "gpuops.sglang.operator"

    def v2_runner_on_failed(self, result, ignore_errors=False):
        operator_failure(result.result, self._display.verbosity)
        super().v2_runner_on_failed(result, ignore_errors)

    def v2_runner_item_on_failed(self, result):
        operator_failure(result.result, self._display.verbosity)
        super().v2_runner_item_on_failed(result)
