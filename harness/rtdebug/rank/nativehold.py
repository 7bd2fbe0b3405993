"""All-stop's hold of a rank with no client as soon as its main thread runs Python again (``rtdebug.rank.allstop``).

A rank with no client used to be held only before its next Python-level collective; one blocked in C++ (DDP's
or FSDP's all-reduce inside ``loss.backward()``) ran on past it. Now:

- **the wake-up**: every rank makes ``allstop-<rank>.fifo`` (0600, in the 0700 session directory) and a hidden
  thread blocks in ``read()`` on it: no wake-up, no cost, while nothing happens. A rank that changes the board
  (``Board.publish``) writes one byte into every other local rank's FIFO (``wake_peers``);
- **the hold**: the woken thread reads the board. A peer stopped and this rank runs with no client: its entry
  says ``pausing``, with the user's line its main thread is at (in a native call, most likely), and it asks
  CPython to run ``hold`` in the main thread at its next eval-loop check (``Py_AddPendingCall``: the main
  thread of the main interpreter on 3.10-3.13). That is at once if the main thread runs Python, else when
  its C call returns. There the rank waits, as at a collective (``AllStop.hold``: ``paused``, with the line;
  suspended in the debugger instead if a client attaches), until the board says running.

The pending call is ``PyObject_IsTrue`` on one object whose ``__bool__`` holds and answers False: no ctypes
callback (no thunk to outlive), and an exception raised while held (Ctrl-C: ``KeyboardInterrupt``) comes out
where the main thread was, as from a signal handler. Never a signal: the user's signals stay theirs. A rank
with a client is paused by pydevd instead (``AllStop._pause``), which lands at the same place.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
import threading
from pathlib import Path
from typing import Any

from rtdebug.common import log
from rtdebug.common.threads import hidden_thread
from rtdebug.rank import debugstate

PREFIX, SUFFIX = "allstop-", ".fifo"
JOIN_S = 2.0  # how long ``close`` waits for the woken thread to end


def fifo_name(rank: int) -> str:
    return f"{PREFIX}{rank}{SUFFIX}"


def wake_peers(session_dir: Path, rank: int) -> None:
    """One byte into every other rank's FIFO in ``session_dir``: read the board now. Never blocks, never
    raises (a rank gone leaves a FIFO with no reader: skipped)."""
    try:
        names = [n for n in os.listdir(session_dir) if n.startswith(PREFIX) and n.endswith(SUFFIX)]
    except OSError:
        return
    for name in names:
        if name == fifo_name(rank):
            continue
        try:
            fd = os.open(session_dir / name, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # ENXIO: no reader (that rank ended); gone meanwhile
            continue
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, b"w")
        except OSError as exc:  # EAGAIN: a full pipe already says "read the board"
            if exc.errno != errno.EAGAIN:
                log.swallowed("rank.nativehold: a peer's FIFO took no byte")
        finally:
            os.close(fd)


class _Pending:
    """The object whose truth the main thread asks for (``PyObject_IsTrue``) at its next eval-loop check."""

    def __init__(self, hold: Any) -> None:
        self.hold = hold
        self.scheduled = False
        self.pid = os.getpid()

    def __bool__(self) -> bool:
        self.scheduled = False
        # closed (``NativeHold.close``): a queued call is a no-op; a child forked with the call queued is not the rank
        if self.hold is None or sys.is_finalizing() or os.getpid() != self.pid:
            return False
        try:
            frame = sys._getframe(1)  # where the main thread was when the eval loop ran this call
        except ValueError:
            frame = None
        try:
            self.hold(debugstate.call_site(frame))
        except Exception:  # the hold never breaks the user's code; a KeyboardInterrupt goes through
            log.swallowed("rank.nativehold: the hold failed")
        return False


class NativeHold:
    """One rank's FIFO, its waiting thread, and the pending call it schedules."""

    def __init__(self, part: Any, fd: int) -> None:
        self.part, self.fd = part, fd  # ``part``: the rank's ``AllStop``
        self.pending = _Pending(self._hold)
        api = ctypes.pythonapi
        api.Py_IncRef(ctypes.py_object(self.pending))  # a call queued at exit finds it alive
        self._add = api.Py_AddPendingCall
        self._add.argtypes, self._add.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
        self._is_true = ctypes.cast(api.PyObject_IsTrue, ctypes.c_void_p)
        self._lock = threading.Lock()
        self.closed = False
        self.thread: threading.Thread | None = None  # the one blocked in ``read()`` on the FIFO
        self.path: Path | None = None  # the FIFO, unlinked by ``close`` (only if it is still this one)

    def close(self) -> None:
        """Undo ``arm`` (an adopted rank's detach): the thread woken and joined, the FIFO closed and unlinked, a
        pending call still queued made a no-op (CPython cannot take it back)."""
        with self._lock:
            self.closed = True
            self.pending.hold = None  # the queued call (if any) answers False at once; nothing of ours kept
        thread = self.thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            try:
                os.write(self.fd, b"q")  # the thread's own FIFO (O_RDWR): its read() returns and it sees closed
            except OSError:
                log.swallowed("rank.nativehold: close: the FIFO took no byte")
            thread.join(JOIN_S)
        if self.path is not None:
            _unlink_if(self.path, os.fstat(self.fd))
            self.path = None
        os.close(self.fd)
        self.fd = -1

    def _wait(self) -> None:
        while not self.closed:
            try:
                if not os.read(self.fd, 64):
                    return
            except InterruptedError:
                continue
            except OSError:
                return
            try:
                self.woken()
            except Exception:
                log.swallowed("rank.nativehold: a wake-up is acted on or not; it never ends the thread")

    def woken(self) -> None:
        """Read the board: a peer stopped (this rank runs with no client): ``pausing`` and a pending call; the
        board running again while still ``pausing``: ``running``."""
        part = self.part
        with self._lock:
            if self.closed:
                return
            by = part.peer_stopped()
            if by is None:
                if part.state == "pausing" and part.endpoint.clients == 0:
                    part.not_pausing()
                return
            if part.state != "running" or part.endpoint.clients > 0:
                return  # paused, or held, already; a client's rank is paused by pydevd (``AllStop._watch``)
            part.native_pausing(by, main_site())
            if self.pending.scheduled:  # still queued from an earlier stop (let go meanwhile, still in C++):
                return  # it holds the rank when back; the entry says pausing again meanwhile
            self.pending.scheduled = True
            if self._add(self._is_true, id(self.pending)) != 0:  # the queue is full: the next collective holds
                self.pending.scheduled = False

    def _hold(self, frame: Any) -> None:
        if frame is None:  # no user frame: the main thread is ending (at exit), not the user's code: not held
            self.part.not_pausing()
            return
        self.part.hold(frame, after_native=True)


