# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The router's answers, parsed (pure, stdlib only): sglang-router 0.3.2 and the Shepherd Model Gateway (smg) 1.13.

Both routers answer the same worker API with the same shapes (docs/router.md has the observations); what differs:

- a worker object of smg has a ``status`` (``pending``, ``ready``, ``not_ready``, ``failed``, ``draining``; any
  case or spelling is taken), 0.3.2's has none: its add-job placeholder shows ``connection_mode: "unknown"``;
- ``DELETE`` takes a 0.3.2 worker out at once, while smg keeps it listed ``draining`` (``is_healthy: false``, no
  new request) for its settle time, 5 s by default, then drops it;
- ``POST`` of a URL already registered answers 202 with its id in 0.3.2 and 409 ``WORKER_ALREADY_EXISTS`` in smg
  (also while it drains); a URL whose add is under way answers 409 ``WORKER_CREATE_IN_PROGRESS`` in smg;
- smg drops the id of an add that failed (404), where 0.3.2 keeps a placeholder whose job is ``failed``.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass

# A router error body is one line; more is not worth putting in a message.
MAX_CAUSE_CHARS = 300

HEALTHY, UNHEALTHY, PENDING, FAILED, DRAINING, UNKNOWN = (
    "healthy", "unhealthy", "pending", "failed", "draining", "unknown")
# The 409 codes of smg's POST /workers.
ALREADY_EXISTS, CREATE_IN_PROGRESS = "WORKER_ALREADY_EXISTS", "WORKER_CREATE_IN_PROGRESS"
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)


class UnexpectedAnswer(ValueError):
    """An answer that is not what sglang-router 0.3.2 or smg 1.13 sends (a parser's complaint)."""


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
    status: str | None = None  # smg's worker status, lower case without "_" ("notready"); None from 0.3.2

    @property
    def state(self):
        """healthy | unhealthy | draining | pending (add job running) | failed (add job or worker) | unknown.

        healthy: routed to (0.3.2: registered and healthy; smg: also status ``ready``). draining: smg took it out
        (``DELETE``): no new request reaches it, those in flight finish, it goes from the list after the settle
        time. A registered worker's state is its health, whatever the job says: adding a URL already registered
        to 0.3.2 answers with the existing id and shows a failed job ("already exists") beside the healthy worker.
        """
        if self.status == "draining":
            return DRAINING
        if self.status == "pending":
            return PENDING
        if self.status == "failed":
            return FAILED
        if self.registered:
            return HEALTHY if self.healthy and self.status in (None, "ready") else UNHEALTHY
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


def parse_worker(document):
    """A ``Worker`` from one worker object (an entry of ``GET /workers`` or ``GET /workers/{id}``).

    UnexpectedAnswer when the object lacks what both routers send (``id``, ``url``, ``is_healthy``).
    """
    if not isinstance(document, dict):
        raise UnexpectedAnswer(f"a worker is a JSON object, got {type(document).__name__}")
    for field, kind in (("id", str), ("url", str), ("is_healthy", bool)):
        if not isinstance(document.get(field), kind):
            raise UnexpectedAnswer(f"a worker object has no {kind.__name__} {field!r}: {_excerpt(document)}")
    job = document.get("job_status") if isinstance(document.get("job_status"), dict) else {}
    status = document.get("status")
    status = status.lower().replace("_", "") if isinstance(status, str) else None
    if status is None:
        # 0.3.2: the placeholder of an add job has not passed the first registration step, connection detection.
        registered = document.get("connection_mode", "unknown") != "unknown"
    else:
        registered = status not in ("pending", "failed")
    return Worker(id=document["id"], url=document["url"], registered=registered, healthy=document["is_healthy"],
                  model_id=str(document.get("model_id", "")), job_type=job.get("job_type"),
                  job_status=job.get("status"), job_message=job.get("message"), status=status)


def parse_workers(document):
    """The listed workers of a ``GET /workers`` answer (``{"workers": [...], "total": N, ...}``)."""
    if not isinstance(document, dict) or not isinstance(document.get("workers"), list):
        raise UnexpectedAnswer(f"expected {{\"workers\": [...]}}, got {_excerpt(document)}")
    return [parse_worker(entry) for entry in document["workers"]]


def parse_accepted(document):
    """The worker id of a 202 answer to ``POST /workers`` or ``DELETE /workers/{id}``."""
    if not isinstance(document, dict) or document.get("status") != "accepted" \
            or not isinstance(document.get("worker_id"), str):
        raise UnexpectedAnswer(f"expected {{\"status\": \"accepted\", \"worker_id\": ...}}, got {_excerpt(document)}")
    return document["worker_id"]


def parse_conflict(body):
    """``(code, worker id or None)`` of smg's 409 answer to ``POST /workers``; UnexpectedAnswer for another body.

    ``{"error": "Worker already exists at URL '...' with ID <uuid>. Use PUT ...", "code": "WORKER_ALREADY_EXISTS"}``
    (registered, or draining), or ``... "code": "WORKER_CREATE_IN_PROGRESS"`` (an add job of that URL is running).
    """
    try:
        document = json.loads(body or "")
    except ValueError:
        document = None
    if not isinstance(document, dict) or document.get("code") not in (ALREADY_EXISTS, CREATE_IN_PROGRESS):
        raise UnexpectedAnswer(f"expected a 409 with code {ALREADY_EXISTS} or {CREATE_IN_PROGRESS}, got "
                               f"{str(body)[:MAX_CAUSE_CHARS]!r}")
    found = _UUID.search(str(document.get("error", "")))
    return document["code"], found.group(0) if found else None


def failure_cause(status, body, api_key_given):
    """What an HTTP error answer of the router means, with the remedy when there is one.

    The router answers errors as JSON (``{"error": "...", "code": "..."}``), as plain text (0.3.2's 422 "missing
    field `url`", 403 "Admin role required ...") or with an empty body (401).
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


def _excerpt(document):
    return json.dumps(document)[:MAX_CAUSE_CHARS]
