"""Runs the contenders through the scenarios on one target, alternating, and measures each timed run.

Per repetition every contender goes through the scenarios in turn, the contenders in an order rotated by one
each repetition. Before a timed run the host holds the scenario's previous fleet, launched as the contender
launches (ours, or by hand for the baselines; untimed; skipped when the contender's previous timed run left
exactly that fleet), after a reset that kills every fleet process. The baselines' waits are scaled
(scenarios.baseline_waits) to the slowest server's startup under ours: the median over ours' runs of that
fleet layout before a baseline first needs it.

Measured per timed run, nothing asserted:
  wall_s             ansible-playbook from start to exit
  cpu_s              its user + system CPU seconds, children included (os.wait4): the controller's cost;
                     with the local connection the modules run on this machine too and are part of it
  startup_s          the slowest server's own startup, launched -> ready, from its log (bench/watch.py)
  overhead_s         wall_s - startup_s
  ready_to_known_s   the last server ready (its log) -> the end of the contender's readiness task
  crash_to_failed_s  the crashed server's log says crashed -> the first failed task
  failure_names_crashed  that first failure names the crashed server (not only another one not ready yet)
  zombie_named_s     run start -> the first task result naming the zombie's pid ("pid": N); None: never
  pct_exec           `pct exec` calls in the rig's call log during the run
  changed            the recap's changed count
"""

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bench import scenarios as catalogue
from bench.collection import BENCH, REPO
from bench.watch import LogWatcher, ServerLog

RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)
SETUP_READY_TIMEOUT_S = 90
# How the fleet a baseline's timed run starts from is launched: by hand, like the baselines, without their waits.
BY_HAND_LAUNCH = "bench/baselines/launch.yml"


class PlaybookRun:
    """One ansible-playbook run: exit status, wall and CPU seconds, output, the bench_events callback's events."""

    def __init__(self, rc, wall_s, cpu_s, started, ended, output, events):
        self.rc, self.wall_s, self.cpu_s = rc, wall_s, cpu_s
        self.started, self.ended = started, ended
        self.output, self.events = output, events
        self.stdout = output.read_text(errors="replace")

    @property
    def recap(self):
        return [{"host": host, "ok": int(ok), "changed": int(changed), "unreachable": int(unreachable),
                 "failed": int(failed)} for host, ok, changed, unreachable, failed in RECAP.findall(self.stdout)]

    def task_end(self, name):
        """The time the last host finished the last task called ``name`` (role prefix ignored)."""
        ends = [event["time"] for event in self.events
                if event["event"] in ("ok", "failed") and event["task"].split(" : ")[-1] == name]
        return max(ends) if ends else None

    def first_failure(self):
        """The first failed (or unreachable) task result, not ignored; None when nothing failed."""
        return next((event for event in self.events
                     if event["event"] in ("failed", "unreachable") and not event.get("ignore_errors")), None)

    def first_naming(self, pid):
        needle = re.compile(rf'"pid": {pid}\b')
        times = [event["time"] for event in self.events
                 if "result" in event and needle.search(json.dumps(event["result"]))]
        return min(times) if times else None


def failure_names(event, name, port):
    """Whether a failed task says what failed is the server ``name`` (its name or port), not only that some failed:
    of a loop, only its failed items count; the command line (every port) does not."""
    result = event.get("result", {})
    failed = [item for item in result.get("results", []) if item.get("failed")] or [result]
    text = json.dumps([{key: value for key, value in item.items() if key not in ("cmd", "invocation")}
                       for item in failed])
    return re.search(rf"\b{re.escape(name)}\b|[: ]{port}\b", text) is not None


