"""One line that names the rank a hung job waits for, from each rank's place in the collective sequence.

Stacks alone say *where* each rank is; the collective records (``rtdebug.registry.collseq``) say *which*
collective each rank entered last, numbered per process group, so they say who the others wait for:
the collective most ranks are blocked in is the one waited on; a rank that has not entered it (a lower
sequence number, another op at that number, returned from an earlier one, or none yet) is the culprit,
described by its stack group's label. Pure functions over the stacks snapshot, so the local, store and
Ray answers, the hang report and the VS Code view all get the same verdict.

Where every dumped rank answered with torch's Flight Recorder (``rtdebug.stacks.flight``), its entries
are the positions: they count every collective, also those DDP and FSDP issue from C++, which the
record never sees; the record still gives the call site of a Python-level one, and it alone sees the
named ops outside torch (``ray.train.report``). Where a rank's recorder is off, that is said in one line
(``snap["flight_note"]``) and the records decide, as before.

``decide`` makes the verdict a value (``rtdebug.stacks.finding.Verdict``: its kind, the ranks waiting and
the culprit, the collective waited on, each side's ``Position``, the mesh coordinates), said once by its
``render``.

A rank whose dump carries no ``collective`` key is an older rank without the record: then no verdict
at all, rather than a wrong one.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rtdebug.registry import collseq
from rtdebug.stacks import flight as flightrec
from rtdebug.stacks.finding import Cycle, Side, Verdict
from rtdebug.stacks.group import ranks_word
from rtdebug.stacks.position import Position


def decide(positions: dict[int, Position | None], labels: dict[int, str], by_site: bool = False) -> Verdict | None:
    """The verdict for the positions of every dumped rank; None when nothing is waited on.
    ``by_site``: the ranks' numbers are not comparable (an adopted job): op and call site decide."""

    kf = Position.site_key if by_site else Position.key

    # the collective the most ranks are inside (on a tie, the lowest rank's: said, never blamed)
    entered = {r: p for r in sorted(positions) if (p := positions[r]) is not None and p.entered}
    ranked = Counter(kf(p) for p in entered.values()).most_common(2)
    if not ranked:
        return None
    key, tied = ranked[0][0], len(ranked) > 1 and ranked[1][1] == ranked[0][1]
    if tied and (waited := _past_ddp(entered, kf, ranked[0][0], ranked[1][0])) is not None:
        key, tied = waited, False
    inside = [r for r, p in entered.items() if kf(p) == key]
    others = sorted(r for r in positions if r not in inside)
    first = entered[inside[0]]
    if not others:
        return Verdict("all_in", first, inside)
    # a rank inside another group's collective may itself be waiting (for the culprit); a tie says two
    # sides disagree, not which one skipped: then nobody is named, rather than the wrong rank
    # a rank that already returned from the collective waited on (or entered a later one of its group) is past
    # it, not missing from it: the ranks were read at different moments (the job moved), never "never entered"
    ahead = [] if by_site else [r for r in others if _past(positions[r], first)]
    candidates = [r for r in others if r not in ahead and (r not in entered or entered[r].pg == first.pg)]
    if ahead and not candidates:
        return Verdict("ahead", first, inside, ahead, culprit_at=positions[ahead[0]])
    others = [r for r in others if r not in ahead]
    if tied or not candidates:
        return _stalemate(positions, entered, inside, others, kf)
    culprit = candidates[0]
    mine = positions[culprit]
    if mine is not None and mine.entered and mine.place() == first.place() and mine.source == "flight":
        if (
            len(others) == 1
        ):  # the same place in the same group, another op: each side is in what the other never entered
            return Verdict(
                "crossed",
                first,
                inside,
                others,
                culprit,
                mine,
                ddp_uneven=mine.ddp,
                uneven=_uneven(positions, culprit, inside),
            )
    return Verdict("never_entered", first, inside, others, culprit, mine, labels.get(culprit, "?"))


def _past(p: Position | None, waited: Position) -> bool:
    """Whether ``p`` stands past the collective ``waited`` of its group: returned from it, or in a later one."""
    if p is None or p.pg != waited.pg:
        return False
    return p.seq > waited.seq or (p.seq == waited.seq and not p.entered)


def _past_ddp(entered: dict[int, Position], kf: Any, a: tuple, b: tuple) -> tuple | None:
    """A tie at one place of one group, one side in DDP's gradient all-reduce during backward(): the other
    side has left the training loop (uneven inputs), so it is the one waited on; None otherwise."""
    side = {k: [p for p in entered.values() if kf(p) == k] for k in (a, b)}
    pa, pb = side[a][0], side[b][0]
    if pa.place() != pb.place() or pa.ddp == pb.ddp:
        return None
    if not all(p.ddp for p in (side[a] if pa.ddp else side[b])):
        return None
    return b if pa.ddp else a


def _uneven(positions: dict[int, Position | None], culprit: int, inside: list[int]) -> tuple[int, int] | None:
    """(the culprit's count, the others') when it ran more of DDP's gradient all-reduces than they did (counted
    by each rank's Flight Recorder, when every one can say); None otherwise."""
    mine = positions[culprit]
    if mine is None or not mine.ddp:
        return None
    counts = {}
    for r in [culprit, *inside]:
        p = positions[r]
        if isinstance(c := (p.allreduces(mine.pg) if p is not None else None), int):
            counts[r] = c
    if len(counts) == len(inside) + 1:
        theirs = sorted({counts[r] for r in inside})
        if len(theirs) == 1 and counts[culprit] > theirs[0]:
            return counts[culprit], theirs[0]
    return None


