# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The launcher seam: how a server's processes are started, stopped and observed.

_lifecycle/ runs the same per-server sequence (stop -> verify GPUs -> launch) whatever the launcher, and
readiness.py's stall kill goes through it too. Every launcher implements ``Launcher`` and nothing outside this
file knows which one it talks to: a launcher checks its own options and servers, adds its own settings to the
comparison that decides a relaunch, finds its server's processes, and stops, kills and starts them.
tests/integration/test_launcher_contract.py runs one contract over every launcher of ``LAUNCHERS``
and a test-only one written in a single file.

``DetachedLauncher`` starts the script as a detached process of its own session (the default).
``SystemdLauncher`` runs it as a systemd service, one unit per server: the unit's cgroup is the
authoritative process set (no scheduler can be orphaned), systemd may restart it and start it at boot.
Processes are judged ours by server_processes.py either way; a launcher never signals another's.
"""

import collections
import os
import signal
import subprocess

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    argument_specs,
    naming,
    option_ranges,
    procfs,
    script_files,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.bounded_command import (
    CommandNotRun,
    CommandTimedOut,
    run_bounded,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import (
    legacy_unit_name,
    unit_name,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.systemd_units import (
    deployment_line,
    render_unit,
    unit_problems,
    unit_sha256,
)

# processes: {pid: ProcessInfo} of the server; group: the process group to signal as a whole, or None;
# main: ProcessInfo of its main process (the one recorded, or the unit's MainPID), or None.
Running = collections.namedtuple("Running", ["processes", "group", "main"])

SYSTEMCTL_TIMEOUT = 60
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified")


class LauncherError(Exception):
    """The launcher could not do what was asked; the message names the command and what it said."""


class Launcher:
    """The contract of a launcher. ``name`` is the module option's value; ``compared`` the settings of its own
    that decide, next to the launch script, whether a running server is current: ``((key, words), ...)``."""

    name = None
    compared = ()

    def __init__(self, owner):
        self.owner = owner  # server_processes.ServerProcesses: which processes are a server's

    @classmethod
    def for_call(cls, owner, params):
        """The launcher for the options ``params`` of a module call."""
        return cls(owner)

    # ---- before anything is touched ------------------------------------------------------------

    def option_problems(self, params):
        """What is wrong with this launcher's own module options (``[]`` when nothing)."""
        return []

    def server_problems(self, where, spec):
        """What this launcher cannot run of one server entry (``where`` names it in the message)."""
        return []

    def problem(self):
        """Why this launcher cannot work on this host, or None."""
        return

    def desired(self, spec):
        """This launcher's compared settings for a server launched from ``spec``: ``{key: value}`` of ``compared``."""
        return {}

    def prepare(self, plans, check_mode):
        """Files the launcher needs besides the scripts, written after every check passed: ``(results by name,
        diffs)``."""
        return {}, []

    # ---- the processes -----------------------------------------------------------------------------

    def observe(self, name, recorded):
        """The server's processes now (``Running``); ``recorded``: its state file."""
        raise NotImplementedError

    def stop(self, name, processes, group, force):
        """Ask ``processes`` (and ``group``) to stop (SIGTERM), or kill them (``force``: SIGKILL); returns the pids that
        were alive before."""
        raise NotImplementedError

    def kill(self, name, recorded=None):
        """Stop the server at once and for good (it could not be recorded, or stalled); returns the pids killed."""
        raise NotImplementedError

    def start(self, plan, log_fd, env):
        """Start ``plan.spec['launch_script']`` with its output appended to ``log_fd``; returns the main pid. Raises
        LauncherError."""
        raise NotImplementedError

    def stopped(self, name):
        """The server was stopped for good (state=stopped), or is launched by another launcher now."""

    def release(self, name):
        """The server left the topology (renamed, or merged by a new tp_size) and its processes are about to be
        stopped as the ones in the way of the servers that need their GPUs or ports: nothing may bring it back."""

    def status(self, name, recorded):
        """What the launcher itself knows of the server, for status reports: at least ``{"launcher": name}``."""
        return {"launcher": self.name}


