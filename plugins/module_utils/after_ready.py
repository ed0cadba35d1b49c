# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the wait's verdicts cause on the host: the processes killed, the router, last good and the journal.

readiness.py observes the servers and decides their states; this acts on the decisions. A server decided
stalled, or crashed with its main process still running after the crash, is killed at once (kill_stuck), in the
slice that decides it. Once every server is decided, in the last slice of a wait outside check mode, a ready
server is added back to the router it is owed to (its state file's ``router_add``) and its script becomes its
last good configuration; every server's outcome, ready or not, is appended to the run journal. Kept apart so
that neither changes with the other: a new readiness rule never touches the router, last good or the journal,
and a new consequence of a verdict never touches the watching.

The end of the wait works on its server trackers (readiness.ServerTracker): their ``result`` (the report,
which gains ``router``, ``last_good_error``, ``journal`` and ``since_last_good`` here), ``name``, ``pid``,
``port``, ``node_rank``, ``action`` and ``log``.
"""

from __future__ import annotations

import time

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    draining,
    journal,
    last_good,
    launchers,
    procfs,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launch_settings import (
    gpus_of,
    model_of,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness_rules import (
    STATES,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.router import (
    RouterError,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.router_answers import (
    normalize_url,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_processes import (
    ServerProcesses,
    recorded_starttime,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    LockTimeout,
    acquire_host_lock,
    read_state,
    release_host_lock,
    write_state,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.sglang_install import (
    server_versions,
)

# A stuck server is killed only under the host lock; a call that holds it longer is acting on it.
KILL_LOCK_SECONDS = 5
# A server reached after the router deadline shared by all still gets one look at its add job.
ROUTER_LAST_LOOK_SECONDS = 0.2


def kill_stuck(options, name, pid, action, recorded_at_start):
    """``(killed pids, why not killed)`` for a server stuck where it failed: stalled, or crashed while its main process
    still runs after CRASH_GRACE_SECONDS (SGLang kills its own tree at once after a crash; one that lingers is stuck,
    holding its GPUs, and a later run would take it for running). ``recorded_at_start``: its state file as the wait
    found it, None when that records another process."""
    if action == "unchanged":  # its fault is not the run's: reported, never killed
        return [], "this run left it unchanged"
    if not options["kill_stalled"]:
        # Left as found for inspection (py-spy, the log); check mode kills nothing and says nothing of it.
        return [], None if options["check_mode"] else "kill_stalled is false"
    return _kill(options["state_dir"], name, pid, recorded_at_start)


def _kill(state_dir, name, pid, recorded_at_start):
    """``(killed pids, why not killed)``: under the host lock, and only while the state file still records
    the process this wait watches (another run may have replaced the server since this slice began)."""
    try:
        lock_fd, _waited = acquire_host_lock(state_dir, KILL_LOCK_SECONDS)
    except LockTimeout:
        return [], "another call holds the host lock, it may be relaunching this server"
    try:
        recorded = read_state(state_dir, name) or {}
        if recorded.get("pid") not in (None, pid):
            return [], f"the state file now records pid {recorded.get('pid')}: another run replaced it"
        # Through the launcher that runs it: a unit with Restart=on-failure is stopped, not restarted.
        by_name = launchers.launchers(ServerProcesses(state_dir), {"state_dir": state_dir})
        launcher = by_name.get(recorded.get("launcher"), by_name[launchers.DEFAULT_LAUNCHER])
        try:
            killed = launcher.kill(name, recorded_at_start)
        except launchers.LauncherError as exc:
            return [], str(exc)
        if not killed:
            # Said, never silent: a stuck server reported without a kill and without a reason would be read as
            # killed.
            state = "still runs" if procfs.pid_alive(pid, recorded_starttime(recorded_at_start)) else "is gone"
            return [], f"no process of {name} was found to kill (its pid {pid} {state})"
        return killed, None
    finally:
        release_host_lock(lock_fd)


def act_on_verdicts(params, trackers):
    """Act on the decided servers; returns the wait result's own fields (``journal_error`` when journaling)."""
    # What each server's state file says now, read once for the last good copies, the router and the journal.
    states = {tracker.name: read_state(params["state_dir"], tracker.name) for tracker in trackers}
    # A configuration that came up is good, whether or not the router then takes the server back.
    keep_last_good(params, trackers, states)
    register_ready(params, [tracker for tracker in trackers if STATES[tracker.result["status"]].ready], states)
    if not params["journal"]:
        return {}
    return {"journal_error": journal_relaunch(params, trackers, states)}


def register_ready(params, trackers, states):
    """Behind a router (router_url): every ready server the deployment owes a place in the router (its state
    file's ``router_add``, see ``draining.owes_router``) is added and must be listed healthy before the wait
    ends; one that is not is ``unrouted``. One that is not owed and not in the router (an operator took it out)
    stays out, reported ``left_out``; one already in it is only checked healthy. Only ready servers are added:
    the router's add job cannot be cancelled, and one queued for a server that then crashed would add it
    whenever it answered."""
    client = draining.router_client(params)
    # A node after rank 0 of a group serves only a placeholder: never a worker.
    routed = [tracker for tracker in trackers if not tracker.node_rank]
    if client is None or not routed:
        return
    for tracker in routed:  # what the summary counts, also when the router cannot be asked
        tracker.result["router"] = {"worker_url": draining.worker_url(params, tracker.port), "worker_id": None,
                                    "healthy": False, "left_out": False}
    try:
        registered = {normalize_url(worker.url): worker.id for worker in client.workers()}
    except RouterError as exc:
        for tracker in routed:
            _unrouted(tracker, str(exc))
        return
    following = []
    for tracker in routed:
        url = tracker.result["router"]["worker_url"]
        owed = (states[tracker.name] or {}).get(draining.ROUTER_ADD_KEY)
        known_id = registered.get(normalize_url(url))
        tracker.result["router"].update(worker_id=known_id, left_out=not owed and known_id is None)
        if owed:
            try:
                following.append((tracker, client.add(url)))
            except RouterError as exc:
                _unrouted(tracker, str(exc))
        elif known_id is not None:
            following.append((tracker, known_id))
    deadline = time.monotonic() + params["router_timeout"]
    for tracker, worker_id in following:  # the router adds them concurrently: one deadline for all
        tracker.result["router"]["worker_id"] = worker_id
        try:
            worker = client.wait_healthy(worker_id, max(deadline - time.monotonic(), ROUTER_LAST_LOOK_SECONDS))
        except RouterError as exc:
            _unrouted(tracker, str(exc))
            continue
        tracker.result["router"].update(worker_id=worker.id, healthy=True)
        _settle_router_debt(params["state_dir"], tracker, states[tracker.name])


def _settle_router_debt(state_dir, tracker, state):
    """The router has the server: a later run finding it outside the router leaves it there (an operator's)."""
    if state and state.get(draining.ROUTER_ADD_KEY) and state.get("pid") == tracker.pid:
        write_state(state_dir, tracker.name, dict(state, **{draining.ROUTER_ADD_KEY: False}))


def _unrouted(tracker, error):
    tracker.result.update(status="unrouted", router_error=error)
    tracker.result["msg"] = STATES["unrouted"].sentence(tracker.result)


def keep_last_good(params, trackers, states):
    """The script of every ready server becomes its last good configuration (what a rollback goes back to)."""
    for tracker in trackers:
        if STATES[tracker.result["status"]].ready:
            state = states[tracker.name]
            if state and state.get("pid") == tracker.pid:
                problem = last_good.keep(params["state_dir"], tracker.name, state, params.get("run_id"))
                if problem:
                    tracker.result["last_good_error"] = problem


def journal_relaunch(params, trackers, states):
    """Append the outcome of every server to the run journal; each report gains ``since_last_good``: its
    settings, facts and timings against the newest earlier run in which it came up with the same model."""
    state_dir, run_id = params["state_dir"], params.get("run_id")
    earlier = journal.runs(journal.read_records(state_dir))
    installed = server_versions({tracker.name: (states[tracker.name] or {}).get("settings") for tracker in trackers})
    entries = {}
    this_run = next((run for run in earlier if run_id and run["run_id"] == run_id), {"servers": {}})
    for tracker in trackers:
        # A rollback compares with what ran before this run, and records this run's failed attempt.
        before = run_id if tracker.action == journal.ROLLED_BACK else None
        settings = (states[tracker.name] or {}).get("settings")
        model = model_of(settings)
        # A renamed server (same model, same GPUs) is compared with what came up under its old name.
        good = journal.last_good(earlier, tracker.name, model, before_run_id=run_id, gpus=gpus_of(settings))
        previous = journal.previous_settings(earlier, tracker.name, before) or (
            good["entry"].get("settings") if good and good.get("name") else None)
        entry = journal.relaunch_entry(tracker.result, tracker.log.state.facts, states[tracker.name],
                                       tracker.action, previous, this_run["servers"].get(tracker.name))
        version = (installed.get(tracker.name) or {}).get("version")
        if version:
            entry["sglang_version"] = version
        entries[tracker.name] = entry
        tracker.result["since_last_good"] = journal.compare(good, entry) if good else None
        if good is None:
            # Not "never ran here" when it came up under other names (a new tp_size merged or split servers).
            came_up_as = journal.model_came_up_as(earlier, model, before_run_id=run_id)
            if came_up_as:
                tracker.result["model_came_up_as"] = came_up_as
        tracker.result["journal"] = entry
    return journal.append(state_dir, journal.run_header(state_dir, "relaunch", run_id), entries)
