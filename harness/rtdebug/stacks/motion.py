"""Whether the job moves: a verdict is true only of ranks that stand still, so ``stacks`` looks twice.

A snapshot is one instant. A healthy job at 900 collectives a second is, at any instant, "blocked" in some
collective, and its ranks are dumped a few milliseconds apart: one snapshot of it reads as a hang (rank 0 in
ALLREDUCE #8748, rank 1 still in #8747). So before a verdict is said, each rank's position is read again
across a short window (``WINDOW_S``):

- the collective record (``rtdebug.registry.collseq``) is read without signalling the rank, before the dump
  and once the window has passed after it (counted from the dump's end: a rank that paused to answer gets
  the whole window to move): a rank whose record changed has moved, and no second dump is taken;
- otherwise (no record, or one that cannot see the collectives DDP and FSDP issue from C++) a second dump is
  taken and each rank's position in it (the Flight Recorder's, or the record's) compared with the first's.

A rank that moved makes the job *moving*: its snapshot keeps the stacks, and its ``verdict`` and ``culprit``
are None (``motion`` says who advanced, by how many collectives, in how long). A verdict is said only when
every position stayed put across the window, or at once when a rank is stopped in the debugger or has exited
(then the others cannot be moving past it; the line says which). The wait is spent only when a verdict is
on the table: a snapshot with none is returned as taken. ``--snapshot`` skips all of it (``instant``).

Pure over two callables (take a snapshot, read the records), so the local, store and Ray paths share it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from rtdebug.stacks.group import ranks_word

WINDOW_S = 0.25  # long enough for any healthy collective to move; short enough for a hung job's stacks
SIGSTOPPED = "process is stopped"  # how ``rtdebug.stacks.collect`` lists a rank held by SIGSTOP or a tracer
Snapshot = dict[str, Any]
Marks = dict[int, Any]  # rank -> something that changes when the rank advances (a record, a position)


State = Literal["moving", "still", "stopped", "instant", "none"]


@dataclass
class Motion:
    """What the second look found. ``state``: ``moving`` (``advanced`` ranks moved), ``still`` (every position
    stayed put for ``window_s``), ``stopped`` (a rank is stopped in the debugger or exited: ``why``, no wait),
    ``instant`` (``--snapshot``: not checked), or ``none`` (no verdict was on the table: nothing to check)."""

    state: State
    window_s: float = 0.0
    advanced: dict[int, int | None] = field(default_factory=dict)  # rank -> collectives advanced (None: moved)
    how: str = ""  # "record" (read without a signal) or "dump" (a second dump)
    why: str = ""  # stopped: which ranks and how

    def line(self, ranks: list[int]) -> str | None:
        """The headline said before anything else (None: nothing to say)."""
        if self.state == "moving":
            moved = sorted(self.advanced)
            rest = sorted(set(ranks) - set(moved))
            who = f"{ranks_word(moved)} advanced" if rest else "every rank advanced"
            counted = [(n, r) for r, n in self.advanced.items() if n]
            if counted:
                n, r = max(counted)
                who += f" (rank {r} by {n} collective{'s' if n != 1 else ''} in {_seconds(self.window_s)})"
            else:
                who += f" within {_seconds(self.window_s)}"
            if rest:  # the others may be waiting for them: no verdict while anyone moves
                return f"the job is progressing: {who}, {ranks_word(rest)} did not; no verdict while ranks move. " + (
                    "Where each rank is now:"
                )
            return f"the job is progressing: {who}; no hang. Where each rank is now:"
        if self.state == "stopped":
            return f"{self.why}: the verdict is this instant's (the others cannot move past it)"
        return None

    def as_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "window_s": round(self.window_s, 3),
            "advanced": {str(r): n for r, n in sorted(self.advanced.items())},
            "how": self.how or None,
            "why": self.why or None,
        }


def _seconds(s: float) -> str:
    """``0.3 s``, or ``40 ms`` below a tenth of a second (a move seen across one dump alone)."""
    return f"{s:.1f} s" if s >= 0.095 else f"{max(s, 0.001) * 1000:.0f} ms"


def positions(snap: Snapshot) -> Marks:
    """Each dumped rank's position as the verdict read it (op, seq, state, group), None where it has none."""
    out: Marks = {r: None for g in snap.get("groups", []) for r in g["ranks"]}
    for g in snap.get("groups", []):
        for c in g.get("collectives", []):
            out[c["rank"]] = (c.get("pg"), c.get("op"), c.get("seq"), c.get("state"))
    return out


