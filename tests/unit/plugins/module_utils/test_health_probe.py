"""readiness.HealthProbe against a real HTTP server: /ready (SGLang 0.5.23) before the generating health path."""

import http.server
import threading
import time

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.readiness import HealthProbe


class Server:
    """Answers ``routes[path]`` (a status) and counts the requests per path; 404 elsewhere."""

    def __init__(self, routes):
        self.routes, self.requests = routes, []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                owner.requests.append(self.path)
                status = owner.routes.get(self.path, 404)
                body = b'{"version": "0.5.23"}' if status == 200 else b""
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    servers = []
    yield lambda routes: servers.append(Server(routes)) or servers[-1]
    for each in servers:
        each.close()


def answer_of(probe):
    probe.start(time.time())
    deadline = time.time() + 10
    while not probe.has_answer and time.time() < deadline:
        time.sleep(0.01)
    return probe.take_answer()


def test_a_server_not_ready_by_its_own_word_is_not_asked_to_generate(server):
    sglang = server({"/ready": 503, "/health_generate": 200})
    probe = HealthProbe(sglang.url, "/health_generate", None, 5)
    assert answer_of(probe)["status"] == 503
    assert sglang.requests == ["/ready"]


def test_once_ready_the_health_path_is_still_the_proof(server):
    sglang = server({"/ready": 200, "/health_generate": 200, "/get_server_info": 200})
    answer = answer_of(HealthProbe(sglang.url, "/health_generate", None, 5))
    assert answer["status"] == 200 and answer["server_info"] == {"version": "0.5.23"}
    assert sglang.requests == ["/ready", "/health_generate", "/get_server_info"]


def test_a_version_without_ready_is_asked_the_health_path_and_ready_only_once(server):
    sglang = server({"/health_generate": 503})
    probe = HealthProbe(sglang.url, "/health_generate", None, 5)
    assert answer_of(probe)["status"] == 503
    assert answer_of(probe)["status"] == 503
    assert probe.has_ready is False
    assert sglang.requests == ["/ready", "/health_generate", "/health_generate"]


def test_a_refused_connection_is_still_starting():
    answer = answer_of(HealthProbe("http://127.0.0.1:9", "/health_generate", None, 2))
    assert answer["status"] is None and answer["error"]
