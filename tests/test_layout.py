"""The package's shape, from the source (``ast``): one package per process, no loops, no upward imports.

Edges are every import of an ``rtdebug`` module, at the top of a module or inside a function, plus the
module paths written as strings (torchrun's ``-m`` target, ``RAY_TRAIN_CALLBACKS``, the views'
backends), since ``importlib`` follows those too. Layers, bottom up: common < registry < views < stacks
< the three process packages (shell, launcher, rank), which never import each other except at the
entry points named in ``ENTRY_POINTS``, and only lazily (inside a function).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "harness" / "rtdebug"
LAYER = {"common": 0, "inject": 1, "registry": 1, "views": 2, "stacks": 3, "connect": 3, "shell": 4, "launcher": 4, "rank": 4}
# (importing package, imported module): the one lazy entry point each crossing may use
ENTRY_POINTS = {
    ("shell", "rtdebug.launcher.start"),  # rtdebug run / torchrun start the controller
    ("launcher", "rtdebug.rank.bootstrap"),  # torchrun's -m target; rtdebug run runs rank 0 in-process
    ("launcher", "rtdebug.rank.ray_worker"),  # named in RAY_TRAIN_CALLBACKS: Ray loads it in each worker
    ("root", "rtdebug.rank.api"),
    (
        "shell",
        "rtdebug.rank.adopted",
    ),  # rtdebug adopt: named in the code it injects into a running rank  # rtdebug.breakpoint, resolved on first use
}
STRING_MODULE = re.compile(r"^rtdebug(\.\w+)+$")


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}


def package_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    if parts[1] in ("cli", "__main__", "commands"):
        return "shell"
    return parts[1]


def resolve(name: str) -> str | None:
    """The rtdebug module ``name`` (or its longest known prefix: ``a.b.Class`` -> ``a.b``)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def edges(module: str) -> list[tuple[str, bool]]:
    """(imported module, lazily) for every rtdebug import and module path string in ``module``."""
    tree = ast.parse(MODULES[module].read_text())
    base = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            pkg = node.module or ""
            if node.level:
                pkg = ".".join(base.split(".")[: len(base.split(".")) - node.level + 1] + ([pkg] if pkg else []))
            names = [f"{pkg}.{a.name}" if resolve(f"{pkg}.{a.name}") == f"{pkg}.{a.name}" else pkg for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and STRING_MODULE.match(node.value):
            names = [node.value]
        for n in names:
            target = resolve(n) if n.startswith("rtdebug") else None
            if target and target != module:
                lazy = id(node) not in top and not isinstance(node, ast.Constant)
                out.append((target, lazy or isinstance(node, ast.Constant)))
    return out


GRAPH = {m: edges(m) for m in MODULES}


def test_every_module_is_found():
    assert "rtdebug.rank.bootstrap" in MODULES and "rtdebug.common.errors" in MODULES
    assert len(MODULES) > 40


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_no_import_circle_between_modules():
    graph = {m: {t for t, _ in es if not t.endswith("__init__")} for m, es in GRAPH.items()}
    # a package's own __init__ (docstring only) is not an edge
    graph = {m: {t for t in ts if MODULES[t].name != "__init__.py"} for m, ts in graph.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_no_import_circle_between_packages():
    graph: dict[str, set[str]] = defaultdict(set)
    for m, es in GRAPH.items():
        for t, _ in es:
            if package_of(t) != package_of(m) and (package_of(m), t) not in ENTRY_POINTS:
                graph[package_of(m)].add(package_of(t))
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def crossings() -> list[str]:
    """Every import that goes up a layer or across process packages, outside ENTRY_POINTS."""
    bad = []
    for m, es in sorted(GRAPH.items()):
        src = package_of(m)
        for t, lazy in es:
            dst = package_of(t)
            if src == dst or dst == "root":
                continue
            if (src, t) in ENTRY_POINTS:
                if not lazy:
                    bad.append(f"{m} imports the entry point {t} at module level (must be lazy)")
                continue
            if src == "root" or LAYER[dst] >= LAYER[src]:
                bad.append(f"{m} ({src}) imports {t} ({dst})")
    return bad


def test_no_upward_import_and_process_packages_stay_apart():
    assert crossings() == []


def test_the_checker_can_fail(monkeypatch):
    """A rank module importing the shell, and a common module importing the registry, are caught."""
    monkeypatch.setitem(GRAPH, "rtdebug.rank.gil", [("rtdebug.commands.control", True)])
    monkeypatch.setitem(GRAPH, "rtdebug.common.ports", [("rtdebug.registry.files", False)])
    bad = crossings()
    assert "rtdebug.rank.gil (rank) imports rtdebug.commands.control (shell)" in bad
    assert "rtdebug.common.ports (common) imports rtdebug.registry.files (registry)" in bad
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize("path", sorted(MODULES.values()), ids=lambda p: str(p.relative_to(PKG)))
def test_init_is_a_docstring_and_modules_stay_small(path):
    tree = ast.parse(path.read_text())
    if path.name == "__init__.py" and path.parent != PKG:
        assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr), f"{path}: docstring only"
        assert isinstance(tree.body[0].value, ast.Constant) and "import" in tree.body[0].value.value.lower()
    assert len(path.read_text().splitlines()) <= 300, f"{path} is over 300 lines"
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            assert n <= 60, f"{path}:{node.lineno} {node.name} is {n} lines (limit 60)"


STORE_SEAMS = {  # the one place each process opens a store connection (all the torch-free client)
    "rtdebug.views.store",  # the shell and the launcher: StoreView.client, one per command
    "rtdebug.rank.publish",  # a rank's publisher
    "rtdebug.rank.stackwatch",  # a rank's dump watcher (its size-bounded subclass)
}


def test_store_clients_are_opened_at_their_seams_only():
    """No module but the seams constructs a store client, and none uses torch's TCPStore (its failed
    connects fill a rank's log with C++ retries; imported from a thread it once aborted a rank)."""
    opened = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if called in ("TCPStoreClient", "TCPStore") or (called == "__init__" and "TCPStore" in ast.dump(f)):
                    opened.setdefault(name, set()).add(called)
    assert set(opened) <= STORE_SEAMS, opened
    assert all("TCPStore" not in calls for calls in opened.values()), opened


RANK_STARTS = ("dump.arm", "collrec.arm", "meshes.arm")


def test_one_rank_start_up():
    """A rank's runtime is armed in one module (rtdebug.rank.startup): the torchrun rank, `rtdebug run`,
    a Ray worker and an adopted rank pass only what differs (their identity, where they publish)."""
    starts = {}
    for name, path in MODULES.items():
        src = path.read_text()
        found = [s for s in RANK_STARTS if f"{s}(" in src]
        if found:
            starts[name] = found
    assert set(starts) <= {"rtdebug.rank.startup"}, starts
