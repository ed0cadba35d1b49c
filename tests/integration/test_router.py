"""The router client against the REAL routers - sglang-router 0.3.2 and smg 1.13.0, each test once per router (the
``router_kind`` fixture) - in front of simulated SGLang servers, on loopback.

Each test starts the router (``python -m sglang_router.launch_router`` or ``python -m smg launch``, its HTTP and
Prometheus ports explicit) and simulated servers (tests/simulator/sglang_sim.py through make_server's launch scripts). All of
them carry the test's GPUOPS_TEST_TOKEN and are killed when the test ends; the router also gets SPT_NOENV=1,
without which its setproctitle("sglang::router", "smg::router") wipes /proc/<pid>/environ, and the token with it.

Requests are counted per server from the simulator's access lines: a stream's line is written when its
answer starts, so a count is taken as soon as the requests are under way.
"""

import http.client
import json
import re
import signal
import subprocess
import threading
import time

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.router import (
    RouterClient,
    RouterError,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.router_answers import (
    DRAINING,
    HEALTHY,
)

from .conftest import free_port_block, http_status

DECODE_RATE = 40  # tokens/s per request: a 100-token stream lasts 2.5 s
ROUTES = ("/generate", "/v1/completions")
ACCESS_LINE = re.compile(r'"POST (/generate|/v1/completions) HTTP/1\.1" 200')


class Server:
    def __init__(self, spec, process):
        self.name, self.port, self.log_path = spec["name"], spec["port"], spec["log_path"]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = process

    def log(self):
        with open(self.log_path, errors="replace") as handle:
            return handle.read()

    def requests_served(self):
        """Generation requests whose answer has started (warmup included)."""
        return len(ACCESS_LINE.findall(self.log()))


def stream(port, route, tokens, outcomes, api_key=None, model="default"):
    """One streaming request; appends (status, ended with [DONE], route) to ``outcomes``."""
    if route == "/generate":
        body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": tokens}, "stream": True}
    else:  # sglang-router rejects an OpenAI request without "model" (422) and serves any value; smg routes by it:
        # 404 model_not_found unless it names a served model (the simulator serves its model path).
        body = {"model": model, "prompt": "The capital of France is", "max_tokens": tokens, "stream": True}
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", route, json.dumps(body), headers)
        response = connection.getresponse()
        text = response.read().decode()
        outcomes.append((response.status, text.rstrip().endswith("data: [DONE]"), route))
    except (OSError, http.client.HTTPException) as exc:
        outcomes.append((repr(exc), False, route))
    finally:
        connection.close()


def streams(port, count, tokens, model, api_key=None):
    """Start ``count`` streams, alternating /generate and /v1/completions; returns (threads, outcomes)."""
    outcomes = []
    threads = [threading.Thread(target=stream, args=(port, ROUTES[i % 2], tokens, outcomes, api_key, model))
               for i in range(count)]
    for thread in threads:
        thread.start()
    return threads, outcomes


def finish(threads, outcomes):
    for thread in threads:
        thread.join(60)
    return outcomes


@pytest.fixture
def start_servers(make_server, tmp_path, wait_until):
    """``start_servers(count)``: simulated one-GPU servers, ready (health 200); a list of Server."""
    (tmp_path / "logs").mkdir(exist_ok=True)
    started = []

    def start(count):
        servers = []
        for index in range(len(started), len(started) + count):
            spec = make_server(f"gpu{index}", [index], env={"SGLANG_SIM_DECODE_TOKENS_PER_S": str(DECODE_RATE)})
            with open(spec["log_path"], "w") as log:
                process = subprocess.Popen([spec["launch_script"]], stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT)
            server = Server(spec, process)
            started.append(server)
            servers.append(server)
        for server in servers:
            wait_until(lambda server=server: http_status(server.port, "/health")[0] == 200, timeout=20,
                       what=f"{server.name} ready")
        return servers

    return start


def wait_listed(client, wait_until, urls, timeout=15):
    """Wait until the router lists exactly ``urls``, all healthy; returns {url: Worker}."""
    def listed():
        workers = client.workers()
        healthy = {worker.url: worker for worker in workers if worker.state == HEALTHY}
        return healthy if sorted(healthy) == sorted(urls) and len(workers) == len(urls) else None
    return wait_until(listed, timeout=timeout, what=f"the router listing {sorted(urls)} healthy")


def port_of(url):
    return int(url.rsplit(":", 1)[1])


def out_of_rotation(router, client, url):
    """The router routes nothing new to ``url``: 0.3.2 lists it no more, smg lists it draining (or no more)."""
    states = [worker.state for worker in client.find(url)]
    return states == [] if router.kind == "sglang-router" else set(states) <= {DRAINING}


def reached_through_router(router, server, servers):
    """Tiny requests through the router (round_robin) until one reached ``server`` (its access log counts it), at
    most one round over ``servers``: a worker listed ready is back in rotation only once this is true."""
    before = server.requests_served()
    for _attempt in range(len(servers) + 1):
        outcomes = []
        stream(port_of(router.url), "/generate", 1, outcomes)
        assert outcomes[0][:2] == (200, True), outcomes
        if server.requests_served() > before:
            return True
    return False


def test_worker_api_list_add_remove_and_re_add(start_servers, start_router, wait_until):
    a, b, c = start_servers(3)
    router = start_router(a.url, b.url)
    client = RouterClient(router.url, timeout=5)

    wait_listed(client, wait_until, [a.url, b.url])  # --worker-urls are added by a background job
    assert len(client.check()) == 2
    assert client.find(c.url) == [] and not client.is_healthy(c.url)

    started = time.monotonic()
    worker_id = client.add(c.url)
    assert time.monotonic() - started < 1, "POST /workers answers at once; the add runs in the background"
    added = client.wait_healthy(worker_id, timeout=10)
    assert (added.id, added.url, added.state) == (worker_id, c.url, HEALTHY)
    assert client.is_healthy(c.url)
    assert [worker.id for worker in client.find(c.url + "/")] == [worker_id], "any spelling finds it"

    assert reached_through_router(router, c, [a, b, c]), "listed healthy, and a request through the router reached it"

    removed = client.remove(c.url)
    assert [worker.id for worker in removed] == [worker_id]
    assert out_of_rotation(router, client, c.url)
    if router.kind == "smg":  # listed draining for its settle time (5 s), then dropped
        assert [worker.state for worker in client.find(c.url)] == [DRAINING]
        assert client.worker(worker_id).state == DRAINING
    else:
        assert client.worker(worker_id) is None
    assert client.remove(c.url) == [], "removing what is not registered (or drains already) does nothing"

    # smg answers 409 while it drains: the add waits until the gateway dropped it, then adds.
    readded = client.register(c.url, timeout=10)
    assert readded.state == HEALTHY and readded.id != worker_id, "a re-added worker gets a new id"
    assert client.worker(worker_id) is None
    assert reached_through_router(router, c, [a, b, c])
    # Last, because sglang-router 0.3.2 runs a job for this add too, unlisted: a DELETE within ~0.1 s of it
    # is undone by the job, which registers the URL again under a new id.
    # smg answers 409 (WORKER_ALREADY_EXISTS) to it: the client takes the listed id.
    assert client.add(c.url) == readded.id, "adding a registered URL answers with its id"
    assert client.worker(readded.id).state == HEALTHY, "... and leaves it registered and healthy"
    assert sorted(wait_listed(client, wait_until, [a.url, b.url, c.url])) == sorted([a.url, b.url, c.url])

    for server in (a, b, c):
        assert "Traceback" not in server.log(), server.log()[-2000:]
        if router.kind == "sglang-router":  # its registrations probed each server with HTTP/2 (gRPC detection) too
            assert '"PRI %2A HTTP/2.0" 404' in server.log()


def test_failures_are_router_errors_naming_router_call_and_cause(start_servers, start_router):
    (server,) = start_servers(1)
    router = start_router()
    client = RouterClient(router.url, timeout=5)
    nothing_there = f"http://127.0.0.1:{free_port_block(1)}"

    with pytest.raises(RouterError) as caught:
        client.register(nothing_there, timeout=15)
    assert caught.value.call.startswith("waiting for worker ")
    if router.kind == "smg":  # a failed add's id is dropped: no failed job to read
        assert caught.value.cause.startswith("the router no longer knows this id (its add failed")
    else:
        assert caught.value.cause.startswith(f"the router could not add {nothing_there}: Workflow failed at step "
                                             "detect_connection_mode")

    with pytest.raises(RouterError, match=r"still pending after 0\.5 s"):
        client.register(f"http://127.0.0.1:{free_port_block(1)}", timeout=0.5)

    not_a_router = RouterClient(server.url, timeout=5)
    with pytest.raises(RouterError, match=r"checking the router \(GET /workers\): HTTP 404: no worker API at this URL"):
        not_a_router.check()


def test_removed_server_finishes_its_requests_and_gets_no_new_ones(start_servers, start_router, wait_until, model_dir):
    servers = start_servers(3)
    router = start_router(*(server.url for server in servers))
    client = RouterClient(router.url, timeout=5)
    wait_listed(client, wait_until, [server.url for server in servers])
    router_port = port_of(router.url)
    leaving = servers[1]
    before = {server.name: server.requests_served() for server in servers}

    threads, in_flight = streams(router_port, 6, 100, model_dir)  # 2.5 s each, two per server
    wait_until(lambda: all(server.requests_served() - before[server.name] == 2 for server in servers), timeout=10,
               what="two streams under way on every server")
    assert client.remove(leaving.url)
    served_by_leaving = leaving.requests_served()
    after_removal = finish(*streams(router_port, 6, 4, model_dir))

    assert sorted(finish(threads, in_flight)) == sorted((200, True, route) for route in ROUTES * 3), in_flight
    assert all(outcome[:2] == (200, True) for outcome in after_removal), after_removal
    assert leaving.requests_served() == served_by_leaving, "no new request reached the removed server"
    assert sum(server.requests_served() - before[server.name] for server in servers) == 12


def test_draining_server_gets_requests_until_its_health_checks_fail(start_servers, start_router, wait_until):
    """Why the relaunch removes a server before stopping it: SIGTERM alone leaves it in the router for a while."""
    servers = start_servers(3)
    router = start_router(*(server.url for server in servers))
    client = RouterClient(router.url, timeout=5)
    wait_listed(client, wait_until, [server.url for server in servers])
    draining = servers[2]
    long_one = []
    direct = threading.Thread(target=stream, args=(draining.port, "/generate", 200, long_one))  # 5 s
    direct.start()
    wait_until(lambda: draining.requests_served() == 2, timeout=5, what="the long stream under way")  # + warmup

    draining.process.send_signal(signal.SIGTERM)  # the launch script exec'ed the simulator: this is its pid
    signalled = time.monotonic()
    during, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            stream(port_of(router.url), "/generate", 4, during)
            time.sleep(0.1)

    loader = threading.Thread(target=load)
    loader.start()
    wait_until(lambda: not client.is_healthy(draining.url), timeout=10,
               what="the router marking the draining server unhealthy")
    judged_after = time.monotonic() - signalled
    time.sleep(0.3)  # a request routed just before the verdict has started by now
    served_when_judged = draining.requests_served()
    time.sleep(1.5)
    stop.set()
    loader.join(30)
    direct.join(30)

    assert "Health check request received during shutdown. Returning 503." in draining.log()
    assert 2 <= judged_after < 8, f"unhealthy after {judged_after:.1f} s: 3 failed checks at 1 s intervals"
    assert served_when_judged > 2, "the router sent new requests to the draining server until it judged it unhealthy"
    assert draining.requests_served() == served_when_judged, "... and none after"
    assert all(outcome[:2] == (200, True) for outcome in during + long_one), during + long_one
    # The drain ends with the last request; the router keeps the dead server listed (unhealthy) until removed.
    wait_until(lambda: draining.process.poll() is not None, timeout=10, what="the drained server exiting")
    assert "Remaining number of requests 0" in draining.log()
    assert [worker.state for worker in client.find(draining.url)] == ["unhealthy"]
    assert client.remove(draining.url) and out_of_rotation(router, client, draining.url)


def test_router_api_key(start_servers, start_router, wait_until, model_dir):
    (server,) = start_servers(1)
    router = start_router(server.url, extra=["--api-key", "router-s3cret"])

    for client, cause in ((RouterClient(router.url), "the router wants a key"),
                          (RouterClient(router.url, api_key="wrong-s3cret"), "the router refused the key")):
        with pytest.raises(RouterError, match=cause) as caught:
            client.check()
        assert caught.value.status == 401 and "s3cret" not in str(caught.value)

    client = RouterClient(router.url, api_key="router-s3cret")
    wait_listed(client, wait_until, [server.url])
    outcomes = finish(*streams(port_of(router.url), 2, 4, model_dir, api_key="router-s3cret"))
    assert [outcome[:2] for outcome in outcomes] == [(200, True)] * 2
    assert [outcome[0] for outcome in finish(*streams(port_of(router.url), 1, 4, model_dir))] == [401]
    assert client.remove(server.url) and out_of_rotation(router, client, server.url)
    assert client.register(server.url, timeout=10).state == HEALTHY
