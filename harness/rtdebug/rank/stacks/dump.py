"""Rank side of ``rtdebug stacks``: one hidden thread takes the dump as Python, with the GIL.

``arm`` starts the rank's dump thread. It blocks in ``read`` on a FIFO ``stacks-<rank>.req`` in the
session directory (the GIL released, nothing per step); a requester writes a nonce line there, and the
thread answers with ``stacks-<rank>.json``: every thread's frames and names (``rtdebug.rank.stacks.take``),
the nonce, and torch's Flight Recorder read at that moment (``rtdebug.rank.stacks.flight``: the collectives
DDP and FSDP issue from C++). The answer is written to a fresh temp name (``O_EXCL|O_NOFOLLOW``,
relative to the directory fd checked at arm) and renamed into place (``rtdebug.common.atomic``), so a
requester never reads half an answer and no symlink planted in the directory is ever written through.

A rank stopped at a breakpoint answers (the thread is hidden from pydevd: ``rtdebug.common.threads``),
and so does one blocked in a C++ collective (the GIL is released there). What cannot answer is a rank
whose GIL some C call holds and never gives back: for that rank only, the requester falls back to the
signal registered here, on which CPython's ``faulthandler`` writes ``stacks-<rank>.txt`` at signal time.
That dump walks the thread list without the GIL -- it can crash a process whose threads come and go --
so it is the fallback, named as such in the output, and never the first try.

Stdlib only: it is armed on every rank's start path.
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import signal
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rtdebug.common import atomic, log
from rtdebug.common.threads import hidden_thread
from rtdebug.rank.stacks import take
from rtdebug.registry.schema import StacksAnswer
from rtdebug.stacks.contract import SIGNAL, answer_file, dump_file, request_file

NONCE_RE = re.compile(rb"^[0-9a-f]{16,64}$")
STOP = b"stop\n"  # written by disarm to wake the thread (only the owner can write into the 0700 session dir)
MIN_GAP_S = 0.005  # requests queued meanwhile are answered once, with the newest nonce


class _Armed:
    """What ``arm`` opened and ``disarm`` closes: the dump thread, the fallback's dump file, the session dir."""

    __slots__ = ("thread", "fd", "dir_fd")

    def __init__(self) -> None:
        self.thread: DumpThread | None = None
        self.fd: int | None = None
        self.dir_fd: int | None = None


_armed = _Armed()


def _newest_nonce(buf: bytes) -> bytes | None:
    for line in reversed(buf.split(b"\n")):
        if NONCE_RE.match(line):
            return line
    return None


class DumpThread:
    """The rank's one dump thread: waits on its FIFO, answers each request whole."""

    def __init__(self, dir_fd: int, rank: int, main_ident: int | None) -> None:
        self.dir_fd, self.rank, self.main_ident = dir_fd, rank, main_ident
        self.req, self.out = request_file(rank), answer_file(rank)
        self.fifo = _make_fifo(dir_fd, self.req)  # O_RDWR: the read blocks, and never sees an EOF
        self.closed = False
        self.thread = hidden_thread(self._loop, f"rtdebug-dumps-{rank}", start=False)

    def start(self) -> DumpThread:
        self.thread.start()
        return self

    def close(self) -> None:
        """Stop the thread and remove the FIFO (detach); the thread ends within one read."""
        self.closed = True
        try:
            os.write(self.fifo, STOP)
        except OSError:
            pass
        self.thread.join(timeout=2.0)
        for name in (self.req, self.out):
            try:
                os.unlink(name, dir_fd=self.dir_fd)
            except OSError:
                pass
        os.close(self.fifo)

    def _loop(self) -> None:
        while not self.closed:
            try:
                buf = os.read(self.fifo, 4096)
            except OSError:
                return
            if self.closed:
                return
            nonce = _newest_nonce(buf)
            if nonce is None:
                continue  # junk or a torn line: nothing is taken for it
            time.sleep(MIN_GAP_S)  # let a burst of requests land, then answer them all at once
            try:
                more = os.read(self.fifo, 4096) if _readable(self.fifo) else b""
            except OSError:
                more = b""
            nonce = _newest_nonce(more) or nonce
            try:
                self.answer(nonce.decode())
            except Exception:  # the rank must go on whatever happens here
                log.swallowed("rank.stacks.dump: the rank must go on whatever happens here")
                continue

    def answer(self, nonce: str) -> None:
        from rtdebug.rank.stacks import flight

        stacks = take.take(self.main_ident)
        value: StacksAnswer = {
            "text": stacks["text"],
            "main_id": stacks["main_id"],
            "pid": stacks["pid"],
            "nonce": nonce,
            "how": "thread",
            "flight": flight.read(),
        }
        atomic.write(self.out, json.dumps(value).encode(), dir_fd=self.dir_fd)


def _readable(fd: int) -> bool:
    import select

    return bool(select.select([fd], [], [], 0)[0])


def _make_fifo(dir_fd: int, name: str) -> int:
    """A new FIFO ``name`` in the directory, opened read-write; whatever was at that name is replaced."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    os.mkfifo(name, 0o600, dir_fd=dir_fd)
    fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # replaced between mkfifo and open
        os.close(fd)
        raise OSError(f"{name} is not the FIFO just made")
    return fd


def _bottom() -> list[str]:
    f = sys._getframe()
    while f.f_back is not None:
        f = f.f_back
    return [f.f_code.co_filename, f.f_code.co_name]


def _arm_signal(dir_fd: int, rank: int) -> dict[str, Any]:
    """The fallback: faulthandler on ``SIGNAL`` writes to ``stacks-<rank>.txt``; {} if the signal is taken."""
    if signal.getsignal(SIGNAL) not in (signal.SIG_DFL, None):
        return {}  # the program (or an embedder) already owns the signal
    name = dump_file(rank)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    except OSError:
        return {}
    faulthandler.register(SIGNAL, file=fd, all_threads=True, chain=False)
    _armed.fd = fd
    return {"signal": int(SIGNAL), "file": name}


def arm(session_dir: Path, rank: int, main_ident: int | None = None) -> dict[str, Any] | None:
    """Start this rank's dump thread and arm the signal fallback; returns the rank entry's ``stacks``
    field (None when neither could be armed). A second call re-arms (the old thread and fd go)."""
    disarm()
    try:
        dir_fd = os.open(session_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    field: dict[str, Any] = {}
    try:
        _armed.thread = DumpThread(dir_fd, rank, main_ident).start()
        field.update(request=request_file(rank), answer=answer_file(rank))
    except OSError:
        pass
    field.update(_arm_signal(dir_fd, rank))
    if not field:
        os.close(dir_fd)
        return None
    _armed.dir_fd = dir_fd
    ident = main_ident if main_ident is not None else threading.main_thread().ident
    return dict(field, main_thread=hex(ident or 0), bottom=_bottom())


def disarm() -> None:
    """Stop the dump thread, give the signal back (default action), close what ``arm`` opened."""
    t, fd, dir_fd = _armed.thread, _armed.fd, _armed.dir_fd
    _armed.thread = _armed.fd = _armed.dir_fd = None
    if t is not None:
        t.close()
    if fd is not None:
        faulthandler.unregister(SIGNAL)
        os.close(fd)
    if dir_fd is not None:
        os.close(dir_fd)
