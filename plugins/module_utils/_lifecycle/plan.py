# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What is to happen to each server of one call: its frozen plan (ServerPlan) and the planning policy.

Nothing here writes: a plan is built from what the host shows (a Snapshot that job.py gathers), the decision
itself is server_plan.decide; then the canary deferral and, for a rollback, which last good script each server
goes back to (files are only read). A plan is never changed once made: each later planning step (the deferral,
job.py's conflict policy and router check) returns new plans. What happens while the worker acts is recorded in
a ServerRun (run.py).
"""

import collections

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    last_good,
    launch_settings,
    server_plan,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.request import (
    ServerControlError,
    script_problems,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launchers import (
    DEFAULT_LAUNCHER,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    read_state,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.words import counted


def _is_index(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def gpu_keyed(values):
    """``{gpu index: value}`` keyed by the index as text, in index order, as a result carries it."""
    return {str(index): value for index, value in sorted(values.items())}


_PLAN_FIELDS = (
    "spec", "name", "recorded",
    # Who starts it (the requested launcher), and who stops what runs now (the recorded one).
    "launcher", "stop_launcher",
    # The settings it is to run with (None when it is to stop), its GPUs, and the decision.
    "desired", "gpus", "action", "reason",
    # What runs of it when planned: ProcessInfo of its main process while that is the recorded one (or the
    # launcher's current one), else None; pid -> ProcessInfo; its process group.
    "main", "processes", "group",
    # Stale servers and forced foreign holders that hold its GPUs or port (the conflict policy): pid -> ProcessInfo.
    "blockers",
    # The launch script's sha256, and its flags and environment, keys hidden (for the run journal).
    "script_sha256", "launch_settings",
    # Used MiB per GPU (keyed as text) when planned; behind a router, the worker URL it is registered under.
    "gpu_memory_before", "worker_url",
    # With rollback: the record of the run it goes back to, or why it has no last good configuration.
    "rollback_to", "no_last_good",
)


class ServerPlan(collections.namedtuple("ServerPlan", _PLAN_FIELDS)):
    """What is to happen to one server: decided before anything is touched, never changed after (a tuple)."""

    __slots__ = ()

    def updated(self, **changes):
        """A new plan: this one with ``changes``."""
        return self._replace(**changes)

    def with_action(self, action, reason):
        return self._replace(action=action, reason=reason)

    @property
    def main_pid(self):
        return self.main.pid if self.main else None

    @property
    def port(self):
        """The port it serves on: the requested one, else the recorded one (a stop passes names only)."""
        return self.spec.get("port") or (self.recorded or {}).get("port")

    @property
    def kills(self):
        return self.action in ("relaunched", "stopped")

    @property
    def launches(self):
        return self.action in ("launched", "relaunched")

    @property
    def changes(self):
        """Stopped and/or launched: its GPUs and port are checked, its GPU memory verified."""
        return self.action not in ("unchanged", "already_stopped", "deferred")

    @property
    def restarted_since_recorded(self):
        """Unchanged, but its main process is not the recorded one: systemd restarted it since it was recorded."""
        return self.action == "unchanged" and self.main_pid != self.recorded.get("pid")


# What the host shows of one server before anything is decided: its state file (or None), what of it runs
# (launchers.Running, seen through its stop launcher), unless it is to stop the launch script it would run as
# ``(sha256, text)``, and the crash the log of the process that runs shows (its error summary, else None).
Snapshot = collections.namedtuple("Snapshot", ["recorded", "running", "script", "crash"], defaults=(None,))


def requested_state(state, name, no_last_good):
    # A rollback stops a server that has no last good configuration rather than run the one that failed.
    return "stopped" if name in no_last_good else state


def stop_launcher_of(recorded, launchers_by_name):
    """Stopping always goes through the launcher recorded in the state file (the default one when none is)."""
    recorded_launcher = server_plan.recorded_settings(recorded)["launcher"]
    return launchers_by_name.get(recorded_launcher, launchers_by_name[DEFAULT_LAUNCHER])


def plan_server(spec, state, snapshot, launcher, stop_launcher, secrets, state_file, rollback_to=None,
                no_last_good=None):
    """The ServerPlan of ``spec`` for ``state``: ``launcher`` starts it, ``stop_launcher`` stops what runs;
    ``secrets`` are hidden from its launch settings, ``state_file`` is named in its reason; with rollback,
    ``rollback_to`` is the record of the run it goes back to, ``no_last_good`` why it has none."""
    recorded = snapshot.recorded
    recorded_gpus = (recorded or {}).get("gpus")
    # A state file is only read: a malformed GPU list counts as none recorded.
    if not isinstance(recorded_gpus, list) or not all(_is_index(gpu) for gpu in recorded_gpus):
        recorded_gpus = []
    running = snapshot.running
    script_sha256 = settings = desired = None
    if state != "stopped":
        script_sha256, script_text = snapshot.script
        settings = launch_settings.read_settings(script_text, secrets)
        desired = server_plan.desired_settings(spec, script_sha256, launcher.name, launcher.desired(spec))
    main_pid = running.main.pid if running.main else None
    observed = server_plan.Observed(recorded, bool(running.processes), main_pid, snapshot.crash)
    decision = server_plan.decide(state, desired, observed, state_file)
    return ServerPlan(
        spec=spec, name=spec["name"], recorded=recorded, launcher=launcher, stop_launcher=stop_launcher,
        desired=desired, gpus=sorted(spec.get("gpus") or recorded_gpus), action=decision.action,
        reason=decision.reason, main=running.main, processes=running.processes, group=running.group, blockers={},
        script_sha256=script_sha256, launch_settings=settings, gpu_memory_before={}, worker_url=None,
        rollback_to=rollback_to, no_last_good=no_last_good)


# The deferral: the plans (deferred ones among them) and the canary - the servers that go first while others wait
# for them (none when nothing waits for a canary).
Deferral = collections.namedtuple("Deferral", ["plans", "canary"])


def _serves(plan):
    return plan.kills


def defer_beyond_max_changes(plans, limit, came_up_with=None, batch_size=None, stops_serving=_serves):
    """A canary: only the first ``limit`` (max_changes) servers that need a change get it; the others keep running
    what they run, their scripts untouched, until a later call. Returns a Deferral of new plans; ``plans`` are left
    as they are.

    With ``came_up_with`` (``(name, script_sha256) -> bool``: max_changes_scope unseen) only a configuration a
    server never came up with on this host needs a canary: the first ``limit`` servers launching one go first and
    every other server that would stop a serving process (``stops_serving(plan)``: one it relaunches or stops, or a
    stale server of an earlier topology in its way) waits; a server that stops nothing is launched (nothing serves
    there to lose). When no server goes to a configuration it never came up with, nothing is a canary. Either way at
    most ``batch_size`` servers change (the canary first). The canary is empty when no server waits for it."""
    changing = [index for index, plan in enumerate(plans) if plan.changes]
    unseen = [index for index in changing if came_up_with is not None and plans[index].launches
              and not came_up_with(plans[index].name, plans[index].script_sha256)]
    if unseen:
        canary = unseen[:limit]
        going = canary + [index for index in changing if index not in canary and not stops_serving(plans[index])]
        why = (f"the canary ({', '.join(plans[index].name for index in canary)}) goes first with a configuration "
               "that never came up on this host")
    elif came_up_with is None and limit:
        canary = going = changing[:limit]
        why = f"at most {_changes(limit)} in this call (max_changes)"
    else:
        canary, going, why = [], changing, None
    deferred = {index: why for index in changing if index not in going}
    beyond_batch = going[batch_size or len(going):]
    deferred.update((index, f"at most {_changes(batch_size)} in this call (batch_size)") for index in beyond_batch)
    # A canary only where others wait for it.
    canary = [index for index in canary if index not in beyond_batch] if deferred else []
    return Deferral(
        [plan.with_action("deferred", f"deferred: {deferred[index]}; would be {plan.reason}")
         if index in deferred else plan for index, plan in enumerate(plans)],
        [plans[index].name for index in canary])


def _changes(count):
    return f"{counted(count, 'server')} {'changes' if count == 1 else 'change'}"


def take_last_good(params):
    """For a rollback: each server's last good script becomes the one to launch; one without is stopped.

    Returns ``(scripts, rollback_to, no_last_good)``: the scripts to write by server name, the record of the run
    each server goes back to, and why the others have none.
    """
    if params.get("scripts"):
        raise ServerControlError("invalid request: rollback launches the servers' last good scripts; "
                                 "pass no scripts with it")
    if params["state"] != "restarted":
        raise ServerControlError(f"invalid request: rollback relaunches servers: state must be restarted, "
                                 f"not {params['state']}")
    state_dir, api_key = params["state_dir"], params.get("api_key")
    scripts, rollback_to, no_last_good = {}, {}, {}
    for spec in params["servers"]:
        name = spec["name"]
        # Never back to the script it is rolled back from when this run made it last good (a canary that came
        # up, then regressed); back to it when an earlier run did (a group rank stopped for a peer's failure).
        leaving = (read_state(state_dir, name) or {}).get("script_sha256")
        try:
            found, text = last_good.rollback_target(state_dir, name, leaving, params.get("run_id"))
        except OSError as exc:
            no_last_good[name] = str(exc)
            continue
        if text is None or not spec.get("launch_script"):
            no_last_good[name] = (f"{name} has no last good configuration (it never came up with another one "
                                  "on this host)")
            continue
        # It runs with today's key: a key rotated away since it came up must not serve again.
        keyed, rekeyed = last_good.with_api_key(text, api_key)
        if keyed is None:
            no_last_good[name] = (f"the last good script of {name} has a command line whose --api-key cannot "
                                  "be replaced (no exec line, or an abbreviated flag): it could serve with a "
                                  "key rotated away")
            continue
        problems = script_problems(f"{name} (last good)", name, spec["launch_script"], {"content": keyed})
        if problems:
            no_last_good[name] = "; ".join(problems)
            continue
        scripts[name] = {"name": name, "path": spec["launch_script"], "content": keyed}
        key = ("rekeyed" if rekeyed else "current") if api_key else ("removed" if rekeyed else "none")
        rollback_to[name] = dict(found, key_status=key)
    return scripts, rollback_to, no_last_good
