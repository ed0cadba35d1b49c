#!/usr/bin/env bash
# scripts/timed.sh REPORT_DIR STEP COMMAND...: runs COMMAND and writes "<wall seconds> <exit status>" to
# REPORT_DIR/STEP.time for scripts/test_report.py; exits with COMMAND's status.
set -u
report_dir=$1 step=$2
shift 2
mkdir -p "$report_dir"
start=$(date +%s.%N)
status=0
"$@" || status=$?
awk -v start="$start" -v end="$(date +%s.%N)" -v status="$status" 'BEGIN { printf "%.1f %d\n", end - start, status }' > "$report_dir/$step.time"
exit "$status"
