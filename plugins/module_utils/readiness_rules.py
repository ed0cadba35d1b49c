# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The state of a server, decided by a table of rules, and the words of every state, defined once.

Pure: no I/O, no clock, stdlib only, so the controller imports it too. On the host the wait
(``readiness.ServerTracker``) and server_info (``server_facts``) gather an ``Observation`` of one server
and ``decide`` it with their table of rules: the first rule that fires gives the ``Verdict``. ``STATES``
says what each status means and how it is said: the host-side ``msg`` of a server, and the progress
lines and reports the controller shows (plugin_utils).

Adding a rule is one function ``rule(observation) -> Verdict | None`` and one entry in a table, at the
place its precedence asks for; a new status also gets one entry in ``STATES``.
"""

from __future__ import annotations

import collections
import dataclasses
import types

# SGLang logs "Received sigquit" before the failing child's traceback reaches the log, and then
# kills itself; a server whose log says it crashed gets this long to die so the traceback is complete.
CRASH_GRACE_SECONDS = 3.0


@dataclasses.dataclass(frozen=True)
class Observation:
    """One look at one server: plain values, no handles. Fields a caller does not observe keep their default."""

    now: float
    # One look (check mode, server_info): decide on what is there, wait for nothing (no grace, no stall, no timeout).
    snapshot: bool = False
    # The pid the wait watches, and the one the state file records now (None: no state file or no pid in it).
    pid: int | None = None
    recorded_pid: int | None = None
    # The main process runs (None: no pid to look at); its exit status once it is gone, when the host still knows it.
    main_alive: bool | None = None
    exit_status: int | None = None
    # server_info: some process of the server runs (its main process or one carrying its marker), and a state
    # file records it as launched.
    processes_alive: bool | None = None
    state_recorded: bool = True
    # The phase of its log, when that log first said "crashed", when it last moved (health checks do not count).
    log_phase: str | None = None
    crash_seen_at: float | None = None
    last_activity: float | None = None
    # A health answer that came in with this look ({"status", "error", ...}, status None when unreachable) and
    # when its probe was sent.
    answer: dict | None = None
    answer_sent_at: float | None = None
    # Its health endpoint is a placeholder that always answers 200 (a node of a multi-node group other than rank
    # 0): it is judged by its process and its log alone.
    placeholder_health: bool = False
    # Why its port is not its own (another process listens there), from the last look before a health request.
    foreign_listener: str | None = None
    # The wait's options: seconds of log silence that make a stall (0: off), and when the whole wait ends.
    stall_timeout: float = 0
    deadline: float | None = None


# ``details``: what the verdict found that its report and msg need (exit status, /get_server_info, ...).
Verdict = collections.namedtuple("Verdict", "status details", defaults=(types.MappingProxyType({}),))


def decide(observation, rules):
    """The verdict of the first rule that fires, else None (not decided yet)."""
    for rule in rules:
        verdict = rule(observation)
        if verdict is not None:
            return verdict
    return None


# ---- rules ----------------------------------------------------------------------------------------


def replaced(observation):
    """The state file records another pid than the one watched: another run relaunched the server meanwhile."""
    if observation.recorded_pid is not None and observation.recorded_pid != observation.pid:
        return Verdict("replaced")
    return None


def answered_by_another(observation):
    """Another process listens on its port: never ready, never sent the key (the check comes before each request)."""
    if observation.foreign_listener:
        return Verdict("foreign_listener", {"foreign_listener": observation.foreign_listener})
    return None


def answered_ready(observation):
    """Health answered 200 while its main process, where known, runs (else the port is not its own)."""
    answer = observation.answer
    if observation.placeholder_health:
        return None
    if answer is not None and answer["status"] == 200 and observation.main_alive is not False:
        return Verdict("ready", {"server_info": answer.get("server_info"),
                                 "server_info_error": answer.get("server_info_error")})
    return None


def rank_ready(observation):
    """A node other than rank 0: its log says its schedulers are ready while its main process runs."""
    if observation.placeholder_health and observation.log_phase == "ready" and observation.main_alive is not False:
        return Verdict("ready")
    return None


def process_gone(observation):
    """Its main process is gone (a reused pid does not count): a crash, noticed within one look."""
    if observation.main_alive is False:
        return Verdict("crashed", {"exit_status": observation.exit_status, "process_gone": True})
    return None


def crashed_in_log(observation):
    """Its log says it crashed, for CRASH_GRACE_SECONDS (so the traceback is complete); in a snapshot at once."""
    if observation.log_phase != "crashed":
        return None
    seen_at = observation.now if observation.crash_seen_at is None else observation.crash_seen_at
    graced = observation.now - seen_at >= CRASH_GRACE_SECONDS
    if observation.snapshot or graced:
        # Its main process still running after the grace is stuck, not dying (see after_ready.kill_stuck).
        return Verdict("crashed", {"outlived_crash": bool(observation.main_alive) and graced})
    return None


def health_path_missing(observation):
    """Its own port answers 404 on the health path: no such endpoint (a typo in the path), never a stall to kill."""
    answer = observation.answer
    if (not observation.placeholder_health and answer is not None and answer["status"] == 404
            and observation.main_alive is not False):
        return Verdict("misconfigured")
    return None


def stall_suspected_since(observation):
    """When the log's silence reached stall_timeout; None while it has not (and when off, and in a snapshot)."""
    if observation.snapshot or not observation.stall_timeout or observation.last_activity is None:
        return None
    since = observation.last_activity + observation.stall_timeout
    return since if observation.now >= since else None


