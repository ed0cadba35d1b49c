"""The main process (SGLang's launch_server): it forks the schedulers (and, with --dp-size > 1, the data parallel
controller; on node 0 the detokenizer), waits for their ready reports, then serves the HTTP API (handlers.py)
through uvicorn's phases (connection refused -> 503 -> 200 once the warmup request passed) and handles the signals:
SIGQUIT from a failed child kills the tree, SIGTERM drains the requests in flight and then kills the tree (exit
137): at once up to v0.5.10; v0.5.23 first sends its schedulers a ShutdownReq and waits up to 15 s for them, then
kills the tree and waits up to 60 s for it to be reaped, logging the stragglers of each wait (shutdown_v0_5_23; the
waits on the simulated clock). GET /ready (v0.5.23) answers 200 only while up, not draining and not paused (POST
/pause_generation, /continue_generation: they only flip that state here, generation goes on). A node of rank >= 1
runs only its schedulers, then the dummy health server on --host/--port (GET /ping, /health, /health_generate:
always 200; /metrics with --enable-metrics, no scheduler gauges) and waits on each scheduler, logging "Scheduler or
DataParallelController <pid> terminated with <code>"."""

import datetime
import http.server
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.request

from .handlers import handle_http_error, make_dummy_health_handler, make_handler
from .log import Logger
from .processes import (
    descendants,
    fork_child,
    kill_process_tree,
    run_detokenizer,
    sleep_forever,
    wait_gone,
)
from .scheduler import Scheduler
from .serving import Serving
from .tracebacks import fake_traceback


