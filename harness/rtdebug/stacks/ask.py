"""Asking a rank's dump thread for its stacks (the requester's half of ``rtdebug.rank.stacks.dump``).

``ask`` writes a fresh nonce into the rank's FIFO -- opened write-only, non-blocking (``ENXIO`` at once when
no thread reads it, never a hang), without following links, and only if it is a FIFO -- and ``Asked.read``
takes the answer the thread renamed into place: a regular file, size-bounded, whose nonce is this one's.
A rank entry is a hint: only the names rtdebug's own ``arm`` writes are used.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtdebug.registry.schema import RankEntry
from rtdebug.stacks import contract
from rtdebug.stacks import group as stackgroup

FALLBACK_S = 1.5  # see fallback_after
FALLBACK_MIN_S = 0.5  # the least a dump thread gets before a signal: under 2x this --timeout, no signal at all
MAX_ANSWER = 512 << 10  # a dump thread's answer: the text (contract.MAX_TEXT) and the recorder's summary


@dataclass
class Asked:
    """A rank whose dump thread was asked (a nonce in its FIFO) and whose answer is awaited."""

    entry: RankEntry
    path: Path
    nonce: str

    def read(self) -> dict[str, Any] | None:
        """The answer to this nonce, as a dump ``group`` takes, or None (not yet, or not a valid answer)."""
        raw = _read_regular(self.path, MAX_ANSWER)
        try:
            value = json.loads(raw) if raw else None
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, dict) or value.get("nonce") != self.nonce or not isinstance(value.get("text"), str):
            return None
        stacks = self.entry.get("stacks")  # ``ask`` asked only a rank whose entry has one
        dump: dict[str, Any] = {
            "threads": stackgroup.parse_dump(value["text"]),
            "main_id": str(stacks.get("main_thread") if stacks else None),
            "pid": self.entry["pid"],
            "complete": True,
            "how": "thread",
        }
        if value.get("flight") is not None:
            dump["flight"] = value["flight"]
        return dump


def _read_regular(path: Path, limit: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit + 1)[:limit]
    except OSError:
        return None
    finally:
        os.close(fd)


def ask(sdir: Path, e: RankEntry) -> Asked | None:
    """Write a fresh nonce into rank ``e``'s dump FIFO; None when it has no dump thread to ask."""
    info = e.get("stacks")
    rank = e["rank"]
    if not isinstance(info, dict) or info.get("request") != contract.request_file(rank):
        return None
    if info.get("answer") != contract.answer_file(rank):
        return None
    nonce = secrets.token_hex(16)
    try:  # O_NONBLOCK: ENXIO at once when no thread reads it (the rank's thread is gone), never a hang
        fd = os.open(sdir / contract.request_file(rank), os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        os.write(fd, nonce.encode() + b"\n")
    except OSError:
        return None
    finally:
        os.close(fd)
    return Asked(e, sdir / contract.answer_file(rank), nonce)


def fallback_after(timeout: float) -> float | None:
    """How long a rank's dump thread gets before the signal fallback: ``FALLBACK_S``, or half the timeout;
    None (no fallback: the thread gets the whole timeout) when that would be under ``FALLBACK_MIN_S``.

    A thread waiting for the GIL gets it within one switch interval (5 ms) of the holder reaching a
    bytecode boundary, and the dump takes milliseconds; 1.5 s is 300 switch intervals, time enough for
    a rank on a loaded machine, so the only ranks left are those in one long C call that holds the GIL
    (then nothing in the process starts or ends Python threads, which is what makes the fallback safe
    enough to try). Half the timeout leaves the fallback time to be read. A tiny ``--timeout`` never sends a
    healthy rank whose thread is merely slow to answer to the signal-time dump (unsafe while its threads
    start and end): below 0.5 s a rank is not yet one held in a C call."""
    wait = min(FALLBACK_S, timeout / 2)
    return wait if wait >= FALLBACK_MIN_S else None


def no_fallback_note(timeout: float) -> str:
    """Why a rank whose thread did not answer within a tiny ``timeout`` was not signalled (one line)."""
    return (
        f"its dump thread did not answer within {timeout:g} s; not signalled "
        f"(--timeout {2 * FALLBACK_MIN_S:g} or more tries the signal-time dump)"
    )
