# Copyright (c) gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The throughput probe: real streaming requests at a constant concurrency against our own servers, from the host.

For ``duration`` seconds every probed server gets ``concurrency`` requests in flight at all times (a client
thread each, the next request as soon as one ends), each asking for exactly ``output_len`` tokens
(``ignore_eos``) after a prompt of ``input_len`` token ids - on SGLang's ``/generate`` or the OpenAI
``/v1/completions`` route. Output tokens count when their stream chunk arrives inside the window, so the
figure is the steady-state throughput at that concurrency; requests still in flight at the end are closed
(``cut_at_end``, not errors). A stream that ends without ``[DONE]`` or a non-200 answer is an error. About
half-way and near the end the server's ``/metrics`` is read: the busier sample is what capacity advice judges.

Bounded in time (``duration``, a per-read ``probe_timeout``) and in count (``max_requests`` for the whole
probe). Only servers recorded in the state dir whose live main process carries our ownership marker are
probed. The load runs in a detached worker (host_job.py): the module's slices only report its progress.
"""

import http.client
import json
import socket
import threading
import time

from ansible_collections.gpuops.sglang.plugins.module_utils import (
    argument_specs,
    capacity_rules,
    capacity_snapshot,
    host_job,
    journal,
    option_ranges,
    procfs,
    run_lock,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.http_probe import (
    get_json,
    http_get,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.launch_settings import (
    gpus_of,
    model_of,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.probe_figures import (
    FIGURES,
    summarize,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.prometheus import (
    sglang_gauges,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.secrets import scrub_text
from ansible_collections.gpuops.sglang.plugins.module_utils.server_processes import (
    ServerProcesses,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.server_state import (
    read_state,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.words import counted

# Metrics samples, as fractions of the window: one in the steady state, one near the end.
METRICS_AT = (0.5, 0.9)


class ProbeError(Exception):
    """The probe cannot run (bad request, no server of ours to probe)."""


# ---- pure: what a probe client sends and reads ---------------------------------------------------------


def request_body(route, input_len, output_len):
    """The request of one probe client: ``input_len`` token ids, exactly ``output_len`` tokens back, streamed."""
    prompt = [1000 + index % 20000 for index in range(input_len)]
    if route == "generate":
        return {"input_ids": prompt, "stream": True,
                "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0}}
    return {"model": "default", "prompt": prompt, "max_tokens": output_len, "ignore_eos": True, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def completion_tokens(route, chunk):
    """Output tokens so far according to one stream chunk (both routes report running totals), or None."""
    if route == "generate":
        return (chunk.get("meta_info") or {}).get("completion_tokens")
    return (chunk.get("usage") or {}).get("completion_tokens")


# ---- I/O: clients, the load of one server ----------------------------------------------------------------


class ServerLoad:
    """``concurrency`` client threads keeping requests in flight against one server until the window closes."""

    def __init__(self, name, port, params, budget, window):
        self.name, self.port, self.params = name, port, params
        self.budget, self.window = budget, window
        self.lock = threading.Lock()
        self.requests = []
        self.tokens_in_window = 0
        self.cut_at_end = 0
        self.connections = set()
        self.metrics = []
        self.body = json.dumps(request_body(params["route"], params["input_len"], params["output_len"])).encode()
        self.threads = [threading.Thread(target=self._client, daemon=True) for _client in range(params["concurrency"])]

    def start(self):
        for thread in self.threads:
            thread.start()

    def close(self):
        """At the end of the window: cut what is still in flight."""
        with self.lock:
            connections = list(self.connections)
        for connection in connections:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except (AttributeError, OSError):
                pass

    def join(self, timeout):
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(deadline - time.monotonic(), 0))

    def sample_metrics(self):
        status, body, _error = http_get(f"http://{self.params['host']}:{self.port}/metrics",
                                        self.params["probe_timeout"], self.params["api_key"])
        if status == 200:
            self.metrics.append(sglang_gauges(body))

    def _client(self):
        while self.window.open() and self.budget.take():
            self._one_request()

    def _one_request(self):
        params = self.params
        connection = http.client.HTTPConnection(params["host"], self.port, timeout=params["probe_timeout"])
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if params["api_key"]:
            headers["Authorization"] = f"Bearer {params['api_key']}"
        started = time.monotonic()
        record = {"ok": False, "ttft_s": None, "e2e_s": None, "error": None}
        counted = 0
        with self.lock:
            self.connections.add(connection)
        try:
            connection.request("POST", argument_specs.PROBE_ROUTES[params["route"]], body=self.body, headers=headers)
            response = connection.getresponse()
            if response.status != 200:
                record["error"] = f"HTTP {response.status}"
                return
            done = False
            for line in iter(response.readline, b""):
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    record["error"] = "stream error: " + str((chunk["error"] or {}).get("message"))[:200]
                    return
                total = completion_tokens(params["route"], chunk)
                if total:
                    now = time.monotonic()
                    if record["ttft_s"] is None:
                        record["ttft_s"] = now - started
                    if self.window.contains(now) and total > counted:
                        with self.lock:
                            self.tokens_in_window += total - counted
                    counted = max(counted, total)
            if not done:
                if not self.window.open():  # cut by close() at the end of the window
                    with self.lock:
                        self.cut_at_end += 1
                    return
                record["error"] = "the stream ended without [DONE]"
                return
            record["ok"] = True
            record["e2e_s"] = time.monotonic() - started
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if not self.window.open():
                with self.lock:
                    self.cut_at_end += 1
                return
            record["error"] = scrub_text(f"{type(exc).__name__}: {exc}", [params["api_key"]] if params["api_key"]
                                         else [])[:200]
        finally:
            connection.close()
            finished_in_window = self.window.contains(time.monotonic())
            with self.lock:
                self.connections.discard(connection)
                # A request that completes after the window closed counts in neither figure (its tokens did).
                if record["error"] or (record["ok"] and finished_in_window):
                    self.requests.append(record)

    def figures(self):
        with self.lock:
            figures = summarize(self.requests, self.tokens_in_window, self.window.length, self.params["concurrency"])
            figures["cut_at_end"] = self.cut_at_end
        return figures

    def progress(self):
        with self.lock:
            return {"name": self.name, "requests": sum(record["ok"] for record in self.requests),
                    "errors": sum(not record["ok"] for record in self.requests),
                    "output_tokens": self.tokens_in_window}


class Window:
    """The measuring window, shared by every client of the probe."""

    def __init__(self, length):
        self.length = length
        self.start = time.monotonic()
        self.end = self.start + length

    def open(self):
        return time.monotonic() < self.end

    def contains(self, moment):
        return self.start <= moment <= self.end


class Budget:
    """``max_requests`` for the whole probe, taken one request at a time by every client."""

    def __init__(self, total):
        self.left = total
        self.lock = threading.Lock()

    def take(self):
        with self.lock:
            if self.left <= 0:
                return False
            self.left -= 1
            return True


# ---- the probe -------------------------------------------------------------------------------------------


def ours_to_probe(params):
    """``(servers to probe [(name, port, state)], refused [{name, error}])``: only live servers of this deployment."""
    owner = ServerProcesses(params["state_dir"])
    probe, refused, sockets = [], [], procfs.ListeningSockets()
    for spec in params["servers"]:
        state = read_state(params["state_dir"], spec["name"])
        port = spec.get("port") or (state or {}).get("port")
        main = owner.main_process(state) if state else None
        if state is None:
            why = f"no state file in {params['state_dir']}: not launched by gpuops.sglang.server"
        elif spec.get("port") and state.get("port") != spec["port"]:
            why = f"port {spec['port']} is not the recorded port {state.get('port')}"
        elif main is None:
            why = f"its recorded process {state.get('pid')} does not run"
        elif owner.owner(main.pid).verdict != "ours":
            why = f"pid {main.pid} does not carry this deployment's ownership marker"
        elif (squatter := owner.foreign_listener(spec["name"], port, likely=[main.pid], sockets=sockets)) is not None:
            why = squatter  # the load carries the API key: never to another process
        else:
            probe.append((spec["name"], port, state))
            continue
        refused.append({"name": spec["name"], "status": "refused", "error": f"{spec['name']} not probed: {why}"})
    return probe, refused


def _capacity(state, metrics, server_info):
    """The capacity judgement of the busier metrics sample, with the server's configured facts and settings."""
    if not metrics:
        return None
    busiest = max(metrics, key=lambda gauges: (gauges.get("num_running_reqs") or 0) + (gauges.get("num_queue_reqs") or 0))
    snapshot = capacity_snapshot.snapshot_of(busiest, server_info or {}, (state or {}).get("settings"))
    return capacity_rules.judge(snapshot)