def _unlink_if(path: Path, mine: os.stat_result) -> None:
    """Unlink ``path`` if it is still the FIFO ``mine`` (never a name someone put there meanwhile)."""
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        st = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
        if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
            os.unlink(path.name, dir_fd=dir_fd)
    except OSError:
        log.swallowed("rank.nativehold: close: the FIFO was gone")
    finally:
        os.close(dir_fd)


def main_site() -> tuple[str, int] | None:
    """The user's line the main thread is at now (its innermost frame outside rtdebug and torch)."""
    ident = threading.main_thread().ident
    frame = sys._current_frames().get(ident) if ident is not None else None
    return debugstate.at_site(frame)


def arm(session_dir: Path, rank: int, part: Any) -> NativeHold | None:
    """Make this rank's FIFO and start its thread; None (with the collective wrapper's hold only) if it cannot."""
    try:
        dir_fd = os.open(session_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    name = fifo_name(rank)
    try:
        try:
            os.unlink(name, dir_fd=dir_fd)  # a restarted rank's leftover
        except FileNotFoundError:
            pass
        os.mkfifo(name, 0o600, dir_fd=dir_fd)
        fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)  # never an EOF
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    try:
        held = NativeHold(part, fd)
    except (AttributeError, OSError):  # no ctypes.pythonapi (not CPython)
        os.close(fd)
        return None
    held.path = Path(session_dir) / name
    held.thread = hidden_thread(held._wait, f"rtdebug-allstop-wake-{rank}")
    return held
