"""Parse stack dumps (faulthandler's format) and group ranks by identical main-thread stack.

Pure functions, no processes: ``stacks`` collects the text, this module turns
it into the JSON the CLI prints and the VS Code extension reads. Frames are
innermost first, as faulthandler writes them. rtdebug's own frames, runpy
and the debugger's (pydevd/debugpy) are kept in ``threads`` but left out of a
group's key and ``frames``, so a rank stopped at a breakpoint groups by the
user's frames, not by where pydevd waits.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from rtdebug.common.paths import PACKAGE_DIR
from rtdebug.registry.schema import RankEntry

THREAD_RE = re.compile(
    r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[([^\]]{0,64})\])?(?= ).*\(most recent call first\):\s*$"
)
STACK_RE = re.compile(r"^Stack \(most recent call first\):\s*$")
FRAME_RE = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$')
DEBUGGER_PARTS = (
    "/debugpy/",
    "/pydevd",
    "/_pydevd_bundle/",
    "/_pydev_bundle/",
    "/_pydev_imps/",
    "/_pydevd_frame_eval/",
    "/pydev_ipython/",
)
STDLIB_RE = re.compile(r"[/\\]lib(64)?[/\\]python3\.\d+[/\\]")
ARROW = "\u2190"
# the collective record's wrapper (rtdebug.rank.collectives.recorder) sits between the user's call and torch's
# collective: it is left out, so a rank blocked in all_reduce still shows all_reduce, not its caller
TRANSPARENT = os.path.join("rtdebug", "rank", "collectives", "recorder.py")


def parse_dump(text: str) -> list[dict[str, Any]]:
    """faulthandler's ``all_threads=True`` text -> threads, each with frames innermost first."""
    threads: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = THREAD_RE.match(line)
        if m or STACK_RE.match(line):
            threads.append(
                {
                    "id": m.group(2) if m else None,
                    "current": m is not None and m.group(1).startswith("Current"),
                    "name": m.group(3) if m else None,  # the dump thread's text names threads; faulthandler's not
                    "frames": [],
                    "truncated": False,
                }
            )
            continue
        if not threads:
            continue
        f = FRAME_RE.match(line)
        if f:
            line_no = None if f.group(2) == "???" else int(f.group(2))
            threads[-1]["frames"].append(frame(f.group(1), line_no, f.group(3)))
        elif line.strip() == "...":
            threads[-1]["truncated"] = True
    return threads


def frame(file: str, line: int | None, function: str) -> dict[str, Any]:
    return {"file": file, "line": line, "function": function, "kind": frame_kind(file)}


def frame_kind(file: str) -> str:
    """``internal`` (rtdebug, debugger, runpy), ``library`` (stdlib, site-packages) or ``user``."""
    norm = file.replace("\\", "/")
    if norm.startswith(PACKAGE_DIR.replace("\\", "/")) or any(p in norm for p in DEBUGGER_PARTS):
        return "internal"
    if norm in ("<frozen runpy>",) or norm.endswith("/runpy.py"):
        return "internal"
    if norm.startswith("<") or "/site-packages/" in norm or "/dist-packages/" in norm or STDLIB_RE.search(norm):
        return "library"
    return "user"


def dump_complete(text: str, main_id: str | None, bottom: list[str] | None) -> bool:
    """True once the main thread's block has reached its outermost frame.

    CPython lists the newest thread first, so the main thread (the oldest) comes
    last; its bottom frame never changes, so seeing it means the dump is whole.
    """
    if not text.endswith("\n"):
        return False
    threads = parse_dump(text)
    if not threads or main_id is None:
        return False
    last = threads[-1]
    if last["id"] is None or int(last["id"], 16) != int(main_id, 16):
        return False
    if last["truncated"] or text.rstrip("\n").endswith("<no Python frame>"):
        return True
    if not last["frames"] or not bottom:
        return False
    f = last["frames"][-1]
    return [f["file"], f["function"]] == list(bottom)


