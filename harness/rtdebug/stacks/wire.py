"""The job-wide stacks protocol, whole: its keys, the request, the answer, the MACs and the delete order.

A requester (``rtdebug.stacks.jobwide``: ``rtdebug stacks --store/--ray-address``, the hang report) asks
every rank of a job through the job's own c10d store or the Ray GCS KV; each rank's watcher thread
(``rtdebug.rank.stacks.watch``) answers. Both ends build and check everything here, so they cannot drift.
Stdlib only: every rank imports it.

Keys (c10d, under ``rtdebug/<run id>/``): ``dumpseq`` (a counter: each request takes the next number),
``dump/<n>`` (request n, which the ranks wait on), ``dump/<n>/<nonce>/<rank>`` (rank's answer) and
``dump/<n>/<nonce>/done`` (how many answered). Ray KV: ``dump/<sid>/request`` and ``dump/<sid>/rank/<r>``
(the KV has no counter: a request's number is its time; a worker answers only a newer one).

The delete order, which makes every interleaving leave nothing behind: a rank keeps at most its latest
answer (it deletes its previous one when it writes the next); a rank counts itself done first, then, if
the request is gone (the requester gave up), deletes the count itself; the requester, when it gives up or
is done, deletes the request first and then the count. So a count made after the requester's delete is
the rank's to delete, and none survives either side.

Trust: anyone who reaches the store can write a request or an answer, at any key, ahead of time.

- A request is ``rtdq1 <mac>,<mac>...\\n<body>``: one MAC per secret the requester knows (it cannot tell
  which one the job uses), each over the store key and the body's *bytes*. A rank reads at most
  ``MAX_REQUEST`` bytes of it (``rtdebug.rank.stacks.watch`` refuses a longer value before it is sent), finds
  its MAC with ``hmac.compare_digest`` and only then parses the body: junk costs a rank one HMAC over 4 KiB
  at most, never a JSON parse of whatever size someone wrote.
- The body carries a fresh random ``nonce``. A rank puts it, signed, in its answer (and c10d's answer and
  done-count keys are under it), so answers and counts planted for a future request number are never
  read, and a planted answer cannot pass for one to this request.
- An answer is signed with the rank's secret under its own key (so it cannot be moved to another rank
  or request); the requester bounds its size and fields, and counts only answers a secret it knows
  signed (an unsigned one is shown, marked, never counted in the verdict).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

from rtdebug.registry import signing
from rtdebug.registry.c10d import PREFIX
from rtdebug.stacks import flight as flightrec
from rtdebug.stacks import group as stackgroup
from rtdebug.stacks.contract import MAX_TEXT

MAX_ANSWER = MAX_TEXT + flightrec.MAX_JSON + (16 << 10)
MAX_REQUEST = 4096  # bytes: a genuine request is ~100 plus 65 per MAC
MAX_MACS = 8
MAGIC = b"rtdq1 "
NONCE_LEN = 32
HEX_RE_CHARS = frozenset("0123456789abcdefx")
_HEX = frozenset("0123456789abcdef")
_DOMAIN = b"rtdebug-request-v1\0"
OTHER_REQUEST = "it answers another request (its number or nonce is not this one's)"  # stale, or planted ahead


def new_nonce() -> str:
    return secrets.token_hex(NONCE_LEN // 2)


def nonce_ok(nonce: Any) -> bool:
    """A nonce as ``new_nonce`` makes them (it becomes part of a store key)."""
    return isinstance(nonce, str) and len(nonce) == NONCE_LEN and set(nonce) <= _HEX


def _mac(key: str, body: bytes, secret: str) -> bytes:
    return hmac.new(secret.encode(), _DOMAIN + key.encode() + b"\0" + body, hashlib.sha256).hexdigest().encode()


def request(key: str, n: int, nonce: str, secrets_known: list[str]) -> bytes:
    """Request ``n`` at ``key``, bound to ``nonce``, with one MAC per known secret."""
    body = json.dumps({"n": n, "nonce": nonce}, separators=(",", ":")).encode()
    return MAGIC + b",".join(_mac(key, body, s) for s in secrets_known[:MAX_MACS]) + b"\n" + body


def request_ok(key: str, raw: bytes | None, secret: str | None) -> tuple[int, str] | None:
    """(number, nonce) of a request this rank should answer, else None (junk, oversized, forged). Size, then
    MAC, then parse: nothing of an unsigned value is parsed. A rank without a secret (none was given to its
    job) takes an unsigned request: it has nothing to check one with."""
    if not raw or len(raw) > MAX_REQUEST or not raw.startswith(MAGIC):
        return None
    head, sep, body = raw.partition(b"\n")
    if not sep:
        return None
    if secret:
        want = _mac(key, body, secret)
        if not any(hmac.compare_digest(m, want) for m in head[len(MAGIC) :].split(b",")[:MAX_MACS]):
            return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # unsigned junk, or nested deeper than the parser goes
        return None
    if not isinstance(value, dict) or not nonce_ok(value.get("nonce")):
        return None
    n = value.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return None
    return n, value["nonce"]


def answer(key: str, rank: int, n: int, nonce: str, dump: dict[str, Any], secret: str | None, **extra: Any) -> bytes:
    """Rank ``rank``'s signed answer to request ``n`` (``nonce``)."""
    entry = dict(extra, rank=rank, n=n, nonce=nonce, text=dump["text"], main_id=dump["main_id"], pid=dump["pid"])
    if dump.get("flight") is not None:
        entry["flight"] = dump["flight"]
    return json.dumps(signing.sign(key, entry, secret)).encode()


