"""``rtdebug stacks --history [N]``: each rank's last N collectives, aligned, and where they first part.

``TORCH_DISTRIBUTED_DEBUG=DETAIL`` finds a mismatch by comparing every collective's fingerprint across
ranks before it runs -- an extra collective per collective, for the whole run. Here the same comparison
is made once, when asked, from what each rank's Flight Recorder already holds (``rtdebug.stacks.flight``,
read by its dump thread): per process group, row = sequence number, cell = op, input sizes and dtype.
The first row whose known cells differ is the first divergence. A rank with no entry at a sequence
number it has not reached shows ``-``; one older than the rank's kept window is unknown and blank.

Ranks whose cells are identical over the rows shown share one column, so 1024 ranks of one data-parallel
job read as one or two columns. Pure functions over the snapshot's ``flights`` (which ``verdict``
keeps), so the local, store and Ray answers all get it.
"""

from __future__ import annotations

from typing import Any

from rtdebug.stacks import flight as flightrec
from rtdebug.stacks.group import ranks_word

DEFAULT_N = 16
NOT_REACHED = "-"


def _cell(e: dict[str, Any]) -> str:
    return f"{e['op']} {e['sizes']} {e['dtypes']}".strip()


def align(flights: dict[int, Any], n: int = DEFAULT_N) -> dict[str, Any]:
    """``{"groups": [{"pg", "desc", "rows": [{"seq", "cells": {rank: text}, "entered": [ranks],
    "differs": bool}], "first_divergence": seq | None}], "without": [ranks with no usable recorder]}``."""
    usable = {r: f for r, f in flights.items() if flightrec.plausible(f)}
    per_pg: dict[str, dict[int, dict[int, dict[str, Any]]]] = {}
    descs: dict[str, str] = {}
    for r, f in usable.items():
        for e in f["entries"]:
            if not e["p2p"]:
                per_pg.setdefault(e["pg"], {}).setdefault(r, {})[e["seq"]] = e
                descs.setdefault(e["pg"], e["desc"])
    out = []
    for pg in sorted(per_pg, key=lambda p: (len(p), p)):
        by_rank = per_pg[pg]
        seqs = sorted({s for es in by_rank.values() for s in es})[-n:]
        rows = []
        for s in seqs:
            cells, entered = {}, []
            for r, es in sorted(by_rank.items()):
                if s in es:
                    cells[r] = _cell(es[s])
                    if es[s]["state"] == "entered":
                        entered.append(r)
                elif s > max(es):
                    cells[r] = NOT_REACHED
            known = {c for c in cells.values() if c != NOT_REACHED}
            rows.append({"seq": s, "cells": cells, "entered": entered, "differs": len(known) > 1})
        first = next((row["seq"] for row in rows if row["differs"]), None)
        out.append({"pg": pg, "desc": descs.get(pg, ""), "rows": rows, "first_divergence": first})
    return {"groups": out, "without": sorted(set(flights) - set(usable))}


def _columns(rows: list[dict[str, Any]], ranks: list[int]) -> list[list[int]]:
    """Ranks whose cells are the same in every row, as columns (the largest first)."""
    cols: dict[tuple, list[int]] = {}
    for r in ranks:
        cols.setdefault(tuple((row["cells"].get(r), r in row["entered"]) for row in rows), []).append(r)
    return sorted(cols.values(), key=lambda c: (-len(c), c[0]))


def render(hist: dict[str, Any]) -> str:
    """The text: one table per process group; ``*`` marks a collective the rank is inside (not returned)."""
    out = []
    for g in hist["groups"]:
        rows = g["rows"]
        if not rows:
            continue
        ranks = sorted({r for row in rows for r in row["cells"]})
        cols = _columns(rows, ranks)
        head = ["SEQ"] + [ranks_word(c) for c in cols]
        table = [head]
        for row in rows:
            cells = [f"#{row['seq']}"]
            for c in cols:
                text = row["cells"].get(c[0], "")
                cells.append(text + (" *" if c[0] in row["entered"] else ""))
            table.append(cells)
        widths = [max(len(t[i]) for t in table) for i in range(len(head))]
        desc = f" ({g['desc']})" if g["desc"] else ""
        out.append(f"collective history of group {g['pg']}{desc}, last {len(rows)} (* = inside it, - = not reached):")
        for t, row in zip(table, [None, *rows], strict=True):
            line = "  " + "  ".join(cell.ljust(w) for cell, w in zip(t, widths, strict=True)).rstrip()
            if row is not None and row["seq"] == g["first_divergence"]:
                line += "   <- first divergence"
            out.append(line)
    if hist["without"]:
        out.append(f"no Flight Recorder history from {ranks_word(hist['without'])}")
    return "\n".join(out)
