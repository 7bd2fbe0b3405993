"""The dump must never harm the rank: 5 000 dumps of a process whose threads start and end all the time.

CPython's signal-time dump (faulthandler) walks the thread list without the GIL, and a churning process
died by SIGSEGV after 3 to 32 such signals on 3.11-3.13. The dump thread takes the stacks as Python with
the GIL, so no thread state can be freed under it. Each supported Python runs ``scripts/churn_torture.py``
(the rank side armed by ``rtdebug.rank.stacks.dump.arm``, the requester ``rtdebug.stacks.collect``'s own
``ask``) in its ``.venv-3.X``. ``RTDEBUG_CHURN_DUMPS`` changes the count (default 5000).

The control (``RTDEBUG_CHURN_CONTROL=1``, off in CI: it proves a crash, which is luck-dependent in its
timing) sends the fallback's signal to the same churner and expects it to die: this is why the signal
is only the fallback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.paths import ROOT, SCRIPTS
from support.venvjobs import require_venv

pytestmark = [pytest.mark.pythons]
DUMPS = int(os.environ.get("RTDEBUG_CHURN_DUMPS", "5000"))


def torture(python: str, tmp_path, n: int, mode: str) -> dict:
    r = subprocess.run(
        [python, str(SCRIPTS / "churn_torture.py"), str(tmp_path), str(n), mode],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "harness")),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_thousands_of_dumps_of_a_churning_rank_never_crash_it(version, tmp_path):
    python = str(require_venv(version).parent / "python")
    out = torture(python, tmp_path, DUMPS, "thread")
    assert out == {"dumps": DUMPS, "alive": True, "exit": None}, out


@pytest.mark.skipif(os.environ.get("RTDEBUG_CHURN_CONTROL") != "1", reason="RTDEBUG_CHURN_CONTROL=1 runs the control")
def test_control_signal_time_dumps_crash_the_same_churning_rank(tmp_path):
    out = torture(sys.executable, tmp_path, 20000, "signal")
    assert out["alive"] is False and out["exit"] == -11, out
