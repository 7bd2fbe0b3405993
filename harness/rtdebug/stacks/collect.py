"""Requester side of ``rtdebug stacks``: signal each live rank, read its dump, group the answers.

Under the session's stacks lock: truncate each rank's dump file, send the signal
(``rtdebug.stacks.dump``), then read until each dump is whole (its main thread's
block reaches the recorded bottom frame), stops growing, or ``timeout`` passes --
then that rank is listed as unresponsive, never waited on beyond it.

A rank entry is a hint, not an order: only the dump file and signal that rtdebug's
own ``arm`` records are used (a forged entry cannot make ``stacks`` truncate another
file or send another signal), and only pids whose create time matches are signalled.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtdebug.common.errors import HarnessError
from rtdebug.common.filelocks import locked
from rtdebug.registry import collseq
from rtdebug.registry.files import Registry
from rtdebug.stacks import group as stackgroup
from rtdebug.stacks import verdict
from rtdebug.stacks.dump import SIGNAL, dump_file
from rtdebug.stacks.native import native_dumps

STABLE_S = 0.3  # a dump that stops growing without reaching its bottom frame is taken as it is
POLL_S = 0.005
Entry = dict[str, Any]


@dataclass
class Pending:
    """A rank that was signalled and whose dump is being read."""

    rank: int
    pid: int
    path: Path
    main_id: str
    bottom: list[str] | None
    text: str = ""
    changed: float = 0.0
    complete: bool = False

    def read(self, now: float) -> None:
        """Take in what the rank has written since the last read (parsing only when it changed)."""
        try:
            text = self.path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            text = ""
        if text != self.text:
            self.text, self.changed = text, now
            self.complete = stackgroup.dump_complete(text, self.main_id, self.bottom)

    def answered(self, now: float) -> bool:
        return self.complete or (bool(self.text) and now - self.changed >= STABLE_S)

    def result(self) -> dict[str, Any]:
        threads = stackgroup.parse_dump(self.text)
        return {"threads": threads, "main_id": self.main_id, "pid": self.pid, "complete": self.complete}


def _stopped(pid: int) -> bool:
    import psutil  # the requester only: ranks import rtdebug.stacks.dump, never this module

    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def select_ranks(reg: Registry, session: Entry, ranks: frozenset[int] | None) -> tuple[list[Entry], list[Entry]]:
    """(live entries to dump, entries that have ended) among the selected ranks of this machine's files."""
    live: list[Entry] = []
    ended: list[Entry] = []
    for e in reg.ranks(session["session_id"]):
        if ranks is None or e["rank"] in ranks:
            (live if reg.live_rank(e) else ended).append(e)
    return live, ended


def _why_not(e: Entry) -> str | None:
    """Why rank entry ``e`` cannot be signalled for a dump, or None."""
    info = e.get("stacks")
    if not isinstance(info, dict):
        return "stack dumps are not armed in this rank"
    if info.get("file") != dump_file(e["rank"]) or info.get("signal") != SIGNAL:
        return "its stacks entry is not rtdebug's (file or signal differs); not signalled"
    if _stopped(e["pid"]):
        return "process is stopped (SIGSTOP or a tracer)"
    return None


def signal_ranks(sdir: Path, live: list[Entry], unresponsive: dict[int, str]) -> list[Pending]:
    """Truncate and signal each live rank; those that cannot be go to ``unresponsive``."""
    pending = []
    for e in live:
        why = _why_not(e)
        path = sdir / dump_file(e["rank"])
        if why is None:
            try:
                os.truncate(path, 0)
                os.kill(e["pid"], SIGNAL)
            except OSError as exc:
                why = f"cannot signal pid {e['pid']}: {exc.strerror}"
        if why is not None:
            unresponsive[e["rank"]] = why
            continue
        info = e["stacks"]
        bottom = info.get("bottom") if isinstance(info.get("bottom"), list) else None
        pending.append(
            Pending(e["rank"], e["pid"], path, str(info.get("main_thread")), bottom, changed=time.monotonic())
        )
    return pending


def read_dumps(pending: list[Pending], timeout: float, unresponsive: dict[int, str]) -> dict[int, dict[str, Any]]:
    """Read every pending dump until it is whole or ``timeout`` passes."""
    dumps: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while pending:
        now = time.monotonic()
        for p in list(pending):
            p.read(now)
            if p.answered(now):
                dumps[p.rank] = p.result()
            elif now >= deadline:
                unresponsive[p.rank] = f"no answer within {timeout:g} s"
            else:
                continue
            pending.remove(p)
        if pending:
            time.sleep(POLL_S)
    return dumps


def collect(
    reg: Registry, session: Entry, ranks: frozenset[int] | None = None, timeout: float = 3.0, native: bool = False
) -> dict[str, Any]:
    """A grouped snapshot of the selected live ranks of ``session`` (the ``--json`` object)."""
    sid = session["session_id"]
    sdir = reg.session_dir(sid)
    start, taken_at = time.monotonic(), time.time()  # when the signals went out
    live, ended = select_ranks(reg, session, ranks)
    unresponsive: dict[int, str] = {}
    lock = ExitStack()
    try:
        lock.enter_context(locked(sdir / ".stacks.lock", timeout + 5))
    except OSError as exc:  # LockTimeout included
        raise HarnessError(f"cannot take the stacks lock of session {sid}: {exc}") from None
    with lock:
        dumps = read_dumps(signal_ranks(sdir, live, unresponsive), timeout, unresponsive)
    if native:
        for rank, result in native_dumps({r: d["pid"] for r, d in dumps.items()}, timeout).items():
            dumps[rank]["native"] = result
    pids = {e["rank"]: e["pid"] for e in live}
    for e in live:  # each rank's place in the collective sequence, read without signalling it
        if e["rank"] in dumps and isinstance(e.get("collectives"), dict):
            known, rec = collseq.read_known(sdir, e)
            if known:  # an unreadable record leaves the key out: no verdict, rather than "before any"
                dumps[e["rank"]]["collective"] = rec
    # "incomplete": dumps that stopped short of the main thread's bottom
    snap = stackgroup.snapshot(sid, taken_at, start, dumps, unresponsive, pids, ended)
    return verdict.annotate(snap, dumps, by_site=session.get("mode") == "adopted")
