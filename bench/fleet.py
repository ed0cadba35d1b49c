"""Benchmark: one ansible-playbook run over many simulated GPU hosts - how the controller's cost grows with the fleet.

  .venv/bin/python -m bench.fleet [--hosts 1,4,16,32] [--servers 2] [--reps 2] [--forks 16] [--out bench/results]

Each host is inventories/local's simulated host in a directory of its own (fake GPUs, state, scripts, logs, its own
ports; the model and the installed SGLang are shared), all on this machine through the local connection. For each
fleet size N, hosts 1..N are relaunched by one run of playbooks/relaunch.yml: ``restarted`` (every server stopped
and started again: stop, launch, wait), then a no-op (nothing to change), ``--reps`` times each, alternating.
Measured per run: wall seconds, and the CPU seconds of ansible-playbook with all its children (os.wait4); the hosts
being this machine, that is the controller's work and the modules' work on the hosts. The hosts' interpreter is a
wrapper (``host-python``) that runs the real one and records the CPU of each module it ran, with the module's own
children (nvidia-smi): the host side. The controller is the rest - what a controller of real GPU hosts spends, where
the modules run on the hosts. The servers run detached and are not counted. Writes <out>/fleet.md and fleet.json;
asserts nothing. The servers are stopped at the end.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bench.collection import BENCH, REPO
from bench.targets import SIMULATOR, run_checked

HOST_VARS = REPO / "inventories" / "local" / "host_vars" / "simhost.yml"
RUNS = (("restarted", {"relaunch_state": "restarted"}), ("no-op", {}))
# The hosts' Python: the module's CPU (os.wait4: its waited children too) and the wrapper's own, one line per call.
HOST_PYTHON = """#!{python} -I
import os, resource, sys
pid = os.fork()
if pid == 0:
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
_pid, status, usage = os.wait4(pid, 0)
own = resource.getrusage(resource.RUSAGE_SELF)
with open({log!r}, "a") as log:
    log.write(f"{{usage.ru_utime + usage.ru_stime + own.ru_utime + own.ru_stime:.4f}}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="1,4,16,32", help="fleet sizes, in order (default 1,4,16,32)")
    parser.add_argument("--servers", type=int, default=2, help="GPUs and servers per host (default 2)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--forks", type=int, default=16, help="ansible-playbook --forks (default 16, as ansible.cfg)")
    parser.add_argument("--time-scale", type=float, default=0.05, help="SGLANG_SIM_TIME_SCALE of the servers")
    parser.add_argument("--base-port", type=int, default=32000, help="port of the first host's first server")
    parser.add_argument("--workdir", default=str(REPO / ".work" / "bench-fleet"))
    parser.add_argument("--out", default=str(BENCH / "results"))
    return parser.parse_args(argv)


def _listening(port):
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def host_name(index):
    return f"host{index:02d}"


class Fleet:
    """``count`` simulated hosts under ``workdir`` and an inventory of them (group vars: inventories/local's)."""

    def __init__(self, workdir, count, servers, base_port, time_scale):
        self.workdir = Path(workdir).resolve()
        self.hosts = [host_name(index) for index in range(count)]
        self.servers = servers
        self.base_port = base_port
        self.time_scale = time_scale
        self.model_path = self.workdir / "models" / "Qwen3-Next-80B-A3B-Instruct"
        self.site = self.workdir / "site"
        self.inventory = self.workdir / "inventory"
        self.host_python = self.workdir / "host-python"
        self.host_cpu_log = self.workdir / "host-cpu.log"

    def gpu_dir(self, host):
        return self.workdir / host / "gpu"

    def prepare(self):
        ports = range(self.base_port, self.base_port + len(self.hosts) * self.servers)
        busy = [port for port in ports if _listening(port)]
        if busy:
            raise SystemExit(f"ports {busy[:5]} are in use on this machine; pass another --base-port")
        python = sys.executable
        run_checked([python, SIMULATOR / "sglang_sim.py", "--make-model", self.model_path,
                     "--arch", "Qwen3NextForCausalLM", "--hybrid-mamba", "--shards", "8"])
        run_checked([python, SIMULATOR / "sglang_sim.py", "--make-site", self.site])
        for host in self.hosts:
            run_checked([python, SIMULATOR / "fakegpu.py", "init", self.gpu_dir(host), "--count", str(self.servers)])
        group_vars = yaml.safe_load(HOST_VARS.read_text())
        group_vars.update(
            simhost_repo=str(REPO), sglang_gpu_count=self.servers, sglang_model_path=str(self.model_path),
            sglang_env=dict(group_vars["sglang_env"], PYTHONPATH=str(self.site),
                            SGLANG_SIM_TIME_SCALE=str(self.time_scale)),
            relaunch_progress_interval=5)
        self.write_host_python()
        hosts = {host: {"ansible_connection": "local", "ansible_python_interpreter": str(self.host_python),
                        "simhost_dir": str(self.workdir / host),
                        "sglang_base_port": self.base_port + index * self.servers}
                 for index, host in enumerate(self.hosts)}
        (self.inventory / "group_vars").mkdir(parents=True, exist_ok=True)
        (self.inventory / "group_vars" / "sglang_hosts.yml").write_text(yaml.safe_dump(group_vars))
        (self.inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"sglang_hosts": {
            "hosts": hosts}}}}))

    def write_host_python(self):
        """The hosts' interpreter: runs this Python on the module and appends the CPU seconds it took (its children
        included, the wrapper's own too) to host_cpu_log, one line per module call."""
        self.host_python.write_text(HOST_PYTHON.format(python=sys.executable, log=str(self.host_cpu_log)))
        self.host_python.chmod(0o755)

    def host_cpu(self):
        """CPU seconds of the module calls recorded since the last call, and how many there were."""
        try:
            lines = self.host_cpu_log.read_text().split()
        except FileNotFoundError:
            lines = []
        self.host_cpu_log.write_text("")
        return sum(float(line) for line in lines), len(lines)

    def run(self, count, forks, extra_vars, label):
        """One relaunch.yml over the first ``count`` hosts: (rc, wall s, CPU s of it and its children, of which on the
        hosts, module calls)."""
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
        log = self.workdir / "raw" / f"{label}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(self.inventory), "--forks", str(forks),
                "--limit", ",".join(self.hosts[:count]), "-e", json.dumps(extra_vars),
                str(REPO / "playbooks" / "relaunch.yml")]
        self.host_cpu()
        started = time.monotonic()
        with open(log, "w") as output:
            process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT)
            _pid, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - started
        return (os.waitstatus_to_exitcode(status), wall, usage.ru_utime + usage.ru_stime, *self.host_cpu())

    def reset(self):
        for host in self.hosts:
            run_checked([sys.executable, BENCH / "fleet_tool.py", str(self.gpu_dir(host)), "reset"])


