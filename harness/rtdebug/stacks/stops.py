"""The ``--stop-on`` line: why the job's ranks are stopped, said once for all of them, before anything else.

Each stopped rank's entry carries its own reason (``rtdebug.rank.stopon.halt``): the origin says what it
found, the others that they received it. ``line`` folds them: ``rank 1: non-finite grad of fc2.weight at
step 5 (origin); ranks 0,2 received it in the all-reduce``. An entry's ``stop`` may come from a store
anyone can write: only its shape is trusted, and its text is cut and printed without control characters.
"""

from __future__ import annotations

from typing import TypeGuard

from rtdebug.registry.schema import RankEntry, StopInfo
from rtdebug.stacks.group import ranks_word

KINDS = ("nonfinite", "disagree", "step")


def plausible(stop: object) -> TypeGuard[StopInfo]:
    return (
        isinstance(stop, dict)
        and stop.get("kind") in KINDS
        and isinstance(stop.get("reason"), str)
        and stop.get("origin") in (True, False, None)
    )


def clean(text: str, width: int = 200) -> str:
    return "".join(c if c.isprintable() else "?" for c in text[:width])


def line(entries: list[RankEntry]) -> str | None:
    """One line for every stopped rank among ``entries`` (rank entries), or None when none is stopped."""
    stopped = {e["rank"]: stop for e in entries if plausible(stop := e.get("stop"))}
    if not stopped:
        return None
    parts = []
    origins = sorted(r for r, s in stopped.items() if s.get("origin") is True)
    for r in origins:
        parts.append(f"rank {r}: {clean(stopped[r]['reason'])}")
    received = sorted(r for r, s in stopped.items() if s.get("origin") is False and "received" in s["reason"])
    if received:
        parts.append(f"{ranks_word(received)} received it in the all-reduce")
    rest: dict[str, list[int]] = {}
    for r, s in sorted(stopped.items()):
        if r not in origins and r not in received:
            rest.setdefault(clean(s["reason"]), []).append(r)
    parts += [f"{ranks_word(rs)}: {reason}" for reason, rs in rest.items()]
    kind = next(iter(stopped.values()))["kind"]
    return f"stopped by --stop-on {kind}: " + "; ".join(parts)
