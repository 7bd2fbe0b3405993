"""Children a test sends signals to set those signals' dispositions themselves.

A test run started from a background job of a script inherits SIGINT and SIGQUIT ignored (and SIGHUP under
``nohup``); a child inherits that, and rtdebug rightly keeps an ignored signal ignored. So a test that
sends a signal must not depend on how the suite was started: its child resets the signals it is sent to
their default before it execs (``preexec_fn=default_dispositions``), as if started from a terminal.
``scripts/test-signals-ignored.sh`` runs the signal tests with these signals ignored, to prove it.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import signal
from pathlib import Path
from typing import Any

SENT = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)


def default_dispositions() -> None:
    """In the child (a ``preexec_fn``, or right after ``os.fork()``): every signal a test sends is default."""
    for signum in SENT:
        signal.signal(signum, signal.SIG_DFL)


# Which tests send a signal, read from what their modules do, never from a list of names: a call of
# ``send_signal(S)``, ``os.kill(pid, S)``, ``os.killpg(pgid, S)`` or ``.terminate()`` whose signal is one a
# shell can leave ignored (any but SIGKILL, SIGSTOP, SIGCONT and 0, which nothing can ignore), made by a test or
# by a function or fixture of its module that the test reaches; for a test parametrized over a table of its
# module (``FAULTS = {"launcher SIGHUP": (fault_launcher_sighup, ...)}``), only the entries that reach one.
# `scripts/test-signals-ignored.sh` runs them (``python -m support.sigs`` names the modules; this module,
# loaded with ``-p support.sigs`` and RTDEBUG_SIGNAL_TESTS=1, keeps only the tests that send).
UNIGNORABLE = {"SIGKILL", "SIGSTOP", "SIGCONT"}
ONLY_ENV = "RTDEBUG_SIGNAL_TESTS"


def _signal_sent(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr == "terminate" and not call.args:
        return True
    if func.attr == "send_signal" and call.args:
        return _ignorable(call.args[0])
    if func.attr in ("kill", "killpg") and isinstance(func.value, ast.Name) and func.value.id == "os":
        return len(call.args) > 1 and _ignorable(call.args[1])
    return False


def _ignorable(arg: ast.expr) -> bool:
    if isinstance(arg, ast.Constant):
        return arg.value != 0
    name = arg.attr if isinstance(arg, ast.Attribute) else arg.id if isinstance(arg, ast.Name) else None
    return name not in UNIGNORABLE


def _names(node: ast.AST) -> set[str]:
    names = {x.id for x in ast.walk(node) if isinstance(x, ast.Name)}
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):  # a test reaches a fixture by its parameter
        names |= {a.arg for a in node.args.args}
    return names


@dataclasses.dataclass
class ModuleSignals:
    """``tests``: the test functions that send; ``entries``: a test parametrized over its module's tables ->
    the table keys whose entries send (the test sends with those parameters only)."""

    tests: set[str]
    entries: dict[str, set[object]]

    def sends(self, function: str, params: dict[str, object]) -> bool:
        return function in self.tests or any(v in self.entries.get(function, ()) for v in params.values())


def scan(path: Path) -> ModuleSignals:
    tree = ast.parse(path.read_text(), str(path))
    named: dict[str, ast.AST] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            named.setdefault(node.name, node)
    tables: dict[str, dict[object, set[str]]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
            if len(keys) == len(node.value.keys):
                for target in (t for t in node.targets if isinstance(t, ast.Name)):
                    tables[target.id] = {k: _names(v) for k, v in zip(keys, node.value.values, strict=True)}
        elif isinstance(node, ast.Assign):
            for target in (t for t in node.targets if isinstance(t, ast.Name)):
                named[target.id] = node
    refs = {n: _names(node) for n, node in named.items()}
    sending = {
        n for n, node in named.items() if any(isinstance(c, ast.Call) and _signal_sent(c) for c in ast.walk(node))
    }
    while grown := {n for n in named.keys() - sending if refs[n] & sending}:
        sending |= grown
    tests = {n for n in sending if n.startswith("test")}
    entries = {
        n: {k for t in refs[n] & tables.keys() for k, entry in tables[t].items() if entry & sending}
        for n in named
        if n.startswith("test") and n not in tests
    }
    return ModuleSignals(tests, {n: keys for n, keys in entries.items() if keys})


def senders(tests: Path) -> dict[Path, ModuleSignals]:
    """Every test module under ``tests`` (``test_*.py``) that has a test that sends a signal."""
    found = {p: scan(p) for p in sorted(tests.rglob("test_*.py"))}
    return {p: m for p, m in found.items() if m.tests or m.entries}


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """With ``-p support.sigs`` and RTDEBUG_SIGNAL_TESTS=1: only the tests that send a signal are run."""
    if os.environ.get(ONLY_ENV) != "1":
        return
    scans: dict[Path, ModuleSignals] = {}
    keep, drop = [], []
    for item in items:
        path = Path(str(item.fspath))
        m = scans.setdefault(path, scan(path))
        params = getattr(getattr(item, "callspec", None), "params", {})
        (keep if m.sends(item.originalname, params) else drop).append(item)
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


if __name__ == "__main__":  # the modules `scripts/test-signals-ignored.sh` runs, one a line
    root = Path(__file__).resolve().parents[1]
    for module in senders(root):
        print(module.relative_to(root.parent))
