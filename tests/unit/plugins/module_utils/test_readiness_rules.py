"""The readiness rules on constructed observations (no process, no server, no clock), and the words of each state."""

import json
import socket

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import readiness_rules
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness import (
    ServerTracker,
    finish,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness_rules import (
    CRASH_GRACE_SECONDS,
    SERVER_INFO_RULES,
    STATES,
    STILL_READY_RULES,
    WAIT_RULES,
    Observation,
    Verdict,
    count_ready,
    decide,
    stall_suspected_since,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.progress import (
    format_wait_progress,
)
from ansible_collections.gpuops.sglang.plugins.plugin_utils.report import (
    fleet_problems,
)

NOW = 100_000.0
STALL_TIMEOUT = 600


def look(**fields):
    """A server on its way up: its process runs, its log moved a second ago, no health answer, far from the deadline."""
    return Observation(**dict({"now": NOW, "pid": 42, "recorded_pid": 42, "main_alive": True,
                               "log_phase": "loading_weights", "last_activity": NOW - 1,
                               "stall_timeout": STALL_TIMEOUT, "deadline": NOW + 1000}, **fields))


def answer(status, error=None, **extra):
    return dict({"status": status, "error": error, "server_info": None, "server_info_error": None}, **extra)


def status(observation, rules=WAIT_RULES):
    """The status the rules give, checked to have its words in STATES; None when undecided."""
    verdict = decide(observation, rules)
    if verdict is None:
        return None
    assert verdict.status in STATES, f"{verdict.status} has no entry in STATES"
    return verdict.status


# A log silent since the silence was noticed 5 s ago (it reached stall_timeout at NOW - 5).
SILENT = {"last_activity": NOW - STALL_TIMEOUT - 5}
REFUSED = answer(None, "connection refused")


# ---- the wait ------------------------------------------------------------------------------------


@pytest.mark.parametrize("health", [None, answer(503, "HTTP 503"), answer(None, "timed out"), REFUSED])
def test_a_server_on_its_way_up_is_not_decided(health):
    assert status(look(answer=health, answer_sent_at=NOW - 1 if health else None)) is None


def test_health_200_is_ready_with_what_get_server_info_said():
    verdict = decide(look(answer=answer(200, server_info={"max_running_requests": 48})), WAIT_RULES)
    assert verdict.status == "ready"
    assert verdict.details["server_info"] == {"max_running_requests": 48}


@pytest.mark.parametrize("other", [
    pytest.param(dict(SILENT, answer_sent_at=NOW), id="a silent log"),
    pytest.param({"log_phase": "crashed", "crash_seen_at": NOW - CRASH_GRACE_SECONDS}, id="a crash line"),
    pytest.param({"now": NOW + 1000}, id="the deadline"),
])
def test_a_ready_answer_beats(other):
    assert status(look(answer=answer(200), **other)) == "ready"


def test_a_200_counts_only_while_the_process_runs_when_there_is_a_pid():
    assert status(look(answer=answer(200), main_alive=False, exit_status=0)) == "crashed"
    assert status(look(answer=answer(200), pid=None, recorded_pid=None, main_alive=None)) == "ready"


@pytest.mark.parametrize("other", [
    pytest.param({"answer": answer(200)}, id="a ready answer"),
    pytest.param({"main_alive": False}, id="a gone process"),
    pytest.param({"log_phase": "crashed", "crash_seen_at": NOW - 60}, id="a crash line"),
    pytest.param({"now": NOW + 1000}, id="the deadline"),
])
def test_a_replaced_server_is_decided_before(other):
    assert status(look(recorded_pid=43, **other)) == "replaced"


def test_a_server_is_replaced_only_when_the_state_file_records_another_pid():
    assert status(look(recorded_pid=None)) is None
    assert status(look(pid=None, recorded_pid=None, main_alive=None)) is None


def test_a_gone_process_is_a_crash_at_once_with_its_exit_status():
    verdict = decide(look(main_alive=False, exit_status=137), WAIT_RULES)
    assert verdict.status == "crashed"
    assert dict(verdict.details) == {"exit_status": 137, "process_gone": True}
    assert status(look(main_alive=False, **SILENT)) == "crashed", "a dead process is not a stall"


def test_a_crash_line_waits_crash_grace_seconds_unless_in_a_snapshot():
    crashed = {"log_phase": "crashed"}
    assert status(look(crash_seen_at=None, **crashed)) is None, "first seen now"
    assert status(look(crash_seen_at=NOW - CRASH_GRACE_SECONDS + 0.5, **crashed)) is None
    assert status(look(crash_seen_at=NOW - CRASH_GRACE_SECONDS, **crashed)) == "crashed"
    assert status(look(crash_seen_at=None, snapshot=True, **crashed)) == "crashed"
    verdict = decide(look(crash_seen_at=NOW - CRASH_GRACE_SECONDS, **crashed), WAIT_RULES)
    # SGLang kills its tree at once after a crash: a main process that still runs after the grace is stuck.
    assert dict(verdict.details) == {"outlived_crash": True}, "no exit status, not gone"
    verdict = decide(look(crash_seen_at=NOW - CRASH_GRACE_SECONDS, pid=None, recorded_pid=None, main_alive=None,
                          **crashed), WAIT_RULES)
    assert dict(verdict.details) == {"outlived_crash": False}, "no process to look at"
    verdict = decide(look(crash_seen_at=None, snapshot=True, **crashed), WAIT_RULES)
    assert dict(verdict.details) == {"outlived_crash": False}, "a snapshot does not wait the grace: it may be dying"


def test_a_stall_needs_a_probe_sent_after_the_silence_was_noticed():
    assert stall_suspected_since(look(**SILENT)) == NOW - 5
    assert status(look(**SILENT)) is None, "no answer yet"
    assert status(look(answer=answer(503), answer_sent_at=NOW - 6, **SILENT)) is None, "sent before the silence"
    assert status(look(answer=answer(503), answer_sent_at=NOW - 5, **SILENT)) == "stalled"
    assert status(look(answer=answer(None, "timed out"), answer_sent_at=NOW, **SILENT)) == "stalled"
    assert status(look(answer=answer(200), answer_sent_at=NOW, **SILENT)) == "ready", "a server that serves"


@pytest.mark.parametrize("fields", [
    pytest.param({"stall_timeout": 0}, id="off"),
    pytest.param({"snapshot": True}, id="a snapshot"),
    pytest.param({"last_activity": NOW - STALL_TIMEOUT + 1}, id="the log moved"),
])
def test_no_stall(fields):
    observation = look(**dict(SILENT, answer=answer(503), answer_sent_at=NOW, **fields))
    assert stall_suspected_since(observation) is None
    assert status(observation) is None


def test_the_deadline_times_out_what_nothing_else_decided():
    late = {"now": NOW + 1000}
    assert status(look(**late)) == "timeout"
    assert status(look(answer=answer(503), **late)) == "timeout"
    assert status(look(log_phase="crashed", crash_seen_at=NOW, **late)) == "crashed", "a crash beats the deadline"
    stalled = dict(late, last_activity=NOW + 1000 - STALL_TIMEOUT, answer=answer(503), answer_sent_at=NOW + 1000)
    assert status(look(**stalled)) == "stalled", "a stall beats the deadline"
    assert status(look(snapshot=True, **late)) is None, "a snapshot never times out"


# ---- the end of the wait: still ready? -----------------------------------------------------------


def test_a_ready_server_must_still_run_and_listen_at_the_end():
    assert status(look(answer=answer(200)), STILL_READY_RULES) is None
    assert status(look(answer=answer(None, "timed out")), STILL_READY_RULES) is None, "slow under load is not a crash"
    assert status(look(answer=answer(503)), STILL_READY_RULES) is None
    gone = decide(look(main_alive=False, exit_status=1, answer=REFUSED), STILL_READY_RULES)
    assert (gone.status, gone.details["exit_status"], gone.details.get("no_longer_answers")) == ("crashed", 1, None)
    deaf = decide(look(answer=REFUSED), STILL_READY_RULES)
    assert (deaf.status, deaf.details["no_longer_answers"]) == ("crashed", "connection refused")
    assert status(look(recorded_pid=43, main_alive=False), STILL_READY_RULES) == "replaced"


# ---- server_info ---------------------------------------------------------------------------------


@pytest.mark.parametrize("main_alive, processes_alive, state_recorded, health, log_phase, expected", [
    (True, True, True, 200, "ready", "ready"),
    (True, True, True, 503, "capturing_cuda_graph", None),  # starting
    (True, True, True, 503, "crashed", "crashed"),
    (True, True, True, 200, "crashed", "ready"),  # a traceback after ready (one failed request) is no crash
    (False, True, True, 200, "ready", "orphaned"),  # its scheduler left behind; the 200 is not its own
    (False, False, True, None, "crashed", "crashed"),
    (False, False, True, 200, "ready", "dead"),  # launched, nothing of it runs: the 200 is not its own
    (False, False, False, None, "crashed", "stopped"),
])
def test_server_info_status(main_alive, processes_alive, state_recorded, health, log_phase, expected):
    observation = Observation(now=NOW, snapshot=True, main_alive=main_alive, processes_alive=processes_alive,
                              state_recorded=state_recorded, log_phase=log_phase, answer=answer(health))
    assert status(observation, SERVER_INFO_RULES) == expected


# ---- the words of each state ---------------------------------------------------------------------


def facts(**fields):
    return dict({"name": "gpu7", "pid": 42, "log_path": "/var/log/sglang/gpu7.log", "phase": "loading_weights",
                 "component": "target", "progress": {}, "health": None, "error": None, "exit_status": None,
                 "killed_pids": [], "not_killed": None}, **fields)


def say(status, **fields):
    return STATES[status].sentence(facts(**fields))


OOM = {"summary": "torch.OutOfMemoryError: CUDA out of memory.", "traceback": "Traceback ..."}


def test_crashed_says_the_phase_exit_status_and_error_or_that_the_process_is_gone():
    assert say("crashed", component="draft", exit_status=1, error=OOM, process_gone=True) == (
        "gpu7 crashed in loading_weights (draft model) (exit status 1): torch.OutOfMemoryError: CUDA out of memory.")
    assert say("crashed", phase="initializing", process_gone=True) == (
        "gpu7 crashed in initializing: process 42 is gone, no error in /var/log/sglang/gpu7.log")
    assert say("crashed", error=OOM, health_path="/health_generate", no_longer_answers="connection refused",
               ready_after=61.3) == (
        "gpu7 crashed in loading_weights: torch.OutOfMemoryError: CUDA out of memory.; it no longer answers "
        "/health_generate: connection refused (it was ready after 61.3 s, but not at the end of the wait)")
    assert say("crashed", error=OOM, outlived_crash=True, killed_pids=[42, 43]) == (
        "gpu7 crashed in loading_weights: torch.OutOfMemoryError: CUDA out of memory.; its main process 42 outlived "
        "the crash; killed pids 42, 43")
    assert say("crashed", error=OOM, outlived_crash=True, not_killed="this run left it unchanged").endswith(
        "; its main process 42 outlived the crash; not killed: this run left it unchanged")


def test_stalled_says_how_long_the_log_was_silent_its_last_line_and_what_was_killed():
    silent = {"phase": "capturing_cuda_graph", "silent_for": 605.4, "last_activity_line": "Capturing batches (bs=8)"}
    assert say("stalled", **silent) == (
        "gpu7 stalled in capturing_cuda_graph: no log output for 605 s; last line: Capturing batches (bs=8)")
    assert say("stalled", killed_pids=[41, 42], **silent).endswith("; killed pids 41, 42")
    assert say("stalled", not_killed="another call holds the host lock", **silent).endswith(
        "; not killed: another call holds the host lock")


def test_timeout_says_the_wait_the_phase_its_progress_and_the_last_health_answer():
    weights = {"weights": {"done": 37, "total": 64}}
    assert say("timeout", timeout=1800.0, progress=weights, health={"status": 503, "error": "HTTP 503"}) == (
        "gpu7 not ready after 1800 s, in loading_weights 37/64; last health answer: HTTP 503")
    assert say("timeout", timeout=1.5, phase="initializing", health={"status": None, "error": "refused"}) == (
        "gpu7 not ready after 1.5 s, in initializing; last health answer: unreachable (refused)")
    assert say("timeout", timeout=60.0, component="draft", progress=weights) == (
        "gpu7 not ready after 60 s, in loading_weights (draft model) 37/64; last health answer: none")


def test_ready_replaced_and_a_snapshot_have_their_sentences():
    assert say("ready", seconds_to_ready=61.3) == "gpu7 ready after 61.3 s"
    assert say("ready", seconds_to_ready=None, uptime_s=3600.0) == "gpu7 ready (not restarted by this run, up 3600.0 s)"
    assert say("replaced", replaced_by={"pid": 43, "run_id": "r2"}) == (
        "gpu7 replaced by another run: it now runs as pid 43 (run r2), not as pid 42 launched by this run")
    assert say("replaced", replaced_by={"pid": 43}).endswith("(run unknown), not as pid 42 launched by this run")
    assert say("starting", phase="warming_up") == "gpu7 warming_up (check mode: not waited for)"


def test_every_state_is_a_verdict_or_not_and_says_its_progress_with_the_documented_fields():
    for name, state in STATES.items():
        assert state.decided or not (state.ready or state.failing), name
        if state.progress is not None:
            assert state.progress.format(name="gpu7", phase="loading weights", counter=" 1/2", killed="").startswith(
                "gpu7 "), name
    assert [name for name, state in STATES.items() if state.ready] == ["ready"]
    assert {name for name, state in STATES.items() if not state.decided} == {"waiting", "starting"}


def test_a_node_after_rank_0_is_judged_by_its_log_and_process_never_by_its_placeholder_health():
    placeholder = {"placeholder_health": True}
    # Its dummy endpoint answers 200 from the start and through a dead rendezvous: that is no readiness.
    assert status(look(answer=answer(200), log_phase="initializing", **placeholder)) is None
    assert status(look(answer=answer(200), **dict(SILENT, log_phase="initializing"), **placeholder)) == "stalled"
    assert status(look(log_phase="ready", **placeholder)) == "ready"
    assert status(look(log_phase="ready", main_alive=False, exit_status=137, **placeholder)) == "crashed"
    assert status(look(log_phase="crashed", crash_seen_at=NOW - CRASH_GRACE_SECONDS, answer=answer(200),
                       **placeholder)) == "crashed"
    assert status(look(log_phase="ready", processes_alive=True, **placeholder), SERVER_INFO_RULES) == "ready"
    assert status(look(answer=answer(200), log_phase="initializing", processes_alive=True, **placeholder),
                  SERVER_INFO_RULES) is None  # starting, whatever its placeholder says
    assert STATES["ready"].sentence({"name": "qwen-tp8", "node_rank": 1, "seconds_to_ready": 41.0}) == (
        "qwen-tp8 rank 1 ready after 41.0 s: its schedulers are up (its health endpoint is SGLang's placeholder, "
        "never asked)")


def test_a_404_on_the_health_path_is_a_configuration_error_at_once_never_a_stall():
    not_found = answer(404, "HTTP 404")
    assert status(look(answer=not_found, answer_sent_at=NOW - 1)) == "misconfigured"
    # Even when its log has been silent long enough to be a stall: a wrong path is no reason to kill a server.
    assert status(look(answer=not_found, answer_sent_at=NOW - 1, **SILENT)) == "misconfigured"
    assert status(look(answer=not_found), SERVER_INFO_RULES) == "misconfigured"
    # A crash still beats it; a placeholder (a node after rank 0) is never asked.
    assert status(look(answer=not_found, main_alive=False)) == "crashed"
    assert status(look(answer=not_found, placeholder_health=True)) is None
    sentence = STATES["misconfigured"].sentence({"name": "gpu0", "health_path": "/health_generat"})
    assert sentence.startswith("gpu0 answers HTTP 404 on its health path /health_generat: no such endpoint")
    assert "not killed" in sentence


def test_a_port_another_process_listens_on_is_never_ready():
    squatted = {"foreign_listener": "port 30001 is answered by foreign process 4242 (user nobody), not by gpu1"}
    # Even with a 200 in hand (the check comes before each request, so that answer came from before).
    assert status(look(answer=answer(200), **squatted)) == "foreign_listener"
    assert status(look(**squatted), STILL_READY_RULES) == "foreign_listener"
    assert status(look(answer=answer(200), **squatted), SERVER_INFO_RULES) == "foreign_listener"
    sentence = STATES["foreign_listener"].sentence({"name": "gpu1", **squatted})
    assert sentence == ("port 30001 is answered by foreign process 4242 (user nobody), not by gpu1: no request was "
                        "sent to it, nothing of it counts as the server's answer")


# ---- every column of STATES against the code that reads it -----------------------------------------
# What the code does with each state is written out here: the code reads the table, so a column flipped in the
# table changes the code with it and only an expectation of its own tells.

# A look that each rule fires on.
FIRING = {
    readiness_rules.replaced: look(recorded_pid=43),
    readiness_rules.answered_by_another: look(foreign_listener="port 30007 is answered by foreign process 4242"),
    readiness_rules.answered_ready: look(answer=answer(200)),
    readiness_rules.rank_ready: look(placeholder_health=True, log_phase="ready"),
    readiness_rules.process_gone: look(main_alive=False),
    readiness_rules.crashed_in_log: look(log_phase="crashed", snapshot=True),
    readiness_rules.health_path_missing: look(answer=answer(404)),
    readiness_rules.stalled: look(answer=answer(503), answer_sent_at=NOW, **SILENT),
    readiness_rules.timed_out: look(now=NOW + 1000),
    readiness_rules.stopped_answering: look(answer=REFUSED),
    readiness_rules.orphaned: look(main_alive=False, processes_alive=True),
    readiness_rules.stopped: look(main_alive=None, state_recorded=False),
    readiness_rules.dead: look(main_alive=False),
}
# The states the status playbook fails on (report.fleet_problems), and those whose report names the startup
# phase reached rather than the log's phase.
FAILING = {"crashed", "stalled", "timeout", "replaced", "foreign_listener", "misconfigured", "orphaned", "dead"}
NAMES_PHASE_REACHED = {"crashed", "stalled", "dead"}
# Everything a state's sentence may ask of a server's report; its log reached loading_weights, then crashed.
REPORTED = facts(processes=[{"pid": 43}], silent_for=601.0, last_activity_line="Load weight begin.", timeout=60.0,
                 health_path="/health", replaced_by={"pid": 43}, foreign_listener="port 30007 is answered by 4242",
                 seconds_to_ready=41.0, router_error="refused", node_rank=None,
                 log={"phase": "crashed", "component": "target", "error": OOM, "timeline": [
                     {"phase": "loading_weights", "component": "target"}, {"phase": "crashed", "component": "target"}]})


def verdicts(rules):
    return {rule(FIRING[rule]).status for rule in rules}


def test_the_decided_states_are_the_verdicts_of_the_rules_and_of_the_router_check():
    assert set(FIRING) == set(WAIT_RULES + STILL_READY_RULES + SERVER_INFO_RULES), "a rule without a look"
    # unrouted: a ready server the router did not take back (after_ready.register_ready).
    decided = verdicts(WAIT_RULES + STILL_READY_RULES + SERVER_INFO_RULES) | {"unrouted"}
    assert {name for name, state in STATES.items() if state.decided} == decided


def test_a_state_has_a_sentence_when_some_msg_says_it():
    # The wait's verdicts and its own states (a snapshot's starting, unrouted), and what the status playbook fails on.
    said = verdicts(WAIT_RULES + STILL_READY_RULES) | {"starting", "unrouted"} | FAILING
    assert {name for name, state in STATES.items() if state.sentence} == said


@pytest.mark.parametrize("status", sorted(STATES))
def test_the_wait_fails_on_every_state_but_ready_and_check_mode_on_none(status):
    report = {"name": "gpu7", "status": status, "msg": f"gpu7 {status}"}
    result = finish([report], 1.0, check_mode=False)
    if status == "ready":
        assert (result["ready"], result["not_ready"], "failed" in result) == (["gpu7"], [], False)
    else:
        assert (result["ready"], result["not_ready"], result["failed"]) == ([], ["gpu7"], True)
    assert count_ready([report]) == (status == "ready")
    assert not finish([report], 1.0, check_mode=True).get("failed")


@pytest.mark.parametrize("status", sorted(STATES))
def test_the_status_playbook_fails_on_the_failing_states_naming_the_phase_reached_where_the_table_says(status):
    problems = fleet_problems([dict(REPORTED, status=status)])
    assert len(problems) == (status in FAILING)
    if problems:  # where its sentence says a phase: the one reached, else the log's ("crashed")
        assert ("loading_weights" in problems[0]) == (status in NAMES_PHASE_REACHED), problems[0]


@pytest.fixture
def tracker(tmp_path):
    """The wait's tracker of server gpu7, whose log reached loading_weights, then crashed (no process, no server);
    its state file records pid 43, launched by another run."""
    log = tmp_path / "gpu7.log"
    log.write_text("[2026-01-01 00:00:00] Load weight begin. avail mem=70.00 GB\n"
                   "[2026-01-01 00:00:01] Scheduler hit an exception: Traceback (most recent call last):\n"
                   '  File "model_runner.py", line 1, in load_model\n'
                   "torch.OutOfMemoryError: CUDA out of memory.\n")
    (tmp_path / "gpu7.json").write_text(json.dumps({"pid": 43, "run_id": "r2"}))
    options = {"state_dir": str(tmp_path), "started_at": NOW, "timeout": 60, "api_key": None, "host": "127.0.0.1",
               "health_path": "/health", "probe_timeout": 1, "kill_stalled": False, "check_mode": True}
    tracker = ServerTracker({"name": "gpu7", "port": 30007, "pid": 42, "log_path": str(log)}, options, None, NOW)
    tracker.log.read()
    return tracker


@pytest.mark.parametrize("status", sorted(verdicts(WAIT_RULES + STILL_READY_RULES)))
def test_the_wait_reports_the_phase_reached_where_the_table_says(tracker, status):
    report = tracker.record(Verdict(status, {"foreign_listener": REPORTED["foreign_listener"]}), NOW)
    expected = "loading_weights" if status in NAMES_PHASE_REACHED else "ready" if status == "ready" else "crashed"
    assert report["phase"] == expected


def test_no_other_state_names_the_phase_reached():
    # Where no code reads the column, or nothing shows it: waiting, starting, unrouted and stopped are never
    # recorded by the wait nor failing, a ready report says "ready", orphaned's sentence names no phase.
    assert {name for name, state in STATES.items() if state.names_phase_reached} == NAMES_PHASE_REACHED


# Shown in the wait's progress line: the states of a server not ready, but unrouted and server_info's own.
IN_THE_PROGRESS_LINE = {"waiting", "starting", "crashed", "stalled", "timeout", "replaced", "foreign_listener",
                        "misconfigured"}


@pytest.mark.parametrize("status", sorted(STATES))
def test_the_progress_line_shows_the_states_the_table_gives_words(status):
    line = format_wait_progress("ct200", [{"name": "gpu7", "status": status, "phase": "loading_weights",
                                           "component": "target", "progress": {}}])
    assert ("gpu7" in line) == (status in IN_THE_PROGRESS_LINE), line
    assert line.startswith("ct200: " + ("1/1" if status == "ready" else "0/1") + " ready")


class RecordingProbe:
    """The tracker's health probe, recording when it is sent; the test gives its answers."""

    busy = False

    def __init__(self):
        self.started_at = None
        self.sent = []
        self.answer = None

    @property
    def has_answer(self):
        return self.answer is not None

    def start(self, now):
        self.started_at = now
        self.sent.append(now)

    def take_answer(self):
        given, self.answer = self.answer, None
        return given


def test_the_log_saying_the_server_is_up_sends_a_health_probe_at_once(tmp_path):
    log = tmp_path / "gpu0.log"
    log.write_text("[2026-01-01 00:00:00] Load weight begin. avail mem=70.00 GB\n")
    with socket.socket() as unused:  # nothing listens on it: the probe goes to the server's own port
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    options = {"state_dir": str(tmp_path), "started_at": NOW, "timeout": 60, "api_key": None, "host": "127.0.0.1",
               "health_path": "/health", "probe_timeout": 1, "kill_stalled": False, "check_mode": False,
               "stall_timeout": 0}
    tracker = ServerTracker({"name": "gpu0", "port": port, "log_path": str(log)}, options, None, NOW)
    tracker.probe = probe = RecordingProbe()
    tracker.poll(NOW, may_probe=True)
    probe.answer = answer(503)
    assert tracker.poll(NOW + 0.2, may_probe=True) is None
    assert probe.sent == [NOW], "a 'not yet' is asked again after HEALTH_INTERVAL_SECONDS"

    with log.open("a") as handle:
        handle.write("[2026-01-01 00:00:09] The server is fired up and ready to roll!\n")
    tracker.poll(NOW + 0.4, may_probe=True)
    assert probe.sent == [NOW, NOW + 0.4], "up by its log: asked at once, not a second after the last answer"
    probe.answer = answer(503)
    assert tracker.poll(NOW + 0.6, may_probe=True) is None
    assert probe.sent == [NOW, NOW + 0.4], "once: a 'not yet' after it waits out the interval again"
    tracker.poll(NOW + 1.4, may_probe=True)
    probe.answer = answer(200)
    assert tracker.poll(NOW + 1.5, may_probe=True)["status"] == "ready"
