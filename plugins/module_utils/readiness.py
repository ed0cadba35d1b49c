# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-server readiness tracking: health probe + log phase + process liveness + stall detection.

The gpuops.sglang.wait action plugin runs the wait module in slices. One slice looks at every server of
the host about every POLL_SECONDS and returns when all are decided (ready, crashed, stalled, timeout,
replaced) or when the slice is over. This file does the looking - the log, /proc, the health probe threads -
and hands each look, as a plain ``Observation``, to the rules of ``readiness_rules``, which decide and hold
the words of every state. What a verdict causes on the host (the stall kill; at the end of the wait the
router, last good and the journal) is ``after_ready``'s. What must survive between slices (start time, when
each log last moved, decisions already taken) travels as a small JSON ``carry`` through the module's return
value into the next call. The log is parsed again from the start of the run in every slice, so no parser
state has to be serialised: startup logs are small (the server module rotates them at every launch).
"""

from __future__ import annotations

import threading
import time

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    after_ready,
    argument_specs,
    draining,
    option_ranges,
    procfs,
    run_lock,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.fact_table import (
    CONFIGURED_FACTS,
    SERVER_INFO_FACTS,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.http_probe import (
    get_json,
    http_get,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launch_settings import (
    node_rank_of,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.naming import state_file
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness_rules import (
    STATES,
    STILL_READY_RULES,
    WAIT_RULES,
    Observation,
    decide,
    stall_suspected_since,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.run_log import (
    RunLog,
    local_timestamp,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_processes import (
    ServerProcesses,
    recorded_starttime,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    read_state,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.words import counted

POLL_SECONDS = 0.2
HEALTH_INTERVAL_SECONDS = 1.0
# Set by every health probe that ends: the wait looks again at once instead of at the end of its POLL_SECONDS nap (a
# healthy host is decided as soon as its answers are in, not a nap or two later).
_PROBE_ENDED = threading.Event()


def _nap():
    """Until a health probe ends, POLL_SECONDS at most."""
    _PROBE_ENDED.wait(POLL_SECONDS)
    _PROBE_ENDED.clear()


# SGLang 0.5.23's cheap readiness check (no generation, no key needed); older versions and the placeholder health
# server of a multi-node rank answer 404.
READY_PATH = "/ready"


class HealthProbe:
    """One health request at a time in a thread, so a hanging server never delays the others."""

    def __init__(self, base_url, health_path, api_key, timeout):
        self._base_url = base_url
        self._health_path = health_path
        self._api_key = api_key
        self._timeout = timeout
        self._thread = None
        self._answer = None
        self.started_at = None
        # Whether the server serves /ready (None: not known yet). Where it does, the health path (a generation, with
        # /health_generate) is asked only once /ready says 200: it stays the proof that the server generates.
        self.has_ready = None

    @property
    def busy(self):
        return self._thread is not None and self._thread.is_alive()

    @property
    def has_answer(self):
        return not self.busy and self._answer is not None

    def start(self, now):
        self.started_at = now
        self._answer = None
        self._thread = threading.Thread(target=self._probe, name=f"health {self._base_url}")
        self._thread.daemon = True
        self._thread.start()

    def take_answer(self):
        """``{"status", "error", "server_info", "server_info_error"}`` once the probe finished, else None."""
        if not self.has_answer:
            return None
        answer, self._answer = self._answer, None
        return answer

    def _probe(self):
        try:
            self._ask()
        finally:
            _PROBE_ENDED.set()

    def _ask(self):
        if self.has_ready is not False:
            status, _body, error = http_get(self._base_url + READY_PATH, self._timeout, self._api_key)
            if status == 404:
                self.has_ready = False
            elif status is not None:
                self.has_ready = True
            # Refused or timed out (still starting, whatever its version), or not ready by its own word.
            if status is None or (self.has_ready and status != 200):
                self._answer = {"status": status, "error": error, "server_info": None, "server_info_error": None}
                return
        status, _body, error = http_get(self._base_url + self._health_path, self._timeout, self._api_key)
        answer = {"status": status, "error": error, "server_info": None, "server_info_error": None}
        if status == 200:
            answer["server_info"], answer["server_info_error"] = get_json(
                self._base_url + "/get_server_info", self._timeout, self._api_key)
        self._answer = answer


class ServerTracker:
    """Watches one server for the wait: one ``Observation`` per look (log, /proc, health probe), decided by
    ``WAIT_RULES``; the verdict becomes the server's report (and with kill_stalled a stalled server is killed, and a
    crashed one whose main process outlived the crash)."""

    def __init__(self, spec, options, carried, now):
        self.name = spec["name"]
        self._options = options
        state = read_state(options["state_dir"], self.name) or {}
        # A node of a multi-node group; from rank 1 on its health endpoint is SGLang's placeholder.
        self.node_rank = spec.get("node_rank")
        if self.node_rank is None:
            self.node_rank = node_rank_of(state.get("settings"))
        self.port = spec.get("port") or state.get("port")
        self.log_path = spec.get("log_path") or state.get("log_path")
        self.pid = spec.get("pid") or state.get("pid")
        self._recorded_pid = state.get("pid")
        same_process = self.pid == self._recorded_pid
        self._recorded = state if same_process else None
        # Launched by this run (pid from the server module) but recorded with another pid since.
        self.replaced_by = state if self._recorded_pid and not same_process else None
        self._starttime = recorded_starttime(state) if same_process else None
        self.launched_at = state.get("launched_at") if same_process else None
        self.action = spec.get("action")
        self._deadline = options["started_at"] + options["timeout"]
        if not self.port:
            recorded_in = state_file(options["state_dir"], self.name)
            raise ValueError(f"server {self.name}: no port given and none recorded in {recorded_in}")
        carried = carried or {}
        self.result = carried.get("result")
        self._lines_seen = carried.get("lines_seen", 0)
        self._last_activity = carried.get("last_activity", now)
        self._crash_seen = carried.get("crash_seen")
        self._health = carried.get("health")
        self._probed_this_slice = False
        self._owner = ServerProcesses(options["state_dir"])
        self._foreign_listener = None
        # The log's phase when the last health probe was sent.
        self._phase_at_probe = None
        self.log = RunLog(self.log_path, self.launched_at, [options["api_key"]] if options["api_key"] else [])
        self.probe = HealthProbe(f"http://{options['host']}:{self.port}", options["health_path"],
                                 options["api_key"], options["probe_timeout"])

    @property
    def settled(self):
        """No probe in flight and at least one answer this slice: the report is current."""
        return self._probed_this_slice and not self.probe.busy and not self.probe.has_answer

    def carry(self):
        return {"result": self.result, "lines_seen": self._lines_seen, "last_activity": self._last_activity,
                "crash_seen": self._crash_seen, "health": self._health}

    def alive(self):
        """The server's main process runs. A recorded pid counts only with its recorded start time."""
        if self._recorded is not None:
            return self._starttime is not None and procfs.pid_alive(self.pid, self._starttime)
        return procfs.pid_alive(self.pid)

    def take_answer(self):
        """The health probe's answer when it has one (kept as the server's last health answer), else None."""
        answer = self.probe.take_answer()
        if answer is not None:
            self._probed_this_slice = True
            self._health = {"status": answer["status"], "error": answer["error"]}
        return answer

    def observe(self, now, answer=None, snapshot=False):
        """One look at the server for the rules: its process, then its log (so a dead one's last words are in)."""
        if self.replaced_by is not None:
            # Its log and processes are another run's now: nothing of them is read or judged.
            return Observation(now=now, pid=self.pid, recorded_pid=self._recorded_pid)
        main_alive = exit_status = None
        if self.pid:
            main_alive = self.alive()
            if not main_alive:
                info = procfs.read_process(self.pid)
                exit_status = info.exit_status if info else None
        self.log.read()
        if self.log.activity_lines != self._lines_seen:
            self._lines_seen = self.log.activity_lines
            self._last_activity = now
        if self.log.state.phase == "crashed":
            self._crash_seen = self._crash_seen or now
        return Observation(
            now=now, snapshot=snapshot, pid=self.pid, recorded_pid=self._recorded_pid, main_alive=main_alive,
            exit_status=exit_status, log_phase=self.log.state.phase, crash_seen_at=self._crash_seen,
            last_activity=self._last_activity, answer=answer, placeholder_health=bool(self.node_rank),
            answer_sent_at=self.probe.started_at if answer is not None else None,
            foreign_listener=self._foreign_listener,
            stall_timeout=self._options["stall_timeout"], deadline=self._deadline)

    def poll(self, now, may_probe, snapshot=False, sockets=None):
        """One look; records the verdict when a rule fires, else keeps the health probe going. ``sockets``: the
        listening sockets of this round of looks (procfs.ListeningSockets), shared by its servers."""
        observation = self.observe(now, self.take_answer(), snapshot)
        verdict = decide(observation, WAIT_RULES)
        if verdict is not None:
            return self.record(verdict, now)
        # The log saying it is up is worth a probe at once: no waiting out the interval after a "not yet" answer.
        up_since_probe = observation.log_phase == "ready" and self._phase_at_probe != "ready"
        probe_due = self.probe.started_at is None or (
            may_probe and (up_since_probe or now - self.probe.started_at >= HEALTH_INTERVAL_SECONDS))
        # A suspected stall is decided on the answer to a probe sent after the silence was noticed.
        if not self.probe.busy and (probe_due or stall_suspected_since(observation) is not None):
            self.start_probe(now, sockets)
        return None

    def start_probe(self, now, sockets=None):
        """A health request, unless another process listens on the port (it must never get the key)."""
        self._foreign_listener = self._owner.foreign_listener(self.name, self.port, likely=[self.pid], sockets=sockets)
        if self._foreign_listener is None:
            self._phase_at_probe = self.log.state.phase
            self.probe.start(now)

    def record(self, verdict, now, **context):
        """The server's report for a verdict (``context``: more facts for its msg); it is the tracker's result."""
        status, details = verdict
        state = STATES[status]
        log = self.log.state
        report = self.report()
        report["status"] = status
        facts = {key: log.facts[key] for key in CONFIGURED_FACTS if log.facts.get(key) is not None}
        report["facts_source"] = "log"
        server_info = details.get("server_info")
        if server_info:
            facts.update((key, server_info[key]) for key in SERVER_INFO_FACTS
                         if server_info.get(key) is not None)
            report["facts_source"] = "get_server_info"
        report.update(
            facts=facts,
            error=log.error,
            exit_status=details.get("exit_status"),
            log_tail=list(self.log.tail),
            timeline=list(log.timeline or []),
            killed_pids=[],
            not_killed=None,
            seconds_to_ready=None,
        )
        if details.get("server_info_error"):
            report["server_info_error"] = details["server_info_error"]
        if state.ready:
            report["phase"] = "ready"
            up = round(now - (self.launched_at or self._options["started_at"]), 1)
            # A server the run left running did not start now: its time up is no startup time.
            report["uptime_s" if self.action == "unchanged" else "seconds_to_ready"] = up
            if not report["timeline"] or report["timeline"][-1].get("phase") != "ready":
                report["timeline"].append({"phase": "ready", "timestamp": local_timestamp(now),
                                           "line": f"health {self._options['health_path']} answered 200"})
        elif state.names_phase_reached:
            report["phase"], report["component"] = self.log.phase_reached()
        if status == "stalled" or details.get("outlived_crash"):
            report["killed_pids"], report["not_killed"] = after_ready.kill_stuck(
                self._options, self.name, self.pid, self.action, self._recorded)
        report["msg"] = self.explain(report, now, **details, **context)
        self.result = report
        return report

    def report(self):
        """Current view of the server, also used for progress lines before it is decided."""
        log = self.log.state
        return {
            "name": self.name,
            "port": self.port,
            "node_rank": self.node_rank,
            "pid": self.pid,
            "log_path": self.log_path,
            "status": self.result["status"] if self.result else "waiting",
            "phase": log.phase,
            "component": log.component,
            "progress": log.progress,
            "last_log_line": log.last_line,
            "health": self._health,
            "silent_s": round(time.time() - self._last_activity, 1),
        }

    def confirm_ready(self, now, answer):
        """Ready earlier in the wait must still hold at its end (``STILL_READY_RULES``)."""
        ready_after = self.result["seconds_to_ready"]
        verdict = decide(self.observe(now, answer), STILL_READY_RULES)
        if verdict is not None:
            self.record(verdict, now, ready_after=ready_after)

    def explain(self, report, now, **details):
        """The msg about the server: its report, the verdict's details and what only the tracker knows."""
        return STATES[report["status"]].sentence({
            **report, **details,
            "silent_for": now - self._last_activity,
            "last_activity_line": self.log.last_activity_line,
            "timeout": self._options["timeout"],
            "health_path": self._options["health_path"],
            "replaced_by": self.replaced_by,
        })


