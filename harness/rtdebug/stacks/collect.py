"""Requester side of ``rtdebug stacks``: ask each live rank's dump thread, read its answer, group them.

Under the session's stacks lock: write a fresh nonce into each rank's FIFO (``rtdebug.rank.stacks.dump``);
its dump thread answers with the stacks, taken as Python with the GIL, and its Flight Recorder. A rank
whose thread has not answered within ``fallback_s`` (a C call holds its GIL; see ``fallback_after``)
gets the signal fallback: its signal-time dump file is truncated and read until it is whole (its main
thread's block reaches the recorded bottom frame), stops growing, or ``timeout`` passes -- then that
rank is listed as unresponsive, never waited on beyond it. Either answer is taken, the thread's first.

A rank entry is a hint, not an order: only the file names and the signal that rtdebug's own ``arm``
records are used (a forged entry cannot make ``stacks`` write, truncate or read another file or send
another signal), files are opened without following symlinks, a FIFO must be a FIFO and an answer a
regular file, and only pids whose create time matches are signalled.
"""

from __future__ import annotations

import os
import stat
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtdebug.common import selector
from rtdebug.common.errors import HarnessError
from rtdebug.common.filelocks import locked
from rtdebug.registry import collseq
from rtdebug.registry.files import Registry
from rtdebug.registry.schema import RankEntry, SessionEntry
from rtdebug.stacks import group as stackgroup
from rtdebug.stacks import stops, verdict
from rtdebug.stacks.ask import Asked, ask, fallback_after, no_fallback_note
from rtdebug.stacks.contract import SIGNAL, dump_file
from rtdebug.stacks.native import native_dumps

STABLE_S = 0.3  # a dump that stops growing without reaching its bottom frame is taken as it is
POLL_S = 0.005


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
        done = self.complete
        return {"threads": threads, "main_id": self.main_id, "pid": self.pid, "complete": done, "how": "signal"}


def _stopped(pid: int) -> bool:
    import psutil  # the requester only: ranks import rtdebug.rank.stacks.dump, never this module

    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def select_ranks(
    reg: Registry, session: SessionEntry, ranks: frozenset[int] | None
) -> tuple[list[RankEntry], list[RankEntry]]:
    """(live entries to dump, entries that have ended) among the selected ranks of this machine's files."""
    live: list[RankEntry] = []
    ended: list[RankEntry] = []
    for e in reg.ranks(session["session_id"]):
        if ranks is None or e["rank"] in ranks:
            (live if reg.live_rank(e) else ended).append(e)
    return live, ended


def records(reg: Registry, session: SessionEntry, ranks: frozenset[int] | None) -> dict[int, Any]:
    """Each selected live rank's collective record, read without signalling it (``rtdebug.stacks.motion``
    compares two reads): rank -> the record (None before the first collective); unreadable ones left out."""
    sdir = reg.session_dir(session["session_id"])
    out: dict[int, Any] = {}
    for e in select_ranks(reg, session, ranks)[0]:
        known, rec = collseq.read_known(sdir, e)
        if known:
            out[e["rank"]] = rec
    return out


def _why_not(e: RankEntry) -> str | None:
    """Why rank entry ``e`` cannot be signalled for a dump, or None."""
    info = e.get("stacks")
    if not isinstance(info, dict):
        return "stack dumps are not armed in this rank"
    if info.get("file") != dump_file(e["rank"]) or info.get("signal") != SIGNAL:
        return "its stacks entry is not rtdebug's (file or signal differs); not signalled"
    if _stopped(e["pid"]):
        return "process is stopped (SIGSTOP or a tracer)"
    if catches(e["pid"], SIGNAL) is False:  # an exiting interpreter has put the default (terminate) back
        return "it no longer handles the stacks signal (it is exiting); not signalled"
    return None


def catches(pid: int, signum: int) -> bool | None:
    """Whether process ``pid`` has a handler for ``signum`` (its ``SigCgt`` mask), None where unknown: a rank's
    dump signal is sent only to a process that catches it, since its default action ends the process."""
    try:
        with open(f"/proc/{pid}/status") as f:
            line = next((ln for ln in f if ln.startswith("SigCgt:")), None)
    except OSError:
        return None
    if line is None:
        return None
    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)