def run_load(params, servers, progress):
    """The load of every server at once; returns ``(per-server results, host figures)``."""
    window = Window(params["duration"])
    budget = Budget(params["max_requests"])
    loads = [ServerLoad(name, port, params, budget, window) for name, port, _state in servers]
    for load in loads:
        load.start()
    samples = [window.start + fraction * window.length for fraction in METRICS_AT]
    last_report = 0.0
    while window.open():
        now = time.monotonic()
        if samples and now >= samples[0]:
            samples.pop(0)
            threads = [threading.Thread(target=load.sample_metrics, daemon=True) for load in loads]
            for thread in threads:
                thread.start()
        if now - last_report >= 1.0:
            last_report = now
            progress({"elapsed": round(now - window.start, 1), "duration": window.length,
                      "servers": [load.progress() for load in loads]})
        time.sleep(0.1)
    for load in loads:
        load.close()
    for load in loads:
        load.join(params["probe_timeout"])
    results = []
    for load, (_name, _port, state) in zip(loads, servers):
        server_info, _error = get_json(f"http://{params['host']}:{load.port}/get_server_info",
                                       params["probe_timeout"], params["api_key"])
        figures = load.figures()
        results.append(dict(figures, name=load.name, port=load.port, status="probed",
                            capacity=_capacity(state, load.metrics, server_info)))
    every = [record for load in loads for record in load.requests]
    host = summarize(every, sum(load.tokens_in_window for load in loads), window.length,
                     params["concurrency"] * len(loads))
    return results, host


