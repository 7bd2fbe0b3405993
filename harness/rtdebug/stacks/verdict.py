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
    # the collective the most ranks are inside (on a tie, the lowest rank's: said, never blamed)
    entered = {r: rec for r in sorted(recs) if (rec := recs[r]) is not None and rec.get("state") == "entered"}
    ranked = Counter(kf(rec) for rec in entered.values()).most_common(2)
    if not ranked:
        return None, None
    key, tied = ranked[0][0], len(ranked) > 1 and ranked[1][1] == ranked[0][1]
    inside = [r for r, rec in entered.items() if kf(rec) == key]
    others = sorted(r for r in recs if r not in inside)
    first = entered[inside[0]]
    if not others:
        where = collseq.where(first)
        return (
            f"all {len(inside)} ranks are in {where}" if len(inside) > 1 else f"rank {inside[0]} is in {where}"
        ), None
    # a rank inside another group's collective may itself be waiting (for the culprit); a tie says two
    # sides disagree, not which one skipped: then nobody is named, rather than the wrong rank
    candidates = [r for r in others if r not in entered or entered[r].get("pg") == first.get("pg")]
    if tied or not candidates:
        return _stalemate(recs, entered, inside, others, kf), None
    culprit = candidates[0]
    text = (
        f"{ranks_word(others)} never entered {collseq.where(first)}: "
        f"rank {culprit} is in {labels.get(culprit, '?')}, {_position(recs[culprit], key[0])}"
    )
    if len(others) == 1:
        text = text.replace(f": rank {culprit} is in ", ": it is in ", 1)
    return text + f"; {ranks_word(inside)} {'waits' if len(inside) == 1 else 'wait'} in it", culprit


def _stalemate(
    recs: dict[int, Rec | None], entered: dict[int, Rec], inside: list[int], others: list[int], kf: Any
) -> str:
    """Where every side stands when the records name nobody: a tie at the top, or the only ranks outside
    the collective waited on are inside another group's (they may be waiting for its culprit)."""
    first = entered[inside[0]]
    parts = [f"{ranks_word(inside)} in {collseq.where(first)}"]
    by_key: dict[tuple, list[int]] = {}
    for r in others:
        by_key.setdefault(kf(entered[r]) if r in entered else ("not inside", r), []).append(r)
    for ranks in by_key.values():
        rec = entered.get(ranks[0])
        if rec is None:
            parts.append(f"{ranks_word(ranks)} {_position(recs[ranks[0]], first.get('pg'))}")
        else:
            group = f" of group {rec.get('pg')}" if rec.get("pg") != first.get("pg") else ""
            parts.append(f"{ranks_word(ranks)} in {collseq.where(rec)}{group}")
    head = "ranks are blocked in different collectives" if set(others) <= set(entered) else "no rank named"
    return f"{head}: " + "; ".join(parts)


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
