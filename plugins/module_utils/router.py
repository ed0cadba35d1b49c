# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Client of the SGLang router's worker API: sglang-router 0.3.2 and smg 1.13 (stdlib only, Python >= 3.9).

The router (``python -m sglang_router.launch_router``, or the Shepherd Model Gateway ``smg launch`` that replaced
it) keeps a registry of workers - the SGLang servers it routes requests to - behind a REST API. What the real
binaries do (docs/router.md has the observations; router_answers.py parses the answers and says what differs):

- ``GET /workers`` lists the registered workers (``id``, ``url``, ``is_healthy``, smg also ``status``);
- ``POST /workers {"url": ...}`` answers 202 at once with the worker's id and queues an add job. The job
  probes the worker (0.3.2: backoff 1, 2, 3, 4, 5, 5, ... s; smg: every ``--worker-startup-check-interval``,
  30 s by default) for up to ``--worker-startup-timeout-secs``, reads its ``/server_info`` and ``/model_info``
  and registers it healthy (smg: ``ready``): it takes traffic at once. Until then it is not listed;
  ``GET /workers/{id}`` shows a placeholder (0.3.2: ``connection_mode: "unknown"``, smg: ``status: pending``)
  whose ``job_status`` is ``processing``; a failed add is a ``failed`` job in 0.3.2, an unknown id in smg.
  smg answers 409 to a URL it lists (also while it drains) or adds already; 0.3.2 answers 202 with its id;
- ``DELETE /workers/{id}`` answers 202. 0.3.2 drops the worker within milliseconds; smg lists it ``draining``
  for its settle time (5 s), then drops it. Either way no new request goes to it from then on and requests in
  flight on it finish, also past its removal: the server is out of the router once it is draining or gone.
  A second ``DELETE`` of a draining smg worker drops it at once, so ``remove`` does not send one;
- ids are UUIDs and a worker removed and added again gets a new one, so a worker is looked up by its URL;
- URLs are compared as strings: ``http://h:1/`` and ``http://h:1`` register twice (double share of traffic).
  ``find`` and ``remove`` therefore treat every spelling of a URL (case of scheme and host, a trailing
  slash) as the same server;
- with ``--api-key`` (and no ``--control-plane-api-keys``) every ``/workers`` call needs that key as Bearer;
  with ``--control-plane-api-keys`` it needs an admin one of those.