def _journal_probe(params, results, host, states):
    """Append the figures; each result gains ``since_last_good`` (its figures against the last good run's)."""
    state_dir, run_id = params["state_dir"], params.get("run_id")
    earlier = journal.runs(journal.read_records(state_dir))
    entries = {}
    for result in results:
        if result["status"] != "probed":
            continue
        probe = {key: result[key] for key in FIGURES + ("requests", "errors", "concurrency", "window_s")}
        probe.update(route=params["route"], input_len=params["input_len"], output_len=params["output_len"])
        entries[result["name"]] = {"probe": probe, "capacity": result.get("capacity")}
        settings = states[result["name"]].get("settings")
        # A renamed server (same model, same GPUs) is compared with what ran under its old name, as the wait does.
        good = journal.last_good(earlier, result["name"], model_of(settings), before_run_id=run_id,
                                 gpus=gpus_of(settings))
        if good and good["entry"].get("probe"):
            result["since_last_good"] = journal.compare(good, dict(good["entry"], probe=probe))
    header = journal.run_header(state_dir, "probe", run_id)
    header["host"] = {key: host[key] for key in FIGURES}
    return journal.append(state_dir, header, entries)


def probe_work(params, servers, refused):
    """The worker's job: load, figures, journal, and the run's release when this is its last call."""
    def work(progress):
        results, host = run_load(params, servers, progress)
        result = {"changed": False, "servers": results + refused, "host": host, "refused": refused}
        if params["journal"]:
            result["journal_error"] = _journal_probe(params, results, host,
                                                     {name: state for name, _port, state in servers})
        errors = sum(server["errors"] for server in results)
        result["msg"] = (f"{counted(len(results), 'server')} probed for {params['duration']:g} s at concurrency "
                         f"{params['concurrency']}: {host['output_tok_s']} output tok/s, {counted(errors, 'error')}"
                         + (f"; not probed: {', '.join(item['name'] for item in refused)}" if refused else ""))
        return result
    return work


def start_probe(params, check_mode):
    """Check the request and the servers, then start the worker (or, in check mode, say what would run)."""
    problems = option_ranges.range_problems(params, argument_specs.PROBE_RANGES)
    if problems:
        raise ProbeError("invalid request: " + "; ".join(problems))
    if params.get("run_id") and not check_mode:
        try:
            run_lock.renew(params["state_dir"], params["run_id"])
        except run_lock.RunLockError as exc:
            raise ProbeError(str(exc))
    servers, refused = ours_to_probe(params)
    if check_mode:
        would_probe = [{"name": name, "port": port, "status": "would_probe"} for name, port, _state in servers]
        return {"changed": False, "servers": refused + would_probe,
                "msg": f"would probe {counted(len(servers), 'server')} for {params['duration']:g} s at concurrency "
                       f"{params['concurrency']}"}
    if not servers:
        raise ProbeError("no server to probe: " + "; ".join(item["error"] for item in refused))
    job_id = host_job.new_job_id()
    try:
        host_job.start(params["state_dir"], job_id, probe_work(params, servers, refused),
                       {"run_id": params.get("run_id"), "servers": [name for name, _port, _state in servers],
                        "kind": "probe"})
    except (OSError, host_job.WorkerNotStarted) as exc:
        raise ProbeError(f"the probe did not start: {exc}")
    return host_job.follow_result(params["state_dir"], job_id, time.time() + params["progress_interval"], run_id=params.get("run_id"))


def probe_slice(params, carry=None, check_mode=False):
    """One slice of the probe module: start it, or report its progress; its result once it is over."""
    if carry:
        result = host_job.follow_result(params["state_dir"], carry["job"], time.time() + params["progress_interval"],
                                        carry.get("events_seen", 0), params.get("run_id"))
    else:
        result = start_probe(params, check_mode)
    if "carry" not in result and params["release_run"] and params.get("run_id") and not check_mode:
        result["released"] = run_lock.release(params["state_dir"], params["run_id"])
    return result
