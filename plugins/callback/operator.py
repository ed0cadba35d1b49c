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
  - The message is printed as plain text after the host's C(fatal) label - a list of problems one per line, a
    traceback as its lines - and the rest of the result after it.
  - At C(-vvv) and above, failures are shown exactly as C(ansible.builtin.default) shows them.
  - Interrupted (Ctrl-C) in a task of M(gpuops.sglang.server), M(gpuops.sglang.wait) or M(gpuops.sglang.probe),
    it says what goes on on the hosts (their work runs detached there) and how to see it, after Ansible's own
    C(User interrupted execution).
  - At verbosity 0 a run prints what it changed, what it says and what failed - ok results with nothing to say,
    skipped tasks and includes are left out (as with C(display_ok_hosts), C(display_skipped_hosts) and
    C(display_included_hosts) false), but what a task says to the operator (M(ansible.builtin.debug)) and every
    warning are shown, and a task that prints progress lines while it runs (M(gpuops.sglang.server),
    M(gpuops.sglang.wait), M(gpuops.sglang.probe)) shows its banner before them (not in check mode).
  - At C(-v) and above, every task is shown as C(ansible.builtin.default) shows it.
  - The repository's C(ansible.cfg) sets it; set C(stdout_callback = gpuops.sglang.operator) in yours for the
    same output (AWX uses its own callback).
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - set as the stdout callback in the configuration
"""

import atexit

from ansible import constants as C
from ansible import context
from ansible.playbook.task_include import TaskInclude
from ansible.plugins.callback.default import CallbackModule as DefaultCallback
from ansible.vars.clean import strip_internal_keys
from ansible_collections.gpuops.sglang.plugins.filter.sglang import (
    import_all as import_filter_code,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.failure_text import (
    SHOW_EVERYTHING_VERBOSITY,
    failure_sentence,
    interruption_note,
    operator_failure,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.sliced import (
    PROGRESS_ACTIONS,
)

# As the callback gpuops.sglang.preload does: every task's fork inherits the filters' controller code.
import_filter_code()

# Off at verbosity 0, for a short run; -v shows every task.
_QUIET_OPTIONS = ("display_ok_hosts", "display_skipped_hosts", "display_included_hosts")
# The tasks whose ok result is a message to the operator.
_SAYING_ACTIONS = frozenset(("ansible.builtin.debug", "debug", "ansible.legacy.debug"))


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "gpuops.sglang.operator"

    def __init__(self):
        super().__init__()
        # (name, module) of the task that runs now: what an interruption cuts short.
        self._running_task = None
        self._ended = False
        # An ok result that says something to the operator is being printed.
        self._saying = False
        atexit.register(self._say_what_goes_on)

    def get_option(self, k):
        if k in _QUIET_OPTIONS:
            return self._display.verbosity >= 1 or self._saying
        return super().get_option(k)

    def v2_playbook_on_task_start(self, task, is_conditional):
        action = task.resolved_action or task.action
        self._running_task = (task.get_name(), action)
        super().v2_playbook_on_task_start(task, is_conditional)
        if action in PROGRESS_ACTIONS and self._last_task_banner != task._uuid and not context.CLIARGS.get("check"):
            self._print_task_banner(task)

    def v2_runner_on_ok(self, result):
        if isinstance(result.task, TaskInclude) and not self.get_option("display_included_hosts"):
            return
        if self.get_option("display_ok_hosts") or result.result.get("changed"):
            super().v2_runner_on_ok(result)
        elif result.task.action in _SAYING_ACTIONS:
            self._saying = True
            try:
                super().v2_runner_on_ok(result)
            finally:
                self._saying = False
        else:
            # Not printed, but its warnings are (a variable the collection does not know, ...).
            self._handle_warnings_and_exception(result)

    def v2_playbook_on_stats(self, stats):
        self._ended = True
        super().v2_playbook_on_stats(stats)

    def _say_what_goes_on(self):
        """At exit without the play's end (ansible-playbook interrupted): what the interrupted task left running."""
        # In check mode nothing runs detached on the hosts.
        if self._ended or self._running_task is None or context.CLIARGS.get("check"):
            return
        note = interruption_note(*self._running_task)
        if note:
            self._display.display(note, color=C.COLOR_WARN, stderr=True)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if not self._said_once(result, "fatal", C.COLOR_ERROR):
            super().v2_runner_on_failed(result, ignore_errors)
        elif ignore_errors:
            self._display.display("...ignoring", color=C.COLOR_SKIP)

    def v2_runner_on_unreachable(self, result):
        if not self._said_once(result, "unreachable", C.COLOR_UNREACHABLE):
            super().v2_runner_on_unreachable(result)
        elif result.task.ignore_unreachable:
            self._display.display("...ignoring", color=C.COLOR_SKIP)

    def v2_runner_item_on_failed(self, result):
        if not self._said_once(result, "failed", C.COLOR_ERROR, item=True):
            super().v2_runner_item_on_failed(result)

    def _said_once(self, result, label, color, item=False):
        """Print a failed or unreachable result as ``<label>: [host]: <its sentence>``, the sentence as plain text
        (not a YAML string: quotes doubled, a traceback one escaped line), then whatever else the result says.
        False, printing nothing, where Ansible's own output is kept: -vvv, no sentence, a loop's results."""
        shown = operator_failure(result.result, self._display.verbosity)
        sentence = failure_sentence(shown.get("msg"))
        if sentence is None or self._display.verbosity >= SHOW_EVERYTHING_VERBOSITY or (
                not item and result.task.loop and "results" in shown):
            return False
        if self._last_task_banner != result.task._uuid:
            self._print_task_banner(result.task)
        self._handle_warnings_and_exception(result)
        self._clean_results(shown, result.task.action)
        if self._display.verbosity < 2 and self.get_option("show_task_path_on_failure"):
            self._print_task_path(result.task)
        said = {"msg", "changed", "failed", "unreachable"}
        where = f"[{self.host_label(result)}]"
        if item:
            # The item is named in the label; the loop's own variables restate it.
            where += f" (item={self._get_item_label(shown)})"
            said |= {"ansible_loop", "ansible_loop_var", "ansible_index_var", shown.get("ansible_loop_var", "item")}
        rest = {key: value for key, value in shown.items() if key not in said}
        rest = self._dump_results(rest) if strip_internal_keys(dict(rest)) else ""
        self._display.display(f"{label}: {where}: {sentence}" + (f"\n{rest}" if rest else ""),
                              color=color, stderr=self.get_option("display_failed_stderr"))
        return True
