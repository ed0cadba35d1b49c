# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Client of the SGLang router's worker API, as sglang-router 0.3.2 defines it (stdlib only, Python >= 3.9).

The router (``python -m sglang_router.launch_router``) keeps a registry of workers - the SGLang servers it
routes requests to - behind a REST API. What the real binary does (docs/router.md has the observations):

- ``GET /workers`` lists the registered workers (``id``, ``url``, ``is_healthy``, ...);
- ``POST /workers {"url": ...}`` answers 202 at once with the worker's id and queues an add job. The job
  probes the worker's ``/health`` (backoff 1, 2, 3, 4, 5, 5, ... s, for up to the router's
  ``--worker-startup-timeout-secs``), reads its ``/server_info`` and ``/model_info`` and registers it
  healthy: it takes traffic at once. Until then it is not listed; ``GET /workers/{id}`` shows a placeholder
  (``connection_mode: "unknown"``) whose ``job_status`` is ``processing``, then ``failed`` with the reason;
- ``DELETE /workers/{id}`` answers 202 and takes the worker out of routing within milliseconds; requests in
  flight on it finish. A pending add cannot be cancelled this way (the removal job fails: not found);
- ids are UUIDs and a worker removed and added again gets a new one, so a worker is looked up by its URL;
- URLs are compared as strings: ``http://h:1/`` and ``http://h:1`` register twice (double share of traffic).
  ``find`` and ``remove`` therefore treat every spelling of a URL (case of scheme and host, a trailing
  slash) as the same server;
- with ``--api-key`` (and no ``--control-plane-api-keys``) every ``/workers`` call needs that key as Bearer;
  with ``--control-plane-api-keys`` it needs an admin one of those.

The parsers (``parse_worker``, ``parse_workers``, ``parse_accepted``, ``failure_cause``) are pure, for tests on
captured answers. Every failure is a ``RouterError`` whose message names the router, the call and the cause
(unreachable, unauthorized, unknown worker, ...), never the key.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from ansible_collections.gpuops.sglang.plugins.module_utils.http_probe import (
    OPENER,
    Deadline,
    read_body,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_text

# Every worker API call answers within milliseconds; a router that takes longer is in trouble.
DEFAULT_TIMEOUT = 10.0
# How often a wait re-reads the registry; a removal shows within milliseconds, an add within a second or two.
POLL_INTERVAL = 0.25
# A router error body is one line; more is not worth putting in a message.
MAX_CAUSE_CHARS = 300
MAX_BODY_BYTES = 4 << 20


HEALTHY, UNHEALTHY, PENDING, FAILED, UNKNOWN = "healthy", "unhealthy", "pending", "failed", "unknown"


class UnexpectedAnswer(ValueError):
    """An answer that is not what sglang-router 0.3.2 sends (a parser's complaint)."""


class RouterError(Exception):
    """A worker API call that failed: ``router_url``, ``call`` (what was asked), ``cause``, ``status`` (HTTP or None)."""

    def __init__(self, router_url, call, cause, status=None):
        self.router_url, self.call, self.cause, self.status = router_url, call, cause, status
        super().__init__(f"sglang router {router_url}: {call}: {cause}")


@dataclass(frozen=True)
class Worker:
    """One entry of the router's registry, or the placeholder of an add job still running or failed."""

    id: str
    url: str
    registered: bool  # in the registry (routed to while healthy), not only an add job
    healthy: bool
    model_id: str
    job_type: str | None = None  # the last job the router shows for this id: "AddWorker", "RemoveWorker"
    job_status: str | None = None  # "processing", "failed", ...
    job_message: str | None = None

    @property
    def state(self):
        """healthy | unhealthy (registered, not routed to) | pending (add job running) | failed (add job) | unknown.

        A registered worker's state is its health, whatever the job says: adding a URL already registered
        answers with the existing id and shows a failed job ("already exists") beside the healthy worker.
        """
        if self.registered:
            return HEALTHY if self.healthy else UNHEALTHY
        if self.job_status == "processing":
            return PENDING
        if self.job_type == "AddWorker" and self.job_status == "failed":
            return FAILED
        return UNKNOWN


def normalize_url(url):
    """The URL without a trailing slash, its scheme and host in lower case: one spelling per server."""
    parts = urllib.parse.urlsplit(url.strip())
    return urllib.parse.urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"),
                                    parts.query, parts.fragment))


def check_url(url, what):
    """``url`` normalized, or ValueError naming ``what`` when it is no http(s)://host[:port] URL."""
    if not isinstance(url, str):
        raise TypeError(f"{what} must be a URL string like http://10.0.0.5:30000, not {type(url).__name__}")
    normalized = normalize_url(url)
    parts = urllib.parse.urlsplit(normalized)
    if "@" in parts.netloc:
        # A URL is shown in messages and records: the key goes in its own no_log option, never inside the URL.
        raise ValueError(f"{what} must not carry credentials (user:password@host): give the router's API key as its "
                         "own option (sglang_router_api_key, router_api_key) instead")
    try:
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is no number, or out of range
        valid = False
    if not valid:
        raise ValueError(f"{what} {url!r} is not an http(s)://host[:port] URL (e.g. http://10.0.0.5:30000)")
    return normalized


