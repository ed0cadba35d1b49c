#!/usr/bin/env bash
# Runs tests/gpu on a GPU machine that has python3 with torch and pytest but no network:
# ansible-core comes from wheels made here with `make gpu-wheels` (tests/gpu/wheels).
# Results go to $OUT (or /tmp/gpuops-gpu-out): pytest.log and nvidia-smi.tar (the outputs the modules parsed).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpuops-gpu-out}
mkdir -p "$out"
venv=/tmp/gpuops-gpu-venv
python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install -q --no-index --find-links tests/gpu/wheels ansible-core
nvidia-smi -L
fixtures=$(mktemp -d)
status=0
GPUOPS_GPU_FIXTURES_OUT=$fixtures "$venv/bin/python" -m pytest tests/gpu -v -s -p no:cacheprovider \
  >"$out/pytest.log" 2>&1 || status=$?
tar -C "$fixtures" -cf "$out/nvidia-smi.tar" .
tail -60 "$out/pytest.log"
exit "$status"
