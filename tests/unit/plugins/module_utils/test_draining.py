"""The drain before a stop, decided on counts (no server): in-flight parsers, the drain's outcomes, the router
settings' checks and the worker URL."""

import json

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils import draining
from ansible_collections.gpuops.sglang.plugins.module_utils.in_flight import (
    count_from_loads,
    count_from_metrics,
)


def loads(*ranks):
    return json.dumps({"timestamp": "2026-12-01T20:00:00+00:00", "version": "0.5.10", "loads": [
        {"dp_rank": rank, "num_running_reqs": running, "num_waiting_reqs": waiting, "num_used_tokens": 10}
        for rank, (running, waiting) in enumerate(ranks)]})


def test_loads_count_running_and_waiting_over_every_dp_rank():
    assert count_from_loads(loads((3, 1), (0, 2))) == 6
    assert count_from_loads(loads((0, 0))) == 0


@pytest.mark.parametrize("body", [
    "", "not json", "[]", json.dumps({"loads": []}), json.dumps({"loads": [{"dp_rank": 0}]}),
    json.dumps({"loads": [{"num_running_reqs": -1, "num_waiting_reqs": 0}]}),
    json.dumps({"loads": [{"num_running_reqs": True, "num_waiting_reqs": 0}]}),
    json.dumps({"loads": ["x"]}),
])
def test_loads_without_counts_give_none(body):
    assert count_from_loads(body) is None


METRICS = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",model_name="m",tp_rank="0"} 4.0
sglang:num_running_reqs{dp_rank="1",model_name="m",tp_rank="0"} 2.0
sglang:num_queue_reqs{dp_rank="0",model_name="m",tp_rank="0"} 1.0
sglang:num_queue_reqs{dp_rank="1",model_name="m",tp_rank="0"} 0.0
"""


def test_metrics_count_running_and_queued_gauges_of_every_dp_rank():
    assert count_from_metrics(METRICS) == 7
    assert count_from_metrics("sglang:num_running_reqs 0.0\n") is None  # no queue gauge: not SGLang's


class Counter:
    """Answers of requests_in_flight, one per call."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = 0

    def __call__(self, base_url, timeout, api_key):
        self.calls += 1
        assert base_url == "http://127.0.0.1:30003" and timeout == draining.COUNT_TIMEOUT_SECONDS
        return self.answers.pop(0)


def drain(counter, timeout=60.0):
    return draining.Drain("http://127.0.0.1:30003", timeout, None, started=100.0, count=counter)


def test_a_drain_counts_once_a_second_until_no_request_is_left():
    counter = Counter((12, None), (3, None), (0, None))
    d = drain(counter)
    assert d.poll(100.0) == draining.DRAINING and d.requests_left == 12
    assert d.poll(100.5) == draining.DRAINING and counter.calls == 1  # not counted again within the interval
    assert d.poll(101.0) == draining.DRAINING and d.requests_left == 3
    assert d.poll(102.0) == draining.DRAINED
    assert d.poll(150.0) == draining.DRAINED and counter.calls == 3  # decided: never counted again
    assert d.report() == {"outcome": "drained", "seconds": 2.0, "requests_left": 0, "error": None}


def test_a_drain_ends_at_drain_timeout_with_the_requests_left():
    d = drain(Counter((5, None), (4, None)), timeout=1.5)
    assert d.poll(100.0) == draining.DRAINING
    assert d.poll(101.0) == draining.DRAINING
    assert d.poll(101.6) == draining.TIMED_OUT
    assert d.report() == {"outcome": "timed_out", "seconds": 1.6, "requests_left": 4, "error": None}


def test_a_server_that_gives_no_count_is_not_waited_for():
    d = drain(Counter((None, "connection refused")))
    assert d.poll(100.0) == draining.UNCOUNTED
    assert d.report()["error"] == "connection refused"


def test_a_drain_the_server_ended_itself_says_so():
    d = drain(Counter((2, None)))
    d.poll(100.0)
    d.end(103.0, draining.EXITED)
    assert d.report() == {"outcome": "exited", "seconds": 3.0, "requests_left": 2, "error": None}


@pytest.mark.parametrize("host, worker_host, port, url", [
    ("127.0.0.1", None, 30003, "http://127.0.0.1:30003"),
    ("0.0.0.0", "10.0.0.5", 30000, "http://10.0.0.5:30000"),
    ("::1", None, 30001, "http://[::1]:30001"),
])
def test_the_worker_url_is_the_address_the_router_reaches(host, worker_host, port, url):
    assert draining.worker_url({"host": host, "router_worker_host": worker_host}, port) == url


def test_a_loopback_worker_host_behind_a_router_elsewhere_is_refused():
    # The router would list the servers under another address: nothing would be taken out of it before a stop.
    [problem] = draining.router_problems("http://10.0.0.2:8000", "127.0.0.1", None)
    assert problem.startswith("router_worker_host must be the address at which the router http://10.0.0.2:8000 "
                              "reaches the servers; '127.0.0.1' is this host's loopback")
    assert draining.router_problems("http://10.0.0.2:8000", "127.0.0.1", "10.0.0.5") == []
    assert draining.router_problems("http://localhost:8000", "127.0.0.1", None) == []


def test_router_settings_are_checked_with_the_names_the_caller_uses():
    assert draining.router_problems(None, "0.0.0.0", None) == []
    assert draining.router_problems("http://127.0.0.1:8000", "127.0.0.1", None) == []
    problems = draining.router_problems("10.0.0.2:8000", "0.0.0.0", None,
                                        names=("sglang_router_url", "sglang_router_worker_host"))
    assert len(problems) == 2
    assert problems[0].startswith("sglang_router_url '10.0.0.2:8000' is not an http(s)://host[:port] URL")
    assert problems[1].startswith("sglang_router_worker_host is required with sglang_router_url when the servers "
                                  "listen on '0.0.0.0'")


@pytest.mark.parametrize("behind_router, action, removed_ids, recorded, owed", [
    (True, "launched", None, None, True),  # a new server joins the router
    (True, "relaunched", ["4b1e"], {"router_add": False}, True),  # this run took it out
    (True, "relaunched", [], {"router_add": True}, True),  # an earlier run took it out and did not put it back
    (True, "relaunched", [], {"router_add": False}, False),  # found outside the router: an operator's choice
    (True, "relaunched", [], {}, False),  # a state file written before router_add
    (False, "launched", None, None, False),  # no router: nothing owed, whatever a router later finds
    (False, "relaunched", None, {"router_add": True}, False),
])
def test_a_server_is_owed_a_place_in_the_router_only_if_this_deployment_took_it_or_launched_it(
        behind_router, action, removed_ids, recorded, owed):
    assert draining.owes_router(behind_router, action, removed_ids, recorded) is owed
