"""Where the time of a `make test` went: the slowest tests and the total per tier.

Reads what `make test` leaves in its report directory (default .work/test-report):
  <step>.xml   pytest's junit report of a pytest step (every test with its duration)
  <step>.time  "<seconds> <exit status>" of every step, written by scripts/timed.sh
and prints the 15 slowest tests, then per tier the number of tests and their summed duration, then the
wall time of each step. Timings are reported here, never asserted by a test (docs/testing.md).

    .venv/bin/python scripts/test_report.py [REPORT_DIR] [--slowest N]
"""

import argparse
import sys
from pathlib import Path
from xml.etree import ElementTree

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.tiers import tier_of


def test_file_of(case):
    """The test's file relative to the repository, from junit's classname (tests.unit.foo.test_x.TestY)."""
    parts = case.get("classname", "").split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (REPO / candidate).is_file():
            return candidate
    return "/".join(parts) + ".py"


def read_cases(report_dir):
    """(tier, test id, seconds, outcome) of every test case of every junit report in ``report_dir``."""
    cases = []
    for report in sorted(report_dir.glob("*.xml")):
        for case in ElementTree.parse(report).iter("testcase"):
            test_file = test_file_of(case)
            outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
            cases.append((tier_of(test_file)[0], f"{test_file}::{case.get('name')}", float(case.get("time", 0)), outcome))
    return cases


def read_steps(report_dir):
    """[(step, seconds, exit status)] in the order the steps ended."""
    steps = []
    for path in sorted(report_dir.glob("*.time"), key=lambda path: path.stat().st_mtime):
        seconds, status = path.read_text().split()
        steps.append((path.stem, float(seconds), int(status)))
    return steps


def minutes(seconds):
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}" if seconds >= 60 else f"{seconds:.1f} s"


def report(report_dir, slowest=15):
    cases = read_cases(report_dir)
    lines = [f"== the {min(slowest, len(cases))} slowest tests =="]
    for tier, test_id, seconds, _outcome in sorted(cases, key=lambda case: -case[2])[:slowest]:
        lines.append(f"{seconds:8.1f} s  {tier:<11} {test_id}")
    lines.append("== tests per tier (summed test time; tiers run side by side, see the steps) ==")
    totals = {}
    for tier, _test_id, seconds, outcome in cases:
        entry = totals.setdefault(tier, {"tests": 0, "seconds": 0.0, "skipped": 0})
        entry["tests"] += 1
        entry["seconds"] += seconds
        entry["skipped"] += outcome == "skipped"
    for tier, entry in sorted(totals.items(), key=lambda item: -item[1]["seconds"]):
        skipped = f", {entry['skipped']} skipped" if entry["skipped"] else ""
        lines.append(f"{tier:<12} {entry['tests']:5d} tests{skipped:<14} {minutes(entry['seconds']):>9}")
    lines.append(f"{'all':<12} {len(cases):5d} tests{'':<14} {minutes(sum(case[2] for case in cases)):>9}")
    steps = read_steps(report_dir)
    if steps:
        lines.append("== steps (wall time, in the order they ended) ==")
        for step, seconds, status in steps:
            lines.append(f"{step:<24} {minutes(seconds):>9}{'' if status == 0 else f'  FAILED (exit {status})'}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("report_dir", nargs="?", default=".work/test-report", type=Path)
    parser.add_argument("--slowest", type=int, default=15)
    args = parser.parse_args(argv)
    if not args.report_dir.is_dir():
        print(f"no test report in {args.report_dir}", file=sys.stderr)
        return 1
    print(report(args.report_dir, args.slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
