#!/usr/bin/env bash
# Create .venv (if missing) and install the harness with Ray and the test tools.
# torch is pinned to 2.13.0 in pyproject.toml: here that takes the CPU build from local disk.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip 2>/dev/null || true
.venv/bin/python -m pip install -q -e '.[ray,test]'
.venv/bin/python -c 'import torch, ray, debugpy; print("setup ok: torch", torch.__version__, "ray", ray.__version__, "debugpy", debugpy.__version__)'
