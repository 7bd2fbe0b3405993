"""The package's shape, from the source (``ast``): one package per process, no loops, no upward imports.

Edges are every import of an ``rtdebug`` module, at the top of a module or inside a function, plus the
module paths written as strings (torchrun's ``-m`` target, ``RAY_TRAIN_CALLBACKS``, the views'
backends), since ``importlib`` follows those too, and the imports and module paths inside strings that
are Python code (what ``rtdebug adopt`` injects into a running rank). Layers, bottom up: common < registry
< views < stacks < the three process packages (shell, launcher, rank), which never import each other
except at the entry points named in ``ENTRY_POINTS``, and only lazily (inside a function).

No module reads or writes another module's ``_private`` names (``from m import _x``, ``m._x`` on an
imported rtdebug module, or ``obj._x`` where ``_x`` is what another module's class keeps private), in its
own code or in code it injects as a string. A module is kept whole: a
warning above ``SOFT_LINES`` lines, a failure only above ``HARD_LINES``.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "harness" / "rtdebug"
LAYER = {
    "common": 0,
    "inject": 1,
    "registry": 1,
    "capsule": 1,  # a replay capsule's format: written by a rank, read by the shell and a replaying rank
    "views": 2,
    "stacks": 3,
    "connect": 3,
    "dap": 3,  # the job's DAP endpoint: the shell's `rtdebug dap`, and beside the launcher (--dap-port)
    "shell": 4,
    "launcher": 4,
    "rank": 4,
}
# (importing package, imported module): the one lazy entry point each crossing may use
ENTRY_POINTS = {
    ("shell", "rtdebug.launcher.start"),  # rtdebug run / torchrun start the controller
    ("launcher", "rtdebug.rank.bootstrap"),  # torchrun's -m target; rtdebug run runs rank 0 in-process
    ("launcher", "rtdebug.rank.execute"),  # rtdebug run under a debugger already: the script alone
    ("launcher", "rtdebug.rank.ray_worker"),  # named in RAY_TRAIN_CALLBACKS: Ray loads it in each worker
    ("root", "rtdebug.rank.api"),  # rtdebug.breakpoint, resolved on first use
    ("shell", "rtdebug.rank.adopted"),  # rtdebug adopt: named in the code it injects into a running rank
    ("inject", "rtdebug.rank.adopted"),  # the detach it injects into an adopted rank (``inject.runner``)
    ("vscode-extension", "rtdebug.rank.api"),  # what a debugger evaluates in a rank (DAP evaluate)
}
EXTENSION_SRC = PKG.parents[1] / "vscode-extension" / "src"
STRING_MODULE = re.compile(r"^rtdebug(\.\w+)+$")
PLACEHOLDER = re.compile(r"\{\w*(![rsa])?\}")  # a str.format template's field: code once filled in
SOFT_LINES, HARD_LINES = 500, 900
# packages that are one concept with one public face: their __init__ re-exports it (and nothing else)
FACADES = {"rtdebug.rank.endpoint": {"Endpoint", "debugger_active"}}


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


def _as_code(text: str) -> ast.Module | None:
    """``text`` as Python, if it is code (it parses, and imports, calls or reads an attribute)."""
    if "\n" not in text and "import" not in text:
        return None
    try:
        tree = ast.parse(PLACEHOLDER.sub("None", text))
    except (SyntaxError, ValueError):
        return None
    code = (ast.Import, ast.ImportFrom, ast.Call, ast.Attribute)
    return tree if any(isinstance(n, code) for n in ast.walk(tree)) else None


def code_strings(tree: ast.Module) -> Iterator[ast.Module]:
    """The strings in ``tree`` that are Python code: each string constant, and each module-level name's
    string built up piece by piece (``X = "..."``, ``X += "..."``)."""
    built: dict[str, str] = {}
    pieces: set[int] = set()  # the constants a built string is made of: read whole, not one by one
    for node in tree.body:
        value = getattr(node, "value", None)
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            built[node.targets[0].id] = value.value
            pieces.add(id(value))
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id in built:
            built[node.target.id] += value.value
            pieces.add(id(value))
    texts = {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in pieces
    }
    for text in sorted(texts | set(built.values())):
        if (code := _as_code(text)) is not None:
            yield code


def edges(module: str) -> list[tuple[str, bool]]:
    """(imported module, lazily) for every rtdebug import and module path string in ``module``, and in the
    code it holds as strings (lazy: it runs elsewhere, later)."""
    tree = ast.parse(MODULES[module].read_text())
    out = _edges(module, tree, lazy_all=False)
    for code in code_strings(tree):
        out += _edges(module, code, lazy_all=True)
    return out


def _edges(module: str, tree: ast.Module, lazy_all: bool) -> list[tuple[str, bool]]:
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
                out.append((target, lazy or lazy_all or isinstance(node, ast.Constant)))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (inner := _dotted(node.value)) is not None:
        return f"{inner}.{node.attr}"
    return None


def _module_of_call(node: ast.AST) -> str | None:
    """``sys.modules.get("rtdebug.x")`` or ``sys.modules["rtdebug.x"]``: the rtdebug module it names."""
    if isinstance(node, ast.Call) and _dotted(node.func) == "sys.modules.get" and node.args:
        node = node.args[0]
    elif isinstance(node, ast.Subscript) and _dotted(node.value) == "sys.modules":
        node = node.slice
    else:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES:
        return node.value
    return None


def reaches(module: str, tree: ast.Module, where: str = "") -> list[str]:
    """Every read or write of another rtdebug module's ``_private`` name in ``tree`` (``module``'s code, or
    code it holds as a string: ``where`` says so): ``from m import _x``, and ``m._x`` where ``m`` names an
    imported rtdebug module (``import a.b as m``, ``from a import b``, ``m = sys.modules.get("a.b")``, or the
    dotted path itself)."""
    base = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    alias: dict[str, str] = {}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in MODULES:
                    alias[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            pkg = node.module or ""
            if node.level:
                pkg = ".".join(base.split(".")[: len(base.split(".")) - node.level + 1] + ([pkg] if pkg else []))
            for a in node.names:
                if f"{pkg}.{a.name}" in MODULES:
                    alias[a.asname or a.name] = f"{pkg}.{a.name}"
                elif pkg in MODULES and pkg != module and _private(a.name):
                    bad.append(f"{module}{where}:{node.lineno} imports {a.name} from {pkg}")
        elif isinstance(node, ast.Assign) and (named := _module_of_call(node.value)) is not None:
            for t in node.targets:
                if isinstance(t, ast.Name):
                    alias[t.id] = named
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        owner = _dotted(node.value)
        target = alias.get(owner or "") or (owner if owner in MODULES else None) or _module_of_call(node.value)
        if target is not None and target != module:
            bad.append(f"{module}{where}:{node.lineno} reaches into {target}.{node.attr}")
    return bad


def _own_privates(tree: ast.Module) -> set[str]:
    """The ``_private`` attributes a module's classes keep: ``self._x`` / ``cls._x``, and ``_methods``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            names |= {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return {n for n in names if _private(n)}


