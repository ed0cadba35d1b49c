"""Benchmark: relaunching simulated SGLang fleets with gpuops.sglang and with what users write today.

  .venv/bin/python -m bench [--target local --target pct] [--reps 5] [--scaling 1,2,4,8] [--history bench/results.md]

Targets: local (inventories/local: a simulated 8-GPU host on this machine, local connection) and pct (rig
containers reached through community.proxmox.proxmox_pct_remote; needs root and LXC, tests/rig). Writes
<out>/latest.md, latest.json and latest.png, every playbook run's output under <out>/raw/; with --history,
appends a dated section to that file. Measures, asserts nothing (bench/runner.py says what is measured).
"""

import argparse
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from bench import report
from bench import scenarios as catalogue
from bench.collection import REPO
from bench.runner import Bench
from bench.targets import LocalTarget, RigTarget

RIG_VMIDS = tuple(range(9700, 9708))


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", action="append", choices=("local", "pct"),
                        help="default: local, and pct where the LXC rig can come up")
    parser.add_argument("--scenario", action="append", choices=catalogue.SCENARIO_KEYS, help="default: all")
    parser.add_argument("--contender", action="append", choices=catalogue.CONTENDER_KEYS, help="default: all")
    parser.add_argument("--only", action="append", default=[], metavar="CONTENDER@TARGET=SCENARIO,...",
                        help="run that contender on that target in these scenarios only (to fit a time budget)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--servers", type=int, default=8, help="GPUs and servers per host (default 8)")
    parser.add_argument("--time-scale", type=float, default=0.5, help="SGLANG_SIM_TIME_SCALE of the servers")
    parser.add_argument("--scaling", default="", help="pct only: container counts, e.g. 1,2,4,8 (healthy scenario)")
    parser.add_argument("--scaling-reps", type=int, default=None, help="default: --reps")
    parser.add_argument("--scaling-contender", action="append", choices=catalogue.CONTENDER_KEYS,
                        help="default: the contenders of the scenarios")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--workdir", default=str(REPO / ".work" / "bench"))
    parser.add_argument("--base-port", type=int, default=30000, help="local: port of the first server")
    parser.add_argument("--rig-workdir", default="/var/tmp/gpuops-bench-rig")
    parser.add_argument("--rig-port", type=int, default=2299)
    parser.add_argument("--merge", help="a latest.json of an earlier run: its runs of the targets this run does not "
                                        "run are kept in this report (e.g. pct run after local)")
    parser.add_argument("--history", help="append a dated section to this file (make bench: bench/results.md)")
    parser.add_argument("--no-plot", action="store_true")
    return parser.parse_args(argv)


def parse_only(items):
    """``by_hand_loop@pct=healthy,noop`` -> {"pct": {"by_hand_loop": {"healthy", "noop"}}}."""
    only = {}
    for item in items:
        contender, _at, rest = item.partition("@")
        target, _eq, keys = rest.partition("=")
        scenario_keys = set(keys.split(","))
        if contender not in catalogue.CONTENDER_KEYS or target not in ("local", "pct") or \
                not scenario_keys <= set(catalogue.SCENARIO_KEYS):
            raise SystemExit(f"--only {item!r}: expected CONTENDER@TARGET=SCENARIO,... with a contender of "
                             f"{', '.join(catalogue.CONTENDER_KEYS)}, target local or pct, scenarios of "
                             f"{', '.join(catalogue.SCENARIO_KEYS)}")
        only.setdefault(target, {})[contender] = scenario_keys
    return only


def default_targets():
    from tests.rig import rig
    return ["local"] if rig.unavailable_reason() else ["local", "pct"]


def machine():
    load = os.getloadavg()
    return f"{os.cpu_count()} CPU cores, load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} (1/5/15 min) at the start"


def commit():
    result = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True,
                            text=True, check=False)
    return result.stdout.strip() or "unknown"


