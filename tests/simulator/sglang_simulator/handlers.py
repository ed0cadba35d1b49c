"""The HTTP side, as a FastAPI app behind uvicorn looks on the wire (HTTP/1.1, its Server header, its access
lines and error bodies): the API of node 0 (make_handler: health, /ready from v0.5.23 (like /health, no API key
needed here), model and server info, /v1/models, /v1/loads, /metrics, pause and continue, the generation routes,
streams as server-sent events) and the dummy health server of a node of rank >= 1 (make_dummy_health_handler)."""

import http.server
import json
import sys

from .log import timestamp, write_line
from .routes import GENERATION_ROUTES, RequestError, generation_reply, stream_renderer


def handle_http_error(httpd, request, client_address):
    # A client that went away is not the server's error: uvicorn logs no traceback for it (and a traceback in
    # the log reads as a crash).
    if not isinstance(sys.exc_info()[1], OSError):
        http.server.ThreadingHTTPServer.handle_error(httpd, request, client_address)


METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class UvicornHandler(http.server.BaseHTTPRequestHandler):
    """What a FastAPI app behind uvicorn looks like on the wire: HTTP/1.1, its Server header, JSON replies."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, fmt, *args):
        pass  # uvicorn's access lines, where it writes them, come from send_response

    def read_body(self):
        """The request body, by Content-Length or chunked (h11 reads both; smg streams a body it forwards chunked
        when its retries are off, with no Content-Length)."""
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""
        chunks = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # the trailer section, up to its empty line
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()  # the CRLF after each chunk

    def reply(self, code, body=b"", content_type="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def make_dummy_health_handler(enable_metrics):
    """launch_dummy_health_check_server's app (utils/common.py): GET /ping, /health and /health_generate answer
    200 always, /metrics only with --enable-metrics (empty: no scheduler of this node exports), FastAPI's 404 and
    405 otherwise; uvicorn runs it at log level warning, so no access lines."""
    routes = {"/ping", "/health", "/health_generate"} | ({"/metrics"} if enable_metrics else set())

    class DummyHealthHandler(UvicornHandler):
        def route(self):
            path = self.path.split("?")[0]
            self.read_body()
            if path not in routes:
                return self.reply(404, {"detail": "Not Found"})
            if self.command != "GET":
                return self.reply(405, {"detail": "Method Not Allowed"})
            if path == "/metrics":
                return self.reply(200, "", METRICS_CONTENT_TYPE)
            return self.reply(200)

        do_GET = do_POST = do_PUT = do_DELETE = route

    return DummyHealthHandler


def make_handler(server):
    class Handler(UvicornHandler):
        def parse_request(self):
            # The router's connection detection opens two gRPC (HTTP/2) connections to the HTTP port beside its
            # GET /health. uvicorn (h11) takes their "PRI * HTTP/2.0" line for a request (a 404 and its access
            # line) and the HTTP/2 frames after it for an invalid request.
            if self.raw_requestline.startswith(b"PRI * HTTP/2.0"):
                self.requestline = self.raw_requestline.decode("latin-1").rstrip("\r\n")
                self.command, self.path, self.request_version = "PRI", "%2A", "HTTP/2.0"
                self.close_connection = True
                self.reply(404, {"detail": "Not Found"})
                server.log.info("WARNING:  Invalid HTTP request received.")
                return False
            return super().parse_request()

        def send_response(self, code, message=None):
            super().send_response(code, message)
            phrase = http.server.BaseHTTPRequestHandler.responses.get(code, ("",))[0]
            if server.log.quiet:
                return
            if not hasattr(self, "path"):  # a request line that does not parse: uvicorn logs no access line for it
                server.log.info("WARNING:  Invalid HTTP request received.")
                return
            host, port = self.client_address[:2]
            write_line(1, f'[{timestamp()}] INFO:     {host}:{port} - "{self.command} {self.path} {self.request_version}" '
                          f"{code} {phrase}\n")

        def authorized(self):
            if not server.args.api_key or self.path.startswith(("/health", "/metrics", "/ready")):
                return True
            return self.headers.get("Authorization") == "Bearer " + server.args.api_key

        def do_GET(self):
            self.route()

        def do_POST(self):
            self.route()

        def route(self):
            path = self.path.split("?")[0]
            body = self.read_body()
            if not self.authorized():
                return self.reply(401, {"error": "Unauthorized"})
            if path in ("/health", "/health_generate"):
                if server.gracefully_exit:
                    server.log.info("Health check request received during shutdown. Returning 503.")
                    return self.reply(503)
                return self.reply(200 if server.status == "Up" else 503)
            if path == "/ready" and server.sim.new and self.command == "GET":
                return self.reply(200 if server.ready() else 503)
            if path in ("/pause_generation", "/continue_generation") and self.command == "POST":
                server.paused = path == "/pause_generation"
                return self.reply(200)
            if path in ("/model_info", "/get_model_info") and self.command == "GET":
                if path == "/get_model_info" and server.sim.new:
                    server.log.info("Endpoint '/get_model_info' is deprecated and will be removed in a future "
                                    "version. Please use '/model_info' instead.")
                return self.reply(200, server.model_info())
            if path in ("/server_info", "/get_server_info") and self.command == "GET":
                return self.reply(200, server.server_info())
            if path == "/v1/models" and self.command == "GET":
                name = server.args.served_model_name
                return self.reply(200, {"object": "list", "data": [{
                    "id": name, "object": "model", "created": int(server.start_time), "owned_by": "sglang",
                    "root": name, "max_model_len": server.scheduler_info["context_len"]}]})
            if path == "/v1/loads" and self.command == "GET":  # SGLang PR #16976 (January 2026), before 0.5.9
                return self.reply(200, server.loads())
            if path == "/metrics" and server.args.enable_metrics and self.command == "GET":
                return self.reply(200, server.metrics(), METRICS_CONTENT_TYPE)
            if path in GENERATION_ROUTES and self.command == "POST":
                return self.generation(path, body)
            return self.reply(404, {"detail": "Not Found"})

        def generation(self, path, raw):
            parse = GENERATION_ROUTES[path][0]
            try:
                body = json.loads(raw or b"{}")
            except ValueError as exc:
                return self.reply_error(path, f"invalid JSON body: {exc}")
            if server.status == "Starting":
                server.sim.sleep(1.0)  # the warmup request compiles kernels first
            try:
                if not isinstance(body, dict):
                    raise RequestError("The request body must be a JSON object.")
                prompts, limit = parse(body)
                if body.get("stream") and len(prompts) > 1:
                    raise RequestError("The simulator streams one prompt per request, not a batch.")
                requests = server.serving.submit(prompts, limit)
            except RequestError as exc:
                return self.reply_error(path, str(exc))
            try:
                if body.get("stream"):
                    self.stream(requests[0], stream_renderer(path, body, requests[0]))
                else:
                    for request in requests:
                        server.serving.wait(request)
                    self.reply(200, generation_reply(path, body, requests))
            finally:
                for request in requests:
                    server.serving.answered(request)

        def reply_error(self, path, message):
            if path == "/generate":
                return self.reply(400, {"error": {"message": message}})
            return self.reply(400, {"object": "error", "message": message, "type": "BadRequestError", "param": None,
                                    "code": 400})

        def stream(self, request, render):
            """Server-sent events in chunked transfer encoding (so the connection stays open), then [DONE]."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.connection.settimeout(2)  # a client that stops reading must not stall the other streams
            if server.serving.stream(request, render, self.write_events):
                self.connection.settimeout(None)
            else:  # the client went away: SGLang aborts the request
                self.close_connection = True

        def write_events(self, events, finished):
            """One HTTP chunk per event, as uvicorn sends them, in one write."""
            messages = [b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n" for event in events]
            if finished:
                messages += [b"data: [DONE]\n\n", b""]  # the empty chunk ends the body
            self.wfile.write(b"".join(b"%x\r\n%s\r\n" % (len(message), message) for message in messages))

    return Handler