PRIVATE_ATTRS = {m: _own_privates(ast.parse(p.read_text())) for m, p in MODULES.items()}


def object_reaches(module: str, tree: ast.Module, where: str = "") -> list[str]:
    """``obj._x`` where ``_x`` is what a class of another rtdebug module keeps private and this module's
    own classes do not: one module's code reaching into another's objects (``endpoint._sock``)."""
    mine = PRIVATE_ATTRS.get(module, set())
    theirs = {a: m for m, attrs in sorted(PRIVATE_ATTRS.items()) if m != module for a in attrs}
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr in theirs and node.attr not in mine):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        bad.append(f"{module}{where}:{node.lineno} reaches into {ast.unparse(node)} ({theirs[node.attr]} keeps it)")
    return bad


def private_reaches(module: str) -> list[str]:
    tree = ast.parse(MODULES[module].read_text())
    bad = reaches(module, tree) + object_reaches(module, tree)
    for code in code_strings(tree):
        where = " (in code held as a string)"
        bad += reaches(module, code, where) + object_reaches(module, code, where)
    return bad


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


def test_no_module_reaches_into_another_modules_private_names():
    assert [line for m in sorted(MODULES) for line in private_reaches(m)] == []


def test_the_private_check_can_fail():
    """Each way in: ``from m import _x``, ``m._x`` by alias, by ``from``, by dotted path, and in code held
    as a string (found through ``sys.modules``), built piece by piece; a dunder and the module's own names
    are not reaches."""
    src = """
import rtdebug.rank.stopon.ddp as d
import rtdebug.rank.adopted
from rtdebug.rank.stopon import agree
from rtdebug.rank.stopon.ddp import _step, STATE, __doc__
d._names[1] = "x"
agree._state
rtdebug.rank.adopted._lock
d.__file__
CODE = "import sys\\nm = sys.modules.get('rtdebug.rank.adopted')\\n"
CODE += "r = m._state.get('session_id')\\nimport rtdebug.rank.stopon.arm as a\\na._state\\n"
"""
    tree = ast.parse(src)
    found = reaches("rtdebug.commands.adoptstopon", tree)
    for code in code_strings(tree):
        found += reaches("rtdebug.commands.adoptstopon", code, " (string)")
    m = "rtdebug.commands.adoptstopon"
    assert sorted(found) == [
        f"{m} (string):3 reaches into rtdebug.rank.adopted._state",
        f"{m} (string):5 reaches into rtdebug.rank.stopon.arm._state",
        f"{m}:5 imports _step from rtdebug.rank.stopon.ddp",
        f"{m}:6 reaches into rtdebug.rank.stopon.ddp._names",
        f"{m}:7 reaches into rtdebug.rank.stopon.agree._state",
        f"{m}:8 reaches into rtdebug.rank.adopted._lock",
    ], found
    assert reaches("rtdebug.rank.stopon.ddp", ast.parse("import rtdebug.rank.stopon.ddp as me\nme._x")) == []
    assert "_sock" in PRIVATE_ATTRS["rtdebug.rank.endpoint.port"]
    reach = object_reaches("rtdebug.rank.unadopt", ast.parse("def shut(endpoint):\n    endpoint._sock.close()"))
    assert reach == ["rtdebug.rank.unadopt:2 reaches into endpoint._sock (rtdebug.rank.endpoint.port keeps it)"], reach
    shell_to_rank = [t for code in code_strings(tree) for t, lazy in _edges(m, code, True) if lazy]
    assert "rtdebug.rank.stopon.arm" in shell_to_rank  # the injected import is an edge the layers see