class Bench:
    """One target, its runs and their records; raw outputs under ``raw_dir``."""

    def __init__(self, target, servers, time_scale, raw_dir, log=print):
        self.target, self.servers, self.time_scale = target, servers, time_scale
        self.raw_dir = Path(raw_dir)
        self.raw_dir.mkdir(parents=True, exist_ok=True)
        self.log = log
        self.sequence = 0
        self.records = []  # every timed run's record, in the order measured
        self.startups = {}  # (layout, hosts) -> ours' slowest startups
        self.calibrations = {}

    # --- one playbook run -------------------------------------------------------------------------
    def playbook(self, playbook, variables, label, host_count=1):
        self.sequence += 1
        stem = self.raw_dir / f"{self.sequence:04d}-{label}"
        vars_file, events_file, stdout_file = (stem.with_suffix(suffix) for suffix in (".vars.yml", ".events", ".out"))
        vars_file.write_text(yaml.safe_dump(variables, sort_keys=False))
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_CALLBACK_PLUGINS=str(BENCH / "callback_plugins"),
                   ANSIBLE_CALLBACKS_ENABLED="bench_events", BENCH_EVENTS_FILE=str(events_file))
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), *self.target.inventory_args(host_count),
                "--forks", str(max(host_count, 1)), "-e", f"@{vars_file}", str(REPO / playbook)]
        started = time.time()
        clock = time.monotonic()
        with open(stdout_file, "wb") as output:
            process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT)
            _pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - clock
        events = [json.loads(line) for line in events_file.read_text().splitlines()] if events_file.exists() else []
        return PlaybookRun(process.returncode, wall, usage.ru_utime + usage.ru_stime, started, started + wall,
                           stdout_file, events)

    def variables(self, contender, fleet, waits, ours_state="restarted"):
        servers = fleet.servers(self.servers, self.target.base_port, self.target.draft_model_path)
        variables = dict(self.target.extra_vars(self.time_scale), sglang_servers=servers)
        if contender.key == "ours":
            variables["relaunch_state"] = ours_state
        else:
            variables.update({key: value for key, value in waits.items() if key.startswith("bench_")})
        return variables, servers

    def server_logs(self, servers, host_count):
        return [ServerLog(host, server["name"], self.target.log_path(host, server["name"]))
                for host in self.target.hosts[:host_count] for server in servers]

    # --- the fleet before a timed run ---------------------------------------------------------------
    def reset(self, host_count):
        for host in self.target.hosts[:host_count]:
            self.target.tool(host, "reset")
            self.target.forget_pid_files(host)

    def launch(self, contender, fleet, host_count, label, attempts=2):
        """Reset, then bring up ``fleet`` as the contender's timed run will find it (untimed): ours launches its
        own, a baseline's is launched by hand (BY_HAND_LAUNCH). Returns once every server's log says ready; a
        launch that did not get there is tried once more before the bench gives up."""
        self.reset(host_count)
        variables, servers = self.variables(contender, fleet, {})
        logs = self.server_logs(servers, host_count)
        with LogWatcher(logs):
            run = self.playbook(contender.playbook if contender.key == "ours" else BY_HAND_LAUNCH, variables, label,
                                host_count)
            deadline = time.monotonic() + SETUP_READY_TIMEOUT_S
            while any(log.ready is None for log in logs) and time.monotonic() < deadline:
                time.sleep(0.2)
        not_ready = [f"{log.host}/{log.name}" for log in logs if log.ready is None]
        if not_ready:
            message = (f"{contender.key} did not bring up the fleet before a timed run ({label}, rc={run.rc}): "
                       f"{', '.join(not_ready)} not ready after {SETUP_READY_TIMEOUT_S} s; see {self.raw_dir}")
            if attempts <= 1:
                raise RuntimeError(message)
            self.log(f"[{self.target.name}] {message}; trying once more")
            return self.launch(contender, fleet, host_count, label + "-again", attempts - 1)
        if contender.key == "ours":
            self.startups.setdefault((fleet.layout, host_count), []).append(max(log.startup_s for log in logs))
        return run, logs

    def waits(self, contender, fleet, host_count):
        """The baselines' waits, scaled to the slowest server's startup under ours: the median over ours' runs of
        this layout and host count so far, fixed when a baseline first needs it (one untimed launch by ours when
        there is none)."""
        key = (fleet.layout, host_count)
        if contender.key == "ours":
            return {}
        if key not in self.calibrations:
            if not self.startups.get(key):
                self.launch(catalogue.CONTENDERS[0], catalogue.Fleet(fleet.layout), host_count,
                            f"calibrate-{fleet.layout}-x{host_count}")
            samples = self.startups[key]
            startup = statistics.median(samples)
            self.calibrations[key] = dict(catalogue.baseline_waits(startup), startup_s=round(startup, 3),
                                          samples=len(samples), layout=fleet.layout, hosts=host_count)
            self.log(f"[{self.target.name}] {fleet.layout} x{host_count}: slowest startup under ours {startup:.2f} s "
                     f"(median of {len(samples)}) -> baselines sleep {self.calibrations[key]['bench_sleep_s']} s, "
                     f"delay {self.calibrations[key]['bench_delay_s']} s")
        return self.calibrations[key]

    # --- the timed run ------------------------------------------------------------------------------
    def measure(self, scenario, contender, rep, host_count):
        waits = self.waits(contender, scenario.fleet, host_count)
        variables, servers = self.variables(contender, scenario.fleet, waits, scenario.ours_state)
        zombies = self.kill_faulty(scenario, host_count) if scenario.kill_faulty_first else []
        logs = self.server_logs(servers, host_count)
        label = f"{scenario.key}-x{host_count}-{contender.key}-r{rep}"
        with LogWatcher(logs):
            run = self.playbook(contender.playbook, variables, label, host_count)
        record = {"target": self.target.name, "scenario": scenario.key, "hosts": host_count,
                  "servers_per_host": len(servers), "contender": contender.key, "rep": rep, "label": label,
                  "rc": run.rc, "wall_s": round(run.wall_s, 3), "cpu_s": round(run.cpu_s, 3),
                  "changed": sum(row["changed"] for row in run.recap),
                  "failed_hosts": sum(1 for row in run.recap if row["failed"] or row["unreachable"]),
                  "pct_exec": self.target.pct_calls(run.started, run.ended), "output": run.output.name,
                  "servers": [log.as_dict() for log in logs]}
        ports = {server["name"]: server["port"] for server in servers}
        record.update(self.figures(run, logs, ports, contender, zombies, host_count))
        if contender.key == "ours" and record["startup_s"] is not None and record["ready"] == len(logs):
            self.startups.setdefault((scenario.fleet.layout, host_count), []).append(record["startup_s"])
        self.log(f"[{self.target.name}] {label}: rc={run.rc} wall={run.wall_s:.1f}s cpu={run.cpu_s:.1f}s "
                 f"startup={record['startup_s']} pct_exec={record['pct_exec']} changed={record['changed']}")
        return record, scenario.leaves(run.rc == 0)

    def figures(self, run, logs, ports, contender, zombies, host_count):
        relaunched = [log for log in logs if log.launched is not None]
        ready = [log for log in relaunched if log.ready is not None]
        crashed_logs = sorted((log for log in relaunched if log.crashed is not None), key=lambda log: log.crashed)
        crashed = [log.crashed for log in crashed_logs]
        startup = max((log.startup_s for log in ready), default=None)
        knows = run.task_end(contender.knows_task)
        all_ready = max(log.ready for log in ready) if ready and len(ready) == len(relaunched) else None
        failure = run.first_failure()
        failed_at = failure["time"] if failure else None
        named = [run.first_naming(pid) for pid in zombies]
        alive_after = set(self.orphans(host_count)) & set(zombies) if zombies else set()
        return {
            "relaunched": len(relaunched), "ready": len(ready), "crashed": len(crashed),
            "startup_s": round(startup, 3) if startup is not None else None,
            "overhead_s": round(run.wall_s - startup, 3) if startup is not None else None,
            "ready_to_known_s": round(knows - all_ready, 3) if knows and all_ready else None,
            "crash_to_failed_s": round(failed_at - min(crashed), 3) if crashed and failed_at else None,
            "failure_names_crashed": (failure_names(failure, crashed_logs[0].name, ports[crashed_logs[0].name])
                                      if crashed and failure else None),
            "zombie_pids": zombies,
            "zombie_named_s": (round(min(named) - run.started, 3) if zombies and None not in named else None),
            "zombie_alive_after": bool(alive_after),
        }

    def kill_faulty(self, scenario, host_count):
        """SIGKILL the faulty server of the previous fleet on every host; return what it left running (orphans)."""
        servers = scenario.previous.servers(self.servers, self.target.base_port, self.target.draft_model_path)
        port = servers[catalogue.fault_index(len(servers))]["port"]
        for host in self.target.hosts[:host_count]:
            self.target.tool(host, "kill-server", str(port))
        return self.orphans(host_count)

    def orphans(self, host_count):
        return [pid for host in self.target.hosts[:host_count] for pid in self.target.tool(host, "orphans")["orphans"]]

    # --- the series ---------------------------------------------------------------------------------
    def run_scenarios(self, scenario_list, contenders, reps, host_count=1, only=None):
        """Adds a record per timed run to ``records``; ``only``: {contender key: scenario keys} for contenders
        limited to some scenarios."""
        for rep in range(reps):
            shift = rep % len(contenders)
            for contender in contenders[shift:] + contenders[:shift]:
                fleet = None  # unknown: reset and launch before the first timed run
                for scenario in scenario_list:
                    if only and contender.key in only and scenario.key not in only[contender.key]:
                        continue
                    if fleet != scenario.previous:
                        self.launch(contender, scenario.previous, host_count,
                                    f"before-{scenario.key}-x{host_count}-{contender.key}-r{rep}")
                    record, fleet = self.measure(scenario, contender, rep, host_count)
                    self.records.append(record)
        self.reset(host_count)

    def pct_exec_cost(self, host_count, calls=20):
        """Seconds per `pct exec` as the controller sees it: one `raw` task of ``calls`` items per host."""
        run = self.playbook("bench/pct_exec_cost.yml", {"bench_calls": calls}, f"pct-exec-cost-x{host_count}",
                            host_count)
        start = [event["time"] for event in run.events if event["event"] == "task_start"]
        end = run.task_end("One pct exec per item")
        if run.rc != 0 or not start or end is None:
            raise RuntimeError(f"bench/pct_exec_cost.yml failed (rc={run.rc}); see {self.raw_dir}")
        per_call = (end - max(start)) / calls
        return {"hosts": host_count, "calls_per_host": calls, "seconds_per_call": round(per_call, 4),
                "pct_exec": self.target.pct_calls(run.started, run.ended), "cpu_s": round(run.cpu_s, 3),
                "wall_s": round(run.wall_s, 3)}
