# Copyright: contributors to gpuops.sglang
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tiny HTTP client for SGLang's /health_generate, /get_server_info and /metrics (stdlib only)."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request

# /metrics of a large server is some hundred kB; a body beyond this is not what we asked for.
MAX_BODY_BYTES = 8 << 20

_JSON_TYPE_NAMES = {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
                    type(None): "null"}

# Proxies from the environment (http_proxy, ...) must never see a probe of a local inference server.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url, timeout, api_key=None):
    """GET ``url`` and return ``(status, body_text, error)``.

    ``status`` is None when the server could not be reached or did not answer within ``timeout``
    (connection refused, reset, timeout); ``error`` then says why. HTTP error statuses such as 503
    are answers, returned with their body and ``error`` None.
    """
    request = urllib.request.Request(url, headers={"Accept": "*/*"})
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return response.status, _decode(response.read(MAX_BODY_BYTES)), None
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, _decode(exc.read(MAX_BODY_BYTES)), None
    except urllib.error.URLError as exc:
        return None, "", str(exc.reason)
    except (socket.timeout, TimeoutError):
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
