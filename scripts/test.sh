#!/usr/bin/env bash
# Quick start 2: set up and run every test: the Python suite (real torchrun, Ray local mode, debugpy,
# a real DAP client), then the VS Code extension's unit, DAP and real-VS-Code tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest tests
if [ -f vscode-extension/scripts/ci.sh ] && [ "${SKIP_VSCODE:-0}" != 1 ]; then
  RTDEBUG_PYTHON="$PWD/.venv/bin/python" bash vscode-extension/scripts/ci.sh
fi
