#!/usr/bin/env bash
# The GPU check (docs/gpu-check.md): rtdebug's NCCL and CUDA paths on a lent GPU machine, in one run of at most
# 8 minutes. From the repository root, with the wheelhouse of scripts/gpu-bundle.sh carried in the tree:
#   OUT=/an/empty/dir bash scripts/gpu-check.sh [--only NAME,...] [--list] [--dry --python PY] [--help]
# Writes $OUT/gpu-check.json, $OUT/summary.txt and $OUT/logs/. Where there is no CUDA GPU: one line, exit 2.
# GPU_CHECK_PYTHON: the machine's Python with torch (default python3); GPU_CHECK_TIMEOUT: the hard limit (470 s).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${GPU_CHECK_PYTHON:-$(command -v python3 || command -v python || true)}
[ -n "$PY" ] || { echo "gpu-check: error: no python3 on PATH (set GPU_CHECK_PYTHON)" >&2; exit 2; }
# the check's modules and the helpers it shares with the tests (tests/support); taken off again for the jobs
export GPU_CHECK_OWN_PATH="$PWD/scripts/gpu_check:$PWD/tests"
export PYTHONPATH="$GPU_CHECK_OWN_PATH${PYTHONPATH:+:$PYTHONPATH}"
exec timeout --kill-after=15 "${GPU_CHECK_TIMEOUT:-470}" "$PY" scripts/gpu_check/check.py "$@"