def test_the_checker_can_fail(monkeypatch):
    """A rank module importing the shell, and a common module importing the registry, are caught."""
    monkeypatch.setitem(GRAPH, "rtdebug.rank.endpoint.gil", [("rtdebug.commands.control", True)])
    monkeypatch.setitem(GRAPH, "rtdebug.common.ports", [("rtdebug.registry.files", False)])
    bad = crossings()
    assert "rtdebug.rank.endpoint.gil (rank) imports rtdebug.commands.control (shell)" in bad
    assert "rtdebug.common.ports (common) imports rtdebug.registry.files (registry)" in bad
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def _facade(package: str, body: list[ast.stmt]) -> set[str] | None:
    """The names a facade ``__init__`` re-exports: ``from <its own module> import ...`` and a matching
    ``__all__``; None if it does anything else."""
    names: set[str] = set()
    listed: set[str] | None = None
    for node in body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + ".") and not node.level:
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            listed = set(ast.literal_eval(node.value))
        else:
            return None
    return names if listed == names else None


@pytest.mark.parametrize("path", sorted(MODULES.values()), ids=lambda p: str(p.relative_to(PKG)))
def test_init_is_a_docstring_and_modules_stay_small(path):
    """A module keeps its concept whole: above ``SOFT_LINES`` a warning (is it two concepts?), a failure only
    above ``HARD_LINES``; a function stays under 60 lines."""
    tree = ast.parse(path.read_text())
    if path.name == "__init__.py" and path.parent != PKG:
        assert isinstance(tree.body[0], ast.Expr), f"{path}: a docstring first"
        assert isinstance(tree.body[0].value, ast.Constant) and "import" in tree.body[0].value.value.lower()
        face = FACADES.get(module_name(path))
        if face is None:
            assert len(tree.body) == 1, f"{path}: docstring only"
        else:
            assert _facade(module_name(path), tree.body[1:]) == face, f"{path}: re-exports of its own modules only"
    lines = len(path.read_text().splitlines())
    assert lines <= HARD_LINES, f"{path} is {lines} lines (limit {HARD_LINES})"
    if lines > SOFT_LINES:
        warnings.warn(f"{path.relative_to(PKG)} is {lines} lines (over {SOFT_LINES}): one concept still?", stacklevel=1)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            assert n <= 60, f"{path}:{node.lineno} {node.name} is {n} lines (limit 60)"