def advanced(before: Marks, after: Marks) -> dict[int, int | None]:
    """rank -> how many collectives it advanced (None: it moved, by a count these marks cannot say), for every
    rank read both times whose mark changed."""
    out: dict[int, int | None] = {}
    for r in sorted(set(before) & set(after)):
        a, b = before[r], after[r]
        if a == b:
            continue
        out[r] = _count(a, b)
    return out


def _count(a: Any, b: Any) -> int | None:
    """Collectives between two marks of one rank: their sequence numbers' difference in the same group."""
    sa, sb = _seq(a), _seq(b)
    if sa is None or sb is None or sa[0] != sb[0] or sb[1] <= sa[1]:
        return None
    return sb[1] - sa[1]


def _seq(mark: Any) -> tuple[Any, int] | None:
    if isinstance(mark, tuple) and len(mark) == 4 and isinstance(mark[2], int):
        return mark[0], mark[2]
    if isinstance(mark, dict) and isinstance(mark.get("seq"), int):
        return mark.get("pg"), mark["seq"]
    return None


def stopped(snap: Snapshot) -> str:
    """Why the job cannot be moving past some rank (one in the debugger, one that exited), or ""."""
    why = []
    debugger = sorted(r for g in snap.get("groups", []) if g.get("debugger") for r in g["ranks"])
    if debugger:
        why.append(f"{ranks_word(debugger)} {'is' if len(debugger) == 1 else 'are'} stopped in the debugger")
    held = sorted(u["rank"] for u in snap.get("unresponsive_detail", []) if u["reason"].startswith(SIGSTOPPED))
    if held:
        why.append(f"{ranks_word(held)} {'is' if len(held) == 1 else 'are'} stopped by a signal or a tracer")
    ended = sorted(e["rank"] for e in snap.get("exited", []) if isinstance(e.get("rank"), int))
    if ended:
        why.append(f"{ranks_word(ended)} {'has' if len(ended) == 1 else 'have'} exited")
    return "; ".join(why)


def settle(
    take: Callable[[], Snapshot],
    records: Callable[[], Marks] | None = None,
    window: float = WINDOW_S,
    instant: bool = False,
    recheck: Callable[[], Snapshot] | None = None,
) -> Snapshot:
    """A snapshot whose verdict (if any) is true of ranks that stand still; ``snap["motion"]`` says how it was
    checked, ``snap["motion_line"]`` the headline. ``records``: each rank's collective record, read without
    signalling it (None: the ranks are elsewhere; only a second dump can tell). ``recheck``: a cheaper second
    dump, for positions only (``--native``: py-spy once, not twice); the first snapshot is the one shown."""
    start = time.monotonic()
    first = records() if records is not None and not instant else None
    snap = take()
    if instant:
        return _said(snap, Motion("instant"))
    if snap.get("verdict") is None:  # nothing to check: the records read around the dump may still say it moved
        moved = advanced(first, records()) if first is not None and records is not None else {}
        m = Motion("moving", time.monotonic() - start, moved, "record") if moved else Motion("none")
        return _said(snap, m)
    why = stopped(snap)
    if why:
        return _said(snap, Motion("stopped", why=why))
    time.sleep(window)  # counted from the dump's end: a rank may have paused to answer it
    if first is not None and records is not None:
        moved = advanced(first, records())
        if moved:
            return _said(_no_verdict(snap), Motion("moving", time.monotonic() - start, moved, "record"))
    again = (recheck or take)()
    moved = advanced(positions(snap), positions(again))
    elapsed = time.monotonic() - start
    shown = again if recheck is None else snap  # the newer one, unless it was taken for its positions only
    if moved:
        return _said(_no_verdict(shown), Motion("moving", elapsed, moved, "dump"))
    if again.get("verdict") is None:  # the second look has none (a rank went silent): nothing is claimed
        return _said(_no_verdict(shown), Motion("none"))
    why = stopped(again)
    return _said(shown, Motion("stopped", why=why) if why else Motion("still", elapsed, how="dump"))


def _no_verdict(snap: Snapshot) -> Snapshot:
    snap["verdict"], snap["culprit"] = None, None
    return snap


def _said(snap: Snapshot, m: Motion) -> Snapshot:
    ranks = sorted(r for g in snap.get("groups", []) for r in g["ranks"])
    snap["motion"] = m.as_json()
    snap["motion_line"] = m.line(ranks)
    return snap
