"""Multi-node tensor parallelism (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``, SGLang 0.5.10), as
torch.distributed's TCPStore rendezvous and the gloo CPU group form it.

Node R runs TP ranks [tp/N * R, tp/N * (R + 1)) on its local GPUs (``base_gpu_id + (rank mod tp/N) * gpu_id_step``),
titled with their global rank. World rank 0 (node 0's TP0) listens on the --dist-init-addr port (on every address,
as torch's TCPStore); every other rank connects to it over TCP, retrying, and all block after "Init torch
distributed begin." until the whole world joined, or fail after --dist-timeout (default 600 s, scaled by
SGLANG_SIM_TIME_SCALE unless that is 0) with libtorch's words. The ranks agree on the tightest GPU through these
connections (the MIN of free memory after init sizes every rank, and trips the imbalance check, and the MIN after
loading sizes the pools), and keep them open while serving: a rank that dies closes them, and its peers fail as
SGLang's schedulers do when gloo raises in a collective ("Connection closed by peer"), through "Scheduler hit an
exception" and SIGQUIT to a tree kill of their node. (What a node of rank >= 1 serves: server.py.)"""

import errno
import json
import os
import select
import socket
import time

from .tracebacks import SCHEDULER_FRAMES, SchedulerFailure, fake_traceback

DEFAULT_DIST_TIMEOUT_S = 600  # torch's NCCL default when --dist-timeout is not given
CONNECT_RETRY_S = 0.1
C10D_WRAPPER_FRAME = ("torch/distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)")
TORCH_ALL_REDUCE_FRAMES = [C10D_WRAPPER_FRAME, ("torch/distributed/distributed_c10d.py", 2815, "all_reduce", "work.wait()")]
MODEL_RUNNER_FRAME = ("model_executor/model_runner.py", 378, "__init__",
                      "min_per_gpu_memory = self.init_torch_distributed()")
RENDEZVOUS_FRAMES = SCHEDULER_FRAMES + [
    MODEL_RUNNER_FRAME,
    ("model_executor/model_runner.py", 953, "init_torch_distributed", "init_distributed_environment("),
    ("distributed/parallel_state.py", 1676, "init_distributed_environment", "torch.distributed.init_process_group("),
    C10D_WRAPPER_FRAME,
    ("torch/distributed/c10d_logger.py", 95, "wrapper", "func_return = func(*args, **kwargs)"),
    ("torch/distributed/distributed_c10d.py", 1710, "init_process_group",
     "store, rank, world_size = next(rendezvous_iterator)"),
    ("torch/distributed/rendezvous.py", 279, "_tcp_rendezvous_handler", "store = _create_c10d_store("),
    ("torch/distributed/rendezvous.py", 197, "_create_c10d_store", "return TCPStore("),
]
MEMORY_FRAME = ("utils/common.py", 501, "get_available_gpu_memory", "torch.distributed.all_reduce(")
PRE_MODEL_LOAD_MEMORY_FRAMES = SCHEDULER_FRAMES + [
    MODEL_RUNNER_FRAME,
    ("model_executor/model_runner.py", 1005, "init_torch_distributed",
     "pre_model_load_memory = get_available_gpu_memory("),
    MEMORY_FRAME,
] + TORCH_ALL_REDUCE_FRAMES
POOL_MEMORY_FRAMES = SCHEDULER_FRAMES + [
    ("model_executor/model_runner.py", 381, "__init__", "self.initialize(min_per_gpu_memory)"),
    ("model_executor/model_runner.py", 547, "initialize", "self.init_memory_pool(pre_model_load_memory)"),
    ("model_executor/model_runner_kv_cache_mixin.py", 907, "init_memory_pool",
     "self.max_total_num_tokens = self.profile_max_num_token(total_gpu_memory)"),
    ("model_executor/model_runner_kv_cache_mixin.py", 148, "profile_max_num_token",
     "available_gpu_memory = get_available_gpu_memory("),
    MEMORY_FRAME,
] + TORCH_ALL_REDUCE_FRAMES
# Every event-loop turn broadcasts the received requests from TP0 over the gloo CPU group (recv_requests), so a
# peer that died is noticed at once there, also while idle.
EVENT_LOOP_FRAMES = [
    ("managers/scheduler.py", 2931, "run_scheduler_process", "scheduler.event_loop_overlap()"),
    ("managers/scheduler.py", 1019, "event_loop_overlap", "recv_reqs = self.recv_requests()"),
    ("managers/scheduler.py", 1275, "recv_requests", "recv_reqs = broadcast_pyobj("),
    ("utils/common.py", 1211, "broadcast_pyobj", "dist.broadcast(tensor_size, src=src, group=dist_group)"),
    C10D_WRAPPER_FRAME,
    ("torch/distributed/distributed_c10d.py", 2772, "broadcast", "work.wait()"),
]


def dist_init_address(args):
    """(host, port) of the TCPStore: --dist-init-addr, else --host (or 127.0.0.1) with --nccl-port or a port free
    on this node (server_args.py), so nodes launched without --dist-init-addr never meet."""
    if args.dist_init_addr:
        host, _colon, port = args.dist_init_addr.rpartition(":")
        return host.strip("[]"), int(port)
    if args.nccl_port:
        return args.host or "127.0.0.1", args.nccl_port
    with socket.socket() as probe:
        probe.bind(("", 0))
        return args.host or "127.0.0.1", probe.getsockname()[1]


