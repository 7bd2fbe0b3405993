#!/usr/bin/env bash
# The benchmarks (bench/README.md): the suite behind docs/performance.md, or one probe, on .venv's Python with
# the bench package and the shared helpers (tests/support) importable through PYTHONPATH, never sys.path edits.
#   bash scripts/bench.sh [--quick | --dry | --only 1,3 ...]     the suite (bench/suite/run.py; --help)
#   bash scripts/bench.sh probes/NAME [ARGS | --help]           a probe (bench/probes/NAME.py)
# PYTHON: another interpreter (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
export PYTHONPATH="$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
module=bench.suite.run
if [ "${1:-}" != "" ] && [ "${1#probes/}" != "$1" ]; then
  name=${1#probes/} && name=${name%.py} && shift
  [ -f "bench/probes/$name.py" ] || { echo "bench: error: no probe bench/probes/$name.py (ls bench/probes)" >&2; exit 2; }
  module=bench.probes.$name
fi
exec "$PY" -m "$module" "$@"