def run_scaling(bench, target, args, contenders, counts, result):
    """Healthy, on 1..N containers with forks = containers (one container: the scenarios' runs), and the cost of
    one pct exec at each size; a size that cannot be had ends the series with a note."""
    keys = args.scaling_contender or [contender.key for contender in contenders]
    scaling_contenders = [contender for contender in contenders if contender.key in keys]
    reps = args.scaling_reps or args.reps
    result["scaling"] = {"counts": counts, "servers_per_host": args.servers,
                         "contenders": [contender.key for contender in scaling_contenders], "reps": reps}
    for count in counts:
        try:
            target.prepare(args.servers, count)
            result["pct_exec_cost"].append(bench.pct_exec_cost(count))
            if count > 1:
                bench.run_scenarios([catalogue.scenario("healthy")], scaling_contenders, reps, host_count=count)
        except Exception as error:  # noqa: BLE001 - the series stops there, the results so far stay
            result["scaling"]["note"] = f"The series stopped at {count} containers: {error}"
            print(f"[pct] scaling stopped at {count} containers: {error}", flush=True)
            return


def merge_earlier(result, earlier, targets):
    """Keep the earlier run's figures of the targets this run did not run; the report says where each came from."""
    kept = [name for name in earlier["meta"]["targets"] if name not in targets]
    result["runs"] += [run for run in earlier["runs"] if run["target"] in kept]
    for key in ("calibrations", "skipped"):
        result[key].update((name, value) for name, value in earlier[key].items() if name in kept)
    if "pct" in kept:
        result["scaling"], result["pct_exec_cost"] = earlier["scaling"], earlier["pct_exec_cost"]
    result["meta"]["targets"] = kept + targets
    result["meta"]["merged"] = {name: {key: earlier["meta"][key] for key in ("date", "commit", "command", "machine")}
                                for name in kept}


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    targets = args.target or default_targets()
    scenario_list = [catalogue.scenario(key) for key in (args.scenario or catalogue.SCENARIO_KEYS)]
    contenders = [c for c in catalogue.CONTENDERS if c.key in (args.contender or catalogue.CONTENDER_KEYS)]
    scaling_counts = [int(count) for count in args.scaling.split(",") if count.strip()]
    only = parse_only(args.only)
    out = Path(args.out)
    raw = out / "raw"
    for name in targets:
        shutil.rmtree(raw / name, ignore_errors=True)
    result = {"meta": {"date": datetime.date.today().isoformat(), "machine": machine(), "commit": commit(),
                       "command": shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]),
                       "targets": targets, "scenarios": [s.key for s in scenario_list],
                       "contenders": [c.key for c in contenders], "reps": args.reps, "time_scale": args.time_scale,
                       "servers_per_host": args.servers,
                       "only": {target: {key: sorted(keys) for key, keys in limits.items()}
                                for target, limits in only.items()},
                       "faults": {"crash": catalogue.CRASH_FAULT, "zombie": catalogue.ZOMBIE_FAULT}},
              "calibrations": {}, "runs": [], "skipped": {}, "scaling": None, "pct_exec_cost": []}
    for name in targets:
        if name == "local":
            target = LocalTarget(Path(args.workdir) / "local", args.base_port)
        else:
            target = RigTarget(RIG_VMIDS[:max(scaling_counts + [1])], args.rig_port, args.rig_workdir)
        try:
            target.prepare(args.servers)
        except Exception as error:  # noqa: BLE001 - RuntimeError, or the rig's RigError: said in the report
            result["skipped"][name] = f"not run: {error}"
            print(f"[{name}] not run: {error}", flush=True)
            target.close()
            continue
        bench = Bench(target, args.servers, args.time_scale, raw / name, log=lambda line: print(line, flush=True))
        try:
            bench.run_scenarios(scenario_list, contenders, args.reps, only=only.get(name))
            if name == "pct" and scaling_counts:
                run_scaling(bench, target, args, contenders, scaling_counts, result)
        except Exception as error:  # noqa: BLE001 - the runs so far are reported, with why it stopped
            result["skipped"][name] = f"stopped after {len(bench.records)} timed runs: {error}"
            print(f"[{name}] stopped: {error}", flush=True)
        finally:
            result["runs"] += bench.records
            result["calibrations"][name] = list(bench.calibrations.values())
            target.close()
    if args.merge:
        merge_earlier(result, json.loads(Path(args.merge).read_text()), targets)
    result["summary"] = report.summarize(result["runs"])
    report.write(result, out, plot=not args.no_plot)
    if args.history:
        report.append_history(result, args.history)
    print(f"wrote {out / 'latest.md'}, latest.json" + ("" if args.no_plot else ", latest.png"), flush=True)


if __name__ == "__main__":
    main()