def stalled(observation):
    """Silent for stall_timeout, and a health probe sent since did not answer 200.

    A silent log alone is not enough: a server that serves is never stalled (nor killed). A node whose health is a
    placeholder is judged by its silence alone.
    """
    since, answer = stall_suspected_since(observation), observation.answer
    if since is not None and observation.placeholder_health:
        return Verdict("stalled")  # its placeholder would answer 200 even in a dead rendezvous
    if (since is not None and answer is not None and answer["status"] != 200
            and observation.answer_sent_at is not None and observation.answer_sent_at >= since):
        return Verdict("stalled")
    return None


def timed_out(observation):
    """The whole wait is over; a snapshot never times out."""
    if not observation.snapshot and observation.deadline is not None and observation.now >= observation.deadline:
        return Verdict("timeout")
    return None


def stopped_answering(observation):
    """Nothing listens on its port any more; a slow answer of a live process under load is not a crash."""
    answer = observation.answer
    if answer is not None and answer["status"] is None and "refused" in (answer["error"] or ""):
        return Verdict("crashed", {"no_longer_answers": answer["error"]})
    return None


def orphaned(observation):
    """Processes of it (a scheduler left behind) run without their main process; they may hold GPU memory."""
    if observation.processes_alive and observation.main_alive is False:
        return Verdict("orphaned")
    return None


def stopped(observation):
    """No state file and no process: stopped on purpose, or never launched."""
    if not observation.state_recorded and not observation.main_alive and not observation.processes_alive:
        return Verdict("stopped")
    return None


def dead(observation):
    """Recorded as launched, but no process of it is left (after crashed_in_log: its log names no crash)."""
    if not observation.main_alive and not observation.processes_alive:
        return Verdict("dead")
    return None


# The wait, every look until the server is decided: a replaced server is another run's (nothing of it is judged),
# a ready answer beats a silent log, a crash beats the deadline.
WAIT_RULES = (replaced, answered_by_another, answered_ready, rank_ready, process_gone, crashed_in_log, health_path_missing, stalled,
              timed_out)
# The wait, once more at its end for every server decided ready: still this run's, still running, still listening.
STILL_READY_RULES = (replaced, answered_by_another, process_gone, stopped_answering)
# server_info, one snapshot; no verdict means "starting" (alive, not answering 200, no crash in its log).
SERVER_INFO_RULES = (orphaned, stopped, answered_by_another, answered_ready, rank_ready, crashed_in_log, health_path_missing, dead)


