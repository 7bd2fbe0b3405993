"""``rtdebug run`` runs the script in its own process: the script's warnings print as under ``python``
(category, file, line, source), its filters and ``PYTHONWARNINGS`` decide, and rtdebug's own warnings keep
their ``rtdebug: warning:`` form (``rtdebug.common.warns``)."""

from __future__ import annotations

import os
import subprocess

import pytest

from support.jobs import rtdebug
from support.paths import PY, SCRIPTS
from support.ports import free_port_base

pytestmark = pytest.mark.e2e
SCRIPT = SCRIPTS / "warns_own.py"


@pytest.fixture(autouse=True)
def own_registry(registry_dir):
    return registry_dir


def _not_ours(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("rtdebug: ")]


def test_the_scripts_warnings_print_as_under_python():
    python = subprocess.run([PY, str(SCRIPT)], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert python.returncode == 0 and python.stdout == "done\n", python.stderr
    assert f"{SCRIPT}:13: UserWarning: my own deprecation" in python.stderr.splitlines()  # what we compare with
    r = rtdebug("run", "--port", str(free_port_base(2)), str(SCRIPT), timeout=120)
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr
    assert _not_ours(r.stderr) == python.stderr.splitlines()
    assert "rtdebug: warning: my own deprecation" not in r.stderr


def test_filters_decide_and_rtdebugs_own_warnings_keep_their_form():
    # PYTHONWARNINGS=error::UserWarning (as -W): the script's UserWarning is an error, rtdebug's own is still a
    # warning (its category is not a UserWarning); 127.0.0.2 is loopback, but not one rtdebug knows as such
    env = dict(os.environ, PYTHONWARNINGS="error::UserWarning")
    r = rtdebug("run", "--host", "127.0.0.2", "--port", str(free_port_base(2)), str(SCRIPT), env=env, timeout=120)
    assert r.returncode == 1 and "done" not in r.stdout, r.stderr
    assert "rtdebug: warning: debug endpoints bind 127.0.0.2: whoever they let in" in r.stderr
    assert r.stderr.splitlines()[-1] == "UserWarning: my own deprecation"
    # the script's own simplefilter("error", UserWarning)
    r = rtdebug("run", "--port", str(free_port_base(2)), str(SCRIPT), "error", timeout=120)
    assert r.returncode == 1 and "done" not in r.stdout, r.stderr
    assert r.stderr.splitlines()[-1] == "UserWarning: my own deprecation"
    assert f'  File "{SCRIPT}", line 13, in <module>' in r.stderr.splitlines()
