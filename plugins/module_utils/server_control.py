# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kill -> verify GPU memory freed -> launch, for the SGLang servers of one host, each on its own.

Everything that can be checked is checked before any process is touched or any script written:
the request (names, ports, GPUs, files, numbers), GPUs present, foreign GPU holders and port owners.
Then the launch scripts are written and a detached worker (module_utils/host_job.py) runs the
sequence per server: out of the router and drained (module_utils/draining.py), SIGTERM -> wait -> SIGKILL,
verify its GPUs free, launch it. One server whose GPU does not free in time, or whose process survives
SIGKILL, is reported down; the others go on.
"""

import os
import re
import signal
import time

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    argument_specs,
    draining,
    host_job,
    journal,
    last_good,
    launch_settings,
    launchers,
    option_ranges,
    procfs,
    run_lock,
    safe_files,
    script_files,
    server_plan,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.gpu_inventory import (
    GpuError,
    require_present,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.nvidia_smi import (
    NvidiaSmiError,
    bounded_runner,
    device_minors,
    query_gpus,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_text
from ansible_collections.gpuops.sglang.plugins.module_utils.server_processes import (
    ServerProcesses,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    LockTimeout,
    acquire_host_lock,
    mark_lock_holder,
    read_state,
    release_host_lock,
    remove_state,
    state_path,
    write_state,
)

# Foreign processes that keep GPU device nodes open on bare-metal hosts without using memory.
IGNORED_GPU_HOLDERS = (r"^(/\S+/)?nvidia-persistenced\b", r"^(/\S+/)?nv-hostengine\b", r"dcgm-exporter")


STATES = ("started", "restarted", "stopped")
# After SIGKILL a process normally disappears at once; one stuck in D state is reported instead.
SIGKILL_GRACE_SECONDS = 10
_POLL_SECONDS = 0.25
SCRIPT_MODE = 0o700
SCRIPT_DIRECTORY_MODE = 0o755


class ServerControlError(Exception):
    """A user-facing failure; ``details`` go into the module result next to the message."""

    def __init__(self, msg, **details):
        super().__init__(msg)
        self.details = details


def validate_request(params, launcher):
    """Check the request, and what ``launcher`` (the requested one) asks of it, before any process is looked at or
    touched (files are only looked at); raise one error listing every problem."""
    servers, state = params["servers"], params["state"]
    problems = option_ranges.range_problems(params, argument_specs.SERVER_RANGES) + draining.router_problems(
        params.get("router_url"), params["host"], params.get("router_worker_host"))
    problems += launcher.option_problems(params)
    for pattern in params["ignore_gpu_holders"]:
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"ignore_gpu_holders entry {pattern!r} is not a valid regular expression: {exc}")
    scripts = {script["name"]: script for script in params.get("scripts") or []}
    launching = state != "stopped"
    seen_names, seen_ports, gpu_owner = {}, {}, {}
    seen_files = {}  # (option, path) -> server: two servers sharing a log or script would mix up their records
    for position, server in enumerate(servers):
        where = f"servers[{position}]"
        name = server.get("name")
        if not procfs.valid_server_name(name):
            problems.append(f"{where}.name {name!r} is invalid: use letters, digits, '.', '_' and '-' "
                            "(it names files and the marker value)")
        duplicate = name in seen_names
        if duplicate and procfs.valid_server_name(name):
            problems.append(f"duplicate server name {name!r} (servers[{seen_names[name]}] and {where})")
        seen_names.setdefault(name, position)
        where = f"{where} ({name})"
        if launching:
            missing = [key for key in ("port", "gpus", "launch_script", "log_path") if server.get(key) in (None, [])]
            if missing:
                problems.append(f"{where}: {', '.join(missing)} required for state={state}")
        for extra in server.get("extra_ports") or []:
            if not 1 <= extra <= 65535:
                problems.append(f"{where}.extra_ports entry {extra} is out of range 1-65535")
        port = server.get("port")
        if port is not None:
            if not 1 <= port <= 65535:
                problems.append(f"{where}.port {port} is out of range 1-65535")
            elif port in seen_ports:
                problems.append(f"port {port} is used by both {seen_ports[port]!r} and {name!r}")
            seen_ports.setdefault(port, name)
        for gpu in server.get("gpus") or []:
            if gpu < 0:
                problems.append(f"{where}.gpus contains {gpu}; GPU indexes are >= 0")
            elif gpu_owner.get(gpu, name) != name:
                problems.append(f"GPU {gpu} is assigned to both {gpu_owner[gpu]!r} and {name!r}")
            gpu_owner.setdefault(gpu, name)
        for option in ("launch_script", "log_path", "pid_file"):
            path = None if duplicate else server.get(option)  # a repeated server repeats its files: said above
            if path and (option, os.path.realpath(path)) in seen_files:
                problems.append(f"{option} {path} is used by both {seen_files[option, os.path.realpath(path)]!r} "
                                f"and {name!r}")
            elif path:
                seen_files[option, os.path.realpath(path)] = name
        if launching and server.get("log_path"):
            problem = safe_files.log_dir_problem(os.path.dirname(server["log_path"]) or ".")
            if problem:
                problems.append(f"{where}.log_path {server['log_path']}: {problem}")
        for option in ("log_path", "pid_file"):
            if server.get(option) and os.path.islink(server[option]):
                problems.append(f"{where}.{option} {server[option]} is a symbolic link (to "
                                f"{os.readlink(server[option])}); refusing to write through it: remove it or "
                                "point it at a regular file")
        script = server.get("launch_script")
        if launching and script:
            problems.extend(_script_problems(where, name, script, scripts.get(name)))
        if launching:
            problems.extend(launcher.server_problems(where, server))
    for name, script in scripts.items():
        server = next((server for server in servers if server.get("name") == name), None)
        if server is None or server.get("launch_script") != script["path"]:
            problems.append(f"scripts entry {name!r} ({script['path']}) is not the launch_script of a listed server")
    if problems:
        raise ServerControlError("invalid request: " + "; ".join(problems), problems=problems)


def _script_problems(where, name, path, given):
    """Problems of one launch script: the content to be written when ``given``, else the file on the host."""
    if given is not None:
        content = given["content"]
    elif not os.path.isfile(path):
        return [f"{where}.launch_script {path} does not exist or is not a file"]
    elif not os.access(path, os.X_OK):
        mode = oct(os.stat(path).st_mode & 0o777)
        return [f"{where}.launch_script {path} is not executable (mode {mode}); make it executable"]
    else:
        with open(path, errors="replace") as handle:
            content = handle.read()
    exported = _exported_marker(content)
    if exported not in (None, name):
        return [(f"{where}.launch_script {path} exports {procfs.MARKER_VAR}={exported}, "
                 f"not {name}: its processes would be taken for server {exported!r}")]
    return []


_MARKER_EXPORT = re.compile(r"^[ \t]*export[ \t]+" + procfs.MARKER_VAR + r"=['\"]?([^'\"\s]+)", re.MULTILINE)


def _exported_marker(script_text):
    """The marker value a launch script exports (the last one wins in sh), or None."""
    values = _MARKER_EXPORT.findall(script_text)
    return values[-1] if values else None


def _is_index(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _gpu_keyed(values):
    return {str(index): value for index, value in sorted(values.items())}


# What each server goes through in the worker; the controller turns these into progress words.
STEP_DRAINING, STEP_STOPPING, STEP_KILLING, STEP_VERIFYING = "draining", "stopping", "killing", "verifying"
STEP_DONE, STEP_FAILED = "done", "failed"


class ServerPlan:
    """What happens to one server, and what happened."""

    def __init__(self, spec, recorded, launcher, stop_launcher):
        self.spec = spec
        self.name = spec["name"]
        self.recorded = recorded
        # Who starts it (the requested launcher), and who stops what runs now (the recorded one).
        self.launcher = launcher
        self.stop_launcher = stop_launcher
        self.desired = None
        recorded_gpus = (recorded or {}).get("gpus")
        # A state file is only read: a malformed GPU list counts as none recorded.
        if not isinstance(recorded_gpus, list) or not all(_is_index(gpu) for gpu in recorded_gpus):
            recorded_gpus = []
        self.gpus = sorted(spec.get("gpus") or recorded_gpus)
        self.action = "unchanged"
        self.reason = ""
        self.main_pid = None
        self.processes = {}
        self.group = None
        # Stale servers and forced foreign holders that hold this server's GPUs or port: pid -> ProcessInfo.
        self.blockers = {}
        self.killed = []
        self.last_signal = {}
        self.script_sha256 = None
        # Flags and environment of the launch script, keys hidden: recorded for the run journal.
        self.launch_settings = None
        self.launched = {}
        self.rotated_log = None
        self.timings = {}
        self.gpu_memory_before = {}
        self.gpu_memory_after = {}
        # The worker's progress through kill -> verify -> launch.
        self.step = None
        self.step_since = None
        self.error = None
        self.down = False
        self.gpu_used = {}
        self.gpu_holders = None
        self.port_holders = []
        self.processes_left = {}
        self.stop_started = None
        # Its drain (draining.Drain) and, behind a router, its worker URL and the router entries taken out.
        self.drain = None
        self.worker_url = None
        self.router_removed = None

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

    def targets(self):
        return {**self.blockers, **self.processes}

    def enter(self, step, now):
        self.step, self.step_since = step, now

    def fail(self, now, error, down):
        self.enter(STEP_FAILED, now)
        self.error, self.down = error, down

    def progress(self, now):
        return {"name": self.name, "step": self.step, "seconds": round(now - (self.step_since or now), 1),
                "action": self.action, "processes_left": len(self.processes_left),
                "requests_left": self.drain.requests_left if self.drain else None,
                "signal": "SIGKILL" if "SIGKILL" in self.last_signal.values() else (
                    "SIGTERM" if self.last_signal else None),
                "gpu_used_mib": _gpu_keyed(self.gpu_used), "port_holders": self.port_holders, "error": self.error}


class ServerControl:
    """Brings the servers of one host to ``state`` (see the gpuops.sglang.server module docs)."""

    def __init__(self, params, check_mode=False):
        self.params = params
        self.check_mode = check_mode
        self.state_dir = params["state_dir"]
        self.device_dir = params["gpu_device_dir"]
        self.owner = ServerProcesses(self.state_dir)
        self.launchers = launchers.launchers(self.owner, params)
        self.launcher = self.launchers[params.get("launcher") or launchers.DEFAULT_LAUNCHER]
        self.run = bounded_runner(params["nvidia_smi_timeout"])
        self.minors = {}  # GPU index -> device minor, from the GPUs nvidia-smi lists
        self.foreign = {}
        self.stale = {}
        self.timings = {}
        # What happened to whom, in order, for the progress lines: {"server", "event", "at_s", ...}.
        self.events = []
        self.router = None
        self.act_started = None
        self.scripts = {script["name"]: script for script in params.get("scripts") or []}
        # rollback: the servers going back to their last good script (name -> its record), and those that have none.
        self.rollback_to, self.no_last_good = {}, {}
        if params.get("rollback"):
            self._take_last_good()
        self.secrets = list(params.get("secrets") or [])

    # ---- reading the host --------------------------------------------------------------------

    def _query_gpus(self, ids=None):
        try:
            return query_gpus(self.run, self.params["nvidia_smi"], ids=ids)
        except NvidiaSmiError as exc:
            raise ServerControlError(str(exc))

    def _take_last_good(self):
        """For a rollback: each server's last good script becomes the one to launch; one without is stopped."""
        if self.scripts:
            raise ServerControlError("invalid request: rollback launches the servers' last good scripts; "
                                     "pass no scripts with it")
        if self.params["state"] != "restarted":
            raise ServerControlError(f"invalid request: rollback relaunches servers: state must be restarted, "
                                     f"not {self.params['state']}")
        for spec in self.params["servers"]:
            name = spec["name"]
            # Never back to the script it is rolled back from when this run made it last good (a canary that came
            # up, then regressed); back to it when an earlier run did (a group rank stopped for a peer's failure).
            leaving = (read_state(self.state_dir, name) or {}).get("script_sha256")
            try:
                found, text = last_good.rollback_target(self.state_dir, name, leaving, self.params.get("run_id"))
            except OSError as exc:
                self.no_last_good[name] = str(exc)
                continue
            if text is None or not spec.get("launch_script"):
                self.no_last_good[name] = (f"{name} has no last good configuration (it never came up with another one "
                                           "on this host)")
                continue
            # It runs with today's key: a key rotated away since it came up must not serve again.
            keyed, rekeyed = last_good.with_api_key(text, self.params.get("api_key"))
            if keyed is None:
                self.no_last_good[name] = (f"the last good script of {name} has a command line whose --api-key cannot "
                                           "be replaced (no exec line, or an abbreviated flag): it could serve with a "
                                           "key rotated away")
                continue
            problems = _script_problems(f"{name} (last good)", name, spec["launch_script"], {"content": keyed})
            if problems:
                self.no_last_good[name] = "; ".join(problems)
                continue
            self.scripts[name] = {"name": name, "path": spec["launch_script"], "content": keyed}
            key = ("rekeyed" if rekeyed else "current") if self.params.get("api_key") else (
                "removed" if rekeyed else "none")
            self.rollback_to[name] = dict(found, key_status=key)

    def _script(self, spec):
        """``(sha256, text)`` of the script the server will run: the one given, else the one on disk."""
        given = self.scripts.get(spec["name"])
        if given is not None:
            return script_files.sha256_text(given["content"]), given["content"]
        return script_files.read_script(spec["launch_script"])

    def _plan(self, spec):
        # A rollback stops a server that has no last good configuration rather than run the one that failed.
        state = "stopped" if spec["name"] in self.no_last_good else self.params["state"]
        recorded = read_state(self.state_dir, spec["name"])
        recorded_launcher = server_plan.recorded_settings(recorded)["launcher"]
        stop_launcher = self.launchers.get(recorded_launcher, self.launchers[launchers.DEFAULT_LAUNCHER])
        plan = ServerPlan(spec, recorded, self.launcher, stop_launcher)
        running = stop_launcher.observe(plan.name, recorded)
        plan.processes, plan.group = running.processes, running.group
        plan.main_pid = running.main.pid if running.main else None
        if state != "stopped":
            plan.script_sha256, script_text = self._script(spec)
            plan.launch_settings = launch_settings.read_settings(script_text, self.secrets)
            plan.desired = server_plan.desired_settings(spec, plan.script_sha256, self.launcher.name,
                                                        self.launcher.desired(spec))
        observed = server_plan.Observed(recorded, bool(plan.processes), plan.main_pid)
        decision = server_plan.decide(state, plan.desired, observed, state_path(self.state_dir, plan.name))
        plan.action, plan.reason = decision.action, decision.reason
        if plan.action == "unchanged" and plan.main_pid != recorded.get("pid") and not self.check_mode:
            self._record_restart(plan, running.main)
        return plan

    def _record_restart(self, plan, main):
        """systemd restarted the server since it was recorded: the state file follows its new main process."""
        restarted = dict(plan.recorded, pid=main.pid, pgid=main.pgid, pid_starttime=main.starttime,
                         launched_at=procfs.start_epoch(main))
        write_state(self.state_dir, plan.name, restarted)
        plan.recorded = restarted

    def _check_conflicts(self, plans):
        """Before anything is written or killed: judge every GPU holder and port owner that is not ours to stop.

        Foreign processes (no marker, or no deployment) fail the run, except GPU holders with
        force_kill_gpu_holders; processes of a server this run leaves running fail it. Processes of a
        server not in this request are stale (renamed or removed) and stopped with the servers whose GPU
        or port they hold when that server has a state file in our state_dir; otherwise they belong to
        another deployment on this host and fail the run.
        """
        planned = {plan.name for plan in plans}
        doomed = {pid for plan in plans if plan.kills for pid in plan.processes}
        problems = []
        ignored = [re.compile(pattern) for pattern in self.params["ignore_gpu_holders"]]

        def judge(pid, what, needing):
            if pid in doomed:
                return
            info = procfs.read_process(pid)
            if info is None:
                return
            owner = self.owner.owner(pid)
            stale_state = read_state(self.state_dir, owner.server) if owner.verdict == "ours" and owner.server else None
            holder = server_plan.Holder(pid, info.cmdline, owner.verdict, owner.server, owner.deployment,
                                        pid in self.owner.protected, stale_state is not None)
            judgement = server_plan.judge_holder(holder, what, planned, ignored,
                                                 self.params["force_kill_gpu_holders"], self.state_dir)
            if judgement.kind == "refuse":
                problems.append(judgement.problem)
            elif judgement.kind == "force":
                self.foreign[pid] = dict(procfs.describe(pid), holds=what)
                for plan in needing:
                    plan.blockers[pid] = info
            elif judgement.kind == "stale":
                # The whole stale server goes, not only the process in the way: its state file is removed.
                stale, _group = self.owner.of_server(owner.server, stale_state)
                stale[pid] = info
                for stale_pid, stale_info in stale.items():
                    entry = self.stale.setdefault(stale_pid, dict(procfs.describe(stale_pid), holds=None))
                    if stale_pid == pid:
                        entry["holds"] = what
                    for plan in needing:
                        plan.blockers[stale_pid] = stale_info

        gpus = sorted({gpu for plan in plans if plan.changes for gpu in plan.gpus})
        holders = procfs.gpu_holders(self.device_dir, {gpu: self.minors.get(gpu, gpu) for gpu in gpus}) if gpus else {}
        for gpu in gpus:
            for pid in holders.get(gpu, []):
                judge(pid, f"GPU {gpu}", [plan for plan in plans if plan.changes and gpu in plan.gpus])
        for plan in plans:
            if plan.launches:
                for port in [plan.spec["port"]] + (plan.spec.get("extra_ports") or []):
                    for pid in procfs.port_listeners(port):
                        judge(pid, f"port {port} of server {plan.name!r}", [plan])
        if problems:
            raise ServerControlError("refusing to touch any process: " + "; ".join(problems), problems=problems)

    def _write_scripts(self, plans, check_mode):
        """Write the given launch scripts (and the launcher's units) after every check passed; returns their
        results and diffs."""
        scripts = [self.scripts[plan.name] for plan in plans if plan.name in self.scripts]
        results, diffs = {}, []
        try:
            if scripts:
                results, diffs = script_files.sync_scripts(scripts, SCRIPT_MODE, SCRIPT_DIRECTORY_MODE,
                                                           self.params["required_paths"], self.secrets, check_mode)
            units, unit_diffs = self.launcher.prepare(plans, check_mode)
        except script_files.ScriptError as exc:
            raise ServerControlError(str(exc), **exc.details)
        except launchers.LauncherError as exc:
            raise ServerControlError(f"{exc}; no server was stopped")
        for name, unit in units.items():
            results.setdefault(name, {})["unit"] = unit
        return results, diffs + unit_diffs

    # ---- acting (in the detached worker) -------------------------------------------------------

    def _event(self, plan, event, now, **details):
        self.events.append(dict(details, server=plan.name, event=event, at_s=round(now - self.act_started, 1)))

    def _fail(self, plan, now, error, down):
        plan.fail(now, error, down)
        self._event(plan, "failed", now, error=error)

    def _signal(self, plan, sig, now):
        reached = plan.stop_launcher.stop(plan.name, plan.targets(), plan.group, force=sig == signal.SIGKILL)
        plan.last_signal.update((pid, signal.Signals(sig).name) for pid in reached)
        plan.enter(STEP_KILLING if sig == signal.SIGKILL else STEP_STOPPING, now)
        return reached

    @staticmethod
    def _port(plan):
        return plan.spec.get("port") or (plan.recorded or {}).get("port")

    def _begin_stop(self, plan, now):
        """A running server: out of the router first (behind one), then drained (drain_timeout > 0) - before SIGTERM
        behind a router, after it without (SIGTERM starts SGLang's own drain)."""
        params = self.params
        if plan.worker_url:
            plan.router_removed, error = draining.deregister(self.router, plan.worker_url)
            if error:
                # Still registered, maybe still routed to: stopping it now would fail requests.
                self._fail(plan, now, f"{plan.name} was not stopped: taking it out of the router failed: {error}",
                           down=False)
                return
        drains = params["drain_timeout"] > 0
        if not (plan.worker_url and drains):
            self._signal(plan, signal.SIGTERM, now)
        if drains:
            plan.drain = draining.Drain(draining.server_url(params["host"], self._port(plan)), params["drain_timeout"],
                                        params.get("api_key"), now,
                                        count_timeout=min(params["probe_timeout"], draining.COUNT_TIMEOUT_SECONDS))
            plan.enter(STEP_DRAINING, now)

    def _advance_drain(self, plan, now):
        if not self.owner.still_alive(plan.targets()):
            plan.drain.end(now, draining.EXITED)
        elif plan.drain.poll(now) == draining.DRAINING:
            return
        self._event(plan, "drain_end", now, **plan.drain.report())
        if plan.worker_url:
            self._signal(plan, signal.SIGTERM, now)
        else:
            plan.enter(STEP_STOPPING, now)  # SIGTERM was sent when the drain began

    def _check_router(self, plans):
        """A router that cannot be used fails the call while every server still serves."""
        self.router = draining.router_client(self.params)
        if self.router is None or not any(plan.kills for plan in plans):
            return
        try:
            self.router.check()
        except draining.RouterError as exc:
            raise ServerControlError(f"{exc}; nothing was touched")
        for plan in plans:
            if plan.kills and self._port(plan):
                plan.worker_url = draining.worker_url(self.params, self._port(plan))

    def _rescan(self, plan):
        """Children may have been spawned while the server was shutting down."""
        running = plan.stop_launcher.observe(plan.name, plan.recorded)
        plan.group = running.group  # no group once its leader is gone
        plan.processes.update(running.processes)

    def _advance_stop(self, plan, now):
        alive = plan.processes_left = self.owner.still_alive(plan.targets())
        in_step = now - plan.step_since
        if plan.step == STEP_STOPPING:
            if alive and in_step < self.params["stop_timeout"]:
                return
            self._rescan(plan)
            left = self.owner.still_alive(plan.targets())
            if left:
                # After the whole stop_timeout it ignored SIGTERM; before it, children spawned while it shut down.
                self._event(plan, "sigkill", now, after_s=round(in_step, 1), processes=len(left),
                            ignored_sigterm=bool(alive))
                self._signal(plan, signal.SIGKILL, now)
                return
        elif alive:
            if in_step >= SIGKILL_GRACE_SECONDS:
                survivors = ", ".join(f"{pid} ({info.cmdline}, state {_state_of(pid)})"
                                      for pid, info in sorted(alive.items()))
                self._fail(plan, now, f"{plan.name} is down: its processes survived SIGKILL for {SIGKILL_GRACE_SECONDS} "
                                      f"s (uninterruptible, e.g. stuck in the driver): {survivors}", down=True)
            return
        plan.timings["stop_s"] = round(now - plan.stop_started, 3)
        self._event(plan, "stopped", now, stop_s=plan.timings["stop_s"])
        plan.enter(STEP_VERIFYING, now)

    def _advance_verify(self, plan, used, query_error, now):
        plan.gpu_used = {gpu: used[gpu] for gpu in plan.gpus if gpu in used}
        threshold = self.params["gpu_free_threshold_mib"]
        busy = sorted(gpu for gpu in plan.gpus if gpu not in used or used[gpu] > threshold)
        plan.port_holders = procfs.port_listeners(plan.spec["port"]) if plan.launches and not busy else []
        if not busy and not plan.port_holders:
            plan.gpu_memory_after = _gpu_keyed(plan.gpu_used)
            plan.timings["gpu_free_s"] = round(now - plan.step_since, 3)
            if plan.launches:
                if plan.stop_launcher is not plan.launcher:
                    plan.stop_launcher.stopped(plan.name)  # e.g. its systemd unit must not start it at boot too
                self._launch(plan)
                self._event(plan, "launched", now, pid=plan.launched["pid"])
            else:
                plan.stop_launcher.stopped(plan.name)
                remove_state(self.state_dir, plan.name)
            plan.enter(STEP_DONE, now)
            return
        if now - plan.step_since < self.params["gpu_free_timeout"]:
            return
        plan.gpu_memory_after = _gpu_keyed(plan.gpu_used)
        down = "is down" if plan.kills else "was not launched"
        if busy:
            holders = procfs.gpu_holders(self.device_dir, {gpu: self.minors.get(gpu, gpu) for gpu in busy})
            described = []
            for gpu in busy:
                who = "held by " + ", ".join(self.process_text(pid) for pid in holders[gpu]) if holders.get(gpu) else (
                    "no process here holds the device (a process outside this container, or the driver)")
                memory = f"still uses {used[gpu]} MiB" if gpu in used else f"memory unknown ({query_error})"
                described.append(f"GPU {gpu} {memory}; {who}")
            self._fail(plan, now, f"{plan.name} {down}: GPU memory not freed within gpu_free_timeout="
                                  f"{self.params['gpu_free_timeout']:g} s (threshold {threshold} MiB): "
                                  + "; ".join(described), down=True)
            plan.gpu_holders = {str(gpu): [procfs.describe(pid) for pid in holders.get(gpu, [])] for gpu in busy}
        else:
            self._fail(plan, now, f"{plan.name} {down}: port {plan.spec['port']} still in use after gpu_free_timeout="
                                  f"{self.params['gpu_free_timeout']:g} s by "
                                  + ", ".join(self.process_text(pid) for pid in plan.port_holders), down=True)

    def _launch(self, plan):
        spec = plan.spec
        started = time.monotonic()
        log_path = spec["log_path"]
        try:
            safe_files.ensure_private_dir(os.path.dirname(log_path) or ".")
            plan.rotated_log = safe_files.rotate_log(log_path, self.params["log_generations"])
            log_fd = safe_files.open_append_no_follow(log_path)
        except OSError as exc:
            raise LaunchError(f"{plan.name} was not launched: cannot prepare its log {log_path}: {exc}")
        env = dict(os.environ)
        # The launch script exports both too; setting them here covers scripts written by hand.
        env[procfs.MARKER_VAR] = plan.name
        env[procfs.DEPLOYMENT_VAR] = self.state_dir
        # SGLang names its children with setproctitle, which overwrites /proc/<pid>/environ - and with it
        # the marker - unless SPT_NOENV is set (the title then fits in the original command line).
        env.setdefault("SPT_NOENV", "1")
        try:
            pid = plan.launcher.start(plan, log_fd, env)
        except launchers.LauncherError as exc:
            raise LaunchError(f"{plan.name} was not launched: {exc}")
        finally:
            os.close(log_fd)
        info = procfs.read_process(pid)
        # The state file contract of docs/architecture.md.
        plan.launched = dict(
            plan.desired, name=plan.name, pid=pid, pgid=info.pgid if info else pid, launched_at=time.time(),
            pid_starttime=info.starttime if info else None, run_id=self.params.get("run_id"),
            settings=plan.launch_settings,
            **{draining.ROUTER_ADD_KEY: draining.owes_router(
                self.router is not None, plan.action, plan.router_removed, plan.recorded)})
        try:
            write_state(self.state_dir, plan.name, plan.launched)
            if spec.get("pid_file"):
                safe_files.write_atomic(spec["pid_file"], f"{pid}\n", 0o644)
        except OSError as exc:
            # A server nobody recorded would be found only by its marker: stop it rather than leave it half-known.
            plan.launcher.kill(plan.name)
            plan.launched = {}
            raise LaunchError(f"{plan.name} was not launched: cannot record its state in {self.state_dir}: {exc}")
        plan.timings["launch_s"] = round(time.monotonic() - started, 3)

    def act(self, plans, progress):
        """The sequence, per server at its own pace; ``progress(snapshot)`` is called about once a second."""
        acting = [plan for plan in plans if plan.changes]
        started = self.act_started = time.monotonic()
        for plan in acting:
            plan.stop_started = started
            if not plan.targets():
                plan.enter(STEP_VERIFYING, started)
            elif plan.main_pid is not None and self._port(plan):  # serving, or on its way: not killed unasked
                self._guarded(plan, started, self._begin_stop, plan, started)
            else:
                self._signal(plan, signal.SIGTERM, started)
        last_report = 0.0
        while True:
            now = time.monotonic()
            for plan in acting:
                if plan.step == STEP_DRAINING:
                    self._guarded(plan, now, self._advance_drain, plan, now)
                if plan.step in (STEP_STOPPING, STEP_KILLING):
                    self._guarded(plan, now, self._advance_stop, plan, now)
            verifying = [plan for plan in acting if plan.step == STEP_VERIFYING]
            if verifying:
                used, query_error = self._memory_used(sorted({gpu for plan in verifying for gpu in plan.gpus}))
                for plan in verifying:
                    self._guarded(plan, now, self._advance_verify, plan, used, query_error, now)
            pending = [plan for plan in acting if plan.step not in (STEP_DONE, STEP_FAILED)]
            if not pending or now - last_report >= 1.0:
                last_report = now
                try:
                    progress({"elapsed": round(now - started, 1), "servers": [plan.progress(now) for plan in acting],
                              "events": self.events})
                except OSError:
                    pass  # progress is for the eyes only (a full disk): the sequence must go on
            if not pending:
                break
            time.sleep(_POLL_SECONDS)
        for plan in acting:
            plan.killed = [{"pid": pid, "cmdline": info.cmdline, "signal": plan.last_signal[pid]}
                           for pid, info in sorted(plan.targets().items()) if pid in plan.last_signal]
            for pid in plan.blockers:
                registry = self.stale if pid in self.stale else self.foreign
                if pid in registry:
                    registry[pid]["signal"] = plan.last_signal.get(pid)
        if not any(plan.step == STEP_FAILED for plan in acting):
            for owner in {entry["server"] for entry in self.stale.values()}:
                remove_state(self.state_dir, owner)
        self.timings["act_s"] = round(time.monotonic() - started, 3)
        return self._journaled(plans, self._result(plans))

    def _journaled(self, plans, result):
        """The result, after the run journal got what only this call knows: every server a stop handled, and
        the servers left down (the wait journals the others)."""
        if not self.params["journal"]:
            return result
        stopping = self.params["state"] == "stopped"
        entries = {plan.name: {key: value for key, value in (
            ("action", plan.action), ("outcome", "down" if plan.down else plan.action),
            ("error", plan.error), ("gpu_memory_after_mib", plan.gpu_memory_after or None)) if value is not None}
            for plan in plans if stopping or plan.down or plan.name in self.no_last_good}
        if entries:
            header = journal.run_header(self.state_dir, "stop" if stopping else "relaunch", self.params.get("run_id"))
            result["journal_error"] = journal.append(self.state_dir, header, entries)
        return result

    def _guarded(self, plan, now, step, *args):
        """One server's step; whatever it raises fails that server alone, never the sequence of the others."""
        try:
            step(*args)
        except LaunchError as exc:
            self._fail(plan, now, str(exc), down=True)
        except Exception as exc:  # noqa: BLE001  # pylint: disable=broad-except
            stopped = "is down" if plan.kills else "was not launched"
            self._fail(plan, now, scrub_text(f"{plan.name} {stopped}: {type(exc).__name__}: {exc}"), down=True)

    def process_text(self, pid):
        """``pid 123 (python3 -m sglang.launch_server ...) of server 'gpu0'`` - command line scrubbed of keys."""
        info = procfs.read_process(pid)
        owner = self.owner.owner(pid)
        whose = {"ours": f"of server {owner.server!r}", "other_deployment": f"of server {owner.server!r} of another "
                 f"deployment ({owner.deployment})"}.get(owner.verdict, "foreign")
        return f"pid {pid} ({info.cmdline if info else 'gone'}) {whose}"

    def _memory_used(self, gpus):
        """Used MiB per GPU index, and the error of a failed query (the GPUs then count as not verified)."""
        try:
            return {gpu["index"]: gpu["memory_used_mib"] or 0 for gpu in self._query_gpus(gpus)}, None
        except ServerControlError as exc:
            return {}, str(exc)

    # ---- reporting -----------------------------------------------------------------------------

    @staticmethod
    def _describe_before(plan):
        running = bool(plan.processes)
        return server_plan.describe(running, (plan.recorded or {}).get("pid") if running else None,
                                    server_plan.recorded_settings(plan.recorded))

    def _describe_after(self, plan):
        if not plan.changes:
            return self._describe_before(plan)
        if plan.action == "stopped" or plan.down:
            return server_plan.describe(False, None, {})
        return server_plan.describe(True, plan.launched.get("pid"), plan.desired)

    def _server_result(self, plan):
        current = plan.launched or (plan.recorded if plan.action == "unchanged" else {}) or {}
        return {
            "name": plan.name,
            "action": plan.action,
            "reason": plan.reason,
            "changed": plan.changes,
            "error": plan.error,
            "down": plan.down,
            "pid": current.get("pid"),
            "pgid": current.get("pgid"),
            "port": plan.spec.get("port"),
            "gpus": plan.gpus,
            "log_path": plan.spec.get("log_path"),
            "rotated_log": plan.rotated_log,
            "state_file": state_path(self.state_dir, plan.name),
            "killed": plan.killed,
            "killed_pids": [entry["pid"] for entry in plan.killed],
            "gpu_memory_before_mib": plan.gpu_memory_before,
            "gpu_memory_after_mib": plan.gpu_memory_after,
            "gpu_holders": plan.gpu_holders,
            "timings": plan.timings,
            "drain": plan.drain.report() if plan.drain else None,
            "router": {"worker_url": plan.worker_url, "removed_ids": plan.router_removed} if plan.worker_url else None,
            **self._rollback_result(plan),
        }

    def _rollback_result(self, plan):
        """With rollback: the run whose configuration the server went back to, or that it had none."""
        if plan.name in self.rollback_to:
            to = self.rollback_to[plan.name]
            return {"rollback": {"to_run_id": to.get("run_id"), "to_time": to.get("time"),
                                 "script_sha256": to["script_sha256"], "key_status": to["key_status"]}}
        if plan.name in self.no_last_good:
            return {"rollback": {"error": f"{self.no_last_good[plan.name]}: left stopped"}}
        return {}

    def _result(self, plans):
        failed = [plan for plan in plans if plan.step == STEP_FAILED]
        result = {
            "changed": any(plan.changes for plan in plans),
            "servers": [self._server_result(plan) for plan in plans],
            "down": [plan.name for plan in failed if plan.down],
            "stale_killed": [self.stale[pid] for pid in sorted(self.stale)],
            "foreign_killed": [self.foreign[pid] for pid in sorted(self.foreign)],
            "timings": self.timings,
            "diff": {
                "before": {plan.name: self._describe_before(plan) for plan in plans},
                "after": {plan.name: self._describe_after(plan) for plan in plans}},
        }
        if failed:
            others = [plan.name for plan in plans if plan.changes and plan.step == STEP_DONE]
            result["failed"] = True
            result["msg"] = "; ".join(plan.error for plan in failed) + (
                f". Now down: {', '.join(result['down'])}" if result["down"] else "") + (
                f". The others were handled: {', '.join(others)}" if others else "")
        return result

    # ---- entry points --------------------------------------------------------------------------

    def apply(self, slice_seconds):
        """Check, write scripts and start the sequence; returns the result, or a progress result with
        ``carry`` when the sequence still runs after ``slice_seconds``."""
        params = self.params
        started = time.monotonic()
        validate_request(params, self.launcher)
        if params.get("run_id") and not self.check_mode:
            try:
                run_lock.renew(self.state_dir, params["run_id"])
            except run_lock.RunLockError as exc:
                raise ServerControlError(str(exc))
        if self.check_mode:
            plans, scripts, diffs = self._read_host(check_mode=True)
            return dict(self._result(plans), scripts=scripts, script_diffs=diffs)
        try:
            lock_fd, waited = acquire_host_lock(self.state_dir, params["lock_timeout"])
        except LockTimeout as exc:
            raise ServerControlError(str(exc))
        try:
            self.timings["lock_wait_s"] = round(waited, 3)
            earlier = host_job.unreported(self.state_dir)
            interrupted = [_interrupted_summary(record) for record in earlier]
            for record in earlier:
                host_job.mark_reported(self.state_dir, record)
            plans, scripts, diffs = self._read_host(check_mode=False)
            extra = {"scripts": scripts, "script_diffs": diffs, "interrupted_runs": interrupted}
            if not any(plan.changes for plan in plans):
                self.timings["total_s"] = round(time.monotonic() - started, 3)
                return dict(self._journaled(plans, self._result(plans)), **extra)
            job_id = host_job.new_job_id()

            def work(progress):
                mark_lock_holder(lock_fd)
                return dict(self.act(plans, progress), **extra)

            try:
                host_job.start(self.state_dir, job_id, work,
                               {"run_id": params.get("run_id"), "servers": [plan.name for plan in plans]},
                               keep_fds=(lock_fd,))
            except OSError as exc:
                raise ServerControlError(f"cannot record the job in {self.state_dir}: {exc}; no server was stopped")
            except host_job.WorkerNotStarted as exc:
                raise ServerControlError(str(exc))
        finally:
            release_host_lock(lock_fd)
        return host_job.follow_result(self.state_dir, job_id, time.time() + slice_seconds)

    def _read_host(self, check_mode):
        problem = self.launcher.problem()
        if problem:
            raise ServerControlError(f"{problem}; nothing was touched")
        present = {gpu["index"]: gpu for gpu in self._query_gpus()}
        self.minors = device_minors(present.values(), self.params["nvidia_driver_dir"])
        plans = self._defer_beyond_max_changes([self._plan(spec) for spec in self.params["servers"]])
        # Also the GPUs recorded at launch (stop.yml passes names only): the container may have fewer now.
        try:
            require_present(present, [(gpu, f"{gpu} of server {plan.name!r}") for plan in plans for gpu in plan.gpus])
        except GpuError as exc:
            raise ServerControlError(str(exc))
        for plan in plans:
            plan.gpu_memory_before = _gpu_keyed({
                gpu: present[gpu]["memory_used_mib"] for gpu in plan.gpus if gpu in present})
        self._check_conflicts(plans)
        self._check_router(plans)
        scripts, diffs = self._write_scripts([plan for plan in plans if plan.action != "deferred"], check_mode)
        return plans, scripts, diffs

    def _defer_beyond_max_changes(self, plans):
        """A canary: only the first ``max_changes`` servers that need a change get it; the others keep running
        what they run, their scripts untouched, until a later call."""
        limit = self.params.get("max_changes")
        if limit:
            for plan in [plan for plan in plans if plan.changes][limit:]:
                plan.action = "deferred"
                plan.reason = f"deferred: at most {limit} servers change in this call (max_changes); would be " + \
                    plan.reason
        return plans


def _state_of(pid):
    info = procfs.read_process(pid)
    return info.state if info else "gone"


class LaunchError(Exception):
    """One server could not be launched; the others go on."""


def _interrupted_summary(record):
    """What a run whose result nobody picked up (Ctrl-C, dropped connection) did on this host."""
    result = record.get("result") or {}
    servers = [f"{server['name']} {'down' if server.get('down') else server['action']}"
               for server in result.get("servers") or [] if server.get("changed")]
    return {"job_id": record["job_id"], "run_id": record.get("run_id"), "status": record["status"],
            "started": record.get("started"), "finished": record.get("finished"),
            "down": result.get("down") or [], "servers": servers, "msg": result.get("msg")}