class DetachedLauncher(Launcher):
    """The launch script as a detached process in a session of its own."""

    name = "detached"

    def observe(self, name, recorded):
        processes, group = self.owner.of_server(name, recorded)
        return Running(processes, group, self.owner.main_process(recorded))

    def stop(self, name, processes, group, force):
        return self.owner.signal(processes, [group] if group else [], signal.SIGKILL if force else signal.SIGTERM)

    def start(self, plan, log_fd, env):
        script = plan.spec["launch_script"]
        try:
            # Fully detached: own session, no terminal, no inherited fds, so `pct exec` returns.
            # Not run_command: that waits for the child, and this child is the long-running server.
            # Every signal at its default, none blocked: the worker that runs this catches SIGHUP and SIGINT rather
            # than ignoring them (host_job._set_worker_signals), so exec resets them; restore_signals does SIGPIPE.
            process = subprocess.Popen(  # pylint: disable=ansible-bad-function
                [script], stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                cwd=os.path.dirname(script) or None, env=env, close_fds=True, start_new_session=True)
        except OSError as exc:
            raise LauncherError(f"cannot execute launch script {script}: {exc}")
        return process.pid

    def kill(self, name, recorded=None):
        return self.owner.kill_now(name, recorded)


class SystemdLauncher(Launcher):
    """One systemd service per server and deployment, ``gpuops-sglang-<deployment id>-<name>.service`` in
    ``unit_dir``: a unit of another deployment is never written, stopped or counted."""

    name = "systemd"
    compared = (("unit_sha256", "systemd unit"),)
    systemd_runtime_dir = "/run/systemd/system"

    def __init__(self, owner, options, state_dir, stop_timeout, proc_root=procfs.PROC_ROOT, cgroup_roots=CGROUP_ROOTS):
        super().__init__(owner)
        self.cgroup_roots = cgroup_roots
        self.options = options
        self.state_dir = state_dir
        self.stop_timeout = stop_timeout
        self.proc_root = proc_root

    def unit(self, name):
        return unit_name(name, self.state_dir)

    # ---- talking to systemd ------------------------------------------------------------------------

    def _systemctl(self, *args, check=True):
        argv = [self.options["systemctl"], *args]
        try:
            rc, stdout, stderr = run_bounded(argv, SYSTEMCTL_TIMEOUT)
        except (CommandNotRun, CommandTimedOut) as exc:
            raise LauncherError(f"{exc} (is systemd the init of this host? sglang_launcher: systemd needs it)")
        if check and rc != 0:
            raise LauncherError(f"`{' '.join(argv)}` failed (rc {rc}): {(stderr or stdout).strip()}")
        return rc, stdout

    def properties(self, name):
        """The unit's ActiveState, SubState, MainPID, NRestarts, ControlGroup, UnitFileState, LoadState."""
        _rc, stdout = self._systemctl(
            "show", "--property=ActiveState,SubState,MainPID,NRestarts,ControlGroup,UnitFileState,LoadState,Result",
            self.unit(name))
        return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)

    def _cgroup_pids(self, name, control_group):
        """The pids in the unit's own cgroup. An inactive unit has none (ControlGroup empty): never read a parent
        cgroup instead, where every process of the host (this module's worker too) may live."""
        if os.path.basename(control_group or "") != self.unit(name):
            return set()
        for root in self.cgroup_roots:
            try:
                with open(os.path.join(root, control_group.lstrip("/"), "cgroup.procs")) as handle:
                    return {int(pid) for pid in handle.read().split()}
            except (OSError, ValueError):
                continue
        return set()

    # ---- the launcher interface -----------------------------------------------------------------------

    @classmethod
    def for_call(cls, owner, params):
        return cls(owner, params.get("systemd") or defaults(argument_specs.SYSTEMD_OPTIONS), params["state_dir"],
                   params.get("stop_timeout", 30))

    def option_problems(self, params):
        return [f"systemd.{problem}"
                for problem in option_ranges.range_problems(self.options, argument_specs.SYSTEMD_RANGES)]

    def server_problems(self, where, spec):
        return unit_problems(where, spec, self.state_dir)

    def desired(self, spec):
        return {"unit_sha256": unit_sha256(self.unit_content(spec))}

    def problem(self):
        # sd_booted(3): systemd runs as init exactly when this directory exists.
        if not os.path.isdir(self.systemd_runtime_dir):
            return (f"launcher systemd: systemd is not the init of this host ({self.systemd_runtime_dir} does not "
                    "exist): use launcher detached (sglang_launcher: detached)")
        return None

    def unit_path(self, name):
        return os.path.join(self.options["unit_dir"], self.unit(name))

    def _ours(self, name, path):
        """The unit file at ``path`` is this deployment's unit of server ``name`` (None: there is none)."""
        try:
            with open(path) as handle:
                return deployment_line(name, self.state_dir) in handle.read().splitlines()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise LauncherError(f"cannot read unit {path}: {exc}")

    def _retire_legacy_unit(self, name):
        """Stop, disable and remove the unit this deployment's server ran in before unit names carried the
        deployment; another deployment's unit of that name is left alone."""
        path = os.path.join(self.options["unit_dir"], legacy_unit_name(name))
        if not self._ours(name, path):
            return
        legacy = legacy_unit_name(name)
        self._systemctl("stop", legacy, check=False)
        self._systemctl("disable", "--quiet", legacy, check=False)
        try:
            os.unlink(path)
        except OSError as exc:
            raise LauncherError(f"cannot remove the retired unit {path}: {exc}")
        self._systemctl("daemon-reload")
        self._systemctl("reset-failed", legacy, check=False)

    def unit_content(self, spec):
        return render_unit(spec["name"], spec["launch_script"], spec["log_path"], self.state_dir,
                           self.stop_timeout, self.options)

    def observe(self, name, recorded):
        processes, _group = self.owner.of_server(name, recorded)
        props = self.properties(name)
        for pid in self._cgroup_pids(name, props.get("ControlGroup")):
            info = procfs.read_process(pid, self.proc_root)
            if info is not None and info.state not in ("Z", "X") and pid not in self.owner.protected:
                processes[pid] = info  # in the unit's cgroup: the server's, whatever its environment says
        main = None
        main_pid = int(props.get("MainPID") or 0)
        if props.get("ActiveState") in ("active", "activating", "reloading") and main_pid in processes:
            main = processes[main_pid]
        # The unit signals its cgroup as a whole; process groups play no part.
        return Running(processes, None, main)

    def stop(self, name, processes, group, force):
        """``systemctl stop`` (no restart while it deactivates), or SIGKILL to the whole cgroup."""
        alive = self.owner.still_alive(processes)
        if force:
            self._systemctl("kill", "--signal=SIGKILL", self.unit(name), check=False)
        else:
            self._systemctl("stop", "--no-block", self.unit(name), check=False)
        if self._ours(name, os.path.join(self.options["unit_dir"], legacy_unit_name(name))):
            # Its old unit would restart a server killed in it (Restart=on-failure); start() then removes it.
            self._systemctl("stop", "--no-block", legacy_unit_name(name), check=False)
        # Processes outside the unit (strays of an earlier detached launch, stale servers in the way).
        self.owner.signal(processes, [], signal.SIGKILL if force else signal.SIGTERM)
        return alive

    def prepare(self, plans, check_mode):
        """Write the units of the servers to launch; ``systemctl daemon-reload`` when one changed."""
        units = [{"name": plan.name, "path": self.unit_path(plan.name), "content": self.unit_content(plan.spec)}
                 for plan in plans if plan.launches and plan.launcher is self]
        if not units:
            return {}, []
        for unit in units:
            if self._ours(unit["name"], unit["path"]) is False:
                raise LauncherError(f"{unit['path']} exists but is not this deployment's unit of {unit['name']} (no "
                                    f"{naming.DEPLOYMENT_VAR}={self.state_dir} in it): refusing to overwrite it")
        results, diffs = script_files.sync_scripts(units, 0o644, 0o755, [], [], check_mode)
        if not check_mode and any(result["changed"] for result in results.values()):
            self._systemctl("daemon-reload")
        return results, diffs

    def start(self, plan, log_fd, env):
        self._retire_legacy_unit(plan.name)
        unit = self.unit(plan.name)
        self._systemctl("reset-failed", unit, check=False)  # a start limit hit earlier must not refuse this start
        self._systemctl("enable" if self.options["enabled"] else "disable", "--quiet", unit)
        rc, _stdout = self._systemctl("start", unit, check=False)
        props = self.properties(plan.name)
        main_pid = int(props.get("MainPID") or 0)
        if rc != 0 or not main_pid:
            raise LauncherError(f"`systemctl start {unit}` failed (rc {rc}, unit {props.get('ActiveState')}/"
                                f"{props.get('SubState')}, result {props.get('Result')}): see `journalctl -u {unit}` "
                                f"and {plan.spec['log_path']}")
        return main_pid

    def kill(self, name, recorded=None):
        # Those systemd kills are the server's too: the pids alive before, in its unit or carrying its marker.
        alive = self.owner.still_alive(self.observe(name, recorded).processes)
        # Deactivating first: a SIGKILLed service would be restarted by Restart=on-failure.
        self._systemctl("stop", "--no-block", self.unit(name), check=False)
        self._systemctl("kill", "--signal=SIGKILL", self.unit(name), check=False)
        killed = self.owner.kill_now(name, recorded)
        self.stopped(name)
        return sorted(set(alive) | set(killed))

    def release(self, name):
        # Deactivated first, so that a process killed in it is not restarted (Restart=on-failure); then disabled.
        unit = self.unit(name)
        stop_rc, _stdout = self._systemctl("stop", "--no-block", unit, check=False)
        self.stopped(name)
        # What systemd says afterwards decides, not the exit codes: a unit that is not loaded has nothing to stop.
        props = self.properties(name)
        problems = []
        if stop_rc != 0 and props.get("LoadState") == "loaded":
            problems.append(f"could not be stopped (systemctl stop: rc {stop_rc}), so its restart policy may start "
                            "it again")
        if props.get("UnitFileState") == "enabled":
            problems.append("is still enabled after systemctl disable, so it starts again at boot")
        if problems:
            raise LauncherError(f"{unit} " + " and ".join(problems))

    def stopped(self, name):
        # Stopped means stopped also after a reboot.
        self._systemctl("disable", "--quiet", self.unit(name), check=False)
        self._systemctl("reset-failed", self.unit(name), check=False)
        self._retire_legacy_unit(name)

    def status(self, name, recorded):
        props = self.properties(name)
        return {"launcher": self.name, "unit": self.unit(name), "active_state": props.get("ActiveState"),
                "sub_state": props.get("SubState"), "main_pid": int(props.get("MainPID") or 0) or None,
                "restarts": int(props.get("NRestarts") or 0), "enabled": props.get("UnitFileState") == "enabled"}


# Every launcher, by its name (the server module's ``launcher`` choices).
LAUNCHERS = {launcher.name: launcher for launcher in (DetachedLauncher, SystemdLauncher)}
# Servers recorded before there was a choice of launcher were launched detached.
DEFAULT_LAUNCHER = DetachedLauncher.name


def compared_settings():
    """The settings every launcher adds to the comparison that decides a relaunch (server_plan)."""
    return tuple(setting for launcher in LAUNCHERS.values() for setting in launcher.compared)


def launchers(owner, params):
    """Every launcher, by name, for the options of a module call."""
    return {name: launcher.for_call(owner, params) for name, launcher in LAUNCHERS.items()}


def defaults(spec):
    return {key: option.get("default") for key, option in spec.items()}
