"""The registry schema (``registry.schema.json``, which the VS Code extension reads too) and the code agree.

``REQUIRED`` in ``rtdebug.registry.entry`` lists the fields readers index without checking: each must be
required by the schema, with the same type, or a schema-valid entry could crash a reader. And whatever writes an
entry (``RankState`` for ranks; every ``session_entry(...)`` call for sessions) must write every field the
schema requires and none it does not know (``additionalProperties`` is false). Either side drifting fails here.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jsonschema
import pytest

from rtdebug.common.config import RankConfig, Target
from rtdebug.launcher import single
from rtdebug.rank import state as rankstate
from rtdebug.registry import entry as registry_entry
from rtdebug.registry.entry import REQUIRED, SCHEMA_PATH, session_entry

from support.paths import EXAMPLES, ROOT

SCHEMA = json.loads(SCHEMA_PATH.read_text())
DEFS = SCHEMA["$defs"]
PACKAGE = ROOT / "harness" / "rtdebug"
PY_TO_JSON = {str: "string", int: "integer", float: "number", list: "array", dict: "object", bool: "boolean"}


def resolved(prop: dict) -> dict:
    while "$ref" in prop:
        prop = DEFS[prop["$ref"].rsplit("/", 1)[1]]
    return prop


def schema_types(prop: dict) -> set[str]:
    """The JSON types a schema property allows (a number allows an integer too)."""
    prop = resolved(prop)
    if "enum" in prop or "const" in prop:
        types = {PY_TO_JSON[type(v)] for v in prop.get("enum", [prop.get("const")])}
    else:
        t = prop.get("type")
        types = {t} if isinstance(t, str) else set(t or ())
    return types | ({"integer"} if "number" in types else set())


def code_types(typ: type | tuple[type, ...]) -> set[str]:
    """The JSON types ``registry_entry.problem`` accepts for a field (never a bool, whatever the type)."""
    types = {PY_TO_JSON[t] for t in (typ if isinstance(typ, tuple) else (typ,))}
    return types | ({"integer"} if "number" in types else set())


@pytest.mark.parametrize("kind", ["session", "rank"])
def test_what_readers_index_is_what_the_schema_requires_with_the_same_type(kind):
    schema = DEFS[kind]
    required = set(schema["required"])
    assert set(REQUIRED[kind]) <= required, f"REQUIRED[{kind!r}] has fields the schema does not require: " + str(
        sorted(set(REQUIRED[kind]) - required)
    )
    for field, typ in REQUIRED[kind].items():
        assert code_types(typ) == schema_types(schema["properties"][field]), (kind, field)
    # what registry_entry.problem checks before REQUIRED: the schema's version and kind
    assert resolved(schema["properties"]["schema_version"]) == {"const": registry_entry.SCHEMA_VERSION}
    assert resolved(schema["properties"]["kind"]) == {"const": kind}


def test_the_codes_states_are_the_schemas():
    assert set(registry_entry.LIVE_SESSION_STATES) <= set(DEFS["state_session"]["enum"])
    assert set(registry_entry.LIVE_RANK_STATES) | set(registry_entry.ATTACHABLE_STATES) | set(rankstate.FINAL) <= set(
        DEFS["state_rank"]["enum"]
    )


class Kept:
    def __init__(self) -> None:
        self.entries: list[dict] = []

    def write_rank(self, entry: dict) -> None:
        self.entries.append(json.loads(json.dumps(entry)))  # as written: JSON


def test_a_rank_entry_as_its_record_writes_it_is_schema_valid():
    kept = Kept()
    r = rankstate.RankState(kept, "s1", 0, "127.0.0.1", 5678, False, "t.py", world_size=2)
    r.set(state="ready")
    for entry in kept.entries:
        jsonschema.validate(entry, SCHEMA)
        assert registry_entry.problem(entry, "rank") is None


def test_a_run_session_entry_as_the_launcher_writes_it_is_schema_valid():
    cfg = RankConfig(session_id="s1")
    entry = json.loads(json.dumps(single._entry(cfg, Target(str(EXAMPLES / "local_linear.py")), 5678)))
    jsonschema.validate(entry, SCHEMA)
    assert registry_entry.problem(entry, "session") is None


def _calls(name: str) -> list[tuple[Path, ast.Call]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                if (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "") == name:
                    out.append((path, node))
    return out


def test_every_session_writer_writes_what_the_schema_requires_and_nothing_it_does_not_know():
    """Every ``session_entry(...)`` call (torchrun, run, a Ray run's workers, adopt): session_entry's own fields
    plus the call's keywords. Fields added through ``**`` are optional ones; the required are named."""
    schema = DEFS["session"]
    base = set(session_entry("s1", "run"))
    sites = _calls("session_entry")
    assert len(sites) >= 4, [f"{p.relative_to(ROOT)}:{c.lineno}" for p, c in sites]
    for path, call in sites:
        where = f"{path.relative_to(ROOT)}:{call.lineno}"
        named = {k.arg for k in call.keywords if k.arg is not None}
        assert not set(schema["required"]) - base - named, (where, sorted(set(schema["required"]) - base - named))
        assert named <= set(schema["properties"]), (where, sorted(named - set(schema["properties"])))
    assert base <= set(schema["properties"]), sorted(base - set(schema["properties"]))


def test_entries_are_built_in_those_two_places_only():
    """No other module makes a ``{"kind": "rank"|"session", ...}`` entry of its own (the tests above would miss it)."""
    makers = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "kind" and isinstance(v, ast.Constant):
                        if v.value in ("rank", "session"):
                            makers.add(str(path.relative_to(PACKAGE)))
    assert makers == {"registry/entry.py", "rank/state.py"}, makers
