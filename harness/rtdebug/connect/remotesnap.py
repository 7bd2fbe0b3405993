"""A node's ``rtdebug stacks --json``, read as hostile input: the snapshot rebuilt from typed fields only.

What ``connect``'s relay brings back (``rtdebug.connect.stacksrelay``) was printed by whatever runs on the other
machine, so nothing is taken as it is: the output is bounded (the link's ``MAX_OUTPUT``), must be one JSON
object for the session asked, and the snapshot that ``stacks`` prints and the VS Code extension reads is
built here key by key, each value checked for the type its readers use (a frame's ``file`` a text, a
group's ``ranks`` a list of ints ...), every text at most ``MAX_TEXT`` characters. A required field that is
missing or of the wrong type refuses the whole answer in one line; an optional one is left out; a key this
reader does not know is kept only as a plain scalar. The text output escapes control characters when it is
rendered (``rtdebug.stacks.text``), so a forged name cannot drive the terminal either.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from rtdebug.common.errors import HarnessError

MAX_TEXT = 4096
MAX_NATIVE = 1 << 16
KINDS = ("user", "library", "internal")
Json = dict[str, Any]  # one JSON object of the snapshot, its fields checked


class Bad(Exception):
    """A field of the wrong shape (its path says which)."""


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: Any) -> bool:
    return (_int(v) or isinstance(v, float)) and math.isfinite(v)


def _text(v: Any, limit: int = MAX_TEXT) -> bool:
    return isinstance(v, str) and len(v) <= limit


def _need(ok: bool, where: str) -> None:
    if not ok:
        raise Bad(where)


def _list(v: Any, where: str, item: Callable[[Any, str], Any]) -> list[Any]:
    _need(isinstance(v, list), where)
    return [item(x, f"{where}[{i}]") for i, x in enumerate(v)]


def _rank(v: Any, where: str) -> int:
    _need(_int(v) and v >= 0, where)
    return int(v)


def _opt(v: Any, ok: Callable[[Any], bool]) -> Any:
    return v if v is None or ok(v) else None


def _fields(d: Any, where: str, spec: dict[str, Callable[[Any], bool]]) -> Json:
    """The ``spec`` keys of ``d``, each passing its check (all required)."""
    _need(isinstance(d, dict), where)
    for k, ok in spec.items():
        _need(k in d and ok(d[k]), f"{where}.{k}")
    return {k: d[k] for k in spec}


def _frame(f: Any, where: str) -> Json:
    return _fields(f, where, {"file": _text, "line": lambda v: v is None or _int(v), "function": _text,
                              "kind": lambda v: v in KINDS})  # fmt: skip


def _thread(t: Any, where: str) -> Json:
    out = _fields(t, where, {"rank": lambda v: _int(v) and v >= 0, "main": lambda v: isinstance(v, bool)})
    out["id"] = _opt(t.get("id"), lambda v: _text(v, 64))
    out["name"] = _opt(t.get("name"), lambda v: _text(v, 256))
    for k in ("internal", "current", "truncated"):
        out[k] = t.get(k) is True
    out["frames"] = _list(t.get("frames"), f"{where}.frames", _frame)
    return out


def _scalars(d: Any, where: str) -> Json:
    """A flat object of JSON scalars (a group's ``collectives`` entry): texts bounded, nothing nested."""
    _need(isinstance(d, dict) and len(d) <= 32, where)
    return {str(k)[:64]: v for k, v in d.items() if v is None or isinstance(v, (bool, int)) or _num(v) or _text(v)}


def _native(v: Any) -> Any:
    """py-spy's text for one rank, or its threads (``main`` and frames of function, file, line)."""
    if _text(v, MAX_NATIVE):
        return v
    if not isinstance(v, list):
        return None
    out = []
    for t in v:
        frames = t.get("frames") if isinstance(t, dict) else None
        if not isinstance(frames, list):
            return None
        keep = [
            {
                k: f.get(k) if _text(f.get(k)) or (k == "line" and _int(f.get(k))) else None
                for k in ("function", "file", "line")
            }
            for f in frames
            if isinstance(f, dict)
        ]
        out.append({"main": t.get("main") is True, "frames": keep})
    return out


def _group(g: Any, where: str) -> Json:
    out = _fields(g, where, {"label": _text, "debugger": lambda v: isinstance(v, bool)})
    out["ranks"] = _list(g.get("ranks"), f"{where}.ranks", _rank)
    _need(bool(out["ranks"]), f"{where}.ranks")
    out["frames"] = _list(g.get("frames"), f"{where}.frames", _frame)
    out["threads"] = _list(g.get("threads"), f"{where}.threads", _thread)
    d = g.get("departs_at")
    out["departs_at"] = d if _int(d) and 0 <= d < len(out["frames"]) else None
    if "collectives" in g:
        out["collectives"] = _list(g["collectives"], f"{where}.collectives", _scalars)
    if isinstance(g.get("native"), dict):
        native = {str(r): kept for r, v in g["native"].items() if str(r).isdigit() and (kept := _native(v))}
        if native:
            out["native"] = native
    return out


def _history(h: Any, where: str) -> Json:
    """``stacks --history``'s table (``rtdebug.stacks.history.align``), its cells' rank keys as ints again."""

    def row(r: Any, at: str) -> Json:
        out = _fields(r, at, {"seq": _int, "differs": lambda v: isinstance(v, bool)})
        cells = r.get("cells")
        _need(isinstance(cells, dict) and all(str(k).isdigit() and _text(v, 512) for k, v in cells.items()), at)
        out["cells"] = {int(k): v for k, v in cells.items()}
        out["entered"] = _list(r.get("entered"), f"{at}.entered", _rank)
        return out

    def grp(g: Any, at: str) -> Json:
        out = _fields(g, at, {"pg": lambda v: _text(v, 256), "desc": lambda v: _text(v, 512)})
        out["rows"] = _list(g.get("rows"), f"{at}.rows", row)
        out["first_divergence"] = _opt(g.get("first_divergence"), _int)
        return out

    _need(isinstance(h, dict), where)
    return {"groups": _list(h.get("groups"), f"{where}.groups", grp),
            "without": _list(h.get("without"), f"{where}.without", _rank)}  # fmt: skip


def _motion(m: dict[str, Any]) -> Json:
    advanced = m.get("advanced")
    advanced = advanced if isinstance(advanced, dict) else {}
    return {
        "state": m.get("state") if _text(m.get("state"), 32) else None,
        "window_s": m.get("window_s") if _num(m.get("window_s")) else None,
        "advanced": {str(k): v for k, v in advanced.items() if str(k).isdigit() and _int(v)},
        "how": _opt(m.get("how"), lambda v: _text(v, 256)),
        "why": _opt(m.get("why"), _text),
    }


def _detail(spec: dict[str, Callable[[Any], bool]]) -> Callable[[Any, str], Json]:
    return lambda d, where: _fields(d, where, {"rank": lambda v: _int(v) and v >= 0, **spec})


OPTIONAL: dict[str, Callable[[Any], bool]] = {  # top-level keys kept when of their type, else None
    "stopped": _text, "verdict": _text, "flight_note": _text, "culprit": lambda v: _int(v) and v >= 0,
    "collectives_from": lambda v: _text(v, 64), "source": lambda v: _text(v, 512),
}  # fmt: skip


def _snapshot(data: Any, session_id: str) -> Json:
    snap = _fields(data, "snapshot", {"session_id": lambda v: v == session_id, "taken_at": _num,
                                      "elapsed_s": _num})  # fmt: skip
    snap["groups"] = _list(data.get("groups"), "groups", _group)
    snap["unresponsive"] = _list(data.get("unresponsive", []), "unresponsive", _rank)
    reason: dict[str, Callable[[Any], bool]] = {"reason": lambda v: _text(v)}
    snap["unresponsive_detail"] = _list(data.get("unresponsive_detail", []), "unresponsive_detail",
                                        _detail({**reason, "pid": lambda v: v is None or _int(v)}))  # fmt: skip
    exited: dict[str, Callable[[Any], bool]] = {
        "state": lambda v: _text(v, 64),
        "exit_code": lambda v: v is None or _int(v),
    }
    snap["exited"] = _list(data.get("exited", []), "exited", _detail(exited))
    snap["fallback"] = _list(data.get("fallback", []), "fallback", _detail(reason))
    snap["incomplete"] = _list(data.get("incomplete", []), "incomplete", _rank)
    snap["unverified"] = _list(data.get("unverified", []), "unverified", _rank)
    coords = data.get("coords")
    coords = coords if isinstance(coords, dict) else {}
    snap["coords"] = {str(k): v for k, v in coords.items() if str(k).isdigit() and _text(v, 256)}
    for k, ok in OPTIONAL.items():
        snap[k] = _opt(data.get(k), ok)
    if "history" in data:
        snap["history"] = _history(data["history"], "history")
    if isinstance(data.get("motion"), dict):  # moving or still (rtdebug.stacks.motion), typed field by field
        snap["motion"] = _motion(data["motion"])
    for k, v in data.items():  # a newer rtdebug's other keys: plain scalars only
        if (
            k not in snap
            and isinstance(k, str)
            and len(k) <= 64
            and (v is None or isinstance(v, bool) or _num(v) or _text(v))
        ):
            snap[k] = v
    return snap


def parse(raw: bytes, session_id: str, host: str) -> Json:
    """The snapshot ``raw`` (a node's ``stacks --json``) says for ``session_id``; one line if it is not one."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        what = "something that is not JSON" if raw.strip() else "nothing"
        raise HarnessError(f"{host}: `rtdebug stacks --json` printed {what}; not used") from None
    try:
        return _snapshot(data, session_id)
    except (Bad, RecursionError) as exc:
        raise HarnessError(
            f"{host}: `rtdebug stacks --json` printed a snapshot with a bad {str(exc)[:120]}; not used"
        ) from None
