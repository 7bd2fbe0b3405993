#!/usr/bin/env bash
# Quick start 2: set up and run every test: the Python suite (real torchrun, Ray local mode, debugpy,
# a real DAP client; the torch-free core on Python 3.10-3.13 from scripts/pythons.sh), then the VS Code
# extension's unit, DAP and real-VS-Code tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/lint.sh  # ruff check, ruff format --check, mypy (the rtdebug package)
export RTDEBUG_PYTHONS_REQUIRED=${RTDEBUG_PYTHONS_REQUIRED:-1}  # CI: every supported Python must be there
bash scripts/pythons.sh
.venv/bin/python -m pytest tests
bash scripts/test-signals-ignored.sh -q  # the signal tests once more, SIGINT/SIGQUIT/SIGHUP ignored (nohup, a background job)
if [ -f vscode-extension/scripts/ci.sh ] && [ "${SKIP_VSCODE:-0}" != 1 ]; then
  RTDEBUG_PYTHON="$PWD/.venv/bin/python" bash vscode-extension/scripts/ci.sh
fi
