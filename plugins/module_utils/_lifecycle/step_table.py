# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steps one server goes through in the detached worker, by name: the worker's state machine (steps.py)
switches on them, the plan's progress reports them and the controller words them (plugin_utils/progress.py).
Names only, no imports: the controller's action plugins read them without the host-side code."""

# In the order a server goes through them: out of the router and drained, SIGTERM, SIGKILL, its GPUs verified
# free (then launched), and where it ends.
STEP_DRAINING, STEP_STOPPING, STEP_KILLING, STEP_VERIFYING = "draining", "stopping", "killing", "verifying"
STEP_DONE, STEP_FAILED = "done", "failed"
FINISHED_STEPS = (STEP_DONE, STEP_FAILED)
