#!/usr/bin/env bash
# Prints the path of a Python >= 3.12 interpreter (ansible-core 2.21 needs it), or fails naming what was tried.
# Order: $PYTHON, python3.14..python3.12 and python3 on PATH, then pyenv-installed versions.
set -u
candidates=()
[ -n "${PYTHON:-}" ] && candidates+=("$PYTHON")
for v in 3.14 3.13 3.12; do candidates+=("python$v"); done
candidates+=(python3)
pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
for dir in "$pyenv_root"/versions/3.1[2-9]*/bin /usr/local/bin /opt/python*/bin; do
  [ -x "$dir/python3" ] && candidates+=("$dir/python3")
done
for c in "${candidates[@]}"; do
  path=$(command -v "$c" 2>/dev/null) || continue
  # pyenv shims answer for versions that are not selected; actually run the interpreter.
  if "$path" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
    echo "$path"
    exit 0
  fi
done
echo "error: no Python >= 3.12 found (ansible-core 2.21 needs it). Tried: ${candidates[*]}." >&2
echo "Install one (e.g. 'pyenv install 3.12' or 'apt-get install python3.12') or set PYTHON=/path/to/python3.12." >&2
exit 1