def _stalemate(
    positions: dict[int, Position | None], entered: dict[int, Position], inside: list[int], others: list[int], kf: Any
) -> Verdict:
    """Where every side stands when the records name nobody: a tie at the top, or the only ranks outside
    the collective waited on are inside another group's (they may be waiting for its culprit)."""
    first = entered[inside[0]]
    by_key: dict[tuple, list[int]] = {}
    for r in others:
        by_key.setdefault(kf(entered[r]) if r in entered else ("not inside", r), []).append(r)
    sides = [Side(ranks, entered.get(ranks[0]), positions[ranks[0]]) for ranks in by_key.values()]
    blocked = set(others) <= set(entered)
    return Verdict(
        "stalemate", first, inside, others, sides=sides, blocked=blocked, cycle=_cycle(entered, inside, others, kf)
    )


def _cycle(entered: dict[int, Position], inside: list[int], others: list[int], kf: Any) -> Cycle | None:
    """Who waits for whom, where the Flight Recorder names a group's members: a rank inside a subgroup's
    collective waits for the members not in it; if those wait in the collective the rest are in, the job
    is a cycle -- one of them skipped the subgroup's collective, or the other entered it out of turn."""
    for r in others:
        p = entered.get(r)
        if p is None or not isinstance(p.members, set) or p.pg == entered[inside[0]].pg:
            continue  # only a rank inside another group's collective waits on that group's members
        with_me = sorted(o for o, e in entered.items() if kf(e) == kf(p))
        missing = sorted(p.members - set(with_me))
        if not missing or not set(missing) <= set(inside):
            continue
        return Cycle(with_me, p, p.mesh() or f"group {p.pg}", sorted(p.members), missing)
    return None


def positions(dumps: dict[int, dict[str, Any]], frames: dict[int, list]) -> tuple[dict[int, Any], str | None]:
    """Each dumped rank's Flight Recorder position (every collective) when all of them have one, and the
    one-line note when a rank's recorder is off ({} and the note: the records decide)."""
    flights: dict[int, Any] = {r: d.get("flight") for r, d in dumps.items()}
    off = {r: why for r, f in flights.items() if (why := flightrec.off_reason(f)) is not None}
    if off:
        why = sorted(set(off.values()))[0]
        return {}, (
            f"torch's Flight Recorder is off in {ranks_word(sorted(off))} ({why}): collectives issued from C++ "
            "(DDP, FSDP) are not seen; the verdict uses rtdebug's record of Python-level collectives"
        )
    if not flights or not all(flightrec.plausible(f) for f in flights.values()):
        return {}, None
    out: dict[int, Any] = {}
    for r, f in flights.items():
        rec = dumps[r].get("collective")
        rec = rec if collseq.plausible(rec) else None
        if rec is not None and rec["op"] in collseq.NAMED_OPS and rec["state"] == "entered":
            out[r] = Position.of(rec, "record")  # an op outside torch: its Flight Recorder never sees it
            continue
        pos = flightrec.position(f, rec, frames.get(r, []))
        if pos is not None:
            pos["counts"] = {pos["pg"]: (f.get("counts") or {}).get(pos["pg"])}
            pos["wrapped"] = f.get("wrapped")
            pos["members"] = flightrec.members(f, pos["pg"])
        out[r] = None if pos is None else Position.of(pos, "flight")
    return out, None


def annotate(snap: dict[str, Any], dumps: dict[int, dict[str, Any]], by_site: bool = False) -> dict[str, Any]:
    """Add each group's ``collectives``, and the top-level ``verdict``, ``culprit`` and ``flight_note`` (in
    place; returned); ``by_site`` for an adopted job (``decide``)."""
    found: dict[int, Position | None] = {}
    missing = False
    labels = {}
    frames = {r: g.get("frames", []) for g in snap.get("groups", []) for r in g["ranks"]}
    flight_pos, note = positions(dumps, frames)
    for g in snap.get("groups", []):
        g["collectives"] = []
        for rank in g["ranks"]:
            labels[rank] = g.get("label", "?")
            d = dumps.get(rank) or {}
            if flight_pos:
                pos = flight_pos.get(rank)
            elif "collective" not in d:
                missing = True
                continue
            else:
                rec = d["collective"]
                if rec is not None and not collseq.plausible(rec):
                    missing = True  # a record that is there but unreadable: no verdict, not "before any"
                    continue
                pos = None if rec is None else Position.of(rec, "record")
            found[rank] = pos
            if pos is not None:
                g["collectives"].append(pos.entry(rank))
    if found and any(p is not None and p.entered for p in found.values()):
        for e in snap.get("exited", []):  # a rank that ended while others wait in a collective never entered it
            if isinstance(e.get("rank"), int) and e["rank"] not in found:
                found[e["rank"]] = None
                labels[e["rank"]] = f"{e.get('state', 'exited')} (exit code {e.get('exit_code')})"
    v = None if missing or not found else decide(found, labels, by_site and not flight_pos)
    if v is not None:
        v.coords = {int(r): str(c).replace("\\", "") for r, c in (snap.get("coords") or {}).items()}
    snap["verdict"], snap["culprit"] = (v.render(), v.culprit) if v is not None else (None, None)
    snap["collectives_from"] = "flight recorder" if flight_pos else "record"
    snap["flight_note"] = note
    # for --history (rtdebug.stacks.history), which the command pops: never part of the snapshot's JSON
    snap["_flights"] = {r: d["flight"] for r, d in dumps.items() if d.get("flight") is not None}
    return snap
