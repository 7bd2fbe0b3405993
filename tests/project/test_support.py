"""Everything that drives jobs from outside (tests, bench, the GPU check, the extension's e2e hosts) shares one
support package, ``tests/support``, found through configuration: no file outside the rtdebug package edits
``sys.path`` (the package itself puts a script's folder first, as python does), and the helpers that were copied
across folders (free ports, process trees, marker lines) are defined once."""

from __future__ import annotations

import re
from pathlib import Path

from support.paths import ROOT

DRIVERS = ("tests", "bench", "scripts", "vscode-extension/e2e")
# the measured program of bench's recipe row does what `python script` does before it runs the script
MAY_EDIT_PATH = {"bench/suite/recipe_listen.py"}
PATH_EDIT = re.compile(r"\bsys\.path\s*(\.\s*(insert|append|extend|remove)\s*\(|\[[^\]]*\]\s*=|\s*[+]?=)")
ONCE = {  # a helper -> the one module that defines it
    "def kill_tree(": "tests/support/procs.py",
    "def end_group(": "tests/support/procs.py",
    "def marker_line(": "tests/support/paths.py",
    "def port_free(": "tests/support/ports.py",
    "def free_port(": "tests/support/ports.py",
    "def free_port_base(": "tests/support/ports.py",
}


def driver_files() -> list[Path]:
    files = [p for d in DRIVERS for p in sorted((ROOT / d).rglob("*.py"))]
    return [p for p in files if "node_modules" not in p.parts and ".work" not in p.parts]


def path_edits(text: str) -> list[int]:
    return [i for i, line in enumerate(text.splitlines(), 1) if PATH_EDIT.search(line)]


def test_no_driver_edits_sys_path():
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in driver_files()
        if str(p.relative_to(ROOT)) not in MAY_EDIT_PATH
        for i in path_edits(p.read_text(errors="replace"))
    ]
    assert found == [], f"put the folder on PYTHONPATH (support.paths.support_env, scripts/bench.sh) instead: {found}"


def test_a_path_edit_is_caught():
    edits = "import sys\nsys.path.insert(0, 'x')\nsys.path[:0] = ['y']\nsys.path.append('z')\nprint(sys.path)\n"
    assert path_edits(edits) == [2, 3, 4]


def test_the_shared_helpers_are_defined_once():
    where: dict[str, list[str]] = {k: [] for k in ONCE}
    for p in driver_files():
        text = p.read_text(errors="replace")
        for k in ONCE:
            if re.search(rf"^\s*{re.escape(k)}", text, re.M):
                where[k].append(str(p.relative_to(ROOT)))
    assert {k: v for k, v in where.items() if v != [ONCE[k]]} == {}