class Server:
    def __init__(self, config, model):
        self.config, self.args, self.model, self.sim = config, config.args, model, config.sim
        self.log = Logger()
        self.log.quiet = self.args.log_level in ("warning", "error", "critical")
        self.status = "Starting"
        self.gracefully_exit = False
        self.paused = False
        self.scheduler_info = {}
        self.ready_infos = []
        self.control_fds = []
        self.scheduler_pids = []
        self.serving = None
        self.start_time = time.time()

    # process tree -----------------------------------------------------------------------------
    def launch_subprocesses(self):
        args = self.args
        main_pid = os.getpid()
        orphan = "orphan_scheduler" in self.sim.faults
        ready_readers = []
        ranks = [(d, t) for d in range(args.dp_size) for t in self.config.local_tp_ranks]
        pipes = []
        for _rank in ranks:
            ready_r, ready_w = os.pipe()
            control_r, control_w = os.pipe()
            pipes.append((ready_r, ready_w, control_r, control_w))
            ready_readers.append(ready_r)
            self.control_fds.append(control_w)

        def start_schedulers():
            for (dp_rank, tp_rank), (ready_r, ready_w, control_r, control_w) in zip(ranks, pipes):
                scheduler = Scheduler(self.config, dp_rank, tp_rank, ready_w, control_r, main_pid)
                self.scheduler_pids.append(
                    fork_child(scheduler.title, lambda s=scheduler: self.child_main(s, pipes), orphan=orphan))
            # Only the schedulers keep their ends, so a dead scheduler reads as EOF in the main process.
            for ready_r, ready_w, control_r, control_w in pipes:
                os.close(ready_w)
                os.close(control_r)

        if args.dp_size > 1:
            fork_child("sglang::data_parallel_controller", lambda: (start_schedulers(), sleep_forever()))
            for ready_r, ready_w, control_r, control_w in pipes:
                os.close(ready_w)
                os.close(control_r)
        else:
            start_schedulers()
        if args.node_rank == 0:  # a node of rank >= 1 runs neither tokenizer nor detokenizer
            fork_child("sglang::detokenizer", run_detokenizer)
        return ready_readers

    @staticmethod
    def child_main(scheduler, pipes):
        # Keep only this scheduler's pipe ends, so EOFs mean what they say.
        mine = {scheduler.ready_fd, scheduler.control_fd}
        for fds in pipes:
            for fd in fds:
                if fd not in mine:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
        scheduler.run()

    def wait_for_ready(self, readers):
        for rank, fd in enumerate(readers):
            data = b""
            while not data.endswith(b"\n"):
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.scheduler_died(rank)
                data += chunk
            self.ready_infos.append(json.loads(data))
        self.scheduler_info = self.ready_infos[0]

    def scheduler_died(self, rank):
        if self.sim.new:
            self.log.error(f"Rank {rank} scheduler died during initialization (exit code: -9). If exit code is -9 "
                           "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.")
        else:
            self.log.error(f"Rank {rank} scheduler is dead. Please check if there are relevant logs.")
        kill_process_tree()

    def on_sigquit(self, signum, frame):
        if self.status == "Starting" or not self.sim.new:
            self.log.error("Received sigquit from a child process. It usually means the child failed.")
        else:
            self.log.error(f"SIGQUIT received. signum={signum!r}, frame={frame!r}. It usually means one child failed.")
        if "stuck_after_crash" in self.sim.faults:
            sleep_forever()
        kill_process_tree()

    def on_sigterm(self, signum, frame):
        # Installed once serving, via loop.add_signal_handler: SGLang's handler sees no signum/frame.
        self.gracefully_exit = True
        self.log.info("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        threading.Thread(target=self.drain_and_exit, daemon=True).start()

    def drain_and_exit(self):
        # sigterm_watchdog: requests in flight (new ones are still accepted) are served to the end
        time.sleep(0.3)
        while True:
            remaining = self.serving.in_flight()
            self.log.info(f"Gracefully exiting... Remaining number of requests {len(remaining)}. "
                          f"Remaining requests remaining_rids={remaining!r}.")
            if not remaining:
                break
            time.sleep(5)
        if self.sim.new:
            self.shutdown_v0_5_23()
        kill_process_tree()  # as SGLang 0.5.10 does after the drain: the shell sees 137

    def shutdown_v0_5_23(self):
        """After the drain, v0.5.23 asks this node's schedulers to shut down (ShutdownReq: they release and exit)
        and waits up to 15 s, then SIGKILLs the tree and waits up to 60 s for it to be reaped; then kills itself.
        The scheduler_ignores_shutdown and unreaped_child faults make the stragglers each wait logs."""
        me = os.getpid()
        schedulers = [ready["pid"] for ready in self.ready_infos]
        for fd in self.control_fds:
            try:
                os.write(fd, b"shutdown\n")
            except OSError:
                pass
        still_alive = wait_gone(schedulers, self.sim.scaled(15))
        if still_alive:
            self.log.error(f"Schedulers still alive 15s after ShutdownReq, killing them before they released: "
                           f"{still_alive}")
        spared = []
        if "unreaped_child" in self.sim.faults and wait_gone(schedulers[:1], 0):  # still there
            # The stuck scheduler: SIGKILL would not end it, so it is left running, detached, holding its memory.
            spared = schedulers[:1]
            os.write(self.control_fds[0], b"detach\n")
            deadline = time.monotonic() + 5
            while os.getsid(spared[0]) != spared[0] and time.monotonic() < deadline:
                time.sleep(0.01)
        self.log.info(f"kill_process_tree called: parent_pid={me}, include_parent=True, pid={me}")
        children = [pid for pid in descendants(me) if pid not in spared]
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        not_reaped = wait_gone(children + spared, self.sim.scaled(60))
        if not_reaped:
            self.log.error(f"kill_process_tree: {len(not_reaped)} process(es) not reaped within 60s after SIGKILL; "
                           f"pids={not_reaped}")
        os.kill(me, signal.SIGKILL)

    # lifecycle --------------------------------------------------------------------------------
    def run(self):
        signal.signal(signal.SIGQUIT, self.on_sigquit)
        if "ignore_sigterm" in self.sim.faults:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.log.info(self.config.repr_line())
        readers = self.launch_subprocesses()
        self.wait_for_ready(readers)
        if self.args.node_rank >= 1:
            self.serve_dummy_health()
        self.serving = Serving(self.config, self.ready_infos)
        if self.sim.new:
            timings = self.scheduler_info["timings"]
            graphs = ", ".join(f"{phase}={seconds:.2f}" for phase, seconds in timings["cuda_graph"].items())
            elapsed = time.time() - self.start_time
            self.serving.startup_phases = {"load_weight": timings["load_weight"],
                                           "kv_cache_allocation": timings["kv_cache_allocation"],
                                           "cuda_graph": sum(timings["cuda_graph"].values()),
                                           "scheduler_e2e": elapsed, "tokenizer_e2e": elapsed}
            self.log.info(f"Engine startup timings (s): load_weight={timings['load_weight']:.2f}, "
                          f"kv_cache_allocation={timings['kv_cache_allocation']:.2f}, scheduler_e2e={elapsed:.2f}, "
                          f"cuda_graph={{{graphs}}}, tokenizer_e2e={elapsed:.2f}")
        self.serve_http()

    def http_server(self, handler):
        """A uvicorn-like server bound to --host/--port; OSError (with uvicorn's log line) when it cannot bind."""
        # uvicorn's backlog (2048), not socketserver's 5: a burst of clients must not be refused
        server_class = type("SimHTTPServer", (http.server.ThreadingHTTPServer,),
                            {"daemon_threads": True, "request_queue_size": 2048, "handle_error": handle_http_error})
        if ":" in self.args.host:
            server_class.address_family = socket.AF_INET6
        try:
            return server_class((self.args.host, self.args.port), handler)
        except OSError as exc:
            self.log.error(f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                           f"({self.args.host!r}, {self.args.port}): {exc.strerror.lower()}")
            raise

    def serve_http(self):
        self.log.info(f"INFO:     Started server process [{os.getpid()}]")
        self.log.info("INFO:     Waiting for application startup.")
        self.log.info("INFO:     Application startup complete.")
        try:
            httpd = self.http_server(make_handler(self))
        except OSError:
            for pid in descendants(os.getpid()):
                os.kill(pid, signal.SIGKILL)
            sys.exit(1)
        self.log.info(f"INFO:     Uvicorn running on http://{self.args.host}:{self.args.port} (Press CTRL+C to quit)")
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        threading.Thread(target=self.warmup, daemon=True).start()
        # As asyncio's loop.add_signal_handler: the kernel hands a process's signal to any thread that does not
        # block it (one just starting for a connection takes it as easily as the main thread), while Python runs
        # the handler only in the main thread, once that thread wakes up. In signal.pause() it never did (the
        # handler waited for the SIGKILL); the wakeup fd, written wherever the signal lands, wakes it.
        wakeup_r, wakeup_w = os.pipe()
        os.set_blocking(wakeup_w, False)
        signal.set_wakeup_fd(wakeup_w)
        if "ignore_sigterm" not in self.sim.faults:
            signal.signal(signal.SIGTERM, self.on_sigterm)
        while True:
            os.read(wakeup_r, 512)  # Python runs pending handlers when it returns

    def warmup(self):
        try:
            self.run_warmup()
        except Exception as exc:  # noqa: BLE001 - _execute_server_warmup: any failure kills the server
            self.log.error(f"Initialization failed. warmup error: {type(exc).__name__}: {exc}")
            kill_process_tree()

    def run_warmup(self):
        base = f"http://{self.local_host()}:{self.args.port}"
        headers = {"Authorization": "Bearer " + self.args.api_key} if self.args.api_key else {}
        if not self.args.skip_server_warmup:
            urllib.request.urlopen(urllib.request.Request(base + "/model_info", headers=headers), timeout=5).read()
            payload = {"text": "The capital city of France is",
                       "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
            request = urllib.request.Request(base + "/generate", data=json.dumps(payload).encode(),
                                             headers=dict(headers, **{"Content-Type": "application/json"}))
            urllib.request.urlopen(request, timeout=600).read()
        self.status = "Up"
        self.log.info("The server is fired up and ready to roll!")
        self.tell_schedulers_up()

    def tell_schedulers_up(self):
        for fd in self.control_fds:
            try:
                os.write(fd, b"up\n")
            except OSError:
                pass

    def serve_dummy_health(self):
        """What a node of rank >= 1 does once its schedulers are ready (engine.py): a health server that says 200
        whatever the group does, then a wait on each scheduler in turn; never returns."""
        address = f"{self.args.host}:{self.args.port}"
        try:
            httpd = self.http_server(make_dummy_health_handler(self.args.enable_metrics))
        except OSError:
            httpd = None
        self.log.info(f"Dummy health check server started in background thread at {address}")
        if httpd:
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
        else:  # uvicorn ended its thread; the main thread goes on waiting for the schedulers
            self.log.info(f"Dummy health check server stopped at {address}")
        self.tell_schedulers_up()
        for pid in self.scheduler_pids:
            status = os.waitpid(pid, 0)[1]
            self.log.error(f"Scheduler or DataParallelController {pid} terminated with "
                           f"{os.waitstatus_to_exitcode(status)}")
        # Then launch_server goes on into its HTTP server with no tokenizer manager (as 0.5.18 logs show).
        self.log.info(f"INFO:     Started server process [{os.getpid()}]")
        self.log.info("INFO:     Waiting for application startup.")
        self.log.error("ERROR:    " + fake_traceback(
            [("entrypoints/http_server.py", 280, "lifespan", "server_args = tokenizer_manager.server_args")],
            "AttributeError: 'NoneType' object has no attribute 'server_args'"))
        self.log.error("ERROR:    Application startup failed. Exiting.")
        sys.exit(3)

    def local_host(self):
        host = self.args.host
        if host in ("0.0.0.0", ""):
            return "127.0.0.1"
        if host == "::":
            return "[::1]"
        return f"[{host}]" if ":" in host else host

    # endpoints --------------------------------------------------------------------------------
    def model_info(self):
        info = {"model_path": self.args.model_path, "tokenizer_path": self.args.tokenizer_path,
                "is_generation": True, "preferred_sampling_params": None, "weight_version": "default"}
        if self.sim.new:
            info.update({"served_model_name": self.args.served_model_name, "load_format": "auto",
                         "reasoning_parser": None, "tool_call_parser": None, "disaggregation_mode": "null",
                         "has_image_understanding": False, "has_audio_understanding": False,
                         "model_type": self.model.get("model_type"),
                         "architectures": self.model.get("architectures")})
        return info

    def server_info(self):
        info = self.config.as_dict()
        scheduler = {k: v for k, v in self.scheduler_info.items() if k not in ("timings", "memory_usage", "pid")}
        info.update(scheduler)
        # One internal state per DP rank, from that rank's TP0 scheduler.
        info["internal_states"] = [
            dict(self.config.as_dict(), last_gen_throughput=self.serving.last_gen_throughput(dp_rank),
                 memory_usage=ready["memory_usage"], effective_max_running_requests_per_dp=ready["max_running_requests"])
            for dp_rank, ready in enumerate(self.ready_infos[::self.args.tp_size])]
        info["version"] = self.sim.version
        if self.sim.new:
            info["frontend"] = "python"
            info["startup_time"] = self.scheduler_info["timings"]
        return info

    def ready(self):
        """GET /ready (v0.5.23): up, and neither shutting down nor paused; no generation."""
        return self.status == "Up" and not self.gracefully_exit and not self.paused

    def loads(self):
        """GET /v1/loads (SGLang's v1_loads.py): the schedulers' live counts per DP rank, metrics enabled or not."""
        return {"timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(), "version": self.sim.version,
                "loads": self.serving.loads()}

    def metrics(self):
        labels = {"engine_type": "unified", "model_name": self.args.served_model_name, "pp_rank": "0", "tp_rank": "0"}
        return self.serving.metrics(labels)
