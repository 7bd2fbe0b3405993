"""The registry schema (``registry.schema.json``, which the VS Code extension reads too) and the code agree.

``REQUIRED`` in ``rtdebug.registry.entry`` lists the fields readers index without checking: each must be
required by the schema, with the same type, or a schema-valid entry could crash a reader. And whatever writes an
entry (``RankState`` for ranks; every ``session_entry(...)`` call for sessions) must write every field the
schema requires and none it does not know (``additionalProperties`` is false). Either side drifting fails here.
"""

from __future__ import annotations

import ast
import json
import types
import typing
from pathlib import Path

import jsonschema
import pytest

from rtdebug.common.config import RankConfig, Target
from rtdebug.launcher import single
from rtdebug.rank import state as rankstate
from rtdebug.rank.stacks import dump
from rtdebug.registry import collseq
from rtdebug.registry import entry as registry_entry
from rtdebug.registry import schema as schema_types_mod
from rtdebug.registry.entry import REQUIRED, SCHEMA_PATH, session_entry

from support.paths import EXAMPLES, ROOT
from support.wait import until

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


# -- the types (rtdebug.registry.schema) are the schema's ---------------------------------------------

TYPED = [  # (the type, where the schema defines it)
    (schema_types_mod.SessionEntry, ("session",)),
    (schema_types_mod.NodeInfo, ("session", "nodes", "[]")),
    (schema_types_mod.ConnectInfo, ("session", "connect")),
    (schema_types_mod.ReplayInfo, ("session", "replay")),
    (schema_types_mod.TunnelInfo, ("rank", "tunnel")),
    (schema_types_mod.RankEntry, ("rank",)),
    (schema_types_mod.StacksField, ("rank", "stacks")),
    (schema_types_mod.MeshInfo, ("rank", "meshes", "[]")),
    (schema_types_mod.StopInfo, ("rank", "stop")),
    (schema_types_mod.DebugInfo, ("rank", "debug")),
    (schema_types_mod.CollectivesField, ("rank", "collectives")),
    (schema_types_mod.CollectiveRecord, ("rank", "collective")),
    (schema_types_mod.StacksAnswer, ("stacks_answer",)),
]
PY_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def schema_at(path: tuple[str, ...]) -> dict:
    node = DEFS[path[0]]
    for step in path[1:]:
        node = resolved(node["items"] if step == "[]" else node["properties"][step])
    return node


def annotation_types(annotation) -> tuple[set[str], set]:
    """(the JSON types a TypedDict field's annotation allows, the values a Literal allows: empty if none)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        parts = [annotation_types(a) for a in typing.get_args(annotation)]
        return set().union(*(p[0] for p in parts)), set().union(*(p[1] for p in parts))
    if origin is typing.Literal:
        values = set(typing.get_args(annotation))
        return {PY_TO_JSON[type(v)] for v in values}, values
    if origin is list:
        return {"array"}, set()
    if origin is dict or typing.is_typeddict(annotation):
        return {"object"}, set()
    name = PY_NAMES[annotation]
    return {name} | ({"integer"} if name == "number" else set()), set()


@pytest.mark.parametrize("typed,path", TYPED, ids=[t.__name__ for t, _ in TYPED])
def test_each_type_has_the_schemas_keys_required_alike_and_of_its_json_types(typed, path):
    schema = schema_at(path)
    hints = typing.get_type_hints(typed)
    where = "/".join(path)
    assert set(hints) == set(schema["properties"]), (where, sorted(set(hints) ^ set(schema["properties"])))
    assert typed.__required_keys__ == set(schema.get("required", ())), (
        where,
        sorted(typed.__required_keys__ ^ set(schema.get("required", ()))),
    )
    for key, annotation in hints.items():
        prop = resolved(schema["properties"][key])
        types_, values = annotation_types(annotation)
        assert types_ == schema_types(prop), (where, key, types_, schema_types(prop))
        if values:  # a Literal: exactly the schema's enum or const (plus null where the type allows it)
            assert values == set(prop.get("enum", [prop.get("const")])), (where, key)


def test_every_nested_object_with_properties_has_its_type():
    """A nested object the schema spells out is one of TYPED (so a new one cannot go untyped)."""
    typed_paths = {path for _, path in TYPED}

    def walk(node: dict, path: tuple[str, ...]) -> None:
        node = resolved(node)
        if "properties" in node:
            assert path in typed_paths, f"{'/'.join(path)} has properties but no type in rtdebug.registry.schema"
            for key, prop in node["properties"].items():
                walk(prop, (*path, key))
        if isinstance(node.get("items"), dict):
            walk(node["items"], (*path, "[]"))

    for name in ("session", "rank", "stacks_answer"):
        walk(DEFS[name], (name,))


def test_a_decoded_collective_record_is_its_type_and_schema_valid():
    static = collseq.static_block(b"0", b"float32", b"[4]", b"/job/train.py", b"train_step")
    raw = collseq.HEAD.pack(
        collseq.MAGIC, collseq.VERSION, collseq.ENTERED, collseq.OP_CODES["all_reduce"], 7, 3, 1.5, 42
    )
    rec = collseq.decode(raw + static + collseq.TAIL.pack(7))
    assert rec is not None and set(rec) == set(typing.get_type_hints(schema_types_mod.CollectiveRecord))
    jsonschema.validate(rec, {"$defs": DEFS, **DEFS["rank"]["properties"]["collective"]})


def test_a_dump_threads_answer_is_its_type_and_schema_valid(tmp_path):
    """The real thread's ``answer`` (``rtdebug.rank.stacks.dump``), asked through its FIFO and read from its file."""
    stacks = dump.arm(tmp_path, 0)
    try:
        assert stacks is not None
        jsonschema.validate(stacks, {"$defs": DEFS, **DEFS["rank"]["properties"]["stacks"]})
        nonce = "ab" * 8
        with open(tmp_path / stacks["request"], "wb", buffering=0) as fifo:
            fifo.write(nonce.encode() + b"\n")
        answer = tmp_path / stacks["answer"]
        value = until(lambda: answer.exists() and json.loads(answer.read_text()), 10, "the dump thread's answer")
    finally:
        dump.disarm()
    assert set(value) == set(typing.get_type_hints(schema_types_mod.StacksAnswer)) and value["nonce"] == nonce
    jsonschema.validate(value, {"$defs": DEFS, **DEFS["stacks_answer"]})
    assert "test_a_dump_threads_answer_is_its_type_and_schema_valid" in value["text"]
