"""Requester side of job-wide ``stacks``: every rank of a job, through its store, from anywhere.

A multi-node torchrun job's ranks watch its c10d store for dump requests (``rtdebug.rank.dumpwatch``);
a Ray run's workers watch the GCS KV. This module numbers a request, writes it, waits (bounded) for
the answers of the ranks that are alive, and groups them exactly as a local ``stacks`` does
(``rtdebug.stacks.group``), so the text and ``--json`` are the same. Ranks whose node lost its
heartbeat are listed, never waited on. Every answer is checked (``rtdebug.stacks.answer.parse``);
one that no known secret signed is kept but marked (``unverified``); junk is listed with why.
The request is deleted once answered, and each rank deletes its previous answer when it writes the
next, so a store holds at most one answer per rank: it is not a log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rtdebug.registry import c10d
from rtdebug.registry.record import LIVE_RANK_STATES
from rtdebug.stacks import answer, verdict
from rtdebug.stacks import group as stackgroup

POLL_S = 0.01
Entry = dict[str, Any]


def split_ranks(session: Entry, ranks: frozenset[int] | None) -> tuple[list[int], dict[int, str], list[Entry]]:
    """(ranks to ask, rank -> why it is not asked (its node is lost), ranks that have ended)."""
    ask: list[int] = []
    lost: dict[int, str] = {}
    ended: list[Entry] = []
    for r in session.get("ranks", []):
        if ranks is not None and r["rank"] not in ranks:
            continue
        if r.get("state") in LIVE_RANK_STATES:
            ask.append(r["rank"])
        elif str(r.get("error", "")).startswith("lost:"):
            lost[r["rank"]] = str(r["error"])
        else:
            ended.append(r)
    return ask, lost, ended


def snapshot(
    session: Entry, source: str, dumps: dict[int, Entry], unresponsive: dict[int, str], ended: list[Entry], start: float
) -> dict[str, Any]:
    """The ``--json`` object of a local ``stacks``, plus where it came from and which answers are unverified."""
    pids = {r["rank"]: r.get("pid") for r in session.get("ranks", [])}
    taken_at = time.time() - (time.monotonic() - start)
    snap = stackgroup.snapshot(session["session_id"], taken_at, start, dumps, unresponsive, pids, ended)
    snap["source"] = source
    snap["unverified"] = sorted(r for r, d in dumps.items() if not d["verified"])
    # a forged answer must not steer the verdict: once any answer is signed with a secret known here,
    # unsigned ones count as missing (so no verdict), though their stacks are shown, marked
    signed = {r: d for r, d in dumps.items() if d["verified"]}
    annotate(snap, signed if signed else dumps, session.get("mode") == "adopted")
    return snap


def annotate(snap: dict[str, Any], dumps: dict[int, Entry], by_site: bool = False) -> None:
    """The collective verdict (``rtdebug.stacks.verdict``)."""
    verdict.annotate(snap, dumps, by_site)


def _take(
    raws: dict[int, tuple[str, bytes]], n: int, known: list[str], unresponsive: dict[int, str]
) -> dict[int, Entry]:
    dumps: dict[int, Entry] = {}
    for rank, (key, raw) in raws.items():
        dump, why = answer.parse(key, raw, rank, n, known)
        if dump is None:
            unresponsive[rank] = f"its answer is not valid: {why}"
        else:
            dumps[rank] = dump
    return dumps


def from_store(
    client: Any, session: Entry, known: list[str], ranks: frozenset[int] | None = None, timeout: float = 3.0
) -> dict[str, Any]:
    """Ask every live rank of a torchrun job (``session``, as ``rtdebug.views.store`` gives it) for its stacks."""
    start = time.monotonic()
    run_id = str(session.get("rdzv_id"))
    ask, unresponsive, ended = split_ranks(session, ranks)
    n = client.add(c10d.dump_seq_key(run_id), 1)
    for _ in range(8):  # a key already at n was planted (junk the ranks pass over): take the next number
        if not client.check([c10d.dump_key(run_id, n)]):
            break
        n = client.add(c10d.dump_seq_key(run_id), 1)
    req = c10d.dump_key(run_id, n)
    client.set(req, answer.request(req, n, known))
    try:
        _wait_count(lambda: client.add(c10d.dump_done_key(run_id, n), 0), len(ask), start + timeout)
        keys = [c10d.dump_key(run_id, n, r) for r in ask]
        values = client.multi_get(keys) if keys else []
        raws = {r: (k, v) for r, k, v in zip(ask, keys, values, strict=True) if v}
    finally:
        # the request before the count: a rank that counts after this finds no request and deletes its count
        for key in (req, c10d.dump_done_key(run_id, n)):
            client.delete_key(key)  # each rank deletes its own answer when it writes its next one
    _silent(session, ask, raws, timeout, unresponsive)
    dumps = _take(raws, n, known, unresponsive)
    return snapshot(session, f"store {session.get('store', '?')}", dumps, unresponsive, ended, start)


def _silent(session: Entry, ask: list[int], raws: dict, timeout: float, unresponsive: dict[int, str]) -> None:
    """Why each asked rank is missing; one whose entry is unverified most likely has another secret."""
    unverified = {r["rank"] for r in session.get("ranks", []) if r.get("verified") is False}
    for r in ask:
        if r not in raws:
            unresponsive[r] = f"no answer within {timeout:g} s" + (
                " (its entry is not signed with a secret known here: it answers only requests signed with its "
                "job's secret; set RTDEBUG_JOB_SECRET as the job did)"
                if r in unverified
                else ""
            )


def _wait_count(count: Callable[[], int], want: int, deadline: float) -> None:
    while want and count() < want and time.monotonic() < deadline:
        time.sleep(POLL_S)


def from_kv(kv: Any, session: Entry, known: list[str], ranks: frozenset[int] | None = None, timeout: float = 3.0):
    """Ask every live worker of a Ray run (``session``, as ``rtdebug.views.ray`` gives it) for its stacks."""
    from rtdebug.registry.ray_kv import dump_answer_key, dump_request_key, parse

    start = time.monotonic()
    sid = session["session_id"]
    ask, unresponsive, ended = split_ranks(session, ranks)
    n = time.time_ns() // 1000  # the KV has no counter; workers answer only a number newer than their last
    req = dump_request_key(sid)
    kv.put_raw(req, answer.request(req, n, known))
    raws: dict[int, tuple[str, bytes]] = {}
    try:
        while time.monotonic() < start + timeout and len(raws) < len(ask):
            got = kv.raw(dump_answer_key(sid, None))
            for r in (r for r in ask if r not in raws):  # an answer taken is not parsed again
                key = dump_answer_key(sid, r)
                value = parse(got.get(key, b"null"))
                if isinstance(value, dict) and value.get("n") == n:
                    raws[r] = (key, got[key])
            time.sleep(0.05)
    finally:
        kv.delete_key(req)
    _silent(session, ask, raws, timeout, unresponsive)
    dumps = _take(raws, n, known, unresponsive)
    return snapshot(session, f"ray {getattr(kv, 'address', '?')}", dumps, unresponsive, ended, start)


def notes(snap: dict[str, Any]) -> list[str]:
    """Lines the text output adds for a job-wide snapshot: where it came from, unverified answers."""
    out = [f"(every rank of the job, through the {snap['source']})"]
    if snap.get("unverified"):
        out.append(
            f"warning: {stackgroup.ranks_word(snap['unverified'])}: answer not signed with a job secret known here "
            f"(unverified; set RTDEBUG_JOB_SECRET as the job did)"
        )
    return out


def with_notes(text: str, snap: dict[str, Any]) -> str:
    """``text`` (``rtdebug.stacks.format.render``) with the notes under its ``session ...`` header line."""
    if "source" not in snap:
        return text
    lines = text.split("\n")
    at = next((i + 1 for i, ln in enumerate(lines) if ln.startswith("session ")), 0)
    lines[at:at] = notes(snap)
    return "\n".join(lines)
