#!/usr/bin/env bash
# The tests that send signals to the processes they start, run once more with SIGINT, SIGQUIT and SIGHUP
# ignored, as a suite started from a background job of a script (or under nohup) inherits them. rtdebug
# keeps an ignored signal ignored; each such test sets the disposition in its own child
# (tests/support/sigs.py), so these pass however the suite is started. Extra pytest arguments pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
TESTS=(
  tests/hostile/test_adopt_hostile.py::test_interrupted_adopt_puts_the_rank_back_and_leaves_nothing
  tests/hostile/test_adopt_hostile.py::test_a_signal_during_a_held_call_waits_for_it_then_puts_the_thread_back
  tests/e2e/test_agent.py
  tests/e2e/test_e2e_run.py::test_ctrl_c_stops_everything
  tests/e2e/test_e2e_layout.py::test_stop_ends_rtdebug_run_quietly_with_its_signal
  "tests/hostile/test_faults.py::test_fault[launcher SIGHUP-0]"
)
exec "$PY" -c '
import os, signal, sys
for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)  # kept across exec: pytest and what it starts inherit them ignored
os.execv(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[1:]])
' "${TESTS[@]}" "$@"
