"""One line that names the rank a hung job waits for, from each rank's place in the collective sequence.

Stacks alone say *where* each rank is; the collective records (``rtdebug.registry.collseq``) say *which*
collective each rank entered last, numbered per process group, so they say who the others wait for:
the collective most ranks are blocked in is the one waited on; a rank that has not entered it (a lower
sequence number, another op at that number, returned from an earlier one, or none yet) is the culprit,
described by its stack group's label. Pure functions over the stacks snapshot, so the local, store and
Ray answers, the hang report and the VS Code view all get the same verdict.

A rank whose dump carries no ``collective`` key is an older rank without the record: then no verdict
at all, rather than a wrong one.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rtdebug.registry import collseq
from rtdebug.registry.collseq import where
from rtdebug.stacks.group import ranks_word

Rec = dict[str, Any]


def _key(rec: Rec) -> tuple:
    return (rec.get("pg"), rec["seq"], rec["op"])


def _site_key(rec: Rec) -> tuple:
    """An adopted job's ranks count collectives from their own injection, which may fall on either side
    of a collective: their numbers can differ by one for the same call, so op and call site decide."""
    return (rec.get("pg"), rec["op"], rec.get("file"), rec.get("line"))


def _entry(rank: int, rec: Rec) -> Rec:
    return {k: rec.get(k) for k in ("op", "seq", "state", "file", "line")} | {"rank": rank}


def waited_on(recs: dict[int, Rec | None], key: Any = _key) -> tuple | None:
    """``key`` (pg, seq, op) of the collective the most ranks are inside; ties go to the lowest rank's
    (``verdict_line`` names no culprit on a tie: which side skipped is not in the records)."""
    counts = Counter(key(r) for r in recs.values() if r is not None and r.get("state") == "entered")
    if not counts:
        return None
    best = max(counts.values())
    for rank in sorted(recs):
        rec = recs[rank]
        if rec is not None and rec.get("state") == "entered" and counts[key(rec)] == best:
            return key(rec)
    return None


def _blocked(rec: Rec | None) -> bool:
    return rec is not None and rec.get("state") == "entered"


def _position(rec: Rec | None, pg: Any) -> str:
    """Where a rank stands in the sequence, said against the collective waited on (group ``pg``)."""
    if rec is None:
        return "before any collective"
    text = f"{rec['op']} #{rec['seq']}"
    if rec.get("pg") != pg:
        text += f" of group {rec.get('pg')}"
    return f"inside {text}" if rec.get("state") == "entered" else f"after {text} returned"


def verdict_line(
    recs: dict[int, Rec | None], labels: dict[int, str], by_site: bool = False
) -> tuple[str | None, int | None]:
    """(the verdict, the culprit rank) for records of every dumped rank; (None, None) when nothing is waited on.
    ``by_site``: the ranks' numbers are not comparable (an adopted job): op and call site decide."""
    kf = _site_key if by_site else _key
    key = waited_on(recs, kf)
    if key is None:
        return None, None
    inside = sorted(
        r for r, rec in recs.items() if rec is not None and rec.get("state") == "entered" and kf(rec) == key
    )
    others = sorted(r for r in recs if r not in inside)
    first = recs[inside[0]]
    assert first is not None
    if not others:
        n = len(inside)
        return (f"all {n} ranks are in {where(first)}" if n > 1 else f"rank {inside[0]} is in {where(first)}"), None
    # a rank inside another group's collective may itself be waiting (for the culprit); a tie at the top
    # says two sides disagree, not which one skipped: neither is named, rather than the wrong one
    tie = Counter(kf(recs[r] or {}) for r in others if _blocked(recs[r])).most_common(1)
    candidates = [r for r in others if not (_blocked(recs[r]) and (recs[r] or {}).get("pg") != first.get("pg"))]
    if not candidates or (tie and tie[0][1] >= len(inside)):
        return _stalemate(recs, inside, [r for r in others if _blocked(recs[r])], first), None
    culprit = candidates[0]
    text = (
        f"{ranks_word(others)} never entered {where(first)}: "
        f"rank {culprit} is in {labels.get(culprit, '?')}, {_position(recs[culprit], key[0])}"
    )
    if len(others) == 1:
        text = text.replace(f": rank {culprit} is in ", ": it is in ", 1)
    return text + f"; {ranks_word(inside)} {'waits' if len(inside) == 1 else 'wait'} in it", culprit


def _stalemate(recs: dict[int, Rec | None], inside: list[int], tied: list[int], first: Rec) -> str:
    """Every rank is blocked, not all in one collective: which side is wrong is not in the records (a tie
    at one number, or ranks of one group waiting for a rank that waits in another), so no culprit."""
    parts = [f"{ranks_word(inside)} in {where(first)}"]
    by_key: dict[tuple, list[int]] = {}
    for r in tied:
        by_key.setdefault(_key(recs[r] or {}), []).append(r)
    for ranks in by_key.values():
        rec = recs[ranks[0]] or {}
        group = f" of group {rec.get('pg')}" if rec.get("pg") != first.get("pg") else ""
        parts.append(f"{ranks_word(ranks)} in {where(rec)}{group}")
    return "ranks are blocked in different collectives: " + "; ".join(parts)


def annotate(snap: dict[str, Any], dumps: dict[int, dict[str, Any]], by_site: bool = False) -> dict[str, Any]:
    """Add each group's ``collectives``, and the top-level ``verdict`` and ``culprit`` (in place; returned);
    ``by_site`` for an adopted job (``verdict_line``)."""
    recs: dict[int, Rec | None] = {}
    missing = False
    labels = {}
    for g in snap.get("groups", []):
        g["collectives"] = []
        for rank in g["ranks"]:
            labels[rank] = g.get("label", "?")
            d = dumps.get(rank) or {}
            if "collective" not in d:
                missing = True
                continue
            rec = d["collective"]
            if rec is not None and not collseq.plausible(rec):
                missing = True  # a record that is there but unreadable: no verdict, not "before any"
                continue
            recs[rank] = rec
            if rec is not None:
                g["collectives"].append(_entry(rank, rec))
    text, culprit = (None, None) if missing or not recs else verdict_line(recs, labels, by_site)
    snap["verdict"], snap["culprit"] = text, culprit
    return snap
