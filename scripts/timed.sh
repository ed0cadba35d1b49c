#!/usr/bin/env bash
# scripts/timed.sh REPORT_DIR STEP COMMAND...: runs COMMAND with every line of its output prefixed "[STEP] " (lanes
# that run side by side stay readable and the log never goes quiet for a lane's length), writes
# "<wall seconds> <exit status>" to REPORT_DIR/STEP.time for scripts/test_report.py, exits with COMMAND's status.
set -u
report_dir=$1 step=$2
shift 2
mkdir -p "$report_dir"
start=$(date +%s.%N)
"$@" 2>&1 | sed -u "s/^/[$step] /"
status=${PIPESTATUS[0]}
awk -v start="$start" -v end="$(date +%s.%N)" -v status="$status" 'BEGIN { printf "%.1f %d\n", end - start, status }' > "$report_dir/$step.time"
exit "$status"
