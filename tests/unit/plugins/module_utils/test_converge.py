"""The hold's decision that a relaunch has nothing to change (module_utils/converge.py), on plain answers."""

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.converge import (
    chosen_candidate,
    deferred_by,
    settled,
)

PY = "/opt/sglang/bin/python"
CANDIDATES = [{"sglang": [{"interpreter": PY, "version": version}], "scripts": [{"name": version}]}
              for version in ("0.5.9", "0.5.10", "0.5.23")]


def _installed(version, problem=None):
    entry = {"interpreter": PY, "version": version, "location": "/opt/sglang/lib/python3.12/site-packages"}
    return [dict(entry, problem=problem) if problem else entry]


def test_the_candidate_rendered_for_exactly_the_version_the_host_reports_is_chosen():
    assert chosen_candidate(CANDIDATES, _installed("0.5.10")) is CANDIDATES[1]


@pytest.mark.parametrize("installed", [
    _installed("0.5.23.post1"),  # parses as 0.5.23, but its notes and journal name the text: rendered by the run
    _installed("0.5.11"),  # no flag table here: the run's render says so
    _installed(None, problem="no sglang in /opt/sglang/bin/python"),
    [{"interpreter": "/usr/bin/python3", "version": "0.5.23"}],  # another interpreter's
    [],
], ids=["post release", "no table", "not installed", "other interpreter", "nothing read"])
def test_no_candidate_for_anything_else(installed):
    assert chosen_candidate(CANDIDATES, installed) is None


def test_every_interpreter_of_a_candidate_must_match():
    both = [{"sglang": [{"interpreter": PY, "version": "0.5.23"}, {"interpreter": "python3", "version": "0.5.23"}],
             "scripts": []}]
    assert chosen_candidate(both, _installed("0.5.23")) is None
    assert chosen_candidate(both, _installed("0.5.23") + [{"interpreter": "python3", "version": "0.5.23"}]) is both[0]


def _planned(**changes):
    planned = {"servers": [{"name": "gpu0", "action": "unchanged", "error": None},
                           {"name": "gpu1", "action": "unchanged", "error": None}],
               "scripts": {"gpu0": {"changed": False}, "gpu1": {"changed": False}},
               "script_diffs": [], "removed": [], "stale_killed": [], "foreign_killed": []}
    planned.update(changes)
    return planned


def test_a_plan_with_every_server_unchanged_and_nothing_to_write_is_settled():
    assert settled(_planned()) is None


@pytest.mark.parametrize("changes, why", [
    ({"servers": [{"name": "gpu0", "action": "relaunched", "error": None}]}, "to change: gpu0"),
    ({"servers": [{"name": "gpu0", "action": "launched", "error": None}]}, "to change: gpu0"),
    ({"servers": [{"name": "gpu0", "action": "unchanged", "error": "GPU 0 held by pid 7"}]}, "to change: gpu0"),
    ({"scripts": {"gpu0": {"changed": True}}}, "files to write: gpu0"),
    ({"script_diffs": [{"before_header": "unit"}]}, "files to write: systemd units"),
    ({"removed": [{"name": "gpu9"}]}, "servers no longer requested"),
    ({"stale_killed": [{"pid": 7}]}, "processes in the way"),
], ids=["relaunch", "launch", "error", "script", "unit", "removed", "stale"])
def test_anything_the_server_call_would_do_is_not_settled(changes, why):
    assert why in settled(_planned(**changes))


def test_one_call_may_relaunch_unless_a_canary_or_the_batch_size_defers_servers():
    relaunching = _planned(servers=[{"name": "gpu0", "action": "relaunched", "error": None},
                                    {"name": "gpu1", "action": "launched", "error": None}])
    assert deferred_by(relaunching) is None and deferred_by(_planned()) is None
    canary = _planned(servers=[{"name": "gpu0", "action": "relaunched", "error": None},
                               {"name": "gpu1", "action": "deferred", "error": None},
                               {"name": "gpu2", "action": "deferred", "error": None}])
    assert deferred_by(canary) == "servers deferred until others are up: gpu1, gpu2"
