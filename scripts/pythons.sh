#!/usr/bin/env bash
# The harness on every supported Python, the way a torch-free user installs it: .venv-3.10 ... .venv-3.13,
# each with `pip install -e .` and only the core dependencies (debugpy, psutil; no torch, no Ray).
# tests/project/test_pythons.py runs the torch-free core (real debugpy, a real DAP client) in each of them.
#
#   bash scripts/pythons.sh              # 3.10 3.11 3.12 3.13
#   bash scripts/pythons.sh 3.12 3.13    # just these
#
# Interpreters: the newest $(pyenv root)/versions/3.X.*, else python3.X on PATH. A version that cannot be
# found fails the script unless RTDEBUG_PYTHONS_REQUIRED=0 (then tests/project/test_pythons.py skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VERSIONS=${*:-3.10 3.11 3.12 3.13}
PYENV_ROOT_DIR=$( (command -v pyenv >/dev/null && pyenv root) || echo "${PYENV_ROOT:-$HOME/.pyenv}")

find_python() {
  local found
  found=$(ls -d "$PYENV_ROOT_DIR/versions/$1".*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$found" ]; then found=$(command -v "python$1" || true); fi
  echo "$found"
}

missing=()
for v in $VERSIONS; do
  venv=".venv-$v"
  base=$(find_python "$v")
  if [ -z "$base" ]; then
    echo "pythons: no Python $v (looked in $PYENV_ROOT_DIR/versions and PATH)" >&2
    missing+=("$v")
    continue
  fi
  if [ ! -x "$venv/bin/python" ]; then
    "$base" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip 2>/dev/null || true
  fi
  # Reinstall when the dependencies changed (stamp) or the installed harness does not import from outside
  # the repo (there, the checkout would hide a broken install).
  stamp=$(cat pyproject.toml constraints/ci.txt | sha256sum | cut -c1-16)
  if [ "$(cat "$venv/.rtdebug-stamp" 2>/dev/null)" != "$stamp" ] || [ ! -x "$venv/bin/rtdebug" ] \
      || ! (cd / && "$ROOT/$venv/bin/python" -c 'import rtdebug.cli, debugpy, psutil') 2>/dev/null; then
    if ! "$venv/bin/python" -m pip install -q -c constraints/ci.txt -e . > "$venv/pip.log" 2>&1; then
      cat "$venv/pip.log" >&2
      exit 1
    fi
    echo "$stamp" > "$venv/.rtdebug-stamp"
  fi
  if (cd / && "$ROOT/$venv/bin/python" -c 'import torch') 2>/dev/null; then
    echo "pythons: $venv has torch; it must be torch-free (rm -r $venv and run again)" >&2
    exit 1
  fi
  echo "pythons ok: $venv $("$venv/bin/python" -c 'import sys, debugpy; print(sys.version.split()[0], "debugpy", debugpy.__version__)')"
done
if [ ${#missing[@]} -gt 0 ] && [ "${RTDEBUG_PYTHONS_REQUIRED:-1}" != 0 ]; then
  echo "pythons: missing ${missing[*]} (install with pyenv, or RTDEBUG_PYTHONS_REQUIRED=0 to skip them)" >&2
  exit 1
fi
