"""What server_info selects of a server's HTTP answers (a real socket on 127.0.0.1, no mocks)."""

import http.server
import json
import threading
from pathlib import Path

import pytest
from ansible_collections.gpuops.sglang.plugins.module_utils.capacity_snapshot import (
    snapshot_of,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_facts import (
    http_facts,
)

METRICS = (Path(__file__).resolve().parents[2] / "fixtures" / "metrics" / "sglang_v0.5.9_tp1.txt").read_bytes()
SERVER_INFO = {"version": "0.5.9", "disable_radix_cache": True, "disable_overlap_schedule": True,
               "internal_states": [{"effective_max_running_requests_per_dp": 32, "max_mamba_cache_size": 160}]}


class _SGLang(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/health": b"", "/get_server_info": json.dumps(SERVER_INFO).encode(), "/metrics": METRICS}[self.path]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


@pytest.fixture
def sglang_port():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SGLang)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_capacity_verdict_of_a_status_run_knows_radix_cache_and_overlap_schedule_from_get_server_info(
        sglang_port):
    facts = http_facts("127.0.0.1", sglang_port, {"probe_timeout": 5, "api_key": None, "health_path": "/health"})
    assert facts["server_info"]["effective_max_running_requests_per_dp"] == 32
    snapshot = snapshot_of(facts["metrics"], facts["server_info"])  # as server_facts.describe_servers does
    assert (snapshot.radix_cache_disabled, snapshot.overlap_disabled) == (True, True)
