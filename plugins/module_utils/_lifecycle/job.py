# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kill -> verify GPU memory freed -> launch, for the SGLang servers of one host, each on its own.

Everything that can be checked is checked before any process is touched or any script written:
the request (request.py: names, ports, GPUs, files, numbers), GPUs present, foreign GPU holders and port owners.
Then the launch scripts are written and a detached worker (module_utils/host_job.py) runs the sequence
(sequence.py) per server through its steps (steps.py): out of the router and drained (module_utils/draining.py),
SIGTERM -> wait -> SIGKILL, verify its GPUs free, launch it. One server whose GPU does not free in time, or whose
process survives SIGKILL, is reported down; the others go on.
"""

import collections
import re
import time

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    host_job,
    last_good,
    launchers,
    procfs,
    run_lock,
    script_files,
    server_plan,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.plan import (
    Snapshot,
    defer_beyond_max_changes,
    gpu_keyed,
    plan_server,
    requested_state,
    stop_launcher_of,
    take_last_good,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.request import (
    ServerControlError,
    validate_request,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.result import (
    interrupted_summary,
    job_record,
    journal_interrupted,
    journaled,
    result,
    with_settings_changed,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.run import (
    ServerRun,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.sequence import (
    act,
)
from ansible_collections.gpuops.sglang.plugins.module_utils._lifecycle.steps import (
    check_router,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.gpu_inventory import (
    GpuError,
    require_present,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import state_file
from ansible_collections.gpuops.sglang.plugins.module_utils.nvidia_smi import (
    NvidiaSmiError,
    bounded_runner,
    device_minors,
    query_gpus,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.run_log import (
    crash_of_current_run,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_processes import (
    ServerProcesses,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    LockTimeout,
    acquire_host_lock,
    mark_lock_holder,
    read_state,
    release_host_lock,
    write_state,
)

SCRIPT_MODE = 0o700
SCRIPT_DIRECTORY_MODE = 0o755
# What is in the way of the plans of one call (ServerControl._conflicts): blockers by server name (pid -> ProcessInfo),
# refusals, stale servers removed (name -> state file), stale and force-killed processes (pid -> description), and
# the servers of the call whose own processes hold what other servers of it need (name -> their names).
Conflicts = collections.namedtuple("Conflicts", ["blockers", "problems", "removed", "stale", "foreign", "in_the_way"])


class ServerControl:
    """Brings the servers of one host to ``state`` (see the gpuops.sglang.server module docs)."""

    def __init__(self, params, check_mode=False, gpus=None):
        """``gpus``: the host's GPUs as nvidia-smi listed them a moment ago in the same call (the hold's), instead of
        asking it again for the plan."""
        self.params = params
        self.check_mode = check_mode
        self.listed_gpus = gpus
        self.state_dir = params["state_dir"]
        self.device_dir = params["gpu_device_dir"]
        self.owner = ServerProcesses(self.state_dir)
        self.launchers = launchers.launchers(self.owner, params)
        self.launcher = self.launchers[params.get("launcher") or launchers.DEFAULT_LAUNCHER]
        self.run = bounded_runner(params["nvidia_smi_timeout"])
        self.minors = {}  # GPU index -> device minor, from the GPUs nvidia-smi lists
        self.foreign = {}
        self.stale = {}
        # Servers gone from the topology whose processes this call stops: name -> their state file (their launch
        # script is left in place).
        self.removed = {}
        self.release_errors = {}  # name -> why its launcher could not let it go (release_removed)
        self.timings = {}
        # What happened to whom, in order, for the progress lines: {"server", "event", "at_s", ...}.
        self.events = []
        self.router = None
        self.canary = []  # the servers that go first while others wait for them (defer_beyond_max_changes)
        self.act_started = None
        self.scripts = {script["name"]: script for script in params.get("scripts") or []}
        # rollback: the servers going back to their last good script (name -> its record), and those that have none.
        self.rollback_to, self.no_last_good = {}, {}
        if params.get("rollback"):
            self.scripts, self.rollback_to, self.no_last_good = take_last_good(params)
        self.secrets = list(params.get("secrets") or [])

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
            return dict(with_settings_changed(result(self, [ServerRun(plan) for plan in plans]), scripts),
                        scripts=scripts, script_diffs=diffs)
        try:
            lock_fd, waited = acquire_host_lock(self.state_dir, params["lock_timeout"])
        except LockTimeout as exc:
            raise ServerControlError(str(exc))
        try:
            self.timings["lock_wait_s"] = round(waited, 3)
            earlier = host_job.unreported(self.state_dir)
            interrupted = [interrupted_summary(record) for record in earlier]
            interrupted_journal_error = journal_interrupted(self, earlier)
            for record in earlier:
                host_job.mark_reported(self.state_dir, record)
            plans, scripts, diffs = self._read_host(check_mode=False)
            extra = {"scripts": scripts, "script_diffs": diffs, "interrupted_runs": interrupted}
            if interrupted_journal_error:
                extra["journal_error"] = interrupted_journal_error
            if not any(plan.changes for plan in plans):
                self.timings["total_s"] = round(time.monotonic() - started, 3)
                runs = [ServerRun(plan) for plan in plans]
                return dict(with_settings_changed(journaled(self, runs, result(self, runs)), scripts), **extra)
            job_id = host_job.new_job_id()

            def work(progress):
                mark_lock_holder(lock_fd)
                return dict(with_settings_changed(act(self, plans, progress), scripts), **extra)

            try:
                host_job.start(self.state_dir, job_id, work, job_record(params.get("run_id"), plans),
                               keep_fds=(lock_fd,))
            except OSError as exc:
                raise ServerControlError(f"cannot record the job in {self.state_dir}: {exc}; no server was stopped")
            except host_job.WorkerNotStarted as exc:
                raise ServerControlError(str(exc))
        finally:
            release_host_lock(lock_fd)
        return host_job.follow_result(self.state_dir, job_id, time.time() + slice_seconds)

    # ---- reading the host --------------------------------------------------------------------

    def _read_host(self, check_mode):
        """Plan every server (frozen plans: each step below returns new ones), check the GPUs and every process in
        the way, then write the scripts; returns ``(plans, script results, diffs)``."""
        # One picture of the host's processes for the whole plan (ServerProcesses.one_look): nothing is signalled here.
        with self.owner.one_look():
            problem = self.launcher.problem()
            if problem:
                raise ServerControlError(f"{problem}; nothing was touched")
            present = {gpu["index"]: gpu for gpu in self.listed_gpus or self._query_gpus()}
            self.minors = device_minors(present.values(), self.params["nvidia_driver_dir"])
            plans = [self._plan(spec) for spec in self.params["servers"]]
            if not check_mode:
                plans = self._record_restarts(plans)
            # Also the GPUs recorded at launch (stop.yml passes names only): the container may have fewer now.
            try:
                require_present(present, [(gpu, f"{gpu} of server {plan.name!r}") for plan in plans for gpu in plan.gpus])
            except GpuError as exc:
                raise ServerControlError(str(exc))
            plans = [plan.updated(gpu_memory_before=gpu_keyed({
                gpu: present[gpu]["memory_used_mib"] for gpu in plan.gpus if gpu in present})) for plan in plans]
            # A plan's blockers tell whether it stops a serving process (also a stale server of an earlier topology in its
            # way, which a renamed server stops): a canary defers such plans, and what stays is judged again.
            conflicts = self._conflicts(plans)
            deferral = defer_beyond_max_changes(
                plans, self.params.get("max_changes"), self._came_up_with(), self.params.get("batch_size"),
                lambda plan: plan.kills or any(pid in conflicts.stale for pid in conflicts.blockers[plan.name]))
            if any(plan.action == "deferred" for plan in deferral.plans):
                plans = self._undefer_in_the_way(plans, deferral.plans, conflicts.in_the_way)
                conflicts = self._conflicts(plans)
            # Nobody waits for a canary when every deferred server had to go with it.
            self.canary = deferral.canary if any(plan.action == "deferred" for plan in plans) else []
            if conflicts.problems:
                raise ServerControlError("refusing to touch any process: " + "; ".join(conflicts.problems),
                                         problems=conflicts.problems)
            self.removed, self.stale, self.foreign = conflicts.removed, conflicts.stale, conflicts.foreign
            plans = [plan.updated(blockers=conflicts.blockers[plan.name]) for plan in plans]
            self.router, plans = check_router(self.params, plans)
            scripts, diffs = self._write_scripts([plan for plan in plans if plan.action != "deferred"], check_mode)
            return plans, scripts, diffs

    @staticmethod
    def _undefer_in_the_way(planned, deferred, in_the_way):
        """A deferred server whose own processes hold a GPU or port of a server that goes (a port or GPUs moved from
        one server to another) goes too, as planned: it cannot keep running in the way."""
        originals = {plan.name: plan for plan in planned}
        plans = list(deferred)
        while True:
            going = {plan.name for plan in plans if plan.changes}
            back = {plan.name for plan in plans
                    if plan.action == "deferred" and in_the_way.get(plan.name, set()) & going}
            if not back:
                return plans
            plans = [originals[plan.name] if plan.name in back else plan for plan in plans]

    def _came_up_with(self):
        """max_changes_scope unseen: ``(name, script_sha256) -> bool``, whether the server came up with that script."""
        if self.params.get("max_changes_scope") != "unseen":
            return None
        return lambda name, script_sha256: last_good.came_up_with(self.state_dir, name, script_sha256)

    def _query_gpus(self, ids=None):
        try:
            return query_gpus(self.run, self.params["nvidia_smi"], ids=ids)
        except NvidiaSmiError as exc:
            raise ServerControlError(str(exc))

    def memory_used(self, gpus):
        """Used MiB per GPU index, and the error of a failed query (the GPUs then count as not verified)."""
        try:
            return {gpu["index"]: gpu["memory_used_mib"] or 0 for gpu in self._query_gpus(gpus)}, None
        except ServerControlError as exc:
            return {}, str(exc)

    def _script(self, spec):
        """``(sha256, text)`` of the script the server will run: the one given, else the one on disk."""
        given = self.scripts.get(spec["name"])
        if given is not None:
            return script_files.sha256_text(given["content"]), given["content"]
        return script_files.read_script(spec["launch_script"])

    def _plan(self, spec):
        """Look at the host for one server (its state file, its processes, its script), then plan it."""
        name = spec["name"]
        state = requested_state(self.params["state"], name, self.no_last_good)
        recorded = read_state(self.state_dir, name)
        stop_launcher = stop_launcher_of(recorded, self.launchers)
        running = stop_launcher.observe(name, recorded)
        script = self._script(spec) if state != "stopped" else None

        def planned(snapshot):
            return plan_server(spec, state, snapshot, self.launcher, stop_launcher, self.secrets,
                               state_file(self.state_dir, name), rollback_to=self.rollback_to.get(name),
                               no_last_good=self.no_last_good.get(name))

        plan = planned(Snapshot(recorded, running, script))
        if plan.action == "unchanged" and not plan.restarted_since_recorded:
            # Only a server to be left as it runs has its log read, from the launch recorded: one that outlived its
            # crash is relaunched. Not one its launcher restarted since (systemd's Restart=): the crash in its log was
            # its predecessor's.
            crash = crash_of_current_run(recorded.get("log_path"), recorded.get("launched_at"), self.secrets)
            if crash:
                plan = planned(Snapshot(recorded, running, script, crash))
        return plan

    def _record_restarts(self, plans):
        """systemd restarted a server since it was recorded: its state file follows its new main process (and so
        does its new plan)."""
        return [self._record_restart(plan) if plan.restarted_since_recorded else plan for plan in plans]

    def _record_restart(self, plan):
        main = plan.main
        restarted = dict(plan.recorded, pid=main.pid, pgid=main.pgid, pid_starttime=main.starttime,
                         launched_at=procfs.start_epoch(main))
        write_state(self.state_dir, plan.name, restarted)
        return plan.updated(recorded=restarted)

    def _conflicts(self, plans):
        """Before anything is written or killed: judge every GPU holder and port owner that is not ours to stop.

        Foreign processes (no marker, or no deployment) fail the run, except GPU holders with
        force_kill_gpu_holders; processes of a server this run leaves running fail it. Processes of a
        server not in this request are stale (renamed or removed) and stopped with the servers whose GPU
        or port they hold when that server has a state file in our state_dir; otherwise they belong to
        another deployment on this host and fail the run. Reads only: returns the Conflicts - the processes in each
        plan's way that it stops (its blockers), why the run must refuse, the stale servers removed with their
        processes, and the foreign processes that are force-killed.
        """
        planned = {plan.name for plan in plans}
        doomed = {pid: plan.name for plan in plans if plan.kills for pid in plan.processes}
        stopping = {plan.name for plan in plans if plan.kills}
        problems, removed, stale, foreign, in_the_way = [], {}, {}, {}, {}
        # By server name (unique in a request): pid -> ProcessInfo of each process in its way that it stops.
        blockers = {plan.name: {} for plan in plans}
        ignored = [re.compile(pattern) for pattern in self.params["ignore_gpu_holders"]]

        def judge(pid, what, needing):
            if pid in doomed:
                in_the_way.setdefault(doomed[pid], set()).update(
                    plan.name for plan in needing if plan.name != doomed[pid])
                return
            info = procfs.read_process(pid)
            if info is None:
                return
            owner = self.owner.owner(pid, info.starttime)
            stale_state = read_state(self.state_dir, owner.server) if owner.verdict == "ours" and owner.server else None
            holder = server_plan.Holder(pid, info.cmdline, owner.verdict, owner.server, owner.deployment,
                                        pid in self.owner.protected, stale_state is not None)
            judgement = server_plan.judge_holder(holder, what, planned, stopping, ignored,
                                                 self.params["force_kill_gpu_holders"], self.state_dir)
            if judgement.kind == "refuse":
                problems.append(judgement.problem)
            elif judgement.kind == "force":
                foreign[pid] = dict(procfs.describe(pid), holds=what)
                for plan in needing:
                    blockers[plan.name][pid] = info
            elif judgement.kind == "stale":
                # The whole stale server goes, not only the process in the way: its state file is removed.
                processes, _group = self.owner.of_server(owner.server, stale_state)
                processes[pid] = info
                removed[owner.server] = stale_state
                for stale_pid, stale_info in processes.items():
                    entry = stale.setdefault(stale_pid, dict(procfs.describe(stale_pid), holds=None))
                    if stale_pid == pid:
                        entry["holds"] = what
                    for plan in needing:
                        blockers[plan.name][stale_pid] = stale_info

        gpus = sorted({gpu for plan in plans if plan.changes for gpu in plan.gpus})
        holders = procfs.gpu_holders(self.device_dir, {gpu: self.minors.get(gpu, gpu) for gpu in gpus}) if gpus else {}
        for gpu in gpus:
            for pid in holders.get(gpu, []):
                judge(pid, f"GPU {gpu}", [plan for plan in plans if plan.changes and gpu in plan.gpus])
        sockets = procfs.ListeningSockets()
        for plan in plans:
            if plan.launches:
                for port in [plan.spec["port"]] + (plan.spec.get("extra_ports") or []):
                    for pid in procfs.port_listener_pids(port, listening=sockets.table())[1]:
                        judge(pid, f"port {port} of server {plan.name!r}", [plan])
        return Conflicts(blockers, problems, removed, stale, foreign, in_the_way)

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
