"""The router client's parsers on answers captured from the real sglang-router 0.3.2 (tests/unit/fixtures/router) and
the real smg 1.13.0 (tests/unit/fixtures/router_smg)."""

import json
import re
import socket
from pathlib import Path

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.router import (
    RouterClient,
    RouterError,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.router_answers import (
    ALREADY_EXISTS,
    CREATE_IN_PROGRESS,
    DRAINING,
    FAILED,
    HEALTHY,
    PENDING,
    UNHEALTHY,
    UNKNOWN,
    UnexpectedAnswer,
    check_url,
    failure_cause,
    normalize_url,
    parse_accepted,
    parse_conflict,
    parse_worker,
    parse_workers,
)

FIXTURES = Path(__file__).resolve().parents[3] / "unit" / "fixtures" / "router"
SMG = FIXTURES.parent / "router_smg"
ERRORS = json.loads((FIXTURES / "error_answers.json").read_text())


def answer(name, fixtures=FIXTURES):
    return json.loads((fixtures / name).read_text())


def smg(name):
    return answer(name, SMG)


def test_worker_list_with_one_worker_down():
    workers = parse_workers(answer("workers_list.json"))

    assert [(worker.url, worker.state) for worker in workers] == [
        ("http://127.0.0.1:34104", UNHEALTHY),  # SIGKILLed: stays registered, not routed to
        ("http://127.0.0.1:34101", HEALTHY),
        ("http://127.0.0.1:34100", HEALTHY),
    ]
    assert workers[2].id == "eabd4ad8-0035-404e-b5bf-2138d6c283f3"
    assert workers[2].model_id == "/tmp/rx/model"
    assert all(worker.registered and worker.job_status is None for worker in workers)


def test_registered_worker():
    worker = parse_worker(answer("worker_registered.json"))

    assert worker.state == HEALTHY
    assert worker.id == parse_accepted(answer("add_accepted.json"))  # the id POST /workers answered


def test_adding_a_registered_url_again_leaves_it_healthy_beside_a_failed_job():
    worker = parse_worker(answer("worker_registered_duplicate_add.json"))

    assert (worker.job_type, worker.job_status) == ("AddWorker", "failed")
    assert "already exists" in worker.job_message
    assert worker.state == HEALTHY


def test_add_job_pending_then_failed():
    pending = parse_worker(answer("worker_add_pending.json"))
    failed = parse_worker(answer("worker_add_failed.json"))

    assert (pending.state, pending.registered, pending.healthy) == (PENDING, False, False)
    assert pending.id == failed.id
    assert failed.state == FAILED
    assert failed.job_message.startswith("Workflow failed at step detect_connection_mode")


def test_removing_a_pending_add_shows_a_failed_removal_not_a_failed_add():
    # The add job goes on (a removal cannot cancel it): the placeholder is neither pending nor failed for us.
    worker = parse_worker(answer("worker_pending_remove_failed.json"))

    assert (worker.job_type, worker.job_status) == ("RemoveWorker", "failed")
    assert worker.state == UNKNOWN


def test_accepted_answers():
    assert parse_accepted(answer("delete_accepted.json")) == "8890d25a-5e57-4755-8888-7517371472ee"
    with pytest.raises(UnexpectedAnswer, match="accepted"):
        parse_accepted(answer("worker_not_found.json"))


@pytest.mark.parametrize("document", [
    {"error": "Worker x not found", "code": "WORKER_NOT_FOUND"},
    {"id": "x", "url": "http://h:1", "is_healthy": "true"},
    ["not", "an", "object"],
])
def test_not_a_worker(document):
    with pytest.raises(UnexpectedAnswer):
        parse_worker(document)


@pytest.mark.parametrize("document", [{"workers": "none"}, {"detail": "Not Found"}, None])
def test_not_a_worker_list(document):
    with pytest.raises(UnexpectedAnswer, match="workers"):
        parse_workers(document)


@pytest.mark.parametrize(("case", "api_key_given", "expected"), [
    ("api_key_missing", False, "HTTP 401 unauthorized: the router wants a key; set router_api_key"),
    ("api_key_wrong", True, "HTTP 401 unauthorized: the router refused the key"),
    ("control_plane_key_missing", False, "HTTP 401 unauthorized: the router wants a key"),
    ("control_plane_user_role", True,
     "HTTP 403 forbidden (Admin role required for control plane access): router_api_key must be a key with role admin"),
    ("missing_url", False, "HTTP 422: Failed to deserialize the JSON body into the target type: missing field `url`"),
    ("no_available_workers", False, "HTTP 503: No available workers (all circuits open or unhealthy)"),
])
def test_failure_causes(case, api_key_given, expected):
    error = ERRORS[case]

    assert failure_cause(error["status"], error["body"], api_key_given).startswith(expected)


def test_failure_cause_of_json_errors():
    not_found = (FIXTURES / "worker_not_found.json").read_text()
    bad_id = (FIXTURES / "worker_bad_id.json").read_text()

    assert failure_cause(404, not_found, False) == "HTTP 404: Worker 8890d25a-5e57-4755-8888-7517371472ee not found"
    assert failure_cause(400, bad_id, False).startswith("HTTP 400: Invalid worker_id 'http://127.0.0.1:34101' (expected")
    assert failure_cause(500, "", False) == "HTTP 500"


@pytest.mark.parametrize(("url", "normalized"), [
    ("http://10.0.0.5:30001", "http://10.0.0.5:30001"),
    ("http://10.0.0.5:30001/", "http://10.0.0.5:30001"),
    (" HTTP://GPU-Host:30001/ ", "http://gpu-host:30001"),
    ("https://[::1]:30001", "https://[::1]:30001"),
])
def test_one_spelling_per_server(url, normalized):
    # The router registers "http://h:1/" and "http://h:1" as two workers (each gets its share of traffic).
    assert normalize_url(url) == normalized
    assert check_url(url, "worker URL") == normalized


@pytest.mark.parametrize("url", [
    "127.0.0.1:30001",  # the router takes it, and wipes the metadata of the worker it names
    "ftp://10.0.0.5:30001",
    "http://:30001",
    "http://10.0.0.5:port",
    "http://10.0.0.5:70000",
])
def test_bad_urls(url):
    with pytest.raises(ValueError, match=re.escape(f"worker URL {url!r} is not an http(s)://host[:port] URL")):
        check_url(url, "worker URL")


def test_bad_router_url_is_a_router_error():
    with pytest.raises(RouterError) as caught:
        RouterClient("10.0.0.5:30000")

    assert str(caught.value) == ("sglang router 10.0.0.5:30000: checking router_url: router_url '10.0.0.5:30000' is "
                                 "not an http(s)://host[:port] URL (e.g. http://10.0.0.5:30000)")


def test_unreachable_router_fails_the_check_naming_the_router_and_the_call_but_not_the_key():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = RouterClient(f"http://127.0.0.1:{port}/", api_key="s3cret-router-key", timeout=2)

    with pytest.raises(RouterError) as caught:
        client.check()

    error = caught.value
    assert error.status is None
    assert str(error).startswith(f"sglang router http://127.0.0.1:{port}: checking the router (GET /workers): "
                                 "cannot connect: [Errno 111] Connection refused; is the router running there")
    assert "s3cret" not in str(error)


def test_a_router_that_accepts_the_connection_but_never_answers():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # the kernel completes the handshake; nobody reads the request
        client = RouterClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=0.3)

        with pytest.raises(RouterError, match=r"listing workers \(GET /workers\): no answer within 0\.3 s$"):
            client.workers()


