"""Where things are: the repository, its examples, the test scripts (run as separate processes), the interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"
SCRIPTS = ROOT / "tests" / "scripts"
PY = sys.executable


def marker_line(path: Path, marker: str) -> int:
    """The line of ``# BREAKPOINT: <marker>`` in ``path``."""
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if f"BREAKPOINT: {marker}" in line:
            return i
    raise AssertionError(f"no BREAKPOINT: {marker} in {path}")
