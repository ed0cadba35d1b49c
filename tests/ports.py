"""TCP ports for the servers, routers and listeners that tests start on 127.0.0.1.

Two ways a port chosen with ``bind(0)`` collides once tests run side by side (make test: pytest-xdist workers
beside the LXC lane): another worker picks the same port before the first binds it, or an outgoing connection
(a router's, a client's) takes it as its local port meanwhile - ``bind(0)`` hands out ports from the kernel's
ephemeral range, the very range outgoing connections use. So every port here lies below that range, in a slice of
its own per pytest process: the LXC lane (no xdist) has slice 0, xdist worker gwN slice N + 1.
"""

import itertools
import os
import random
import socket

FIRST_PORT = 10000
SLICE_PORTS = 2000


def ephemeral_start():
    """The first port of the kernel's ephemeral range (outgoing connections' local ports)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def process_slice():
    """(first, end) ports of this pytest process's slice."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ... under pytest-xdist
    index = int(worker[2:]) + 1 if worker.startswith("gw") else 0
    first = FIRST_PORT + index * SLICE_PORTS
    end = first + SLICE_PORTS
    if end > ephemeral_start():
        raise RuntimeError(f"pytest worker {worker} has no port slice below the ephemeral range "
                           f"({ephemeral_start()}): run fewer workers")
    return first, end


def _bindable(port):
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _walk(first, end):
    """The slice's ports round and round from a random one: none handed out twice before the slice wraps around."""
    start = random.randrange(first, end)
    return itertools.cycle(itertools.chain(range(start, end), range(first, start)))


_FIRST, _END = process_slice()
_NEXT = _walk(_FIRST, _END)


def free_port_block(count):
    """The first of ``count`` consecutive ports of this process's slice that nothing is bound to right now."""
    for _attempt in range(SLICE_PORTS):
        first = next(_NEXT)
        if first + count > _END:
            continue
        if all(_bindable(port) for port in range(first, first + count)):
            for _taken in range(count - 1):
                next(_NEXT)
            return first
    raise RuntimeError(f"no {count} consecutive free ports in {_FIRST}-{_END - 1}")


def free_port():
    """A port of this process's slice that nothing is bound to right now."""
    return free_port_block(1)
