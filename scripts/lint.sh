#!/usr/bin/env bash
# The Python linters: ruff (lint + format check) over the repository, mypy over the rtdebug package (harness/rtdebug/)
# and the maintained benchmark (bench/suite/).
# Configuration in pyproject.toml ([tool.ruff], [tool.mypy]); the tools come with setup.sh (the `lint` extra).
# Runs all three and fails if any fails.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rc=0
echo "== ruff check" && "$PY" -m ruff check . || rc=1
echo "== ruff format --check" && "$PY" -m ruff format --check . || rc=1
echo "== mypy rtdebug" && "$PY" -m mypy || rc=1
echo "== mypy bench/suite" && MYPYPATH=tests:. "$PY" -m mypy bench/suite || rc=1  # the maintained benchmark
exit $rc