class Channel:
    """One TCP connection between two ranks, carrying newline-terminated JSON messages."""

    def __init__(self, sock, peer):
        self.sock, self.peer = sock, peer
        self.buffer = b""

    def fileno(self):
        return self.sock.fileno()

    def send(self, message):
        """Send a message; a connection the peer closed shows at the next receive."""
        try:
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            pass

    def fill(self):
        """Read what arrived; False when the peer closed the connection (or reset it)."""
        try:
            data = self.sock.recv(4096)
        except OSError:
            return False
        self.buffer += data
        return bool(data)

    def message(self):
        """The next complete message received, or None."""
        line, newline, rest = self.buffer.partition(b"\n")
        if not newline:
            return None
        self.buffer = rest
        return json.loads(line)

    def recv(self):
        """The next message, waiting for it; None when the peer closed the connection."""
        while True:
            message = self.message()
            if message is not None:
                return message
            if not self.fill():
                return None


class LocalGroup:
    """The ranks of a single-node launch: no connection between them, each sized by its own GPU."""

    channels = ()
    spans_nodes = False

    def rendezvous(self):
        pass

    def all_reduce_min(self, value, frames):
        return value


class NodesGroup:
    """The world group of a multi-node launch, as torch.distributed forms it over TCP.

    World rank 0 hosts the TCPStore: it listens on the --dist-init-addr port and waits until every other rank has
    connected and joined; the others connect to it, retrying. The connections stay open for the collectives
    (all_reduce MIN of free memory) and while serving, so the death of any rank closes one and its peers fail."""

    spans_nodes = True

    def __init__(self, config, rank):
        self.sim = config.sim
        self.rank, self.world_size = rank, config.args.tp_size
        self.host, self.port = config.dist_address
        self.timeout_s = config.args.dist_timeout or DEFAULT_DIST_TIMEOUT_S
        self.channels = []  # rank 0: one per other rank; any other rank: the one to rank 0
        self.listener = None

    def rendezvous(self):
        """Block until all world_size ranks joined (TCPStore(..., wait_for_workers=True))."""
        deadline = time.monotonic() + self.sim.scaled(self.timeout_s)
        if self.rank == 0:
            self.host_store(deadline)
        else:
            self.join_store(deadline)

    def host_store(self, deadline):
        family, dualstack = (socket.AF_INET6, True) if socket.has_dualstack_ipv6() else (socket.AF_INET, False)
        try:  # on every address, as torch's server socket
            self.listener = socket.create_server(("", self.port), family=family, dualstack_ipv6=dualstack)
        except OSError as exc:
            raise self.store_failure(
                "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                f"address. port: {self.port}, useIpv6: false, code: -{exc.errno}, "
                f"name: {errno.errorcode.get(exc.errno, 'UNKNOWN')}, message: {os.strerror(exc.errno).lower()}")
        connecting, joined = [], {}
        while len(joined) < self.world_size - 1:
            remaining = deadline - time.monotonic()
            if remaining <= 0:  # torch counts itself among the clients, and reports whole seconds past the limit
                raise self.store_failure(
                    f"torch.distributed.DistStoreError: Timed out after {self.timeout_s + 1} seconds waiting for "
                    f"clients. {len(joined) + 1}/{self.world_size} clients joined.")
            for ready in select.select([self.listener] + connecting, [], [], remaining)[0]:
                if ready is self.listener:
                    sock, address = self.listener.accept()
                    connecting.append(Channel(sock, address))
                elif not ready.fill():  # gone before it joined
                    connecting.remove(ready)
                    ready.sock.close()
                else:
                    message = ready.message()
                    if message is not None:
                        connecting.remove(ready)
                        joined[message["rank"]] = ready
        # The store keeps listening, but a rank that connects later waits forever (never seen in practice: the
        # group dies with any of its ranks).
        self.channels = list(joined.values())
        for channel in self.channels:
            channel.send({"joined": self.world_size})

    def join_store(self, deadline):
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=max(deadline - time.monotonic(), 0.1))
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise self.store_failure(
                        "torch.distributed.DistNetworkError: The client socket has timed out after "
                        f"{self.timeout_s * 1000}ms while trying to connect to ({self.host}, {self.port}).")
                time.sleep(min(CONNECT_RETRY_S, max(deadline - time.monotonic(), 0)))
        sock.settimeout(None)
        channel = Channel(sock, sock.getpeername())
        channel.send({"rank": self.rank})
        if channel.recv() is None:  # rank 0 went away while this rank waited for the others
            raise self.store_failure("torch.distributed.DistNetworkError: failed to recv, got 0 bytes")
        self.channels = [channel]

    def all_reduce_min(self, value, frames):
        """torch.distributed.all_reduce(MIN) over the CPU group, through rank 0; blocks while a peer is busy
        elsewhere (hung), fails when one is gone (frames: where the caller is)."""
        if self.rank == 0:
            values = [value]
            for channel in self.channels:
                message = channel.recv()
                if message is None:
                    raise self.peer_failure(channel, frames)
                values.append(message["value"])
            for channel in self.channels:
                channel.send({"value": min(values)})
            return min(values)
        channel = self.channels[0]
        channel.send({"value": value})
        message = channel.recv()
        if message is None:
            raise self.peer_failure(channel, frames)
        return message["value"]

    def check(self, readable):
        """Connections select() found readable while serving: a closed one fails the event loop."""
        for channel in readable:
            if not channel.fill():
                raise self.peer_failure(channel, EVENT_LOOP_FRAMES)

    @staticmethod
    def store_failure(error):
        return SchedulerFailure(fake_traceback(RENDEZVOUS_FRAMES, error))

    @staticmethod
    def peer_failure(channel, frames):
        host, port = channel.peer[:2]
        return SchedulerFailure(fake_traceback(frames, (
            f"RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
            f"[{host.removeprefix('::ffff:')}]:{port}")))


def process_group(config, rank):
    return NodesGroup(config, rank) if config.args.nnodes > 1 else LocalGroup()
