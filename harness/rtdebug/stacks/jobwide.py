"""Requester side of job-wide ``stacks``: every rank of a job, through its store, from anywhere.

A multi-node torchrun job's ranks watch its c10d store for dump requests (``rtdebug.rank.stacks.watch``);
a Ray run's workers watch the GCS KV. This module numbers a request, binds it to a fresh nonce
(``rtdebug.stacks.wire``), writes it, waits (bounded) for the answers of the ranks that are alive, and
groups them exactly as a local ``stacks`` does (``rtdebug.stacks.group``), so the text and ``--json``
are the same. Ranks whose node lost its heartbeat are listed, never waited on.

Anyone who reaches the store can write there, so nothing in it is taken on its word: answers and done
counts live under the request's nonce (planted ones for future numbers are never read); the done count
only says when to look, and the wait goes on until every asked rank's answer is signed with a secret
known here (or the timeout); only signed answers are counted in the verdict. An unsigned answer is
shown, marked ``unverified``, junk is listed with why, and both are said before the verdict line.
Ranks whose entries carry another job secret (nodes that do not share one) are said in one line, with
the fix. The request is deleted once answered, and each rank deletes its previous answer when it writes
the next, so a store holds at most one answer per rank: it is not a log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rtdebug.registry import signing
from rtdebug.registry.entry import LIVE_RANK_STATES
from rtdebug.registry.schema import ListedSession, RankEntry
from rtdebug.stacks import group as stackgroup
from rtdebug.stacks import verdict, wire

POLL_S = 0.01
REREAD_S = 0.05  # answers re-read while some are missing though the count says done (a count is a hint)
Fetch = Callable[[list[str]], list[bytes | None]]
# why a silent rank whose entry no secret here verifies did not answer (its node has another secret)
OTHER_SECRET = (
    " (its entry is not signed with a secret known here: it answers only requests signed with its job's secret)"
)


def split_ranks(
    session: ListedSession, ranks: frozenset[int] | None
) -> tuple[list[int], dict[int, str], list[RankEntry]]:
    """(ranks to ask, rank -> why it is not asked (its node is lost), ranks that have ended)."""
    ask: list[int] = []
    lost: dict[int, str] = {}
    ended: list[RankEntry] = []
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
    session: ListedSession,
    source: str,
    dumps: dict[int, dict[str, Any]],
    unresponsive: dict[int, str],
    ended: list[RankEntry],
    start: float,
) -> dict[str, Any]:
    """The ``--json`` object of a local ``stacks``, plus where it came from and which answers are unverified.
    The verdict is made from the signed answers alone (an unsigned one may be anybody's): on a snapshot of
    those, then carried over, so an unsigned rank is never even a blank in it."""
    pids = {r["rank"]: r.get("pid") for r in session.get("ranks", [])}
    taken_at = time.time() - (time.monotonic() - start)
    snap = stackgroup.snapshot(session["session_id"], taken_at, start, dumps, unresponsive, pids, ended)
    snap["source"] = source
    snap["unverified"] = sorted(r for r, d in dumps.items() if not d["verified"])
    signed = {r: d for r, d in dumps.items() if d["verified"]}
    counted = snap if len(signed) == len(dumps) else {"groups": stackgroup.group(signed)}
    annotate(counted, signed, session.get("mode") == "adopted")
    if counted is not snap:
        for name in ("verdict", "culprit", "collectives_from", "flight_note", "_flights"):
            snap[name] = counted[name]
        entries = {e["rank"]: e for g in counted["groups"] for e in g["collectives"]}
        for g in snap["groups"]:
            g["collectives"] = [entries[r] for r in g["ranks"] if r in entries]
    return snap


def annotate(snap: dict[str, Any], dumps: dict[int, dict[str, Any]], by_site: bool = False) -> None:
    """The collective verdict (``rtdebug.stacks.verdict``)."""
    verdict.annotate(snap, dumps, by_site)


def _gather(
    fetch: Fetch,
    keys: dict[int, str],
    n: int,
    nonce: str,
    known: list[str],
    deadline: float,
    count: Callable[[], int] | None = None,
) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """Each asked rank's answer, read through ``fetch`` until all are signed by a known secret (or none is
    known) or the deadline; a value is parsed once. (dumps, rank -> why its answer is not valid).

    ``count`` (c10d's done count): answers are read each time it moves, so one is taken as soon as it is
    counted (its rank deletes it when it answers the next request, maybe another requester's), and every
    ``REREAD_S`` once it says all are in (it is a hint: anyone may have raised it). Without one, every
    ``REREAD_S``."""
    dumps: dict[int, dict[str, Any]] = {}
    unsigned: dict[int, dict[str, Any]] = {}
    invalid: dict[int, str] = {}
    seen: dict[int, bytes] = {}
    counted, next_read = 0, 0.0
    while True:
        now = time.monotonic()
        got = count() if count is not None else len(keys)
        if got != counted or (got >= len(keys) and now >= next_read) or now >= deadline:
            counted, next_read = got, now + REREAD_S
            missing = [r for r in keys if r not in dumps]
            for r, raw in zip(missing, fetch([keys[r] for r in missing]), strict=True):
                if not raw or seen.get(r) == raw:
                    continue
                seen[r] = raw
                dump, why = wire.parse(keys[r], raw, r, n, nonce, known)
                if why == wire.OTHER_REQUEST:  # the rank's answer to an earlier request (Ray: one key per rank)
                    continue
                if dump is None:
                    invalid[r] = why or "?"
                elif dump["verified"] or not known:
                    dumps[r] = dump
                else:  # taken only if nothing signed comes: the rank's own answer may still overwrite it
                    unsigned[r] = dump
        if len(dumps) == len(keys) or now >= deadline:
            break
        time.sleep(POLL_S)
    for r, dump in unsigned.items():
        dumps.setdefault(r, dump)
    return dumps, {r: why for r, why in invalid.items() if r not in dumps}


def _number(client: Any, run_id: str) -> int:
    n: int = client.add(wire.dump_seq_key(run_id), 1)
    for _ in range(8):  # a key already at n was planted (junk the ranks pass over): take the next number
        if not client.check([wire.dump_key(run_id, n)]):
            break
        n = client.add(wire.dump_seq_key(run_id), 1)
    return n


def from_store(
    client: Any, session: ListedSession, known: list[str], ranks: frozenset[int] | None = None, timeout: float = 3.0
) -> dict[str, Any]:
    """Ask every live rank of a torchrun job (``session``, as ``rtdebug.views.store`` gives it) for its stacks."""
    start = time.monotonic()
    run_id = str(session.get("rdzv_id"))
    ask, unresponsive, ended = split_ranks(session, ranks)
    n, nonce = _number(client, run_id), wire.new_nonce()
    req, done = wire.dump_key(run_id, n), wire.dump_done_key(run_id, n, nonce)
    client.set(req, wire.request(req, n, nonce, known))

    def fetch(keys: list[str]) -> list[bytes | None]:
        return client.multi_get(keys) if keys else []

    try:
        keys = {r: wire.answer_key(run_id, n, nonce, r) for r in ask}
        dumps, invalid = _gather(fetch, keys, n, nonce, known, start + timeout, lambda: client.add(done, 0))
    finally:
        # the request before the count: a rank that counts after this finds no request and deletes its count
        for key in (req, done):
            client.delete_key(key)  # each rank deletes its own answer when it writes its next one
    _silent(session, ask, dumps, invalid, timeout, unresponsive)
    return snapshot(session, f"store {session.get('store', '?')}", dumps, unresponsive, ended, start)


def _silent(
    session: ListedSession,
    ask: list[int],
    dumps: dict[int, dict[str, Any]],
    invalid: dict[int, str],
    timeout: float,
    unresponsive: dict[int, str],
) -> None:
    """Why each asked rank is missing; one whose entry is unverified most likely has another secret."""
    unverified = {r["rank"] for r in session.get("ranks", []) if r.get("verified") is False}
    for r in ask:
        if r in invalid:
            unresponsive[r] = f"its answer is not valid: {invalid[r]}"
        elif r not in dumps:
            unresponsive[r] = f"no answer within {timeout:g} s" + (OTHER_SECRET if r in unverified else "")


def from_kv(
    kv: Any, session: ListedSession, known: list[str], ranks: frozenset[int] | None = None, timeout: float = 3.0
) -> dict[str, Any]:
    """Ask every live worker of a Ray run (``session``, as ``rtdebug.views.ray`` gives it) for its stacks."""
    from rtdebug.stacks.wire import dump_answer_key, dump_request_key

    start = time.monotonic()
    sid = session["session_id"]
    ask, unresponsive, ended = split_ranks(session, ranks)
    n, nonce = time.time_ns() // 1000, wire.new_nonce()  # the KV has no counter: workers take a newer number
    req = dump_request_key(sid)
    kv.put_raw(req, wire.request(req, n, nonce, known))

    def fetch(keys: list[str]) -> list[bytes | None]:  # one listing of every answer, not one call per rank
        got = kv.raw(dump_answer_key(sid, None)) if keys else {}
        return [got.get(k) for k in keys]

    try:
        keys = {r: dump_answer_key(sid, r) for r in ask}
        dumps, invalid = _gather(fetch, keys, n, nonce, known, start + timeout)
    finally:
        kv.delete_key(req)
    _silent(session, ask, dumps, invalid, timeout, unresponsive)
    return snapshot(session, f"ray {getattr(kv, 'address', '?')}", dumps, unresponsive, ended, start)


def other_secret(snap: dict[str, Any]) -> list[int]:
    """Ranks that did not answer because their entries carry another job secret than this machine's."""
    return [u["rank"] for u in snap.get("unresponsive_detail", []) if u["reason"].endswith(OTHER_SECRET)]


def warnings(snap: dict[str, Any]) -> list[str]:
    """What must be read before the verdict: ranks not counted in it, and why."""
    out = []
    if snap.get("unverified"):
        out.append(
            f"warning: {stackgroup.ranks_word(snap['unverified'])}: answer not signed with a job secret known here "
            f"(unverified: shown, not counted in the verdict; set RTDEBUG_JOB_SECRET as the job did)"
        )
    other = other_secret(snap)
    if other:
        shared = signing.shown(signing.config_dir())
        out.append(
            f"warning: {stackgroup.ranks_word(other)} {'uses' if len(other) == 1 else 'use'} another job secret "
            f"than this machine (so {'it ignores' if len(other) == 1 else 'they ignore'} its request): set "
            f"RTDEBUG_JOB_SECRET to the same value on every node, or share {shared} (the default secret) between them"
        )
    return out


def notes(snap: dict[str, Any]) -> list[str]:
    """Lines the text output adds for a job-wide snapshot: where it came from, then the warnings."""
    return [f"(every rank of the job, through the {snap['source']})", *warnings(snap)]


def with_notes(text: str, snap: dict[str, Any]) -> str:
    """``text`` (``rtdebug.stacks.text.render``) with the warnings first, before the verdict line (which is
    made from signed answers only; a reader must know what it leaves out before reading it), and where the
    answers came from under the ``session ...`` header line."""
    if "source" not in snap:
        return text
    lines = text.split("\n")
    at = next((i + 1 for i, ln in enumerate(lines) if ln.startswith("session ")), 0)
    lines[at:at] = [f"(every rank of the job, through the {snap['source']})"]
    return "\n".join([*warnings(snap), *lines])
