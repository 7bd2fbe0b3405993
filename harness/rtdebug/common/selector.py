"""One way to choose ranks, everywhere a rank is chosen: rank numbers, or mesh coordinates.

Forms (Monarch's): ``0,2-3`` (rank numbers, as before), ``tp=0``, ``dp=0,tp=*``, ``pp=1:3`` (a slice, the
end excluded), ``dp=(0,2)`` (a list). Dimension names are those of the meshes the job created
(``rtdebug.rank.meshes``), flattened ones included (``dp_shard_cp=1``). Terms are ANDed. An unknown
dimension, or a coordinate out of its range, is one line that lists the valid ones. Pure functions: the
shell resolves against rank entries, a rank against its own coordinates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rtdebug.common.errors import usage

_TERM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]{0,63})=(\*|\d{1,6}|\d{1,6}:\d{1,6}|\(\d{1,6}(?:,\d{1,6}){0,255}\))$")


@dataclass(frozen=True)
class Term:
    dim: str
    values: tuple[int, ...] | None  # None: '*'
    text: str


def is_mesh(text: str) -> bool:
    return "=" in text


def _split(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def parse(text: str, flag: str = "--rank") -> list[Term]:
    terms = []
    for raw in _split(text.replace(" ", "")):
        m = _TERM.match(raw)
        if m is None:
            raise usage(f"{flag} {text!r}: {raw!r} is not DIM=N, DIM=*, DIM=A:B or DIM=(A,B,...)")
        dim, v = m.group(1), m.group(2)
        if v == "*":
            values = None
        elif ":" in v:
            a, b = (int(x) for x in v.split(":"))
            values = tuple(range(a, b))
        elif v.startswith("("):
            values = tuple(int(x) for x in v[1:-1].split(","))
        else:
            values = (int(v),)
        terms.append(Term(dim, values, raw))
    return terms


def dims_of(entries: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Every dimension the entries' meshes name, with its size."""
    sizes: dict[str, int] = {}
    for e in entries:
        for m in meshes_of(e):
            for d, s in zip(m["dims"], m["shape"], strict=False):
                sizes.setdefault(d, s)
    return sizes


def meshes_of(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An entry's meshes that have the shape rtdebug writes (an entry may come from a store: forgeable)."""
    out = []
    for m in entry.get("meshes") or []:
        if not isinstance(m, dict):
            continue
        dims, shape, coord = m.get("dims"), m.get("shape"), m.get("coord")
        if not (isinstance(dims, list) and isinstance(shape, list) and isinstance(coord, list)):
            continue
        if not (len(dims) == len(shape) == len(coord) <= 8):
            continue
        if not all(isinstance(d, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", d) for d in dims):
            continue
        ints = [*shape, *coord]
        if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 20 for x in ints):
            continue
        if any(c >= s for c, s in zip(coord, shape, strict=False)):
            continue
        out.append(m)
    return out


def coords_of(entry: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in meshes_of(entry):
        for d, c in zip(m["dims"], m["coord"], strict=False):
            out.setdefault(d, c)
    return out


def label(entry: Mapping[str, Any]) -> str:
    """``dp=0, tp=1``: the coordinates ``ps`` and the stacks show (the first mesh's dims first)."""
    return ", ".join(f"{d}={c}" for d, c in coords_of(entry).items())


def check(terms: list[Term], sizes: dict[str, int], flag: str = "--rank") -> None:
    valid = ", ".join(f"{d} (0-{s - 1})" for d, s in sizes.items()) or "none: the job has made no DeviceMesh yet"
    for t in terms:
        if t.dim not in sizes:
            raise usage(f"{flag} {t.text}: unknown mesh dimension {t.dim!r}; the dimensions are {valid}")
        bad = [v for v in (t.values or ()) if v >= sizes[t.dim]]
        if bad:
            raise usage(f"{flag} {t.text}: {t.dim}={bad[0]} is out of range; {t.dim} is 0-{sizes[t.dim] - 1}")


def matches(terms: list[Term], coords: dict[str, int]) -> bool:
    return all(t.dim in coords and (t.values is None or coords[t.dim] in t.values) for t in terms)


def resolve(text: str, entries: Sequence[Mapping[str, Any]], flag: str = "--rank") -> frozenset[int]:
    """The ranks among ``entries`` that a mesh selector ``text`` chooses (checked against their meshes)."""
    terms = parse(text, flag)
    check(terms, dims_of(entries), flag)
    return frozenset(e["rank"] for e in entries if matches(terms, coords_of(e)))


def group_label(coords: list[dict[str, int]]) -> str:
    """Several ranks' coordinates in one: ``dp=0, tp=*`` (a dim they differ in is ``*``); "" when unknown."""
    if not coords or not all(coords):
        return ""
    dims = [d for d in coords[0] if all(d in c for c in coords)]
    return ", ".join(f"{d}={coords[0][d]}" if len({c[d] for c in coords}) == 1 else f"{d}=*" for d in dims)
