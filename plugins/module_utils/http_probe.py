# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tiny HTTP client for SGLang's /health_generate, /get_server_info and /metrics (stdlib only)."""

from __future__ import annotations

import functools
import http.client
import json
import socket
import time
import urllib.error
import urllib.request

# /metrics of a large server is some hundred kB; a body beyond this is not what we asked for.
MAX_BODY_BYTES = 8 << 20

_JSON_TYPE_NAMES = {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
                    type(None): "null"}

READ_CHUNK_BYTES = 64 << 10


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer (its 3xx status), never followed: urllib would resend the Authorization header to
    wherever it points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


@functools.cache
def _opener(tls):
    """No proxy handler: proxies from the environment (http_proxy, ...) must never see a probe of a local inference
    server (nor the router's control plane and its key); redirects are not followed. The TLS handler (verifying, the
    default context) only for an https URL (a router's): building it loads the system's CA store, which a probe of
    http://127.0.0.1 never needs."""
    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.UnknownHandler(), urllib.request.HTTPHandler(),
                    urllib.request.HTTPDefaultErrorHandler(), _NoRedirect(), urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    if tls:
        opener.add_handler(urllib.request.HTTPSHandler())
    return opener


def open_request(request, timeout):
    """``request`` (a urllib Request) opened as described in _opener."""
    return _opener(request.type == "https").open(request, timeout=timeout)


class Deadline(Exception):
    """The whole answer did not come within its total deadline."""


def read_body(response, limit, deadline):
    """At most ``limit`` bytes of ``response``, by ``deadline`` (time.monotonic()) for the whole body: the socket
    timeout alone bounds each read, and a server sending a byte at a time would never end. Raises Deadline."""
    chunks, size = [], 0
    # read1: what has arrived (read(n) would block until n bytes came, one trickle at a time).
    read = getattr(response, "read1", None) or response.read
    while size < limit:
        if time.monotonic() > deadline:
            raise Deadline()
        chunk = read(min(READ_CHUNK_BYTES, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def http_get(url, timeout, api_key=None):
    """GET ``url`` and return ``(status, body_text, error)``.

    ``status`` is None when the server could not be reached or did not answer within ``timeout``
    (connection refused, reset, timeout); ``error`` then says why. HTTP error statuses such as 503
    are answers, returned with their body and ``error`` None.
    """
    request = urllib.request.Request(url, headers={"Accept": "*/*"})
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    deadline = time.monotonic() + timeout
    try:
        with open_request(request, timeout) as response:
            return response.status, _decode(read_body(response, MAX_BODY_BYTES, deadline)), None
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, _decode(read_body(exc, MAX_BODY_BYTES, deadline)), None
    except urllib.error.URLError as exc:
        return None, "", str(exc.reason)
    except (socket.timeout, TimeoutError, Deadline):
        return None, "", f"no answer within {timeout} s"
    except (OSError, http.client.HTTPException) as exc:
        # Reset connections, or something that is not an HTTP server on that port (BadStatusLine).
        return None, "", str(exc) or type(exc).__name__


def get_json(url, timeout, api_key=None):
    """GET a JSON object: ``(dict or None, error or None)``; any other JSON value is an error."""
    status, body, error = http_get(url, timeout, api_key=api_key)
    if status != 200:
        return None, error or f"HTTP {status}"
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[..." nested deeper than the stack
        return None, f"invalid JSON from {url}: {exc}"
    if not isinstance(document, dict):
        return None, f"expected a JSON object from {url}, got {_JSON_TYPE_NAMES[type(document)]}"
    return document, None


def _decode(raw):
    return raw.decode("utf-8", errors="replace")