def wait_slice(params, carry=None, check_mode=False):
    """Run one slice of the wait. Returns the module result; ``carry`` in it means "call me again".

    In check mode the wait is a snapshot: one look at every server, no waiting, no killing.
    """
    problems = option_ranges.range_problems(params, argument_specs.WAIT_RANGES) + draining.router_problems(
        params.get("router_url"), params["host"], params.get("router_worker_host"))
    problems += [problem for problem in [option_ranges.url_path_problem("health_path", params["health_path"])]
                 if problem]
    if problems:
        raise ValueError("invalid request: " + "; ".join(problems))
    if params.get("run_id") and not check_mode:
        run_lock.renew(params["state_dir"], params["run_id"])
    now = time.time()
    carry = carry or {"started_at": now, "servers": {}}
    options = dict(params, started_at=carry["started_at"], check_mode=check_mode,
                   kill_stalled=params["kill_stalled"] and not check_mode)
    deadline = carry["started_at"] + params["timeout"]
    slice_end = now if check_mode else min(deadline, now + params["progress_interval"])
    trackers = [ServerTracker(spec, options, carry["servers"].get(spec["name"]), now)
                for spec in params["servers"]]
    while True:
        now = time.time()
        pending = [tracker for tracker in trackers if tracker.result is None]
        sockets = procfs.ListeningSockets()
        for tracker in pending:
            tracker.poll(now, may_probe=now < slice_end, snapshot=check_mode, sockets=sockets)
            if tracker.result is not None:
                # Its verdict may have taken seconds (a stalled server killed): the next ones read the sockets anew.
                sockets = procfs.ListeningSockets()
        # At the deadline the rules time out every server still pending, so none is left.
        pending = [tracker for tracker in pending if tracker.result is None]
        if not pending:
            break
        if now >= slice_end and all(tracker.settled for tracker in pending):
            break
        _nap()

    reports = [tracker.result or tracker.report() for tracker in trackers]
    outcome = {}
    if check_mode:
        for tracker, report in zip(trackers, reports):
            if tracker.result is None:
                report["status"] = "starting"
                report["msg"] = tracker.explain(report, now)
    elif any(tracker.result is None for tracker in trackers):
        return _unfinished(carry, trackers, reports)
    else:
        confirm = carry.get("confirm") or {"started_at": time.time(), "confirmed": []}
        confirm_end = confirm["started_at"] + params["probe_timeout"]
        unconfirmed = _confirm_ready(
            [tracker for tracker in trackers
             if STATES[tracker.result["status"]].ready and tracker.name not in confirm["confirmed"]],
            until=min(time.time() + params["progress_interval"], confirm_end))
        if unconfirmed and time.time() < confirm_end:
            # A slow answer is no crash, but the operator sees what the wait is waiting for, slice by slice.
            waiting_s = round(time.time() - confirm["started_at"], 1)
            confirmed = [tracker.name for tracker in trackers if tracker not in unconfirmed]
            return _unfinished(carry, trackers, [dict(tracker.result, confirming_s=waiting_s)
                                                 if tracker in unconfirmed else tracker.result for tracker in trackers],
                               confirm=dict(confirm, confirmed=confirmed))
        outcome = after_ready.act_on_verdicts(params, trackers)
        reports = [tracker.result for tracker in trackers]
    result = dict(finish(reports, now - carry["started_at"], check_mode), **outcome)
    keep_hold = params["hold_on_failure"] and result["not_ready"]
    if params["release_run"] and params.get("run_id") and not check_mode and not keep_hold:
        # The run's last call to the host: giving it back here saves the release's round trip.
        result["released"] = run_lock.release(params["state_dir"], params["run_id"])
    return result


