# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who runs this task, as the host's run lease and run journal record it: controller, user, AWX job."""

from __future__ import annotations

import getpass
import socket


def awx_job_id(task_vars):
    """The AWX/AAP job id of this run (its extra var), or None outside AWX."""
    return str(task_vars.get("awx_job_id") or task_vars.get("tower_job_id") or "") or None


def run_by(task_vars):
    """``{controller, user, awx_job_id}`` of this run (None values left out)."""
    by = {"controller": socket.gethostname(), "user": getpass.getuser(), "awx_job_id": awx_job_id(task_vars)}
    return {key: value for key, value in by.items() if value}