# --- smg 1.13.0 (tests/unit/fixtures/router_smg/README.md) ---------------------------------------------------------


def test_smg_add_pending_then_ready():
    pending = parse_worker(smg("worker_add_pending.json"))
    ready = parse_worker(smg("worker_ready.json"))

    # smg's placeholder says connection_mode "http" (0.3.2's: "unknown"): its status says it is not registered.
    assert (pending.status, pending.state, pending.registered) == ("pending", PENDING, False)
    assert (ready.status, ready.state, ready.registered, ready.model_id) == ("ready", HEALTHY, True, "/tmp/smgx/model")
    assert pending.id == parse_accepted(smg("add_accepted.json"))


def test_smg_removal_drains_and_a_dead_worker_is_not_ready():
    draining = parse_worker(smg("worker_draining.json"))
    listed = {worker.url: worker for worker in parse_workers(smg("workers_one_down.json"))}

    assert (draining.state, draining.healthy, draining.job_type) == (DRAINING, False, "RemoveWorker")
    assert draining.id == parse_accepted(smg("delete_accepted.json"))
    assert [worker.state for worker in parse_workers(smg("workers_draining.json"))] == [HEALTHY, HEALTHY, DRAINING]
    assert listed["http://127.0.0.1:41102"].status == "notready"  # SIGKILLed: "not_ready", listed until removed
    assert listed["http://127.0.0.1:41102"].state == UNHEALTHY
    assert listed["http://127.0.0.1:41101"].state == HEALTHY


@pytest.mark.parametrize("document", [
    {"id": "x", "url": "http://h:1", "is_healthy": True, "status": "not_ready"},  # healthy flag, status says no
    {"id": "x", "url": "http://h:1", "is_healthy": True, "status": "NotReady"},
])
def test_smg_ready_needs_both_status_and_health(document):
    assert parse_worker(document).state == UNHEALTHY


def test_smg_failed_worker_status():
    assert parse_worker({"id": "x", "url": "http://h:1", "is_healthy": False, "status": "Failed"}).state == FAILED


@pytest.mark.parametrize(("name", "code", "worker_id"), [
    ("conflict_registered.json", ALREADY_EXISTS, "01a2394d-1a40-76f5-a6aa-f16d426487f6"),
    ("conflict_draining.json", ALREADY_EXISTS, "01a2394d-1cc2-7034-af6b-d31cc7fd09f9"),
    ("conflict_in_progress.json", CREATE_IN_PROGRESS, "01a23950-5298-74f3-82bd-867afd711dcc"),
])
def test_smg_conflicts(name, code, worker_id):
    assert parse_conflict((SMG / name).read_text()) == (code, worker_id)


@pytest.mark.parametrize("body", ["", "conflict", '{"error": "x", "code": "OTHER"}'])
def test_not_a_conflict(body):
    with pytest.raises(UnexpectedAnswer, match="409"):
        parse_conflict(body)


def test_smg_error_answers():
    error = smg("error_answers.json")["missing_url"]

    assert failure_cause(error["status"], error["body"], False).startswith(
        "HTTP 400: Invalid JSON data: Failed to deserialize the JSON body into the target type: missing field `url`")
    assert failure_cause(404, (SMG / "worker_not_found.json").read_text(), False) == (
        "HTTP 404: Worker 01a2394d-1cc2-7034-af6b-d31cc7fd09f9 not found")
    assert failure_cause(400, (SMG / "worker_bad_id.json").read_text(), False).startswith(
        "HTTP 400: Invalid worker_id 'http://127.0.0.1:41101' (expected UUID)")