# --- parsers of the router's answers (pure) ---------------------------------------------------------------


def parse_worker(document):
    """A ``Worker`` from one worker object (an entry of ``GET /workers`` or ``GET /workers/{id}``).

    UnexpectedAnswer when the object lacks what 0.3.2 sends (``id``, ``url``, ``is_healthy``).
    """
    if not isinstance(document, dict):
        raise UnexpectedAnswer(f"a worker is a JSON object, got {type(document).__name__}")
    for field, kind in (("id", str), ("url", str), ("is_healthy", bool)):
        if not isinstance(document.get(field), kind):
            raise UnexpectedAnswer(f"a worker object has no {kind.__name__} {field!r}: {_excerpt(document)}")
    job = document.get("job_status") if isinstance(document.get("job_status"), dict) else {}
    # The placeholder of an add job has not passed the first registration step, connection detection.
    registered = document.get("connection_mode", "unknown") != "unknown"
    return Worker(id=document["id"], url=document["url"], registered=registered, healthy=document["is_healthy"],
                  model_id=str(document.get("model_id", "")), job_type=job.get("job_type"),
                  job_status=job.get("status"), job_message=job.get("message"))


def parse_workers(document):
    """The registered workers of a ``GET /workers`` answer (``{"workers": [...], "total": N, ...}``)."""
    if not isinstance(document, dict) or not isinstance(document.get("workers"), list):
        raise UnexpectedAnswer(f"expected {{\"workers\": [...]}}, got {_excerpt(document)}")
    return [parse_worker(entry) for entry in document["workers"]]


def parse_accepted(document):
    """The worker id of a 202 answer to ``POST /workers`` or ``DELETE /workers/{id}``."""
    if not isinstance(document, dict) or document.get("status") != "accepted" \
            or not isinstance(document.get("worker_id"), str):
        raise UnexpectedAnswer(f"expected {{\"status\": \"accepted\", \"worker_id\": ...}}, got {_excerpt(document)}")
    return document["worker_id"]


def failure_cause(status, body, api_key_given):
    """What an HTTP error answer of the router means, with the remedy when there is one.

    The router answers errors as JSON (``{"error": "...", "code": "..."}``), as plain text (422 "missing field
    `url`", 403 "Admin role required ...") or with an empty body (401).
    """
    text = _error_text(body)
    if status == 401:
        if api_key_given:
            return ("HTTP 401 unauthorized: the router refused the key; router_api_key must be the router's "
                    "--api-key, or an admin key of its --control-plane-api-keys when it has those")
        return ("HTTP 401 unauthorized: the router wants a key; set router_api_key to its --api-key, or to an "
                "admin key of its --control-plane-api-keys when it has those")
    if status == 403:
        return f"HTTP 403 forbidden ({text or 'no reason given'}): router_api_key must be a key with role admin"
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"


def _error_text(body):
    body = (body or "").strip()
    try:
        document = json.loads(body)
    except ValueError:
        return body[:MAX_CAUSE_CHARS]
    error = document.get("error") if isinstance(document, dict) else None
    if isinstance(error, dict):  # the data plane's {"error": {"type", "code", "message"}}
        error = error.get("message")
    return str(error)[:MAX_CAUSE_CHARS] if error else body[:MAX_CAUSE_CHARS]


def _checked(router_url, url, what):
    try:
        return check_url(url, what)
    except (TypeError, ValueError) as exc:
        raise RouterError(router_url, f"checking {what}", str(exc)) from None


def _excerpt(document):
    return json.dumps(document)[:MAX_CAUSE_CHARS]


# --- the client ---------------------------------------------------------------------------------------------


