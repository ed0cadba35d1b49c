# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner: what happens to each server of a host and why, and which process in the way may be stopped.

Pure functions on snapshots (no /proc, no files, no processes), so every decision is unit-tested in
milliseconds (tests/unit/plugins/module_utils/test_server_plan.py); the lifecycle package _lifecycle/
gathers the snapshots (job.py), builds the plans (plan.py) and acts on the decisions (sequence.py, steps.py).

One comparison (``compare``) yields both the decision to relaunch, the words of its reason and the
diff, so the three can never disagree.
"""

import collections

# Constants only: nothing here reads /proc or runs a launcher.
from ansible_collections.gpuops.sglang.plugins.module_utils.launchers import (
    DEFAULT_LAUNCHER,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launchers import (
    compared_settings as launcher_settings,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    DEPLOYMENT_VAR,
    MARKER_VAR,
)

# The settings that decide whether a running server is current: (key, words in the reason). Those the launchers
# add (launchers.Launcher.compared) follow them: compared_settings().
COMPARED_SETTINGS = (
    ("script_sha256", "launch script content"),
    ("launch_script", "launch_script"),
    ("port", "port"),
    ("gpus", "gpus"),
    ("log_path", "log_path"),
    ("launcher", "launcher"),
)


def compared_settings():
    """The planner's compared settings, then those of every launcher."""
    return COMPARED_SETTINGS + launcher_settings()


# What the host shows of one server: its state file (or None), whether any process of it lives, the pid of its
# main process while that is the recorded one (or the launcher's current main process), else None, and the crash
# its current run's log shows (the log's error summary) while that main process runs, else None.
Observed = collections.namedtuple("Observed", ["recorded", "running", "main_pid", "crash"], defaults=(None,))
# action: launched, relaunched, unchanged, stopped or already_stopped; changes: [(key, before, after)].
Decision = collections.namedtuple("Decision", ["action", "reason", "changes"])


def desired_settings(spec, script_sha256, launcher=DEFAULT_LAUNCHER, own=None):
    """The compared settings a server of ``spec`` runs with once launched; ``own``: the launcher's own settings
    (``Launcher.desired``), those of the other launchers are None."""
    settings = {"script_sha256": script_sha256, "launch_script": spec.get("launch_script"), "port": spec.get("port"),
                "gpus": sorted(spec.get("gpus") or []), "log_path": spec.get("log_path"), "launcher": launcher}
    return {**settings, **{key: None for key, _words in launcher_settings()}, **(own or {})}


def recorded_settings(recorded):
    """The compared settings of a state file (missing ones as they were before they existed)."""
    recorded = recorded or {}
    settings = {key: recorded.get(key) for key, _words in compared_settings()}
    settings["launcher"] = recorded.get("launcher") or DEFAULT_LAUNCHER
    return settings


def compare(before, after):
    """``[(key, before, after)]`` for every compared setting that differs, in the order of compared_settings()."""
    return [(key, before.get(key), after.get(key)) for key, _words in compared_settings()
            if before.get(key) != after.get(key)]


def _words(changes):
    labels = dict(compared_settings())
    return ", ".join(labels[key] for key, _before, _after in changes)


def decide(state, desired, observed, state_file):
    """The Decision for one server: ``state`` requested, ``desired`` settings (None when stopping)."""
    if state == "stopped":
        if observed.running:
            return Decision("stopped", "stop requested", [])
        return Decision("already_stopped", "no process of this server runs", [])
    changes = compare(recorded_settings(observed.recorded), desired) if observed.recorded else []
    if state == "restarted":
        reason = "restart requested"
    elif not observed.recorded:
        reason = f"no state recorded in {state_file}"
    elif observed.main_pid is None:
        reason = f"recorded process {observed.recorded.get('pid')} is not running"
    elif observed.crash:
        # A main process that outlived its own crash serves nothing: never "unchanged" (SGLang ends its tree at once).
        reason = f"its process {observed.main_pid} still runs but its log shows a crash: {observed.crash}"
    elif not changes:
        return Decision("unchanged", f"running (pid {observed.main_pid}) with the same launch script", [])
    else:
        reason = "changed: " + _words(changes)
    return Decision("relaunched" if observed.running else "launched", reason, changes)


def describe(running, pid, settings):
    """One server in the diff: running, pid and the compared settings."""
    described = {"running": running, "pid": pid}
    described.update((key, settings.get(key)) for key, _words in compared_settings())
    return described


# ---- processes in the way -------------------------------------------------------------------------------

# One process holding a GPU or port a server of this run needs, as the host shows it. verdict: the owner's
# ("ours", "foreign", "other_deployment"); server/deployment: its marker and state dir; protected: it is an
# ancestor of the module; stale_recorded: the server it belongs to has a state file in our state dir.
Holder = collections.namedtuple(
    "Holder", ["pid", "cmdline", "verdict", "server", "deployment", "protected", "stale_recorded"])
# kind: "ignore" (not in the way), "force" (a foreign GPU holder to kill), "stale" (a server of ours no longer
# requested: it goes with the servers it blocks) or "refuse" (``problem`` says why nothing may be touched).
Judgement = collections.namedtuple("Judgement", ["kind", "problem"])


def judge_holder(holder, what, planned, stopping, ignored_patterns, force_gpu_holders, state_dir):
    """Whether ``holder`` of ``what`` (``"GPU 3"``, ``"port 30000 of server 'gpu0'"``) blocks the run.

    ``planned``: names of the servers of this request, ``stopping`` those of them this run stops;
    ``ignored_patterns``: compiled regular expressions of foreign GPU holders that are never in the way
    (nvidia-persistenced, ...).
    """
    gpu = what.startswith("GPU")
    if holder.verdict == "foreign":
        if gpu and any(pattern.search(holder.cmdline) for pattern in ignored_patterns):
            return Judgement("ignore", None)  # daemons keep every device node open without memory
        if gpu and force_gpu_holders and not holder.protected:
            return Judgement("force", None)
        without = (f"{MARKER_VAR}={holder.server} but no {DEPLOYMENT_VAR} (started outside any deployment)"
                   if holder.server else f"no {MARKER_VAR} marker")
        if gpu:
            return Judgement("refuse", f"{what} is held by foreign process {holder.pid} ({holder.cmdline}) that has "
                                       f"{without}; refusing to kill it: stop it yourself or set "
                                       "force_kill_gpu_holders: true")
        return Judgement("refuse", f"{what} is in use by foreign process {holder.pid} ({holder.cmdline}); free the "
                                   "port or choose another one")
    if holder.verdict == "other_deployment":
        return Judgement("refuse", f"{what} is held by pid {holder.pid} ({holder.cmdline}) of server "
                                   f"{holder.server!r} of another deployment (state_dir {holder.deployment}); stop it "
                                   "there first")
    if holder.server in stopping and not holder.protected:
        # Spawned after its server was observed (one still starting spawns its schedulers): the stop looks for the
        # server's processes again and takes it too.
        return Judgement("ignore", None)
    if holder.server in planned:
        return Judgement("refuse", f"{what} is held by pid {holder.pid} ({holder.cmdline}) of server "
                                   f"{holder.server!r}, which this run leaves running")
    if holder.protected:
        return Judgement("refuse", f"{what} is held by pid {holder.pid} ({holder.cmdline}), which runs this module "
                                   "(an ancestor of it); refusing to touch it")
    if not holder.stale_recorded:
        return Judgement("refuse", f"{what} is held by pid {holder.pid} ({holder.cmdline}) of server "
                                   f"{holder.server!r}, which has no state file in {state_dir} (another "
                                   "deployment?); stop it first")
    return Judgement("stale", None)