def _unfinished(carry, trackers, reports, **carried):
    """A slice's answer while the wait goes on: the reports for the progress line, and what the next slice needs."""
    return {"changed": False, "servers": reports, "carry": dict(
        carried, started_at=carry["started_at"], servers={tracker.name: tracker.carry() for tracker in trackers})}


def _confirm_ready(trackers, until):
    """One more look at every ready server, health probes in parallel, until ``until`` at most; returns those whose
    probe has not answered by then (a hung server: the next slice asks again, up to probe_timeout in all, after which
    its silence counts as a slow answer, not a crash)."""
    now, sockets = time.time(), procfs.ListeningSockets()
    for tracker in trackers:
        tracker.start_probe(now, sockets)
    while any(tracker.probe.busy for tracker in trackers) and time.time() < until:
        _nap()
    unanswered = [tracker for tracker in trackers if tracker.probe.busy]
    for tracker in trackers:
        if tracker not in unanswered:
            tracker.confirm_ready(time.time(), tracker.take_answer())
    return unanswered


def finish(reports, elapsed, check_mode):
    not_ready = [report for report in reports if not STATES[report["status"]].ready]
    result = {
        "changed": any(report.get("killed_pids") for report in reports),
        "servers": reports,
        "ready": [report["name"] for report in reports if STATES[report["status"]].ready],
        "not_ready": [report["name"] for report in not_ready],
        "elapsed": round(elapsed, 1),
    }
    if not_ready:
        reasons = "; ".join(report["msg"] for report in not_ready)
        result["msg"] = f"{len(not_ready)}/{counted(len(reports), 'server')} not ready: {reasons}"
        result["failed"] = not check_mode
    else:
        result["msg"] = f"all {counted(len(reports), 'server')} ready" if len(reports) != 1 else "the server is ready"
    return result
