# The benchmark's view of a playbook run: when each task started and ended, on which host, how, with what
# result. Enabled by bench/ for its own runs only (ANSIBLE_CALLBACKS_ENABLED=bench_events).
from __future__ import annotations

DOCUMENTATION = """
name: bench_events
type: aggregate
short_description: task start and end times of a run as JSON lines (bench/ only)
description:
  - Appends one JSON object per event (task start, host result, end of the run) with the time it happened.
requirements:
  - enabled in callbacks_enabled
options:
  path:
    description: file the events are appended to
    env:
      - name: BENCH_EVENTS_FILE
    required: true
"""

import json
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_events"
    CALLBACK_NEEDS_ENABLED = True

    def _write(self, event, **fields):
        with open(self.get_option("path"), "a") as handle:
            handle.write(json.dumps(dict(fields, event=event, time=time.time())) + "\n")

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._write("task_start", task=task.get_name())

    def _result(self, status, result, ignore_errors=False):
        self._write(status, task=result.task.get_name(), host=result.host.get_name(), ignore_errors=ignore_errors,
                    result=json.loads(self._dump_results(result.result)))

    def v2_runner_on_ok(self, result):
        self._result("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result("failed", result, ignore_errors)

    def v2_runner_on_unreachable(self, result):
        self._result("unreachable", result)

    def v2_playbook_on_stats(self, stats):
        self._write("stats")