# ---- the words of every state ---------------------------------------------------------------------


_PROGRESS_BAR_OF_PHASE = {"loading_weights": "weights", "capturing_cuda_graph": "cuda_graph"}


def progress_suffix(phase, progress):
    """`` 37/64`` for the progress bar of the phase (host msg and controller progress line), else ''."""
    counter = (progress or {}).get(_PROGRESS_BAR_OF_PHASE.get(phase))
    if counter and counter.get("total"):
        return f" {counter.get('done')}/{counter['total']}"
    return ""


def describe_health(health):
    if not health:
        return "none"
    if health["status"] is None:
        return f"unreachable ({health['error']})"
    return f"HTTP {health['status']}"


def _phase(facts):
    return facts["phase"] + (" (draft model)" if facts.get("component") == "draft" else "")


def _error(facts):
    return f": {facts['error']['summary']}" if facts.get("error") else ""


def _ready(facts):
    if facts.get("node_rank"):
        return (f"{facts['name']} rank {facts['node_rank']} ready after {facts['seconds_to_ready']} s: its schedulers "
                "are up (its health endpoint is SGLang's placeholder, never asked)")
    if facts.get("seconds_to_ready") is None and facts.get("uptime_s") is not None:
        return f"{facts['name']} ready (not restarted by this run, up {facts['uptime_s']} s)"
    return f"{facts['name']} ready after {facts['seconds_to_ready']} s"


def _starting(facts):
    return f"{facts['name']} {_phase(facts)} (check mode: not waited for)"


def _crashed(facts):
    text = f"{facts['name']} crashed in {_phase(facts)}"
    if facts.get("exit_status") is not None:
        text += f" (exit status {facts['exit_status']})"
    if facts.get("error"):
        text += _error(facts)
    elif facts.get("process_gone"):
        text += f": process {facts['pid']} is gone, no error in {facts['log_path']}"
    if facts.get("no_longer_answers"):
        text += f"; it no longer answers {facts['health_path']}: {facts['no_longer_answers']}"
    if facts.get("ready_after") is not None:
        text += f" (it was ready after {facts['ready_after']} s, but not at the end of the wait)"
    if facts.get("outlived_crash"):
        text += f"; its main process {facts['pid']} outlived the crash" + _killed(facts)
    return text


def _stalled(facts):
    return (f"{facts['name']} stalled in {_phase(facts)}: no log output for {facts['silent_for']:.0f} s; "
            f"last line: {facts['last_activity_line']}" + _killed(facts))


def _killed(facts):
    if facts.get("killed_pids"):
        return f"; killed pids {', '.join(str(pid) for pid in facts['killed_pids'])}"
    return f"; not killed: {facts['not_killed']}" if facts.get("not_killed") else ""


def _timed_out(facts):
    return (f"{facts['name']} not ready after {facts['timeout']:g} s, in {_phase(facts)}"
            f"{progress_suffix(facts['phase'], facts.get('progress'))}; "
            f"last health answer: {describe_health(facts.get('health'))}")


def _foreign_listener(facts):
    return f"{facts['foreign_listener']}: no request was sent to it, nothing of it counts as the server's answer"


def _misconfigured(facts):
    path = facts.get("health_path") or "(server_info's health_path)"
    return (f"{facts['name']} answers HTTP 404 on its health path {path}: no such endpoint, so it can "
            "never be seen ready; set the health path (relaunch_health_path) to one SGLang serves, e.g. "
            "/health_generate or /health. The server was not killed.")


def _replaced(facts):
    recorded = facts["replaced_by"]
    return (f"{facts['name']} replaced by another run: it now runs as pid {recorded.get('pid')} (run "
            f"{recorded.get('run_id') or 'unknown'}), not as pid {facts['pid']} launched by this run")


def _unrouted(facts):
    return (f"{facts['name']} ready after {facts['seconds_to_ready']} s but not taken back by the router, so it gets "
            f"no traffic from it: {facts['router_error']}")


