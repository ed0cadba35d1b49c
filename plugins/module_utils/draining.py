# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A server's drain before it is stopped: until its requests in flight reach 0, within ``drain_timeout``.

Behind a router the server is taken out of it first and drained before SIGTERM: no new request reaches it,
so the count only falls. Without a router, SIGTERM starts SGLang's own drain (it finishes what is in flight,
then exits) and the count is followed until it is 0. Either way the stop goes on as before afterwards
(SIGTERM, SIGKILL after ``stop_timeout``). A server that does not say how many it has (still starting, hung,
no such endpoint) has nothing to wait for.
"""

import ipaddress
import urllib.parse

from ansible_collections.gpuops.sglang.plugins.module_utils.in_flight import (
    requests_in_flight,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.router import (
    RouterClient,
    RouterError,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.router_answers import (
    check_url,
)

# A count takes one short HTTP call; a server that does not answer within it has none to give.
COUNT_TIMEOUT_SECONDS = 2.0
COUNT_INTERVAL_SECONDS = 1.0
ALL_INTERFACES = ("0.0.0.0", "::", "[::]")

# How a drain ended: no request left; drain_timeout reached with requests left; the server gave no count; the
# server exited on its own (SGLang's drain after SIGTERM finished).
DRAINING, DRAINED, TIMED_OUT, UNCOUNTED, EXITED = "draining", "drained", "timed_out", "uncounted", "exited"


def server_url(host, port):
    """``http://host:port``, an IPv6 address in brackets."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def worker_url(params, port):
    """The server as the router's worker: ``http://<router_worker_host or host>:<port>``."""
    return server_url(params.get("router_worker_host") or params["host"], port)


def router_problems(router_url, host, worker_host, names=("router_url", "router_worker_host")):
    """What is wrong with the router settings, checked before anything is touched. ``names``: how the caller
    calls the URL and worker host options (the module's, or the role's variables)."""
    if not router_url:
        return []
    url_name, worker_host_name = names
    if worker_host is not None and not isinstance(worker_host, str):
        return [f"{worker_host_name} must be a host name or IP address (a string), got {worker_host!r}"]
    problems = []
    try:
        check_url(router_url, url_name)
    except (TypeError, ValueError) as exc:
        problems.append(str(exc))
    if not worker_host and host in ALL_INTERFACES:
        problems.append(f"{worker_host_name} is required with {url_name} when the servers listen on {host!r}: the "
                        "address at which the router reaches them, e.g. the GPU host's IP")
    elif _is_loopback(worker_host or host) and not _is_loopback(urllib.parse.urlsplit(router_url).hostname or ""):
        # The router would list the servers under another address: nothing would be taken out before a stop.
        problems.append(f"{worker_host_name} must be the address at which the router {router_url} reaches the "
                        f"servers; {worker_host or host!r} is this host's loopback, which a router elsewhere cannot "
                        "reach")
    return problems


def _is_loopback(host):
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


# The state file key that says the server is owed a place in the router (see owes_router).
ROUTER_ADD_KEY = "router_add"


def router_client(params):
    """The router's client, or None without ``router_url``."""
    if not params.get("router_url"):
        return None
    return RouterClient(params["router_url"], params.get("router_api_key"), params["router_timeout"])


class Drain:
    """The drain of one server; ``poll(now)`` says where it stands (DRAINING until it ends)."""

    def __init__(self, base_url, timeout, api_key, started, count=requests_in_flight,
                 count_timeout=COUNT_TIMEOUT_SECONDS):
        self.base_url, self.timeout, self.api_key = base_url, timeout, api_key
        self.count_timeout = count_timeout
        self.started = started
        self._count = count
        self._next_count_at = started
        self.requests_left = None
        self.error = None
        self.outcome = None
        self.ended = None

    def poll(self, now):
        if self.outcome:
            return self.outcome
        if now >= self._next_count_at:
            self._next_count_at = now + COUNT_INTERVAL_SECONDS
            self.requests_left, self.error = self._count(self.base_url, self.count_timeout, self.api_key)
            if self.requests_left is None:
                self.end(now, UNCOUNTED)
            elif self.requests_left == 0:
                self.end(now, DRAINED)
        if not self.outcome and now - self.started >= self.timeout:
            self.end(now, TIMED_OUT)
        return self.outcome or DRAINING

    def end(self, now, outcome):
        self.outcome, self.ended = outcome, now

    def report(self):
        """What the result and the progress events say about it."""
        return {"outcome": self.outcome or DRAINING, "seconds": round((self.ended or self.started) - self.started, 1),
                "requests_left": self.requests_left, "error": self.error}


def owes_router(behind_router, action, removed_ids, recorded):
    """Whether the server being launched goes into the router once it is ready (its state file's ``router_add``):
    behind a router, launched from nothing, taken out of the router by this run, or still owed there by an earlier
    run that did not get to put it back (interrupted, or rolled back). One that was running outside the router - an
    operator took it out, or put the fleet behind a router by hand - stays as it is."""
    return behind_router and (action == "launched" or bool(removed_ids) or bool((recorded or {}).get(ROUTER_ADD_KEY)))


def deregister(client, url):
    """Take the server out of the router: ``(removed worker ids, error)``."""
    try:
        return [worker.id for worker in client.remove(url)], None
    except RouterError as exc:
        return [], str(exc)