Every failure is a ``RouterError`` whose message names the router, the call and the cause (unreachable,
unauthorized, unknown worker, ...), never the key.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from ansible_collections.gpuops.sglang.plugins.module_utils.http_probe import (
    Deadline,
    open_request,
    read_body,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.router_answers import (
    ALREADY_EXISTS,
    DRAINING,
    FAILED,
    HEALTHY,
    MAX_CAUSE_CHARS,
    UnexpectedAnswer,
    check_url,
    failure_cause,
    normalize_url,
    parse_accepted,
    parse_conflict,
    parse_worker,
    parse_workers,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_text

# Every worker API call answers within milliseconds; a router that takes longer is in trouble.
DEFAULT_TIMEOUT = 10.0
# How often a wait re-reads the registry; a removal shows within milliseconds, an add within a second or two.
POLL_INTERVAL = 0.25
MAX_BODY_BYTES = 4 << 20
# How long an add waits for smg to drop a draining entry of the URL first (its settle time is 5 s by default).
DRAINING_WAIT = 30.0


class RouterError(Exception):
    """A worker API call that failed: ``router_url``, ``call`` (what was asked), ``cause``, ``status`` (HTTP or None)."""

    def __init__(self, router_url, call, cause, status=None):
        self.router_url, self.call, self.cause, self.status = router_url, call, cause, status
        super().__init__(f"sglang router {router_url}: {call}: {cause}")


def _checked(router_url, url, what):
    try:
        return check_url(url, what)
    except (TypeError, ValueError) as exc:
        raise RouterError(router_url, f"checking {what}", str(exc)) from None


# --- the client ---------------------------------------------------------------------------------------------


class RouterClient:
    """Calls of one router's worker API. ``timeout`` bounds each HTTP call, in seconds."""

    def __init__(self, url, api_key=None, timeout=DEFAULT_TIMEOUT):
        self.url = _checked(url, url, "router_url")
        self._api_key = api_key or None
        self.timeout = timeout

    def check(self):
        """The registered workers, or RouterError: reachable, a worker API (0.3.2 or smg), and the key accepted.

        One ``GET /workers``, which needs the same key as adding and removing: call it before anything is
        stopped, so that a router that cannot be used stops a relaunch while every server still serves.
        """
        return self._workers("checking the router")

    def workers(self):
        """Every registered worker (healthy or not), not those smg drains out; add jobs still running are not among
        them either."""
        return [worker for worker in self._workers("listing workers") if worker.state != DRAINING]

    def worker(self, worker_id):
        """The worker or add-job placeholder with this id, or None when the router knows no such id."""
        path = "/workers/" + urllib.parse.quote(worker_id, safe="")
        status, document = self._call("GET", path, f"reading worker {worker_id}", missing_ok=True)
        return None if status == 404 else self._parse(parse_worker, document, f"GET {path}")

    def find(self, worker_url):
        """The listed entries of the server at ``worker_url``, any spelling of it, draining ones included; [] when it
        is not listed."""
        wanted = _checked(self.url, worker_url, "worker URL")
        return [worker for worker in self._workers("listing workers") if normalize_url(worker.url) == wanted]

    def is_healthy(self, worker_url):
        """The router lists the server at ``worker_url`` as healthy (so it routes requests to it)."""
        return any(worker.healthy for worker in self.find(worker_url))

    def add(self, worker_url, draining_wait=DRAINING_WAIT):
        """Queue the registration of ``worker_url``; returns the worker's id (``wait_healthy`` follows the job).

        The router answers at once. A URL already registered keeps its id and stays registered (0.3.2: 202 with
        its id; smg: 409, and the id is the listed one). smg refuses a URL it still lists draining (409): the add
        waits up to ``draining_wait`` seconds until the entry is gone, then adds.
        """
        url = _checked(self.url, worker_url, "worker URL")
        call = f"adding {url}"
        deadline = time.monotonic() + draining_wait
        while True:
            status, document = self._call("POST", "/workers", call, body={"url": url}, conflict_ok=True)
            if status != 409:
                return self._parse(parse_accepted, document, "POST /workers")
            code, worker_id = self._parse(parse_conflict, document, "POST /workers")
            exact = [worker.id for worker in self.find(url) if worker.url == url and worker.state != DRAINING]
            if code == ALREADY_EXISTS and not exact:  # draining, or dropped between the POST and the listing
                if time.monotonic() >= deadline:
                    raise RouterError(self.url, call, f"HTTP 409: still draining after {draining_wait:g} s (the "
                                      "router takes a removed worker back only once it dropped it)", 409)
                time.sleep(POLL_INTERVAL)
                continue
            # Registered (wait_healthy checks that it is ready), or an add job of the URL already running.
            if exact or worker_id:
                return exact[0] if exact else worker_id
            raise RouterError(self.url, call, f"HTTP 409 {code} naming no worker id, and none listed for {url}", 409)

    def wait_healthy(self, worker_id, timeout):
        """Follow an add job until the worker is registered and healthy (smg: ``ready``); returns it.

        RouterError when the job failed (the router's reason), when the id vanished (smg drops a failed add),
        when it drains, or after ``timeout`` seconds (the last state seen). The router's own job goes on after
        our timeout, up to its ``--worker-startup-timeout-secs``: a worker that comes up later is still added.
        """
        deadline = time.monotonic() + timeout
        call = f"waiting for worker {worker_id} to be healthy"
        while True:
            worker = self.worker(worker_id)
            if worker is None:
                raise RouterError(self.url, call, "the router no longer knows this id (its add failed - smg drops a "
                                  "failed add - or it was removed meanwhile)")
            if worker.state == HEALTHY:
                return worker
            if worker.state == FAILED:
                raise RouterError(self.url, call, f"the router could not add {worker.url}: {worker.job_message}")
            if worker.state == DRAINING:
                raise RouterError(self.url, call, f"{worker.url} is being removed (draining)")
            if time.monotonic() >= deadline:
                raise RouterError(self.url, call, f"still {worker.state} after {timeout:g} s ({worker.url})")
            time.sleep(POLL_INTERVAL)

    def register(self, worker_url, timeout):
        """``add`` then ``wait_healthy``: the server takes the router's traffic when this returns its ``Worker``."""
        return self.wait_healthy(self.add(worker_url), timeout)

    def remove(self, worker_url, timeout=DEFAULT_TIMEOUT):
        """Take every entry of the server at ``worker_url`` out of the router; returns those removed ([] if none).

        Returns once ``GET /workers`` lists none of them but draining (smg) ones: from then on no new request goes
        to the server, while those in flight on it finish. An entry already draining is someone else's removal,
        neither sent a ``DELETE`` (it would cut smg's settle time short) nor returned. RouterError when one is
        still routed to after ``timeout``.
        """
        removed = [worker for worker in self.find(worker_url) if worker.state != DRAINING]
        for worker in removed:
            # 404: removed meanwhile, which is what we want.
            self._call("DELETE", "/workers/" + urllib.parse.quote(worker.id, safe=""), f"removing {worker.url}",
                       missing_ok=True)
        deadline = time.monotonic() + timeout
        while removed and any(worker.state != DRAINING for worker in self.find(worker_url)):
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
            raise RouterError(self.url, call, f"unexpected answer (not the worker API of sglang-router 0.3 or smg?): {exc}") \
                from None

    def _call(self, method, path, call, body=None, missing_ok=False, conflict_ok=False):
        """``(status, JSON document)`` of a 2xx answer, of a 404 with ``missing_ok``; ``(409, body text)`` with
        ``conflict_ok``; else RouterError."""
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
            with open_request(request, self.timeout) as response:
                status, text = response.status, read_body(response, MAX_BODY_BYTES, deadline).decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            with exc:
                status, text = exc.code, read_body(exc, MAX_BODY_BYTES, deadline).decode("utf-8", "replace")
            if status == 409 and conflict_ok:
                return status, text
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
            return ("HTTP 404: no worker API at this URL; router_url must point at sglang-router >= 0.3 or smg (not at an "
                    "SGLang server, nor an older router with /add_worker)")
        return failure_cause(status, text, api_key_given=self._api_key is not None)

    def _error(self, call, cause, status=None):
        hidden = [self._api_key] if self._api_key else []
        return RouterError(self.url, scrub_text(call, hidden), scrub_text(cause, hidden), status)
