"""Benchmark: a rolling relaunch of 8 simulated servers behind the real sglang-router or smg, under constant load.

  .venv/bin/python -m bench.rolling [--router sglang-router|smg] [--reps 2] [--clients 16] [--batch-size 2]
                                   [--out bench/results]

The fleet is inventories/local's simulated host (bench's own directory, free ports); the router is the pinned
sglang-router (python -m sglang_router.launch_router, the default) or, with --router smg, the pinned Shepherd Model
Gateway (python -m smg launch; results then go to <out>/rolling-smg.md and .json) on loopback with 1 s health checks; ``--clients`` closed-loop
streaming clients send 2.5 s requests through it for the whole run. Each repetition relaunches every server
(relaunch_state=restarted, relaunch_batch_size) three ways:

  router      sglang_router_url set: out of the router, drained, relaunched, back in it healthy, next batch
  drain only  no router integration; every stop drains first (relaunch_drain_timeout, default)
  neither     no router integration and relaunch_drain_timeout=0: the stop as the collection did it before

and measures the playbook's wall time, requests and failed requests during it, the least number of servers the
router listed healthy, the capacity dip (server-seconds not healthy in the router, and completed requests per
second during the relaunch against the 5 s before it). Writes <out>/rolling.md and rolling.json; asserts nothing.
"""

import argparse
import contextlib
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.collection import REPO
from bench.targets import LocalTarget

sys.path.insert(0, str(REPO / "collections"))
from ansible_collections.gpuops.sglang.plugins.module_utils.router import (
    RouterClient,
    RouterError,
)

ROUTER_FLAGS = ["--policy", "round_robin", "--health-check-interval-secs", "1", "--health-check-timeout-secs", "2",
                "--health-failure-threshold", "3", "--health-success-threshold", "2", "--log-level", "warn"]
# Both wheels install a console script "smg": each router is started by its module.
ROUTER_COMMANDS = {
    "sglang-router": ["-m", "sglang_router.launch_router"],
    "smg": ["-m", "smg", "launch", "--worker-startup-check-interval", "1"],
}
MODES = {
    "router": lambda router_url: {"sglang_router_url": router_url},
    "drain only": lambda router_url: {},
    "neither": lambda router_url: {"relaunch_drain_timeout": 0},
}
SERVERS = 8
TOKENS = 100  # 2.5 s at the simulator's 40 tokens/s
BEFORE_S = 5.0


class Load:
    """Closed-loop streaming clients through the router; each outcome with its end time."""

    def __init__(self, port, clients):
        self.port = port
        self.outcomes = []  # (ended at, ok)
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.client, args=(index,), daemon=True) for index in range(clients)]
        for thread in self.threads:
            thread.start()

    def client(self, index):
        body = json.dumps({"text": f"client {index}", "stream": True, "sampling_params": {"max_new_tokens": TOKENS}})
        while not self.stopping.is_set():
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                connection.request("POST", "/generate", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                ok = response.status == 200 and response.read().decode().rstrip().endswith("data: [DONE]")
            except (OSError, http.client.HTTPException):
                ok = False
            finally:
                connection.close()
            self.outcomes.append((time.monotonic(), ok))

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(90)

    def between(self, start, end):
        return [ok for at, ok in self.outcomes if start <= at < end]


class Capacity:
    """Servers the router lists healthy, every 0.2 s."""

    def __init__(self, client):
        self.client = client
        self.samples = []  # (at, healthy)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self):
        while not self.stopping.wait(0.2):
            with contextlib.suppress(RouterError):  # a sample lost is a sample lost
                self.samples.append((time.monotonic(), sum(worker.healthy for worker in self.client.workers())))

    def stop(self):
        self.stopping.set()
        self.thread.join(10)

    def between(self, start, end):
        return [(at, healthy) for at, healthy in self.samples if start <= at < end]


def run_playbook(target, variables, output, playbook="relaunch"):
    extra = output.with_suffix(".vars.json")
    extra.write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), *target.inventory_args(), "-e", f"@{extra}",
            str(REPO / "playbooks" / f"{playbook}.yml")]
    with open(output, "wb") as handle:
        return subprocess.run(argv, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT, check=False).returncode


