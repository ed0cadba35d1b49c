#!/usr/bin/env bash
# Extract only ansible_collections/awx/awx from the `ansible` 13.x package on PyPI (the last major release
# that bundles it; Galaxy is not reachable from CI and ansible 14 dropped it) into a collections path used
# only by the AWX configuration tests:
#   scripts/fetch_awx_collection.sh [DEST]     (default .work/awx-collection; prints DEST on success)
# Downloads one sdist-free wheel (~50 MB) once into .work/pip-cache; exits 3 when PyPI is unreachable.
set -euo pipefail
ANSIBLE_13=${ANSIBLE_13:-13.8.0}
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/.work/awx-collection}
cache=$root/.work/pip-cache
python=${PYTHON:-$root/.venv/bin/python}
marker=$dest/ansible_collections/awx/awx/MANIFEST.json
if [ -f "$marker" ]; then echo "$dest"; exit 0; fi
mkdir -p "$cache"
wheel=$(ls "$cache"/ansible-"$ANSIBLE_13"-py3-none-any.whl 2>/dev/null || true)
if [ -z "$wheel" ]; then
  if ! "$python" -m pip download -q --no-deps --only-binary=:all: "ansible==$ANSIBLE_13" -d "$cache" >&2; then
    echo "cannot download ansible==$ANSIBLE_13 from PyPI" >&2
    exit 3
  fi
  wheel=$(ls "$cache"/ansible-"$ANSIBLE_13"-py3-none-any.whl)
fi
tmp=$(mktemp -d "$root/.work/awx-collection.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$python" - "$wheel" "$tmp" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive:
    members = [name for name in archive.namelist() if name.startswith("ansible_collections/awx/awx/")]
    if not members:
        sys.exit(f"{wheel} holds no ansible_collections/awx/awx")
    archive.extractall(out, members)
PY
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "$dest"