def visible_frames(frames: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """The frames a user cares about, and whether a debugger was on top (stopped at a breakpoint).

    Frames on top of (called by) rtdebug or the debugger -- e.g. threading's
    ``wait`` inside pydevd's suspend loop -- go too, up to the first user frame;
    the collective wrapper's frames go, but what it called stays.
    """
    frames = [f for f in frames if not f["file"].endswith(TRANSPARENT)]
    first_user = next((i for i, f in enumerate(frames) if f["kind"] == "user"), len(frames))
    lead = frames[:first_user]
    cut = max((i + 1 for i, f in enumerate(lead) if f["kind"] == "internal"), default=0)
    debugger = first_user < len(frames) and any(any(p in f["file"] for p in DEBUGGER_PARTS) for f in lead[:cut])
    kept = [f for f in frames[cut:] if f["kind"] != "internal"]
    return (kept or frames), debugger


def frame_key(frames: list[dict[str, Any]]) -> tuple:
    return tuple((f["file"], f["line"], f["function"]) for f in frames)


def departs_at(frames: list[dict[str, Any]], majority: list[dict[str, Any]]) -> int:
    """Index (innermost first) of the outermost frame of ``frames`` that differs from ``majority``."""
    common = 0
    for a, b in zip(reversed(frames), reversed(majority), strict=False):
        if frame_key([a]) != frame_key([b]):
            break
        common += 1
    return max(len(frames) - 1 - common, 0)


def main_thread(threads: list[dict[str, Any]], main_id: str | None) -> dict[str, Any] | None:
    for t in threads:
        if main_id is not None and t["id"] is not None and int(t["id"], 16) == int(main_id, 16):
            return t
    return threads[-1] if threads else None


def group(dumps: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Ranks with an identical main-thread stack share a group; the largest group comes first.

    ``dumps`` maps rank -> {"threads": [...], "main_id": "0x..", ...} from ``stacks``.
    """
    buckets: dict[tuple, dict[str, Any]] = {}
    for rank in sorted(dumps):
        d = dumps[rank]
        main = main_thread(d["threads"], d.get("main_id"))
        frames, debugger = visible_frames(main["frames"] if main else [])
        g = buckets.setdefault(frame_key(frames), {"ranks": [], "frames": frames, "debugger": False, "threads": []})
        g["ranks"].append(rank)
        g["debugger"] = g["debugger"] or debugger
        for t in d["threads"]:
            g["threads"].append(dict(t, rank=rank, main=t is main, internal=t is not main and own_thread(t)))
        if d.get("native") is not None:
            g.setdefault("native", {})[str(rank)] = d["native"]
    groups = sorted(buckets.values(), key=lambda g: (-len(g["ranks"]), g["ranks"][0]))
    for i, g in enumerate(groups):
        g["label"] = label(g["frames"], g["debugger"])
        g["departs_at"] = None if i == 0 else departs_at(g["frames"], groups[0]["frames"])
    return groups


def own_thread(t: dict[str, Any]) -> bool:
    """rtdebug's or the debugger's own thread (endpoint accept loop, lifetime guard, pydevd reader)."""
    return any(f["kind"] == "internal" for f in t["frames"]) and not any(f["kind"] == "user" for f in t["frames"])


def where(f: dict[str, Any]) -> str:
    return f"{os.path.basename(f['file'])}:{f['line'] if f['line'] is not None else '?'}"


def label(frames: list[dict[str, Any]], debugger: bool = False) -> str:
    """``all_reduce ← train_step (train.py:42)``: innermost frame, then the innermost user frame."""
    if not frames:
        return "<no Python frame>"
    top = frames[0]
    user = next((f for f in frames if f["kind"] == "user"), None)
    if user is None:  # before or after the script (e.g. --wait): say what rtdebug is doing
        own = next((f for f in frames if f["file"].startswith(PACKAGE_DIR)), None)
        if own is not None and own is not top:
            return f"{top['function']} {ARROW} {own['function']} ({where(own)}) [rtdebug, outside the script]"
    if user is None or user is top:
        text = f"{top['function']} ({where(top)})"
    else:
        text = f"{top['function']} {ARROW} {user['function']} ({where(user)})"
    return text + (" [stopped in the debugger]" if debugger else "")


def rank_list(ranks: list[int]) -> str:
    """[0, 2, 3, 4] -> '0,2-4' (the --wait/--rank syntax)."""
    out: list[str] = []
    rs = sorted(ranks)
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(out)


def ranks_word(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + rank_list(ranks)


def snapshot(
    session_id: str,
    taken_at: float,
    start: float,
    dumps: dict[int, dict[str, Any]],
    unresponsive: dict[int, str],
    pids: dict[int, Any],
    ended: list[RankEntry],
) -> dict[str, Any]:
    """The ``stacks --json`` object every source shares (this node's signals, a store, the Ray KV):
    ``start`` is the monotonic time the requests went out, ``unresponsive`` rank -> why."""
    return {
        "session_id": session_id,
        "taken_at": taken_at,
        "elapsed_s": round(time.monotonic() - start, 4),
        "groups": group(dumps),
        "unresponsive": sorted(unresponsive),
        "unresponsive_detail": [
            {"rank": r, "pid": pids.get(r), "reason": unresponsive[r]} for r in sorted(unresponsive)
        ],
        "exited": [{"rank": e["rank"], "state": e["state"], "exit_code": e.get("exit_code")} for e in ended],
        "incomplete": sorted(r for r, d in dumps.items() if not d.get("complete", True)),
    }
