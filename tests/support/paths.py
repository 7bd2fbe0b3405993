"""Where things are: the repository, its examples, the test scripts (run as separate processes), the interpreter,
and a marked line of a script (``marker_line``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"
SCRIPTS = ROOT / "tests" / "scripts"
PY = sys.executable


def support_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) with ``tests/`` first on PYTHONPATH, for a child process that
    imports ``support`` (a test script run on its own, code given with ``-c``): configuration, not sys.path edits."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "tests"), env.get("PYTHONPATH", "")) if p)
    return env


def marker_line(path: Path, marker: str, tags: tuple[str, ...] = ("BREAKPOINT: ",)) -> int:
    """The line of ``# BREAKPOINT: <marker>`` in ``path`` (or of another tag: ``RAISE SITE: ``, or ``""`` for the
    marker text alone)."""
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if any(f"{tag}{marker}" in line for tag in tags):
            return i
    raise AssertionError(f"no {' or '.join(f'{t}{marker}' for t in tags)} in {path}")
