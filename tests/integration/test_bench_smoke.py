"""The benchmark's smoke run: one tiny scenario (2 servers, healthy, 1 repetition, every contender) against the
local simulated host, into a temp dir. It checks only that `python -m bench` produces its outputs and that they
are well-formed; what the numbers are is the benchmark's business (`make bench`), not a test's."""

import json
import subprocess
import sys

from .conftest import REPO_ROOT, free_port_block

CONTENDERS = {"ours", "seed_sleep", "uri_until", "by_hand_loop"}


def test_one_tiny_scenario_writes_table_json_and_plot(tmp_path):
    out = tmp_path / "results"
    bench = subprocess.run(
        [sys.executable, "-m", "bench", "--target", "local", "--scenario", "healthy", "--servers", "2", "--reps", "1",
         "--time-scale", "0.2", "--out", str(out), "--workdir", str(tmp_path / "work"),
         "--base-port", str(free_port_block(2))],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr[-3000:]

    result = json.loads((out / "latest.json").read_text())
    assert {run["contender"] for run in result["runs"]} == CONTENDERS
    for run in result["runs"]:
        assert (run["target"], run["scenario"], run["hosts"], run["servers_per_host"]) == ("local", "healthy", 1, 2)
        assert isinstance(run["rc"], int) and run["wall_s"] > 0 and run["cpu_s"] > 0
        assert [server["name"] for server in run["servers"]] == ["gpu0", "gpu1"]
        assert "PLAY RECAP" in (out / "raw" / "local" / run["output"]).read_text()
    assert {row["contender"] for row in result["summary"]} == CONTENDERS
    assert [c["layout"] for c in result["calibrations"]["local"]] == ["per_gpu"]

    table = (out / "latest.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| healthy |")]
    assert len(rows) == len(CONTENDERS), table
    header = next(line for line in table.splitlines() if line.startswith("| scenario |"))
    assert all(row.count("|") == header.count("|") for row in rows), table

    assert (out / "latest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_fleet_series_runs_one_playbook_over_several_hosts_and_writes_its_table(tmp_path):
    out = tmp_path / "results"
    fleet = subprocess.run(
        [sys.executable, "-m", "bench.fleet", "--hosts", "1,2", "--servers", "1", "--reps", "1", "--out", str(out),
         "--workdir", str(tmp_path / "work"), "--base-port", str(free_port_block(2))],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert fleet.returncode == 0, fleet.stdout[-3000:] + fleet.stderr[-3000:]
    result = json.loads((out / "fleet.json").read_text())
    assert [(run["hosts"], run["run"], run["rc"]) for run in result["runs"]] == [
        (1, "restarted", 0), (1, "no-op", 0), (2, "restarted", 0), (2, "no-op", 0)]
    assert all(run["wall_s"] > 0 and 0 < run["host_cpu_s"] < run["cpu_s"] for run in result["runs"])
    # The hosts' interpreter counted every module call: a relaunch with nothing to change is one per host.
    assert [run["module_calls"] for run in result["runs"] if run["run"] == "no-op"] == [1, 2]
    table = (out / "fleet.md").read_text()
    assert "| 2 | no-op | 1/1 |" in table, table
    # Each host was its own: its own state dir, journaled by the run that held it.
    for host in ("host00", "host01"):
        assert (tmp_path / "work" / host / "state" / "journal.jsonl").exists()