def _truncate(path: Path) -> None:
    """Empty a rank's signal-dump file, never through a symlink and only if it is a regular file."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "its dump file is not a regular file")
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def signal_ranks(sdir: Path, live: list[RankEntry], unresponsive: dict[int, str]) -> list[Pending]:
    """Truncate and signal each live rank (the fallback); those that cannot be go to ``unresponsive``."""
    pending = []
    for e in live:
        why = _why_not(e)
        path = sdir / dump_file(e["rank"])
        if why is None:
            try:
                _truncate(path)
                os.kill(e["pid"], SIGNAL)
            except OSError as exc:
                why = f"cannot signal pid {e['pid']}: {exc.strerror}"
        if why is not None:
            unresponsive[e["rank"]] = why
            continue
        info = e["stacks"]
        assert info is not None  # _why_not: a dict
        bottom = info.get("bottom") if isinstance(info.get("bottom"), list) else None
        pending.append(
            Pending(e["rank"], e["pid"], path, str(info.get("main_thread")), bottom, changed=time.monotonic())
        )
    return pending


def read_answers(asked: list[Asked], pending: list[Pending], until: float) -> dict[int, dict[str, Any]]:
    """Read answers (thread or signal) until all are in or ``until``; both lists keep what is still out."""
    dumps: dict[int, dict[str, Any]] = {}
    while asked or pending:
        now = time.monotonic()
        for a in list(asked):
            d = a.read()
            if d is not None:
                dumps[a.entry["rank"]] = d
                asked.remove(a)
                pending[:] = [p for p in pending if p.rank != a.entry["rank"]]
        for p in list(pending):
            p.read(now)
            if p.answered(now):
                dumps[p.rank] = p.result()
                pending.remove(p)
                asked[:] = [a for a in asked if a.entry["rank"] != p.rank]
        if now >= until:
            break
        if asked or pending:
            time.sleep(POLL_S)
    return dumps


def take(
    sdir: Path, live: list[RankEntry], timeout: float, start: float, unresponsive: dict[int, str]
) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """Every live rank's dump: its thread's answer, or the signal fallback for a rank whose thread is
    silent (no thread, or no answer within ``fallback_after``; a timeout too short for that fallback
    signals only the ranks with no thread); returns (dumps, fallback notes)."""
    asked: list[Asked] = []
    silent: list[RankEntry] = []
    for e in live:
        if _stopped(e["pid"]):
            unresponsive[e["rank"]] = "process is stopped (SIGSTOP or a tracer)"
            continue
        a = ask(sdir, e)
        if a is None:
            silent.append(e)
        else:
            asked.append(a)
    wait = fallback_after(timeout)
    notes = [{"rank": e["rank"], "reason": "it has no dump thread"} for e in silent]
    if wait is None:  # too short for a fallback: the threads get the whole timeout, a late one is never signalled
        pending = signal_ranks(sdir, silent, unresponsive)
        signalled = {p.rank for p in pending}
        dumps = read_answers(asked, pending, start + timeout)
        unresponsive.update((a.entry["rank"], no_fallback_note(timeout)) for a in asked)
        late: list[RankEntry] = []
    else:
        dumps = read_answers(asked, [], start + wait)
        late = [a.entry for a in asked]
        notes += [{"rank": e["rank"], "reason": f"its dump thread did not answer within {wait:g} s"} for e in late]
        pending = signal_ranks(sdir, silent + late, unresponsive)
        signalled = {p.rank for p in pending}  # before the read, which takes the answered ones out
        dumps.update(read_answers(asked, pending, start + timeout))
    for e in silent + late:
        if e["rank"] not in dumps and e["rank"] not in unresponsive:
            unresponsive[e["rank"]] = f"no answer within {timeout:g} s"
    notes = [n for n in notes if n["rank"] in signalled and dumps.get(n["rank"], {}).get("how") == "signal"]
    return dumps, sorted(notes, key=lambda n: n["rank"])


def collect(
    reg: Registry,
    session: SessionEntry,
    ranks: frozenset[int] | None = None,
    timeout: float = 3.0,
    native: bool = False,
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
        dumps, fallback = take(sdir, live, timeout, start, unresponsive)
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
    snap["coords"] = {e["rank"]: c for e in live if (c := selector.label(e))}  # mesh coordinates, if any
    snap["fallback"] = fallback
    snap["stopped"] = stops.line(live)  # --stop-on: why the ranks stand still, said before anything else
    return verdict.annotate(snap, dumps, by_site=session.get("mode") == "adopted")