def summarize(records):
    rows = []
    for count in sorted({record["hosts"] for record in records}):
        for kind, _variables in RUNS:
            runs = [record for record in records if record["hosts"] == count and record["run"] == kind]
            if not runs:
                continue
            walls, cpus = [run["wall_s"] for run in runs], [run["cpu_s"] for run in runs]
            controller = [(run["cpu_s"] - run["host_cpu_s"]) / count for run in runs]
            rows.append({"hosts": count, "run": kind, "ok": sum(run["rc"] == 0 for run in runs), "reps": len(runs),
                         "wall_s": statistics.median(walls), "wall_range": [min(walls), max(walls)],
                         "cpu_s": statistics.median(cpus), "cpu_per_host_s": statistics.median(cpus) / count,
                         "controller_cpu_per_host_s": statistics.median(controller),
                         "controller_cpu_per_host_range": [min(controller), max(controller)],
                         "host_cpu_per_host_s": statistics.median(run["host_cpu_s"] / count for run in runs),
                         "module_calls_per_host": statistics.median(run["module_calls"] / count for run in runs)})
    return rows


def markdown(result):
    setup = (f"One `ansible-playbook playbooks/relaunch.yml` over N simulated hosts of {result['servers']} servers "
             f"each (local connection, forks {result['forks']}, SGLANG_SIM_TIME_SCALE {result['time_scale']}), on "
             f"{result['machine']}; commit {result['commit']}. CPU: ansible-playbook with its children, the hosts "
             "being this machine (the servers not counted); of it, on the hosts: the module calls, measured by the "
             "hosts' interpreter (a wrapper); the controller: the rest, what it costs where the modules run on real "
             f"hosts. Medians of {result['reps']} runs (min-max).")
    lines = [f"# Fleet scaling ({result['date']})", "", setup, "",
             ("| hosts | run | ok | wall s | CPU s | controller CPU s per host | host CPU s per host | module calls "
              "per host |"), "|---|---|---|---|---|---|---|---|"]
    for row in result["summary"]:
        low, high = row["wall_range"]
        c_low, c_high = row["controller_cpu_per_host_range"]
        lines.append(f"| {row['hosts']} | {row['run']} | {row['ok']}/{row['reps']} | {row['wall_s']:.1f} "
                     f"({low:.1f}-{high:.1f}) | {row['cpu_s']:.1f} | {row['controller_cpu_per_host_s']:.2f} "
                     f"({c_low:.2f}-{c_high:.2f}) | {row['host_cpu_per_host_s']:.2f} | "
                     f"{row['module_calls_per_host']:g} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    counts = [int(count) for count in args.hosts.split(",") if count.strip()]
    fleet = Fleet(args.workdir, max(counts), args.servers, args.base_port, args.time_scale)
    fleet.prepare()
    records = []
    try:
        for count in counts:
            # Every host of this size serving first (the hosts added since the last size are launched).
            rc, wall, *_cpu = fleet.run(count, args.forks, {}, f"x{count}-launch")
            print(f"[fleet] {count} hosts launched: rc={rc} wall={wall:.1f}s", flush=True)
            for rep in range(args.reps):
                for kind, variables in RUNS:
                    rc, wall, cpu, host_cpu, calls = fleet.run(count, args.forks, variables, f"x{count}-{kind}-r{rep}")
                    records.append({"hosts": count, "run": kind, "rep": rep, "rc": rc, "wall_s": round(wall, 3),
                                    "cpu_s": round(cpu, 3), "host_cpu_s": round(host_cpu, 3), "module_calls": calls})
                    print(f"[fleet] {count} hosts {kind} r{rep}: rc={rc} wall={wall:.1f}s cpu={cpu:.1f}s "
                          f"(controller {(cpu - host_cpu) / count:.2f} s/host, hosts {host_cpu / count:.2f} s/host in "
                          f"{calls} module calls)", flush=True)
    finally:
        fleet.reset()
    result = {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} CPU cores",
              "commit": subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True,
                                       text=True, check=False).stdout.strip() or "unknown",
              "servers": args.servers, "forks": args.forks, "time_scale": args.time_scale, "reps": args.reps,
              "runs": records, "summary": summarize(records)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "fleet.md").write_text(markdown(result))
    print(f"wrote {out / 'fleet.md'}, fleet.json", flush=True)


if __name__ == "__main__":
    main()