def start_router(target, servers, port, log_path, kind="sglang-router"):
    urls = [f"http://127.0.0.1:{target.base_port + index}" for index in range(servers)]
    argv = [sys.executable, *ROUTER_COMMANDS[kind], "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(port + 1), *ROUTER_FLAGS,
            "--worker-urls", *urls]
    with open(log_path, "w") as log:
        process = subprocess.Popen(argv, env=dict(os.environ, SPT_NOENV="1"), stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
    client = RouterClient(f"http://127.0.0.1:{port}", timeout=5)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(RouterError):  # not up yet
            if sum(worker.healthy for worker in client.workers()) == servers:
                return process, client
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"the router did not list {servers} healthy servers within 60 s (log: {log_path})")


def measure(target, mode, router, load, capacity, base_vars, batch_size, output):
    variables = dict(base_vars, relaunch_state="restarted", relaunch_batch_size=batch_size,
                     **MODES[mode](router.url))
    started = time.monotonic()
    rc = run_playbook(target, variables, output)
    ended = time.monotonic()
    time.sleep(1)
    during = load.between(started, ended + 1)
    before = load.between(started - BEFORE_S, started)
    samples = capacity.between(started, ended)
    lost = sum(SERVERS - healthy for _at, healthy in samples) * 0.2
    return {"mode": mode, "rc": rc, "wall_s": round(ended - started, 1), "requests": len(during),
            "failed": during.count(False), "min_healthy": min((healthy for _at, healthy in samples), default=None),
            "unhealthy_server_s": round(lost, 1), "servers": SERVERS,
            "req_per_s_before": round(len(before) / BEFORE_S, 2),
            "req_per_s_during": round(len(during) / max(ended + 1 - started, 1e-9), 2)}


def markdown(results, args):
    lines = [f"# Rolling relaunch behind {args.router} ({time.strftime('%Y-%m-%d')})", "",
             (f"{SERVERS} simulated servers (time scale {args.time_scale}), {args.clients} streaming clients of "
              f"{TOKENS / 40:.1f} s requests through the real router, relaunch_state=restarted "
              f"relaunch_batch_size={args.batch_size}; {args.reps} repetitions, 2 shared cores."), "",
             ("| mode | rc | wall s | requests | failed | least healthy | server-s not healthy | req/s before | "
              "req/s during |"), "|---|---|---|---|---|---|---|---|---|"]
    for result in results:
        lines.append(f"| {result['mode']} | {result['rc']} | {result['wall_s']} | {result['requests']} | "
                     f"{result['failed']} | {result['min_healthy']} of {result['servers']} | "
                     f"{result['unhealthy_server_s']} | {result['req_per_s_before']} | {result['req_per_s_during']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.rolling", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--router", choices=sorted(ROUTER_COMMANDS), default="sglang-router",
                        help="the router in front of the fleet (default: sglang-router)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=0.5)
    parser.add_argument("--mode", action="append", choices=sorted(MODES), help="default: all three")
    parser.add_argument("--base-port", type=int, default=31000)
    parser.add_argument("--router-port", type=int, default=31900)
    parser.add_argument("--workdir", default=str(REPO / ".work" / "bench-rolling"))
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args(argv)
    target = LocalTarget(args.workdir, args.base_port)
    target.prepare(SERVERS)
    base_vars = dict(target.extra_vars(args.time_scale))
    base_vars["sglang_env"]["SGLANG_SIM_DECODE_TOKENS_PER_S"] = "40"
    raw = Path(args.workdir) / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    if run_playbook(target, dict(base_vars, relaunch_state="restarted"), raw / "setup.out") != 0:
        raise SystemExit(f"the fleet did not come up: {raw / 'setup.out'}")
    process, client = start_router(target, SERVERS, args.router_port, raw / "router.log", args.router)
    load, capacity = Load(args.router_port, args.clients), Capacity(client)
    results = []
    try:
        time.sleep(BEFORE_S + 1)
        for rep in range(args.reps):
            for mode in args.mode or list(MODES):
                result = measure(target, mode, client, load, capacity, base_vars, args.batch_size,
                                 raw / f"{rep}-{mode.replace(' ', '-')}.out")
                print(json.dumps(result), flush=True)
                results.append(result)
                time.sleep(BEFORE_S)  # the router takes back what the last mode left unhealthy; load steady again
    finally:
        load.stop()
        capacity.stop()
        process.terminate()
        run_playbook(target, dict(base_vars, relaunch_drain_timeout=0), raw / "teardown.out", playbook="stop")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "rolling" if args.router == "sglang-router" else f"rolling-{args.router}"
    (out / f"{stem}.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    (out / f"{stem}.md").write_text(markdown(results, args))
    print(markdown(results, args))


if __name__ == "__main__":
    main()
