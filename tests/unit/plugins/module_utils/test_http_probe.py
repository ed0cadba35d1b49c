"""The HTTP client of the health checks, server_info and the router: no redirect followed with the key, and a total
deadline for a whole answer (real sockets on 127.0.0.1, no mocks)."""

import http.server
import shutil
import ssl
import subprocess
import threading
import time

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.http_probe import http_get
from ansible_collections.gpuops.sglang.plugins.module_utils.router import (
    RouterClient,
    RouterError,
)


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Redirects /go to the other server (``server.target``); records every Authorization header it is sent."""

    def do_GET(self):
        self.server.authorizations.append(self.headers.get("Authorization"))
        if self.path.startswith("/go") and self.server.target:
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{self.server.target}/stolen")
            self.end_headers()
            return
        if self.path == "/trickle":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _byte in range(100):  # one byte every 0.1 s: each read is quick, the whole answer is not
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.1)
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"[]")

    def log_message(self, *_args):
        pass


@pytest.fixture
def servers():
    started = []

    def start(target=None):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
        server.authorizations, server.target = [], target
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def test_a_redirect_is_an_answer_never_followed_with_the_key(servers):
    elsewhere = servers()
    redirecting = servers(target=elsewhere.server_address[1])
    status, _body, error = http_get(f"http://127.0.0.1:{redirecting.server_address[1]}/go", 5, api_key="sk-key")
    assert (status, error) == (302, None)
    assert elsewhere.authorizations == [], "the key went nowhere else"

    client = RouterClient(f"http://127.0.0.1:{redirecting.server_address[1]}", api_key="sk-key", timeout=5)
    client.url += "/go?"  # every call of the client is then redirected
    with pytest.raises(RouterError, match=r"HTTP 302|302"):
        client.workers()
    assert elsewhere.authorizations == []


def test_an_answer_that_trickles_in_ends_at_the_total_deadline(servers):
    slow = servers()
    started = time.monotonic()
    status, _body, error = http_get(f"http://127.0.0.1:{slow.server_address[1]}/trickle", 1)
    assert status is None and error == "no answer within 1 s"
    assert time.monotonic() - started < 5, "not 10 s of trickle"


def test_an_https_url_is_spoken_to_over_tls_and_other_schemes_are_refused(servers):
    """The TLS handler is built only for an https URL (a router's): it must still be there for one."""
    plain = servers()
    client = RouterClient(f"https://127.0.0.1:{plain.server_address[1]}", timeout=5)
    with pytest.raises(RouterError, match=r"(?i)ssl|tls|wrong version"):
        client.workers()
    assert plain.authorizations == [], "a TLS handshake, not a plain GET"
    status, _body, error = http_get(f"ftp://127.0.0.1:{plain.server_address[1]}/", 5)
    assert status is None and "unknown url type" in error


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_an_https_router_with_a_certificate_nobody_signed_is_refused(servers, tmp_path):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-keyout", tmp_path / "key.pem", "-out", tmp_path / "cert.pem"], check=True, capture_output=True)
    server = servers()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with pytest.raises(RouterError, match="CERTIFICATE_VERIFY_FAILED"):
        RouterClient(f"https://127.0.0.1:{server.server_address[1]}", api_key="sk-key", timeout=5).workers()
    assert server.authorizations == [], "the key was never sent"


def test_proxies_from_the_environment_never_see_a_probe(servers, monkeypatch):
    proxy, target = servers(), servers()
    for variable in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.setenv(variable, f"http://127.0.0.1:{proxy.server_address[1]}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert http_get(f"http://127.0.0.1:{target.server_address[1]}/health", 5, api_key="sk-key")[0] == 200
    with pytest.raises(RouterError, match="unexpected answer"):  # the recorder's [] is no worker list: it answered
        RouterClient(f"http://127.0.0.1:{target.server_address[1]}", api_key="sk-key", timeout=5).workers()
    assert proxy.authorizations == [] and target.authorizations == ["Bearer sk-key"] * 2
