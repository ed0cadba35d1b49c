# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the steps one server goes through in the detached worker mean, keyed by their names (naming.py): their
order, the ones in which its processes were signalled and the ones where it ends. The worker's state machine
(sequence.py, steps.py) and the controller's progress lines (plugin_utils/progress.py) read it. No imports but
naming.py: the controller's action plugins read it without the host-side code."""

from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    STEP_DONE,
    STEP_DRAINING,
    STEP_FAILED,
    STEP_KILLING,
    STEP_STOPPING,
    STEP_VERIFYING,
)

# In the order a server goes through them: out of the router and drained, SIGTERM, SIGKILL, its GPUs verified
# free (then launched), and where it ends.
STEPS = (STEP_DRAINING, STEP_STOPPING, STEP_KILLING, STEP_VERIFYING, STEP_DONE, STEP_FAILED)
# SIGTERM or SIGKILL was sent: waiting for its processes to go.
SIGNALLED_STEPS = (STEP_STOPPING, STEP_KILLING)
# Where a server ends: the worker is done with it.
FINISHED_STEPS = (STEP_DONE, STEP_FAILED)
