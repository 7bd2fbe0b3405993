#!/usr/bin/env bash
# The tests that send signals to the processes they start, run once more with SIGINT, SIGQUIT and SIGHUP
# ignored, as a suite started from a background job of a script (or under nohup) inherits them. rtdebug
# keeps an ignored signal ignored; each such test sets the disposition in its own child
# (tests/support/sigs.py), so these pass however the suite is started.
# Which tests send a signal is read from what their modules do (`python -m support.sigs` lists the modules;
# `-p support.sigs` with RTDEBUG_SIGNAL_TESTS=1 keeps the tests in them that send), never from a list of
# names: a new test that sends a signal is run here without anyone adding it. Extra pytest arguments pass
# through.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
mapfile -t MODULES < <(PYTHONPATH=tests "$PY" -m support.sigs)
[ "${#MODULES[@]}" -gt 0 ] || { echo "test-signals-ignored: no test sends a signal? (support.sigs found none)" >&2; exit 1; }
RTDEBUG_USER_PYTHONPATH=${PYTHONPATH-} PYTHONPATH=tests${PYTHONPATH:+:$PYTHONPATH} RTDEBUG_SIGNAL_TESTS=1 exec "$PY" -c '
import os, signal, sys
for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)  # inherited: the jobs the tests start get them ignored, as from nohup
user = os.environ.pop("RTDEBUG_USER_PYTHONPATH")  # tests/ is on this sys.path for -p support.sigs only
os.environ.pop("PYTHONPATH") if not user else os.environ.update(PYTHONPATH=user)
import pytest
sys.exit(pytest.main(["-p", "support.sigs", *sys.argv[1:]]))
' "${MODULES[@]}" "$@"
