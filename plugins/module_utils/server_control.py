# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kill -> verify GPU memory freed -> launch, for all SGLang servers of one host at once.

The sequence is: validate everything (input, GPUs present, foreign GPU holders and port owners)
before touching any process; then SIGTERM every process that must go, wait, SIGKILL the rest; poll
nvidia-smi until the GPUs are free; then launch every server fully detached and record its state.
"""

import hashlib
import os
import re
import signal
import subprocess
import time

from ansible_collections.gpuops.sglang.plugins.module_utils import procfs
from ansible_collections.gpuops.sglang.plugins.module_utils.nvidia_smi import (
    DRIVER_GPUS_DIR,
    NvidiaSmiError,
    device_minors,
    query_gpus,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    DEFAULT_STATE_DIR,
    LockTimeout,
    host_lock,
    read_state,
    remove_state,
    state_path,
    write_state,
)

# Foreign processes that keep GPU device nodes open on bare-metal hosts without using memory.
IGNORED_GPU_HOLDERS = (r"^(/\S+/)?nvidia-persistenced\b", r"^(/\S+/)?nv-hostengine\b", r"dcgm-exporter")

COMMON_ARGUMENT_SPEC = {
    "state_dir": {"type": "path", "default": DEFAULT_STATE_DIR},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "gpu_device_dir": {"type": "path", "default": "/dev"},
    "nvidia_driver_dir": {"type": "path", "default": DRIVER_GPUS_DIR},
}

STATES = ("started", "restarted", "stopped")
LOG_GENERATIONS = 5
# After SIGKILL a process normally disappears at once; one stuck in D state is reported instead.
SIGKILL_GRACE_SECONDS = 10
_POLL_SECONDS = 0.25


class ServerControlError(Exception):
    """A user-facing failure; ``details`` go into the module result next to the message."""

    def __init__(self, msg, **details):
        super().__init__(msg)
        self.details = details


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def rotate_log(log_path, generations=LOG_GENERATIONS):
    """Shift ``log`` -> ``log.1`` -> ... -> ``log.<generations>`` (the oldest is dropped).

    Returns the path the previous log now has, or None when there was none. Never truncates: a
    reader still following the old file keeps its data.
    """
    if not os.path.exists(log_path):
        return None
    for generation in range(generations - 1, 0, -1):
        older = f"{log_path}.{generation}"
        if os.path.exists(older):
            os.replace(older, f"{log_path}.{generation + 1}")
    os.replace(log_path, log_path + ".1")
    return log_path + ".1"


def validate_request(servers, state, numbers, ignore_gpu_holders=()):
    """Check the request without looking at the host; raise one error listing every problem."""
    problems = []
    for pattern in ignore_gpu_holders:
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"ignore_gpu_holders entry {pattern!r} is not a valid regular expression: {exc}")
    for option, value in sorted(numbers.items()):
        if value < 0:
            problems.append(f"{option} must be >= 0, got {value}")
    launching = state != "stopped"
    seen_names, seen_ports, gpu_owner = {}, {}, {}
    seen_files = {}  # (option, path) -> server: two servers sharing a log or script would mix up their records
    for position, server in enumerate(servers):
        where = f"servers[{position}]"
        name = server.get("name")
        if not procfs.SERVER_NAME.match(name or ""):
            problems.append(f"{where}.name {name!r} is invalid: use letters, digits, '.', '_' and '-' "
                            "(it names files and the marker value)")
        duplicate = name in seen_names
        if duplicate and procfs.SERVER_NAME.match(name or ""):
            problems.append(f"duplicate server name {name!r} (servers[{seen_names[name]}] and {where})")
        seen_names.setdefault(name, position)
        where = f"{where} ({name})"
        if launching:
            missing = [key for key in ("port", "gpus", "launch_script", "log_path") if server.get(key) in (None, [])]
            if missing:
                problems.append(f"{where}: {', '.join(missing)} required for state={state}")
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
        script = server.get("launch_script")
        if launching and script:
            if not os.path.isfile(script):
                problems.append(f"{where}.launch_script {script} does not exist or is not a file")
            elif not os.access(script, os.X_OK):
                mode = oct(os.stat(script).st_mode & 0o777)
                problems.append(f"{where}.launch_script {script} is not executable (mode {mode}); make it executable")
            else:
                exported = _exported_marker(script)
                if exported not in (None, name):
                    problems.append(f"{where}.launch_script {script} exports {procfs.MARKER_VAR}={exported}, "
                                    f"not {name}: its processes would be taken for server {exported!r}")
    if problems:
        raise ServerControlError("invalid request: " + "; ".join(problems), problems=problems)


_MARKER_EXPORT = re.compile(r"^\s*export\s+" + procfs.MARKER_VAR + r"=['\"]?([^'\"\s]+)", re.MULTILINE)


def _exported_marker(script):
    """The marker value a launch script exports (the last one wins in sh), or None."""
    try:
        with open(script, errors="replace") as handle:
            values = _MARKER_EXPORT.findall(handle.read())
    except OSError:
        return None
    return values[-1] if values else None


def _gpu_keyed(values):
    return {str(index): value for index, value in sorted(values.items())}


def _own_lineage():
    """This process and its ancestors: never signal them, even if they carry a marker."""
    lineage, pid = set(), os.getpid()
    while pid > 1 and pid not in lineage:
        lineage.add(pid)
        info = procfs.read_process(pid)
        pid = info.ppid if info else 0
    return lineage


def _describe(running, pid, values):
    """One server in the diff: running, pid and the settings that decide whether it is current."""
    described = {"running": running, "pid": pid}
    described.update((key, values.get(key)) for key in ("port", "gpus", "launch_script", "script_sha256", "log_path"))
    return described


def _holder_text(pid):
    entry = procfs.describe(pid)
    owner = f"of server {entry['server']!r}" if entry["server"] else "foreign"
    return f"pid {pid} ({entry['cmdline']}) {owner}"


class ServerPlan:
    """What happens to one server, and what happened."""

    def __init__(self, spec, recorded):
        self.spec = spec
        self.name = spec["name"]
        self.recorded = recorded
        self.gpus = sorted(spec.get("gpus") or (recorded or {}).get("gpus") or [])
        self.action = "unchanged"
        self.reason = ""
        self.processes = {}
        self.group = None
        self.killed = []
        self.script_sha256 = None
        self.launched = {}
        self.rotated_log = None
        self.timings = {}
        self.gpu_memory_before = {}
        self.gpu_memory_after = {}

    @property
    def kills(self):
        return self.action in ("relaunched", "stopped")

    @property
    def launches(self):
        return self.action in ("launched", "relaunched")

    @property
    def changes(self):
        """Stopped and/or launched: its GPUs and port are checked, its GPU memory verified."""
        return self.action not in ("unchanged", "already_stopped")


class ServerControl:
    """Brings the servers of one host to ``state`` (see the gpuops.sglang.server module docs)."""

    def __init__(self, run, params, check_mode=False):
        self.run = run
        self.params = params
        self.check_mode = check_mode
        self.state_dir = params["state_dir"]
        self.device_dir = params["gpu_device_dir"]
        self.minors = {}  # GPU index -> device minor, from the GPUs nvidia-smi lists
        # Processes outside the servers' own (stale servers, forced foreign holders): pid -> ProcessInfo.
        self.extra_targets = {}
        self.foreign = {}
        self.stale = {}
        self.timings = {}

    # ---- reading the host --------------------------------------------------------------------

    def _query_gpus(self, ids=None):
        try:
            return query_gpus(self.run, self.params["nvidia_smi"], ids=ids)
        except NvidiaSmiError as exc:
            raise ServerControlError(str(exc))

    def _server_processes(self, name, recorded):
        """Processes of server ``name``: marker matches (of this state_dir's deployment) plus the recorded
        process group while its leader is the process we launched (same starttime)."""
        found = {info.pid: info for info in procfs.find_marked(name, state_dir=self.state_dir)}
        group = None
        pgid = (recorded or {}).get("pgid")
        # Only while its leader is the very process we launched: a leaderless group with that number may be a
        # stranger's (after a reboot or pid wrap-around); marked members of ours are found above anyway.
        if pgid and pgid == recorded.get("pid") and procfs.pid_alive(pgid, recorded.get("pid_starttime")):
            members = procfs.group_members(pgid)
            if members:
                group = pgid
                found.update((info.pid, info) for info in members)
        for pid in _own_lineage():
            found.pop(pid, None)
        return found, group

    def _plan(self, spec):
        state = self.params["state"]
        recorded = read_state(self.state_dir, spec["name"])
        plan = ServerPlan(spec, recorded)
        plan.processes, plan.group = self._server_processes(plan.name, recorded)
        if state == "stopped":
            plan.action = "stopped" if plan.processes else "already_stopped"
            plan.reason = "stop requested" if plan.processes else "no process of this server runs"
            return plan
        plan.script_sha256 = sha256_file(spec["launch_script"])
        recorded_alive = bool(recorded) and procfs.pid_alive(recorded.get("pid"), recorded.get("pid_starttime"))
        if state == "restarted":
            plan.reason = "restart requested"
        elif not recorded:
            plan.reason = f"no state recorded in {state_path(self.state_dir, plan.name)}"
        elif not recorded_alive:
            plan.reason = f"recorded process {recorded.get('pid')} is not running"
        else:
            changed = [key for key in ("launch_script", "port", "gpus", "log_path")
                       if recorded.get(key) != (sorted(spec[key]) if key == "gpus" else spec[key])]
            if recorded.get("script_sha256") != plan.script_sha256:
                changed.insert(0, "launch script content")
            if not changed:
                plan.reason = f"running (pid {recorded['pid']}) with the same launch script"
                return plan
            plan.reason = "changed: " + ", ".join(changed)
        plan.action = "relaunched" if plan.processes else "launched"
        return plan

    def _check_conflicts(self, plans):
        """Before anything is killed: judge every GPU holder and port owner that is not ours to stop.

        Foreign processes (no marker) fail the run, except GPU holders with force_kill_gpu_holders;
        processes of a server this run leaves running fail it. Processes of a server not in this request
        are stale (renamed or removed) and stopped with the rest when that server has a state file in
        our state_dir; otherwise they belong to another deployment on this host and fail the run.
        """
        planned = {plan.name for plan in plans}
        doomed = {pid for plan in plans if plan.kills for pid in plan.processes}
        problems = []

        def judge(pid, what, on_foreign):
            if pid in doomed or pid in self.extra_targets:
                return
            info = procfs.read_process(pid)
            if info is None:
                return
            owner = procfs.marker_of(pid)
            deployment = procfs.other_deployment(pid, self.state_dir)
            if owner is None:
                problem = on_foreign(info)
            elif deployment:
                problem = (f"{what} is held by pid {pid} ({info.cmdline}) of server {owner!r} of another deployment "
                           f"(state_dir {deployment}); stop it there first")
            elif owner in planned:
                problem = (f"{what} is held by pid {pid} ({info.cmdline}) of server {owner!r}, "
                           "which this run leaves running")
            elif read_state(self.state_dir, owner) is None:
                problem = (f"{what} is held by pid {pid} ({info.cmdline}) of server {owner!r}, which has no state "
                           f"file in {self.state_dir} (another deployment?); stop it first")
            else:
                problem = None
                # The whole stale server goes, not only the process in the way: its state file is removed.
                stale, _group = self._server_processes(owner, read_state(self.state_dir, owner))
                stale[pid] = info
                for stale_pid, stale_info in stale.items():
                    self.extra_targets[stale_pid] = stale_info
                    entry = self.stale.setdefault(stale_pid, dict(procfs.describe(stale_pid), holds=None))
                    if stale_pid == pid:
                        entry["holds"] = what
            if problem:
                problems.append(problem)

        ignored = [re.compile(pattern) for pattern in self.params["ignore_gpu_holders"]]

        def foreign_gpu_holder(gpu):
            def on_foreign(info):
                # Daemons such as nvidia-persistenced keep every device node open without using memory.
                if any(pattern.search(info.cmdline) for pattern in ignored):
                    return None
                if not self.params["force_kill_gpu_holders"]:
                    return (f"GPU {gpu} is held by foreign process {info.pid} ({info.cmdline}) that has no "
                            f"{procfs.MARKER_VAR} marker; refusing to kill it: stop it yourself or set "
                            "force_kill_gpu_holders: true")
                self.extra_targets[info.pid] = info
                self.foreign[info.pid] = dict(procfs.describe(info.pid), holds=f"GPU {gpu}")
                return None
            return on_foreign

        def foreign_port_owner(plan):
            def on_foreign(info):
                return (f"port {plan.spec['port']} of server {plan.name!r} is in use by foreign process {info.pid} "
                        f"({info.cmdline}); free the port or choose another one")
            return on_foreign

        gpus = sorted({gpu for plan in plans if plan.changes for gpu in plan.gpus})
        holders = procfs.gpu_holders(self.device_dir, {gpu: self.minors[gpu] for gpu in gpus}) if gpus else {}
        for gpu in gpus:
            for pid in holders.get(gpu, []):
                judge(pid, f"GPU {gpu}", foreign_gpu_holder(gpu))
        for plan in plans:
            if plan.launches:
                for pid in procfs.port_listeners(plan.spec["port"]):
                    judge(pid, f"port {plan.spec['port']}", foreign_port_owner(plan))
        if problems:
            raise ServerControlError("refusing to touch any process: " + "; ".join(problems), problems=problems)

    # ---- acting --------------------------------------------------------------------------------

    def _signal_all(self, plans, sig):
        """Send ``sig`` to every process group and process that must go; return those it reached."""
        targets = dict(self.extra_targets)
        for plan in plans:
            targets.update(plan.processes)
        # Decide who is alive before signalling: a group signal ends some members at once.
        alive = {pid: info for pid, info in targets.items() if procfs.pid_alive(pid, info.starttime)}
        groups = set()
        for plan in plans:
            if plan.group:
                try:
                    os.killpg(plan.group, sig)
                    groups.add(plan.group)
                except OSError:
                    pass
        for pid, info in list(alive.items()):
            if info.pgid in groups:
                continue
            try:
                os.kill(pid, sig)
            except OSError:
                del alive[pid]
        return alive

    def _wait_gone(self, pids, timeout, on_gone):
        deadline = time.monotonic() + timeout
        remaining = dict(pids)
        while remaining:
            for pid, info in list(remaining.items()):
                if not procfs.pid_alive(pid, info.starttime):
                    del remaining[pid]
                    on_gone(pid)
            if not remaining or time.monotonic() >= deadline:
                break
            time.sleep(_POLL_SECONDS)
        return remaining

    def _stop(self, plans):
        killing = [plan for plan in plans if plan.kills]
        if not killing and not self.extra_targets:
            return
        started = time.monotonic()
        owner_of = {pid: plan for plan in killing for pid in plan.processes}
        last_signal = {}

        def gone(pid):
            plan = owner_of.get(pid)
            if plan is not None:
                plan.timings["stop_s"] = round(time.monotonic() - started, 3)

        alive = self._signal_all(killing, signal.SIGTERM)
        last_signal.update((pid, "SIGTERM") for pid in alive)
        self._wait_gone(alive, self.params["stop_timeout"], gone)
        # Re-scan, also when all went: children may have been spawned while the servers were shutting down.
        for plan in killing:
            found, plan.group = self._server_processes(plan.name, plan.recorded)
            plan.processes.update(found)
            owner_of.update((pid, plan) for pid in found)
        alive = self._signal_all(killing, signal.SIGKILL)
        if alive:
            last_signal.update((pid, "SIGKILL") for pid in alive)
            alive = self._wait_gone(alive, SIGKILL_GRACE_SECONDS, gone)
        for plan in killing:
            plan.killed = [{"pid": pid, "cmdline": info.cmdline, "signal": last_signal[pid]}
                           for pid, info in sorted(plan.processes.items()) if pid in last_signal]
        for registry in (self.stale, self.foreign):
            for pid, entry in registry.items():
                entry["signal"] = last_signal.get(pid)
        self.timings["stop_s"] = round(time.monotonic() - started, 3)
        if alive:
            raise ServerControlError(
                f"processes survived SIGKILL for {SIGKILL_GRACE_SECONDS} s (uninterruptible, e.g. stuck in the "
                "driver): " + ", ".join(f"{pid} ({info.cmdline})" for pid, info in alive.items()),
                survivors=sorted(alive))

    def _verify_gpus_free(self, plans):
        gpus = sorted({gpu for plan in plans if plan.changes for gpu in plan.gpus})
        if not gpus:
            return
        threshold = self.params["gpu_free_threshold_mib"]
        started = time.monotonic()
        deadline = started + self.params["gpu_free_timeout"]
        while True:
            used = {gpu["index"]: gpu["memory_used_mib"] or 0 for gpu in self._query_gpus(gpus)}
            busy = {index: mib for index, mib in used.items() if mib > threshold}
            if not busy or time.monotonic() >= deadline:
                break
            time.sleep(_POLL_SECONDS)
        self.timings["gpu_free_s"] = round(time.monotonic() - started, 3)
        for plan in plans:
            plan.gpu_memory_after = _gpu_keyed({gpu: used[gpu] for gpu in plan.gpus if gpu in used})
            if plan.changes:
                plan.timings["gpu_free_s"] = self.timings["gpu_free_s"]
        if busy:
            holders = procfs.gpu_holders(self.device_dir, {gpu: self.minors[gpu] for gpu in busy})
            described = []
            for index in sorted(busy):
                who = ", ".join(_holder_text(pid) for pid in holders.get(index, [])) or (
                    "no process here holds the device (a process outside this container, or the driver)")
                described.append(f"GPU {index} uses {busy[index]} MiB: {who}")
            raise ServerControlError(
                f"GPU memory not freed within gpu_free_timeout={self.params['gpu_free_timeout']} s "
                f"(threshold {threshold} MiB): " + "; ".join(described),
                gpu_holders={str(index): [procfs.describe(pid) for pid in holders.get(index, [])] for index in busy})

    def _launch(self, plan):
        spec = plan.spec
        started = time.monotonic()
        log_path = spec["log_path"]
        log_dir = os.path.dirname(log_path)
        if log_dir and not os.path.isdir(log_dir):
            os.makedirs(log_dir, 0o755)
        plan.rotated_log = rotate_log(log_path)
        env = dict(os.environ)
        # The launch script exports the marker too; setting it here covers scripts that forget.
        env[procfs.MARKER_VAR] = plan.name
        env[procfs.DEPLOYMENT_VAR] = self.state_dir
        # SGLang names its children with setproctitle, which overwrites /proc/<pid>/environ - and with it
        # the marker - unless SPT_NOENV is set (the title then fits in the original command line).
        env.setdefault("SPT_NOENV", "1")
        script = spec["launch_script"]
        try:
            with open(log_path, "ab") as log:
                # Fully detached: own session, no terminal, no inherited fds, so `pct exec` returns.
                # Not run_command: that waits for the child, and this child is the long-running server.
                process = subprocess.Popen(  # pylint: disable=ansible-bad-function
                    [script], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    cwd=os.path.dirname(script) or None, env=env, close_fds=True, start_new_session=True)
        except OSError as exc:
            raise ServerControlError(f"cannot execute launch script {script} of server {plan.name!r}: {exc}")
        info = procfs.read_process(process.pid)
        # The state file contract of docs/architecture.md.
        plan.launched = {
            "name": plan.name, "pid": process.pid, "pgid": process.pid, "port": spec["port"], "gpus": plan.gpus,
            "launch_script": script, "script_sha256": plan.script_sha256, "log_path": log_path,
            "launched_at": time.time(), "pid_starttime": info.starttime if info else None,
        }
        write_state(self.state_dir, plan.name, plan.launched)
        if spec.get("pid_file"):
            with open(spec["pid_file"], "w") as handle:
                handle.write(f"{process.pid}\n")
        plan.timings["launch_s"] = round(time.monotonic() - started, 3)

    def _act(self, plans):
        self._stop(plans)
        self._verify_gpus_free(plans)
        for plan in plans:
            if plan.launches:
                self._launch(plan)
            elif plan.action == "stopped":
                remove_state(self.state_dir, plan.name)
        for owner in {entry["server"] for entry in self.stale.values()}:
            remove_state(self.state_dir, owner)

    # ---- reporting -----------------------------------------------------------------------------

    @staticmethod
    def _describe_before(plan):
        recorded = plan.recorded or {}
        running = bool(plan.processes)
        return _describe(running, recorded.get("pid") if running else None, recorded)

    def _describe_after(self, plan):
        if not plan.changes:
            return self._describe_before(plan)
        if plan.action == "stopped":
            return _describe(False, None, {})
        return _describe(True, plan.launched.get("pid"),
                         dict(plan.spec, gpus=plan.gpus, script_sha256=plan.script_sha256))

    def _server_result(self, plan):
        current = plan.launched or (plan.recorded if plan.action == "unchanged" else {}) or {}
        return {
            "name": plan.name,
            "action": plan.action,
            "reason": plan.reason,
            "changed": plan.changes,
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
            "timings": plan.timings,
        }

    # ---- entry point ---------------------------------------------------------------------------

    def apply(self):
        """Run the whole sequence; returns the module result (raises ServerControlError on failure)."""
        params = self.params
        started = time.monotonic()
        numbers = ("stop_timeout", "gpu_free_timeout", "gpu_free_threshold_mib", "lock_timeout")
        validate_request(params["servers"], params["state"], {option: params[option] for option in numbers},
                         params["ignore_gpu_holders"])
        if self.check_mode:
            return self._apply_locked(0.0, started)
        try:
            with host_lock(self.state_dir, params["lock_timeout"]) as waited:
                return self._apply_locked(waited, started)
        except LockTimeout as exc:
            raise ServerControlError(str(exc))

    def _apply_locked(self, lock_wait, started):
        self.timings["lock_wait_s"] = round(lock_wait, 3)
        present = {gpu["index"]: gpu for gpu in self._query_gpus()}
        self.minors = device_minors(present.values(), self.params["nvidia_driver_dir"])
        _require_present(present, [(gpu, f"{gpu} of server {spec['name']!r}")
                                   for spec in self.params["servers"] for gpu in spec.get("gpus") or []])
        plans = [self._plan(spec) for spec in self.params["servers"]]
        for plan in plans:
            plan.gpu_memory_before = _gpu_keyed({
                gpu: present[gpu]["memory_used_mib"] for gpu in plan.gpus if gpu in present})
        self._check_conflicts(plans)
        if not self.check_mode:
            try:
                self._act(plans)
            except ServerControlError as exc:
                # Processes may already be gone: report what happened so far.
                exc.details.update(changed=True, servers=[self._server_result(plan) for plan in plans],
                                   timings=self.timings)
                raise
        self.timings["total_s"] = round(time.monotonic() - started, 3)
        changed = any(plan.changes for plan in plans) or bool(self.extra_targets)
        return {
            "changed": changed,
            "servers": [self._server_result(plan) for plan in plans],
            "stale_killed": [self.stale[pid] for pid in sorted(self.stale)],
            "foreign_killed": [self.foreign[pid] for pid in sorted(self.foreign)],
            "timings": self.timings,
            "diff": {
                "before": {plan.name: self._describe_before(plan) for plan in plans},
                "after": {plan.name: self._describe_after(plan) for plan in plans}},
        }


def _require_present(present, requested):
    """Fail naming every requested GPU index that nvidia-smi does not list; ``requested``: [(index, label)]."""
    unknown = [label for gpu, label in requested if gpu not in present]
    if unknown:
        listed = ", ".join(str(index) for index in sorted(present)) or "none"
        raise ServerControlError(f"GPU index not present on this host (nvidia-smi lists {listed}): "
                                 + ", ".join(unknown))


def gpu_inventory(run, nvidia_smi="nvidia-smi", device_dir="/dev", gpus=None, driver_dir=DRIVER_GPUS_DIR):
    """GPUs with their memory and the processes holding them, found through /proc (not NVML)."""
    try:
        listed = query_gpus(run, nvidia_smi)
    except NvidiaSmiError as exc:
        raise ServerControlError(str(exc))
    _require_present([gpu["index"] for gpu in listed], [(gpu, str(gpu)) for gpu in gpus or []])
    selected = [gpu for gpu in listed if not gpus or gpu["index"] in gpus]
    minors = device_minors(selected, driver_dir)
    holders = procfs.gpu_holders(device_dir, minors)
    for gpu in selected:
        gpu["device_minor"] = minors[gpu["index"]]
        gpu["processes"] = [dict(entry, ours=entry["server"] is not None)
                            for entry in (procfs.describe(pid) for pid in holders.get(gpu["index"], []))]
    return selected
