"""Tests that send signals set their receivers' dispositions, and `scripts/test-signals-ignored.sh` finds them.

A suite started from a background job of a script (or under nohup) hands its children SIGINT and SIGQUIT (and
SIGHUP) ignored; rtdebug rightly keeps an ignored signal ignored, so a test that sends one to a child that
inherited it waits for an exit that cannot come. The rule, checked here from the source: every child a test
module that sends signals starts, and every child a shared helper (``tests/support/``) starts, gets
``preexec_fn=default_dispositions`` (a fork calls it itself). Which tests send is read from what they do
(``support.sigs.scan``), and the script runs exactly those.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from support.paths import ROOT
from support.sigs import scan, senders

TESTS = ROOT / "tests"


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    def named(f: ast.expr) -> bool:
        return (isinstance(f, ast.Attribute) and f.attr == name) or (isinstance(f, ast.Name) and f.id == name)

    return [c for c in ast.walk(tree) if isinstance(c, ast.Call) and named(c.func)]


def unset_dispositions(path: Path) -> list[str]:
    """``path:line`` of each child started there without the signals a test sends set to their default."""
    tree = ast.parse(path.read_text(), str(path))
    bad = []
    for call in _calls(tree, "Popen"):
        preexec = next((k.value for k in call.keywords if k.arg == "preexec_fn"), None)
        if not (isinstance(preexec, ast.Name) and preexec.id == "default_dispositions"):
            bad.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        if _calls(fn, "fork") and not _calls(fn, "default_dispositions"):
            bad.append(f"{path.relative_to(ROOT)}:{fn.lineno} (os.fork)")
    return bad


def test_children_of_signalling_tests_and_of_the_helpers_start_with_default_dispositions():
    modules = [*senders(TESTS), *sorted((TESTS / "support").glob("*.py"))]
    bad = [where for m in modules for where in unset_dispositions(m)]
    assert bad == [], f"start these children with preexec_fn=default_dispositions (support.sigs): {bad}"


def test_the_scan_finds_what_a_module_does_not_what_it_is_called(tmp_path):
    module = tmp_path / "test_x.py"
    module.write_text(
        "import os, signal\n"
        "def interrupt(p):\n    p.send_signal(signal.SIGINT)\n"
        "def hard(p):\n    os.kill(p.pid, signal.SIGKILL)\n"
        "CASES = {'soft': (interrupt, 1), 'hard': (hard, 2)}\n"
        "def test_plain(p):\n    p.terminate()\n"
        "def test_through_a_helper(p):\n    interrupt(p)\n"
        "def test_kill_only(p):\n    hard(p)\n"
        "def test_cases(case):\n    CASES[case][0](None)\n"
    )
    m = scan(module)
    assert m.tests == {"test_plain", "test_through_a_helper"}
    assert m.entries == {"test_cases": {"soft"}}
    assert m.sends("test_cases", {"case": "soft"}) and not m.sends("test_cases", {"case": "hard"})


def test_the_script_runs_every_module_the_scan_finds():
    listed = subprocess.run(
        ["bash", "-c", 'PYTHONPATH=tests "$0" -m support.sigs', str(ROOT / ".venv/bin/python")],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert listed == [str(p.relative_to(ROOT)) for p in senders(TESTS)]
    assert "tests/e2e/test_connect.py" in listed  # Ctrl-C of connect (it waited 60 s for an ignored SIGINT)
    script = (ROOT / "scripts/test-signals-ignored.sh").read_text()
    assert "-m support.sigs" in script and '"-p", "support.sigs"' in script