def _orphaned(facts):
    pids = ", ".join(str(process["pid"]) for process in facts.get("processes") or [])
    return f"{facts['name']} orphaned: its main process is gone but pids {pids} still run{_error(facts)}"


def _dead(facts):
    return (f"{facts['name']} dead: launched, but no process of it is left (its log ends in phase {_phase(facts)})"
            f"{_error(facts)}")


class State(collections.namedtuple("State", "decided ready failing names_phase_reached sentence progress")):
    """What a status means and how it is said.

    decided: a verdict; the wait stops watching the server. ready: it serves; the wait (outside check mode)
    fails on every server that is not ready, failing or not (readiness.finish). failing: nothing of it serves,
    or something of it is left behind; the status playbook fails on it (report.fleet_problems).
    names_phase_reached: the wait's report and the status playbook's message name the last startup phase
    reached, which a crash or a hang interrupted, not the log's current phase ("crashed").
    sentence(facts): the one-sentence msg about the server; facts are its report (name, pid, log_path, phase,
    component, progress, health, error, exit_status, killed_pids, not_killed, seconds_to_ready, processes),
    the verdict's details and what only the host knows (silent_for, last_activity_line, timeout, health_path,
    replaced_by, ready_after). None: never said in a msg.
    progress: its part of the wait's progress line, with {name}, {phase} (in words), {counter} (`` 37/64``)
    and {killed} (`` (killed)``); None: not in the line: ready (counted in its head), unrouted (neither
    counted nor shown; the wait's msg says it), or never in a wait (server_info's own states).
    """

    __slots__ = ()


STATES = {
    # Not decided yet: mid-wait ("waiting") and in a snapshot ("starting": check mode, server_info).
    "waiting": State(decided=False, ready=False, failing=False, names_phase_reached=False, sentence=None,
                     progress="{name} {phase}{counter}"),
    "starting": State(decided=False, ready=False, failing=False, names_phase_reached=False, sentence=_starting,
                      progress="{name} {phase}{counter}"),
    "ready": State(decided=True, ready=True, failing=False, names_phase_reached=False, sentence=_ready,
                   progress=None),
    "crashed": State(decided=True, ready=False, failing=True, names_phase_reached=True, sentence=_crashed,
                     progress="{name} crashed in {phase}{killed}"),
    "stalled": State(decided=True, ready=False, failing=True, names_phase_reached=True, sentence=_stalled,
                     progress="{name} stalled in {phase}{killed}"),
    "timeout": State(decided=True, ready=False, failing=True, names_phase_reached=False, sentence=_timed_out,
                     progress="{name} timed out in {phase}"),
    "replaced": State(decided=True, ready=False, failing=True, names_phase_reached=False, sentence=_replaced,
                      progress="{name} replaced by another run"),
    # Another process listens on the server's port (bound before SGLang binds it, after loading its weights).
    "foreign_listener": State(decided=True, ready=False, failing=True, names_phase_reached=False,
                              sentence=_foreign_listener, progress="{name} port answered by another process"),
    # The health path is wrong (HTTP 404): a configuration error said at once, neither killed nor rolled back.
    "misconfigured": State(decided=True, ready=False, failing=True, names_phase_reached=False,
                           sentence=_misconfigured, progress="{name} answers 404 on the health path"),
    # Up, but the router (router_url) did not list it healthy: it serves no router traffic.
    "unrouted": State(decided=True, ready=False, failing=False, names_phase_reached=False, sentence=_unrouted,
                      progress=None),
    # server_info only.
    "orphaned": State(decided=True, ready=False, failing=True, names_phase_reached=False, sentence=_orphaned,
                      progress=None),
    "dead": State(decided=True, ready=False, failing=True, names_phase_reached=True, sentence=_dead, progress=None),
    "stopped": State(decided=True, ready=False, failing=False, names_phase_reached=False, sentence=None,
                     progress=None),
}


def count_ready(results):
    """How many of these wait or server_info results are ready."""
    return sum(1 for result in results if STATES[result["status"]].ready)
