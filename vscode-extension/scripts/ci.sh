#!/usr/bin/env bash
# CI for the VS Code extension, from a clean clone: npm ci, build, unit tests, .vsix, DAP e2e against a real
# 2-rank torchrun job, and the real-VS-Code (code-server) e2e. Needs the Python venv with the harness:
# RTDEBUG_PYTHON (default ../.venv/bin/python relative to vscode-extension/). Prints PASS/FAIL per stage.
set -uo pipefail
EXT=$(cd "$(dirname "$0")/.." && pwd)
cd "$EXT"
PY=${RTDEBUG_PYTHON:-../.venv/bin/python}
[ -x "$PY" ] || { echo "FAIL: no Python interpreter at $PY (set RTDEBUG_PYTHON)"; exit 1; }
export RTDEBUG_PYTHON=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
"$RTDEBUG_PYTHON" -c 'import harness' || { echo "FAIL: the harness is not installed in $RTDEBUG_PYTHON"; exit 1; }

failed=()
T0=$SECONDS
stage() {
  local name=$1; shift
  local t=$SECONDS
  echo "=== vscode-extension: $name"
  if "$@"; then echo "PASS: $name ($((SECONDS - t)) s)"; else echo "FAIL: $name ($((SECONDS - t)) s)"; failed+=("$name"); return 1; fi
}

stage "npm ci" npm ci --no-audit --no-fund --loglevel=error || { echo "FAIL: vscode-extension CI (npm ci)"; exit 1; }
stage "build" npm run --silent build || { echo "FAIL: vscode-extension CI (build)"; exit 1; }
stage "unit tests" node --test out/test/unit/
rm -f rtdebug-vscode.vsix
stage "package .vsix" npm run --silent package
stage "DAP e2e (real 2-rank torchrun jobs, single process)" node --test --test-timeout=300000 out/test/dap/
if [ -f rtdebug-vscode.vsix ]; then
  stage "real VS Code e2e (code-server)" env VSIX="$EXT/rtdebug-vscode.vsix" bash e2e/run.sh
else
  echo "FAIL: real VS Code e2e (no .vsix)"; failed+=("real VS Code e2e")
fi

echo "vscode-extension CI: $((SECONDS - T0)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAIL: vscode-extension CI: ${failed[*]}"
  exit 1
fi
echo "PASS: vscode-extension CI"
