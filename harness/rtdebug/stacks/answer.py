"""A job-wide dump request and a rank's answer to it, as they travel through a store (c10d or Ray KV).

Both ends in one place so they cannot drift: the rank side (``rtdebug.rank.dumpwatch``) checks a
request and builds its answer here; the requester (``rtdebug.stacks.jobwide``) builds requests and
checks answers here. Stdlib only: every rank imports it.

Trust: anyone who reaches the store can write a request or an answer. A request carries one MAC per
secret the requester knows (it cannot tell which one the job uses); a rank that has a secret answers
only a request whose MAC matches it, and only a request newer than the last it answered (a replayed
one is ignored). An answer is signed with the rank's secret under its own key (so it cannot be moved
to another rank or request); the requester bounds its size and fields and marks it unverified when
no secret it knows signed it.
"""

from __future__ import annotations

import hmac
import json
import time
from typing import Any

from rtdebug.registry import signing
from rtdebug.stacks import flight as flightrec
from rtdebug.stacks import group as stackgroup
from rtdebug.stacks import take as taker
from rtdebug.stacks.take import MAX_TEXT

MAX_ANSWER = MAX_TEXT + flightrec.MAX_JSON + (16 << 10)
MAX_MACS = 8
HEX_RE_CHARS = frozenset("0123456789abcdefx")


def request(key: str, n: int, secrets: list[str]) -> bytes:
    """Request ``n`` at ``key``, with one MAC per known secret."""
    body = {"n": n, "at": time.time()}
    macs = [signing.mac(key, body, s) for s in secrets[:MAX_MACS]]
    return json.dumps(dict(body, macs=macs)).encode()


def request_ok(key: str, raw: bytes, secret: str | None, last_n: int) -> int | None:
    """The request's number if this rank should answer it, else None (junk, forged, replayed)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # forged: junk, or nested deeper than the parser goes
        return None
    if not isinstance(value, dict) or not isinstance(value.get("n"), int) or value["n"] <= last_n:
        return None
    macs = value.get("macs")
    if secret:
        if not isinstance(macs, list) or not all(isinstance(m, str) for m in macs[:MAX_MACS]):
            return None
        want = signing.mac(key, {k: v for k, v in value.items() if k != "macs"}, secret)
        if not any(hmac.compare_digest(m, want) for m in macs[:MAX_MACS]):
            return None
    return int(value["n"])


def take(main_ident: int | None = None) -> dict[str, Any]:
    """This process's stacks now, taken as Python by the calling (watcher) thread with the GIL, and its
    Flight Recorder (``rtdebug.stacks.take``, ``rtdebug.stacks.flight``)."""
    return dict(taker.take(main_ident), flight=flightrec.read())


def answer(key: str, rank: int, n: int, dump: dict[str, Any], secret: str | None, **extra: Any) -> bytes:
    """Rank ``rank``'s signed answer to request ``n``."""
    entry = dict(extra, rank=rank, n=n, text=dump["text"], main_id=dump["main_id"], pid=dump["pid"])
    if dump.get("flight") is not None:
        entry["flight"] = dump["flight"]
    return json.dumps(signing.sign(key, entry, secret)).encode()


def _fields_problem(value: Any, rank: int, n: int) -> str | None:
    if not isinstance(value, dict):
        return "not a JSON object"
    if value.get("rank") != rank or value.get("n") != n:
        return "it names another rank or request than its key"
    if not isinstance(value.get("text"), str) or len(value["text"]) > MAX_TEXT:
        return "its dump text is missing or too long"
    main = value.get("main_id")
    if not isinstance(main, str) or not main.startswith("0x") or not set(main) <= HEX_RE_CHARS or len(main) > 20:
        return "its main thread id is not a hex number"
    if not isinstance(value.get("pid"), int) or isinstance(value.get("pid"), bool):
        return "its pid is not a number"
    coll = value.get("collective")
    if coll is not None and (not isinstance(coll, dict) or len(json.dumps(coll)) > 4096):
        return "its collective record is not an object (or too big)"
    fr = value.get("flight")
    if fr is not None and not flightrec.plausible(fr) and flightrec.off_reason(fr) is None:
        return "its Flight Recorder summary is not one rtdebug writes (or too big)"
    return None


def parse(key: str, raw: bytes, rank: int, n: int, known: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    """(the dump as ``rtdebug.stacks.group.group`` takes it, None) or (None, why the answer is not valid)."""
    if len(raw) > MAX_ANSWER:
        return None, f"its answer is {len(raw)} bytes (more than {MAX_ANSWER})"
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # forged: junk, or nested deeper than the parser goes
        return None, "its answer is not JSON"
    why = _fields_problem(value, rank, n)
    if why is not None:
        return None, why
    dump = {
        "threads": stackgroup.parse_dump(value["text"]),
        "main_id": value["main_id"],
        "pid": value["pid"],
        "complete": True,
        "verified": signing.verify(key, value, known),
    }
    if "collective" in value:  # absent: the rank keeps no record, so no verdict (not "before any")
        dump["collective"] = value["collective"]
    if value.get("flight") is not None:
        dump["flight"] = value["flight"]
    for name in ("hostname", "node_ip"):
        if isinstance(value.get(name), str):
            dump[name] = value[name][:255]
    return dump, None
