# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What happens to one server while the worker acts on its plan: its ServerRun.

The plan (plan.py) is what was decided and stays as it was; the run is what the steps (steps.py) and the
sequence (sequence.py) record as they go, and what the result (result.py) reports.
"""

from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.plan import (
    gpu_keyed,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    STEP_FAILED,
)


class ServerRun:
    """What happened to one server of the call: ``plan`` (a ServerPlan), then what the worker did with it."""

    def __init__(self, plan):
        self.plan = plan
        # What of it runs: what the plan saw, and children spawned while it shuts down (steps._rescan).
        self.processes = dict(plan.processes)
        self.group = plan.group
        self.killed = []
        self.last_signal = {}
        self.launched = {}
        self.rotated_log = None
        self.timings = {}
        self.gpu_memory_after = {}
        # The worker's progress through kill -> verify -> launch (steps.py).
        self.step = None
        self.step_since = None
        self.error = None
        self.down = False
        self.gpu_used = {}
        self.gpu_holders = None
        self.port_holders = []
        self.processes_left = {}
        self.stop_started = None
        # The size of its log when the first signal was sent: what it writes after that is read for its shutdown.
        self.log_offset = None
        # Its drain (draining.Drain) and, behind a router, the router entries taken out.
        self.drain = None
        self.router_removed = None

    @property
    def name(self):
        return self.plan.name

    @property
    def gpu_used_mib(self):
        return gpu_keyed(self.gpu_used)

    def targets(self):
        return {**self.plan.blockers, **self.processes}

    def enter(self, step, now):
        self.step, self.step_since = step, now

    def fail(self, now, error, down):
        self.enter(STEP_FAILED, now)
        self.error, self.down = error, down

    def progress(self, now):
        return {"name": self.plan.name, "step": self.step, "seconds": round(now - (self.step_since or now), 1),
                "action": self.plan.action, "processes_left": len(self.processes_left),
                "requests_left": self.drain.requests_left if self.drain else None,
                "signal": "SIGKILL" if "SIGKILL" in self.last_signal.values() else (
                    "SIGTERM" if self.last_signal else None),
                "gpu_used_mib": self.gpu_used_mib, "port_holders": self.port_holders, "error": self.error}
