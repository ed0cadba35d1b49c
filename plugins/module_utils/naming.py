# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The naming contract: every name gpuops.sglang leaves on a host, in one place.

The ownership markers a server process carries in its environment, the rule a server name follows, the layout
of ``state_dir``, the names of the systemd units and of rotated logs, and the step names of the server worker
(which its job record on the host carries to the controller). A name changed here changes what an older run
left on a host into something this code no longer finds: state files, locks, units and markers outlive a
release. The roles render the markers through the launch_env filter (plugin_utils/launch_script.py), and
tests/unit/plugins/module_utils/test_naming.py checks the role files against this module.

Stdlib only and no other module_utils: every module's payload may carry it, and the controller imports it.

``<state_dir>/`` holds:

- ``<name>.json``: the state file of server ``<name>`` (server_state.py);
- ``.lock``: the host lock, flocked by whoever signals or launches server processes (server_state.py);
- ``run.json`` and ``.run.lock``: the lease of the run that holds the host, and the flock around it (run_lock.py);
- ``journal.jsonl`` and ``.journal.lock``: the run journal and the flock of its writers (journal.py);
- ``jobs/<job_id>.json``: the record of a detached worker (host_job.py);
- ``last-good/<name>.sh`` and ``<name>.json``, and ``<name>.previous.sh``/``.json``: each server's last good
  configuration and the generation before it (last_good.py).
"""

import hashlib
import os
import re

# Ownership markers, in the environment of every process of a server.
# The server a process belongs to; its value is the server name.
MARKER_VAR = "GPUOPS_SGLANG_SERVER"
# The state_dir of the deployment that launched the process: two deployments on one host (each with its own
# state_dir) may both have a server called gpu0, and must not see each other's processes as theirs.
DEPLOYMENT_VAR = "GPUOPS_SGLANG_STATE_DIR"
# Every marker starts with it: a user may set no variable of that name (plugin_utils/launch_script.py).
MARKER_PREFIX = "GPUOPS_SGLANG_"
MARKERS = (MARKER_VAR, DEPLOYMENT_VAR)

# Server names are marker values and file names: letters, digits, ".", "_" and "-", not starting with a symbol.
SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


# Names whose state file <state_dir>/<name>.json is another file of the state dir.
RESERVED_SERVER_NAMES = ("run",)


def server_name_problem(name):
    """Why ``name`` cannot name a server, or None. Matched whole: ``re.match`` with ``$`` would also take a name
    with a trailing newline."""
    if not isinstance(name, str) or SERVER_NAME.fullmatch(name) is None:
        return (f"name {name!r} must start with a letter or digit and contain only letters, digits, '.', '_' and '-' "
                "(it names files and the marker value)")
    if name in RESERVED_SERVER_NAMES:
        return f"name {name!r} is reserved: its state file would be the run lease {RUN_LEASE_NAME}; choose another"
    return None


def valid_server_name(name):
    return server_name_problem(name) is None


# The state dir and what lies in it (see the module docstring).
DEFAULT_STATE_DIR = "/var/lib/gpuops-sglang"
STATE_SUFFIX = ".json"
HOST_LOCK_NAME = ".lock"
RUN_LEASE_NAME = "run.json"
RUN_LEASE_LOCK_NAME = ".run.lock"
JOURNAL_NAME = "journal.jsonl"
JOURNAL_LOCK_NAME = ".journal.lock"
JOBS_DIR = "jobs"
JOB_SUFFIX = ".json"
LAST_GOOD_DIR = "last-good"
# The last good generations, newest first: "" is the current one, ".previous" the one before it.
LAST_GOOD_GENERATIONS = ("", ".previous")
# A last good generation is a script and its record.
LAST_GOOD_SUFFIXES = (".sh", ".json")


def state_file(state_dir, name):
    """The state file of server ``name``."""
    return os.path.join(state_dir, name + STATE_SUFFIX)


def host_lock_file(state_dir):
    return os.path.join(state_dir, HOST_LOCK_NAME)


def run_lease_file(state_dir):
    return os.path.join(state_dir, RUN_LEASE_NAME)


def run_lease_lock_file(state_dir):
    return os.path.join(state_dir, RUN_LEASE_LOCK_NAME)


def journal_file(state_dir):
    return os.path.join(state_dir, JOURNAL_NAME)


def journal_lock_file(state_dir):
    return os.path.join(state_dir, JOURNAL_LOCK_NAME)


def jobs_dir(state_dir):
    return os.path.join(state_dir, JOBS_DIR)


def job_file(state_dir, job_id):
    return os.path.join(jobs_dir(state_dir), job_id + JOB_SUFFIX)


def last_good_dir(state_dir):
    return os.path.join(state_dir, LAST_GOOD_DIR)


def last_good_file(state_dir, name, suffix, generation=""):
    """``<state_dir>/last-good/<name><generation><suffix>``: ``suffix`` one of LAST_GOOD_SUFFIXES, ``generation``
    one of LAST_GOOD_GENERATIONS."""
    return os.path.join(last_good_dir(state_dir), name + generation + suffix)


# Launch scripts and logs: the roles' defaults, <script_dir>/<name>.sh and <log_dir>/<name>.log
# (plugin_utils/topology.py); a log's earlier runs sit beside it as <log>.1 (the newest) to <log>.<n>.
SCRIPT_SUFFIX = ".sh"
LOG_SUFFIX = ".log"
# A copy of the log of the first crash of a crash loop, kept while the loop rotates the later ones away.
FIRST_CRASH_SUFFIX = ".first-crash"


def launch_script_file(script_dir, name):
    return f"{script_dir.rstrip('/')}/{name}{SCRIPT_SUFFIX}"


def log_file(log_dir, name):
    return f"{log_dir.rstrip('/')}/{name}{LOG_SUFFIX}"


def rotated_log(log_path, generation):
    """The log of the ``generation``-th run before the current one (1: the one just before)."""
    return f"{log_path}.{generation}"


# systemd units (launcher systemd): one per deployment and server.
UNIT_PREFIX = "gpuops-sglang-"


def deployment_id(state_dir):
    """A short id of the deployment (its state dir): two deployments on a host may both have a server gpu0."""
    return hashlib.sha256(os.path.normpath(state_dir).encode("utf-8")).hexdigest()[:8]


def unit_name(name, state_dir):
    return f"{UNIT_PREFIX}{deployment_id(state_dir)}-{name}.service"


def legacy_unit_name(name):
    """The unit name before it carried the deployment (retired at the server's next launch or stop)."""
    return f"{UNIT_PREFIX}{name}.service"


# The steps one server goes through in the detached worker, in order: out of the router and drained, SIGTERM,
# SIGKILL, its GPUs verified free (then launched), and where it ends. The job record carries them to the
# controller; their order and which of them end a server's sequence: _lifecycle/step_table.py.
STEP_DRAINING, STEP_STOPPING, STEP_KILLING, STEP_VERIFYING = "draining", "stopping", "killing", "verifying"
STEP_DONE, STEP_FAILED = "done", "failed"
