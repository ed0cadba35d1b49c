"""Benchmark: relaunching 8 per-GPU SGLang servers with gpuops.sglang vs. the by-hand baseline.

Targets:
  local  the embedded default inventory (simulated 8-GPU host on this machine, local connection);
         needs `make sim-host` first.
  pct    one real LXC container reached through community.proxmox.proxmox_pct_remote (tests/rig);
         needs root and LXC; round trips are counted from the pct stand-in's call log.

Each scenario is one `ansible-playbook` run, timed from start to exit; nothing is asserted.
Results are appended to bench/results.md as a table row per scenario.

Usage: .venv/bin/python bench/relaunch_bench.py [--target local|pct] [--repeat N]
"""

import argparse
import datetime
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RESULTS = REPO / "bench" / "results.md"
RIG = REPO / "tests" / "rig" / "rig.py"
RIG_WORKDIR = Path("/var/tmp/gpuops-bench-rig")
RIG_VMID = "9700"
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)

# name, playbook, extra args, (untimed) playbook run before it for a clean slate.
STOP = ("playbooks/stop.yml", [])
STOP_NAIVE = ("bench/naive_relaunch.yml", ["--tags", "stop"])
SCENARIOS = (
    ("gpuops.sglang relaunch (state=restarted)", "playbooks/relaunch.yml", ["-e", "relaunch_state=restarted"],
     STOP_NAIVE),
    ("gpuops.sglang relaunch, nothing changed (state=started)", "playbooks/relaunch.yml", [], None),
    ("by hand: loop per server + uri 40x15s", "bench/naive_relaunch.yml", [], STOP),
)


def call_log_lines():
    log = RIG_WORKDIR / "pct-calls.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def run_playbook(inventory_args, playbook, extra, env):
    before = call_log_lines()
    started = time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), *inventory_args, playbook, *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    recap = RECAP.findall(proc.stdout)
    changed = sum(int(row[2]) for row in recap)
    failed = sum(int(row[4]) + int(row[3]) for row in recap)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-2000:])
    return {"wall_s": wall, "rc": proc.returncode, "changed": changed, "failed": failed,
            "pct_calls": call_log_lines() - before}


def pct_inventory(env):
    subprocess.run([sys.executable, str(RIG), "up", "--containers", RIG_VMID, "--workdir", str(RIG_WORKDIR),
                    "--port", "2299"], check=True, env=env)
    inventory = RIG_WORKDIR / "bench-inventory.yml"
    subprocess.run([sys.executable, str(RIG), "inventory", "--workdir", str(RIG_WORKDIR), "--output", str(inventory)],
                   check=True, env=env)
    return ["-i", str(inventory), "-i", str(REPO / "bench" / "inventory-pct")]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=("local", "pct"), default="local")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    inventory_args = pct_inventory(env) if args.target == "pct" else []
    rows = []
    try:
        for _round in range(args.repeat):
            for name, playbook, extra, before in SCENARIOS:
                if before:
                    run_playbook(inventory_args, *before, env)
                result = run_playbook(inventory_args, playbook, extra, env)
                print(f"{name}: {result}", flush=True)
                rows.append((name, result))
    finally:
        run_playbook(inventory_args, *STOP_NAIVE, env)
        if args.target == "pct":
            subprocess.run([sys.executable, str(RIG), "down", "--workdir", str(RIG_WORKDIR)], check=False, env=env)
    stamp = datetime.date.today().isoformat()
    with RESULTS.open("a") as handle:
        for name, result in rows:
            pct = str(result["pct_calls"]) if args.target == "pct" else "-"
            outcome = "ok" if result["rc"] == 0 else f"rc={result['rc']}"
            handle.write(f"| {stamp} | {args.target} | {name} | {result['wall_s']:.1f} | {pct} | "
                         f"{result['changed']} | {outcome} |\n")


if __name__ == "__main__":
    main()