STORE_SEAMS = {  # the one place each process opens a store connection (all the torch-free client)
    "rtdebug.views.store",  # the shell and the launcher: StoreView.client, one per command
    "rtdebug.rank.publish",  # a rank's publisher
    "rtdebug.rank.stacks.watch",  # a rank's dump watcher (its size-bounded subclass)
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


TEST_GROUPS = {"unit", "e2e", "hostile", "project"}


def test_tests_are_grouped_by_what_they_need():
    """``docs/testing.md``: every test module sits in one of the groups, none loose in ``tests/``, and no two
    share a name (pytest's default import mode keys modules by their basename)."""
    tests = PKG.parents[1] / "tests"
    loose = sorted(p.name for p in tests.glob("test_*.py"))
    assert not loose, f"test modules outside a group: {loose}"
    found = sorted(p.relative_to(tests) for p in tests.glob("*/test_*.py"))
    groups = {p.parts[0] for p in found}
    assert groups == TEST_GROUPS, groups
    names = [p.name for p in found]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


# Python the extension sends into a rank: an import (``__import__('m'...)``, ``import m``, ``from m import``)
# or ``sys.modules['m']``, and the name it calls on ``__import__('m', ...)``
SENT_MODULE = re.compile(
    r"__import__\(\s*\\?['\"](rtdebug[\w.]*)|\bimport\s+(rtdebug[\w.]*)|\bfrom\s+(rtdebug[\w.]*)\s+import\b"
    r"|sys\.modules(?:\.get\(|\[)\s*\\?['\"](rtdebug[\w.]*)"
)
SENT_CALL = re.compile(r"__import__\(\s*\\?['\"](rtdebug[\w.]*)\\?['\"][^)]*\)\s*\.\s*(\w+)")


def sent_into_ranks(text: str, where: str) -> list[str]:
    """What ``text`` (TypeScript source) names inside a rank, outside the surface: ``where:line: what``."""
    surface = {t for src, t in ENTRY_POINTS if src == "vscode-extension"}
    api = {n.name for n in ast.parse(MODULES["rtdebug.rank.api"].read_text()).body if isinstance(n, ast.FunctionDef)}
    bad = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("//", "*", "/*")):
            continue
        for m in SENT_MODULE.finditer(line):
            name = next(g for g in m.groups() if g)
            if name not in surface:
                bad.append(f"{where}:{i}: {name} (a rank's code, not rtdebug.rank.api)")
        for m in SENT_CALL.finditer(line):
            if m.group(1) in surface and (m.group(2).startswith("_") or m.group(2) not in api):
                bad.append(f"{where}:{i}: rtdebug.rank.api.{m.group(2)} (not a public function of rtdebug.rank.api)")
    return bad


def test_the_extension_sends_only_the_rank_api_into_ranks():
    """What VS Code evaluates inside a rank (``rtdebug.rank.api``) is declared: a rename of rank internals
    cannot break the extension silently."""
    sources = sorted(EXTENSION_SRC.rglob("*.ts"))
    assert sources, f"no TypeScript under {EXTENSION_SRC}"
    bad = [b for p in sources for b in sent_into_ranks(p.read_text(), str(p.relative_to(EXTENSION_SRC.parent)))]
    assert bad == [], "\n".join(bad)
    sent = "".join(p.read_text() for p in sources)
    assert "__import__('rtdebug.rank.api'" in sent  # the check sees what is sent


def test_the_extension_check_can_fail():
    ts = """const A = "__import__('rtdebug.rank.stopon.arm', fromlist=['_']).configure('')";
const B = `__import__('rtdebug.rank.api', fromlist=['_']).stop_at_next_collective()`;
const C = "__import__('rtdebug.rank.api', fromlist=['_'])._connected()";
const D = 'import rtdebug.rank.runtime as r; r.endpoint';
// __import__('rtdebug.rank.stopon.arm') in a comment is not sent
const E = "sys.modules.get('rtdebug.rank.collectives.recorder')";
const F = "__import__('rtdebug.rank.api', fromlist=['_']).no_such_function()";"""
    assert sent_into_ranks(ts, "x.ts") == [
        "x.ts:1: rtdebug.rank.stopon.arm (a rank's code, not rtdebug.rank.api)",
        "x.ts:3: rtdebug.rank.api._connected (not a public function of rtdebug.rank.api)",
        "x.ts:4: rtdebug.rank.runtime (a rank's code, not rtdebug.rank.api)",
        "x.ts:6: rtdebug.rank.collectives.recorder (a rank's code, not rtdebug.rank.api)",
        "x.ts:7: rtdebug.rank.api.no_such_function (not a public function of rtdebug.rank.api)",
    ]
