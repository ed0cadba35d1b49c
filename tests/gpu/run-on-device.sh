#!/usr/bin/env bash
# Runs tests/gpu on a GPU machine that has python3 with torch and pytest but no network:
# ansible-core comes from wheels made here with `make gpu-wheels` (tests/gpu/wheels).
# Results go to $OUT (or /tmp/gpuops-gpu-out): pytest.log and nvidia-smi.tar (the outputs the modules parsed).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpuops-gpu-out}
mkdir -p "$out"
# Beside the machine's own python3 (its torch and pytest), not in a venv that would hide them.
target=/tmp/gpuops-ansible
python3 -m pip install -q --no-index --find-links tests/gpu/wheels --target "$target" ansible-core
export PYTHONPATH=$target PATH=$target/bin:$PATH
nvidia-smi -L
fixtures=$(mktemp -d)
status=0
GPUOPS_GPU_FIXTURES_OUT=$fixtures python3 -m pytest tests/gpu -v -s -p no:cacheprovider \
  >"$out/pytest.log" 2>&1 || status=$?
tar -C "$fixtures" -cf "$out/nvidia-smi.tar" .
tail -60 "$out/pytest.log"
exit "$status"
