"""Human text for a grouped stacks snapshot (``rtdebug stacks`` and the launcher's hang report).

One summary line per group first -- ``ranks 0,2-3: all_reduce ← train_step (train.py:42)`` --
so the odd rank out is visible at a glance; then each group's main-thread frames with
the frame where it departs from the majority marked.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rtdebug.common.selector import group_label
from rtdebug.stacks.group import STDLIB_RE, ranks_word, where


def short_path(path: str) -> str:
    """Relative to the cwd when under it, else from the package dir (site-packages, the stdlib)."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    stdlib = STDLIB_RE.search(path)
    if stdlib is not None:
        return path[stdlib.end() :]
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def summary_lines(snap: dict[str, Any]) -> list[str]:
    groups = snap["groups"]
    lines = []
    coords = snap.get("coords") or {}
    for i, g in enumerate(groups):
        mesh = group_label([_coords(coords.get(r) or coords.get(str(r)) or "") for r in g["ranks"]])
        line = f"{ranks_word(g['ranks'])}{f' [{mesh}]' if mesh else ''}: {g['label']}"
        d = g.get("departs_at")
        if i > 0 and d is not None and d < len(g["frames"]):
            f = g["frames"][d]
            ref = groups[0]["frames"]
            other = ref[len(ref) - (len(g["frames"]) - d)] if len(g["frames"]) - d <= len(ref) else None
            line += f"   <- departs from {ranks_word(groups[0]['ranks'])} at {f['function']} ({where(f)})"
            if other is not None and other["function"] == f["function"] and other["file"] == f["file"]:
                line += f"; they are at line {other['line']}"
        lines.append(line)
    for f in snap.get("fallback", []):
        lines.append(
            f"rank {f['rank']}: signal-time dump (fallback: {f['reason']}; a C call may hold its GIL). "
            "It is read without the GIL, which a process whose threads come and go may not survive"
        )
    for u in snap.get("unresponsive_detail", []):
        lines.append(f"rank {u['rank']}: unresponsive ({u['reason']})")
    for e in snap.get("exited", []):
        lines.append(f"rank {e['rank']}: {e['state']} (exit code {e.get('exit_code')})")
    return lines


def _coords(label: str) -> dict[str, int]:
    """``dp=0, tp=1`` back into a dict (the snapshot keeps the label: JSON readers show it as it is)."""
    out = {}
    for part in filter(None, label.split(", ")):
        k, _, v = part.partition("=")
        if v.isdigit():
            out[k] = int(v)
    return out


def frame_lines(frames: list[dict[str, Any]], mark: int | None, indent: str = "    ") -> list[str]:
    width = max((len(f["function"]) for f in frames), default=0)
    out = []
    for i, f in enumerate(frames):
        line = f["line"] if f["line"] is not None else "?"
        arrow = "> " if i == mark else "  "
        text = f"{indent}{arrow}{f['function'].ljust(width)}  {short_path(f['file'])}:{line}"
        out.append(text + ("   <- departs here" if i == mark else ""))
    return out


# C0 (but the newline) and C1 control characters, each printed as "?"
_CONTROLS = {c: "?" for c in (*range(0x20), *range(0x7F, 0xA0)) if c != 0x0A}


def render(snap: dict[str, Any], threads: bool = False, native: bool = False) -> str:
    """The full text: header, summary, then per-group frames (and other threads / native frames)."""
    n = sum(len(g["ranks"]) for g in snap["groups"]) + len(snap.get("unresponsive", []))
    taken = time.strftime("%H:%M:%S", time.localtime(snap["taken_at"]))
    out = [snap["stopped"]] if snap.get("stopped") else []  # --stop-on: why they all stand still
    out += [snap["motion_line"]] if snap.get("motion_line") else []  # moving (no verdict), or why it stands
    out += [snap["verdict"]] if snap.get("verdict") else []  # who the others wait for, before anything else
    if snap.get("flight_note"):
        out.append(snap["flight_note"])
    out += [
        f"session {snap['session_id']}: {n} rank{'s' if n != 1 else ''}, stacks taken {taken} "
        f"in {snap['elapsed_s']:.2f} s"
    ]
    out += summary_lines(snap)
    for g in snap["groups"]:
        out.append("")
        out.append(f"{ranks_word(g['ranks'])} -- main thread, innermost first:")
        out += frame_lines(g["frames"], g.get("departs_at"))
        if native and g.get("native"):
            rank, text = next(iter(g["native"].items()))
            out.append(f"  native (py-spy, rank {rank}):")
            out += ["    " + line for line in native_main_lines(text)]
        others = [t for t in g["threads"] if not t["main"] and not t.get("internal")]  # not rtdebug's own
        if threads:
            for t in others:
                out.append(f"  rank {t['rank']} thread {t['id']}:")
                out += frame_lines(t["frames"], None, indent="      ")
        elif others:
            where = "this rank" if len(g["ranks"]) == 1 else "these ranks"
            out.append(
                f"  (+{len(others)} other thread{'s' if len(others) != 1 else ''} in {where}; --threads shows them)"
            )
    return "\n".join(out).translate(_CONTROLS)  # a forged answer's names never drive the terminal


def native_main_lines(native: Any) -> list[str]:
    if isinstance(native, str):
        return [native]
    main = next((t for t in native if t.get("main")), native[0] if native else None)
    if main is None:
        return ["<no threads>"]
    return [
        f"{clip(f['function'] or '?')}  {short_path(f['file'] or '?')}" + (f":{f['line']}" if f.get("line") else "")
        for f in main["frames"]
    ]


def clip(name: str, width: int = 100) -> str:
    """C++ template names run to thousands of characters; the head says enough."""
    return name if len(name) <= width else name[: width - 3] + "..."
