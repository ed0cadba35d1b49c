"""Benchmark of gpuops.sglang against the relaunch workflows users write today (``python -m bench``).

  scenarios.py   what is measured: the contenders (ours, baselines/*.yml) and the scenarios
  targets.py     where: inventories/local on this machine, or rig containers through pct
  runner.py      how: alternating runs, each timed and measured (watch.py follows the servers' logs)
  report.py      the results: latest.md, latest.json, latest.png, the history in results.md
"""