def _fields_problem(value: Any, rank: int, n: int, nonce: str) -> str | None:
    if not isinstance(value, dict):
        return "not a JSON object"
    if value.get("rank") != rank:
        return "it names another rank than its key"
    if value.get("n") != n or value.get("nonce") != nonce:
        return OTHER_REQUEST
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


def parse(
    key: str, raw: bytes, rank: int, n: int, nonce: str, known: list[str]
) -> tuple[dict[str, Any] | None, str | None]:
    """(the dump as ``rtdebug.stacks.group.group`` takes it, None) or (None, why the answer is not valid)."""
    if len(raw) > MAX_ANSWER:
        return None, f"its answer is {len(raw)} bytes (more than {MAX_ANSWER})"
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # forged: junk, or nested deeper than the parser goes
        return None, "its answer is not JSON"
    why = _fields_problem(value, rank, n, nonce)
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


# -- keys ---------------------------------------------------------------------------------------------


def dump_seq_key(run_id: str) -> str:
    """A counter: each job-wide ``stacks`` request takes the next number (the requester)."""
    return f"{PREFIX}/{run_id}/dumpseq"


def dump_key(run_id: str, n: int) -> str:
    """Request ``n`` (the requester), which the ranks wait on (their watchers)."""
    return f"{PREFIX}/{run_id}/dump/{n}"


def answer_key(run_id: str, n: int, nonce: str, rank: int) -> str:
    """Rank ``rank``'s answer to request ``n``. Under the request's nonce (fresh, random, known once the request
    is written): an answer planted ahead for a future request number lands where nobody reads."""
    return f"{PREFIX}/{run_id}/dump/{n}/{nonce}/{rank}"


def dump_done_key(run_id: str, n: int, nonce: str) -> str:
    """Counts the answers to request ``n``: the requester waits on one number, not on every key. Under the
    nonce too, so a count planted ahead cannot end the wait before the ranks answer."""
    return f"{PREFIX}/{run_id}/dump/{n}/{nonce}/done"


def dump_request_key(sid: str) -> str:
    """A job-wide ``stacks`` request for run ``sid`` (``rtdebug.stacks.jobwide``)."""
    return f"dump/{sid}/request"


def dump_answer_key(sid: str, rank: int | None) -> str:
    """Worker ``rank``'s answer (``rtdebug.rank.stacks.watch``); ``None``: the prefix of them all."""
    return f"dump/{sid}/rank/" + ("" if rank is None else str(rank))