class RouterClient:
    """Calls of one router's worker API. ``timeout`` bounds each HTTP call, in seconds."""

    def __init__(self, url, api_key=None, timeout=DEFAULT_TIMEOUT):
        self.url = _checked(url, url, "router_url")
        self._api_key = api_key or None
        self.timeout = timeout

    def check(self):
        """The registered workers, or RouterError: reachable, a 0.3 worker API, and the key accepted.

        One ``GET /workers``, which needs the same key as adding and removing: call it before anything is
        stopped, so that a router that cannot be used stops a relaunch while every server still serves.
        """
        return self._workers("checking the router")

    def workers(self):
        """Every registered worker (healthy or not); add jobs still running are not among them."""
        return self._workers("listing workers")

    def worker(self, worker_id):
        """The worker or add-job placeholder with this id, or None when the router knows no such id."""
        path = "/workers/" + urllib.parse.quote(worker_id, safe="")
        status, document = self._call("GET", path, f"reading worker {worker_id}", missing_ok=True)
        return None if status == 404 else self._parse(parse_worker, document, f"GET {path}")

    def find(self, worker_url):
        """The registered entries of the server at ``worker_url``, any spelling of it; [] when it is not registered."""
        wanted = _checked(self.url, worker_url, "worker URL")
        return [worker for worker in self.workers() if normalize_url(worker.url) == wanted]

    def is_healthy(self, worker_url):
        """The router lists the server at ``worker_url`` as healthy (so it routes requests to it)."""
        return any(worker.healthy for worker in self.find(worker_url))

    def add(self, worker_url):
        """Queue the registration of ``worker_url``; returns the worker's id (``wait_healthy`` follows the job).

        The router answers at once. A URL already registered keeps its id and stays registered.
        """
        url = _checked(self.url, worker_url, "worker URL")
        _status, document = self._call("POST", "/workers", f"adding {url}", body={"url": url})
        return self._parse(parse_accepted, document, "POST /workers")

    def wait_healthy(self, worker_id, timeout):
        """Follow an add job until the worker is registered and healthy; returns it.

        RouterError when the job failed (the router's reason), when the id vanished, or after ``timeout``
        seconds (the last state seen). The router's own job goes on after our timeout, up to its
        ``--worker-startup-timeout-secs``: a worker that comes up later is still added.
        """
        deadline = time.monotonic() + timeout
        call = f"waiting for worker {worker_id} to be healthy"
        while True:
            worker = self.worker(worker_id)
            if worker is None:
                raise RouterError(self.url, call, "the router no longer knows this id (removed meanwhile?)")
            if worker.state == HEALTHY:
                return worker
            if worker.state == FAILED:
                raise RouterError(self.url, call, f"the router could not add {worker.url}: {worker.job_message}")
            if time.monotonic() >= deadline:
                raise RouterError(self.url, call, f"still {worker.state} after {timeout:g} s ({worker.url})")
            time.sleep(POLL_INTERVAL)

    def register(self, worker_url, timeout):
        """``add`` then ``wait_healthy``: the server takes the router's traffic when this returns its ``Worker``."""
        return self.wait_healthy(self.add(worker_url), timeout)

    def remove(self, worker_url, timeout=DEFAULT_TIMEOUT):
        """Take every entry of the server at ``worker_url`` out of the router; returns those removed ([] if none).

        Returns once ``GET /workers`` no longer lists any of them: from then on no new request goes to the
        server, while those in flight on it finish. RouterError when one is still listed after ``timeout``.
        """
        removed = self.find(worker_url)
        for worker in removed:
            # 404: removed meanwhile, which is what we want.
            self._call("DELETE", "/workers/" + urllib.parse.quote(worker.id, safe=""), f"removing {worker.url}",
                       missing_ok=True)
        deadline = time.monotonic() + timeout
        while removed and self.find(worker_url):
            if time.monotonic() >= deadline:
                raise RouterError(self.url, f"removing {worker_url}", f"still listed after {timeout:g} s")
            time.sleep(POLL_INTERVAL)
        return removed

    # HTTP ---------------------------------------------------------------------------------------------------

    def _workers(self, call):
        _status, document = self._call("GET", "/workers", call)
        return self._parse(parse_workers, document, "GET /workers")

    def _parse(self, parser, document, call):
        try:
            return parser(document)
        except UnexpectedAnswer as exc:
            raise RouterError(self.url, call, f"unexpected answer (not sglang-router 0.3's worker API?): {exc}") \
                from None

    def _call(self, method, path, call, body=None, missing_ok=False):
        """``(status, JSON document)`` of a 2xx answer (or of a 404 with ``missing_ok``); else RouterError."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        what = f"{call} ({method} {path})"
        deadline = time.monotonic() + self.timeout
        try:
            with OPENER.open(request, timeout=self.timeout) as response:
                status, text = response.status, read_body(response, MAX_BODY_BYTES, deadline).decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            with exc:
                status, text = exc.code, read_body(exc, MAX_BODY_BYTES, deadline).decode("utf-8", "replace")
            if not (status == 404 and missing_ok):
                raise self._error(what, self._http_cause(status, text, path), status) from None
        except urllib.error.URLError as exc:
            raise self._error(what, f"cannot connect: {exc.reason}; is the router running there and reachable "
                              "from this host?") from None
        except (socket.timeout, TimeoutError, Deadline):
            raise self._error(what, f"no answer within {self.timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise self._error(what, f"{exc or type(exc).__name__} (is this an HTTP server?)") from None
        try:
            return status, json.loads(text)
        except ValueError:
            raise self._error(what, f"HTTP {status} with a body that is not JSON: {text[:MAX_CAUSE_CHARS]!r} (is "
                              "this the sglang router?)", status) from None

    def _http_cause(self, status, text, path):
        if status == 404 and path == "/workers":
            return ("HTTP 404: no worker API at this URL; router_url must point at sglang-router >= 0.3 (not at an "
                    "SGLang server, nor an older router with /add_worker)")
        return failure_cause(status, text, api_key_given=self._api_key is not None)

    def _error(self, call, cause, status=None):
        hidden = [self._api_key] if self._api_key else []
        return RouterError(self.url, scrub_text(call, hidden), scrub_text(cause, hidden), status)
