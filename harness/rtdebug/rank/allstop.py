"""All-stop done by the ranks: when one rank stops, the others pause; a continue in one continues all.

Whatever client is attached, or none. How ranks learn of a peer's stop: one small shared file in the session
directory, ``allstop.bin`` (``Board``): a generation, a mode (running / stopped) and the rank that set it. The
rank that stops (a breakpoint, an exception, a step, ``rtdebug.breakpoint``; not a pause, not ``--stop-on``,
which stops every rank by itself) sets it ``stopped``; a ``continue`` request from any rank's client sets it
``running``, and so does the last client of the rank that stopped leaving (no rank stays held for a client
that is gone). Then:

- **a rank with a client attached** reads the board every ``POLL_S`` from a thread of its own (only while a
  client is attached) and asks pydevd to pause every thread, as a client's ``pause`` would; on ``running`` it
  resumes them (unless ``RTDEBUG_CONTINUE_ALL=0``: then each rank is continued in its own client). A rank
  blocked in C++ (a collective) pauses when it returns to Python, and its entry says ``pausing`` meanwhile;
- **a rank with no client** is woken by the board's change (``rtdebug.rank.nativehold``: a FIFO, a thread
  blocked on it) and held as soon as its main thread runs Python: at once, or when its C++ call (DDP's
  all-reduce in ``backward()``) returns; ``pausing`` meanwhile, with the line, then ``paused``;
- **every rank** (client or not) checks the board's mode byte at each collective it enters (the collective
  record's wrapper: one byte read): while a peer is stopped, it does not enter it. A rank with no client
  waits there (its entry says ``paused``, with the line, and one line on stderr says why); if a client
  attaches meanwhile, or one is attached, it is suspended there in the debugger instead.

**Step-all** (gdb's all-stop, with a step that runs its rank alone while it can): a step (``next``, ``stepIn``,
``stepOut``) in a rank runs that rank alone, so a step back soon (most lines) moves no peer. A step that needs
the held peers lets them go as a continue would (``_let_go``): when it goes into a collective (its wrapper sees
it) or is not back after ``STEP_ALONE_S`` (DDP's all-reduce in C++, a long call); its stop (reason ``step``)
pauses them again. A rank stepping itself (VS Code's Step All Ranks: a step in each) is not paused by a peer's
step's stop (the board's ``KIND``), only by a peer's own stop.

Cost when no rank is stopped: a thread blocked in ``read()``, one byte read per collective; with a client,
one wake-up every ``POLL_S``. On unless the job's environment has ``RTDEBUG_ALL_STOP=0`` (``rtdebug torchrun
--no-all-stop``; ``--no-continue-all`` sets ``RTDEBUG_CONTINUE_ALL=0``), and a debugger may change it while the
job runs (``rtdebug.rank.api.all_stop``: the VS Code extension hands its ``rtdebug.allStop`` setting to the
ranks that way, and does no all-stop of its own). The entry's debug state (``rtdebug.rank.debugstate``) is kept
either way. The board is one machine's session directory; a multi-node job's nodes share theirs through the
job's store (``rtdebug.rank.allstop_nodes``, on ``Board.on_publish`` and ``Board.apply``). A Ray Train worker
on a cluster has a private board of its own, joined to the others' the same way through its process group's
store (``rtdebug.rank.ray_allstop``). An adopted rank (``rtdebug.rank.adopted``) takes part from its adoption
on; its detach undoes it all (``AllStop.close``) and lets go of a rank held by it.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rtdebug.common import log
from rtdebug.common.config import ALL_STOP_VAR, CONTINUE_ALL_VAR, switch_on
from rtdebug.common.threads import hidden_thread
from rtdebug.rank import debugstate, nativehold

FILE = "allstop.bin"
MAGIC = b"RTAS"
SIZE = 64
GEN, MODE, FLAGS, KIND, BY = struct.Struct("<I"), 8, 9, 10, struct.Struct("<iid")  # at 4, 8, 9, 10, 12
RUNNING, STOPPED = 0, 1
NO_ALL_STOP, NO_CONTINUE_ALL = 1, 2  # FLAGS' bits: the job's setting, from the first rank's environment
STEP_STOP = 1  # KIND: the stop is a step's (it pauses no rank that is stepping itself)
POLL_S = 0.02
STEP_ALONE_S = 0.5  # a step not back by then lets the held peers go (it may wait for them: DDP's all-reduce)


class Board:
    """The session's all-stop board: an mmap of ``allstop.bin`` every local rank shares (0600, in the 0700
    session directory). A forged or torn read is harmless: the worst is a pause or a resume."""

    def __init__(self, path: Path, flags: int = 0) -> None:
        """Open the session's board; the rank that makes it writes the job's setting (``flags``) into it."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            made = True
        except FileExistsError:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            made = False
        try:
            if os.fstat(fd).st_size < SIZE:
                os.ftruncate(fd, SIZE)
            self.mm = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self.path = path
        # told of each change this rank makes (``publish``), not of one it applies for another node (``apply``):
        # the hook of a bridge that carries the board beyond this machine
        self.on_publish: list[Callable[[int, int, bool], None]] = []
        if made:
            self.mm[FLAGS] = flags
        if self.mm[:4] != MAGIC:
            self.mm[:4] = MAGIC

    @property
    def stop_all(self) -> bool:
        return not self.mm[FLAGS] & NO_ALL_STOP

    @property
    def continue_all(self) -> bool:
        return not self.mm[FLAGS] & NO_CONTINUE_ALL

    def configure(self, stop_all: bool | None, continue_all: bool | None) -> None:
        flags = self.mm[FLAGS]
        if stop_all is not None:
            flags = flags & ~NO_ALL_STOP | (0 if stop_all else NO_ALL_STOP)
        if continue_all is not None:
            flags = flags & ~NO_CONTINUE_ALL | (0 if continue_all else NO_CONTINUE_ALL)
        self.mm[FLAGS] = flags

    def gen(self) -> int:
        return int(GEN.unpack_from(self.mm, 4)[0])

    def read(self) -> tuple[int, int, int]:
        """(generation, mode, the rank that set it)."""
        return self.gen(), self.mm[MODE], int(BY.unpack_from(self.mm, 12)[0])

    def setter_gone(self) -> bool:
        """Whether the process that set the board has ended (killed while stopped, or a restart's leftover)."""
        pid = int(BY.unpack_from(self.mm, 12)[1])
        if pid <= 0:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False

    def close(self) -> None:
        """Unmap the board (a reader that still holds it sees ``ValueError``, which every hold swallows)."""
        try:
            self.mm.close()
        except BufferError:  # exported at this very moment: dropped with its last reference instead
            log.swallowed("rank.allstop: the board's mmap is in use")

    def step_stop(self) -> bool:
        """Whether the board's stop is a step's."""
        return bool(self.mm[KIND] & STEP_STOP)

    def publish(self, mode: int, by: int, step: bool = False) -> None:
        """Set the board (``mode``, by rank ``by``, this process; ``step``: a step's stop) and tell the local
        ranks and ``on_publish``."""
        self.apply(mode, by, os.getpid(), step)
        for hook in self.on_publish:
            try:
                hook(mode, by, step)
            except Exception:  # a bridge never breaks the rank's own all-stop
                log.swallowed("rank.allstop: an on_publish hook failed")

    def apply(self, mode: int, by: int, pid: int, step: bool = False) -> None:
        """Set the board and wake the local ranks, without ``on_publish`` (a change that came from elsewhere;
        ``pid`` 0: a process this machine cannot check, so ``setter_gone`` never lets go for it)."""
        BY.pack_into(self.mm, 12, by, pid, time.time())
        self.mm[KIND] = STEP_STOP if step and mode == STOPPED else 0
        GEN.pack_into(self.mm, 4, (self.gen() + 1) & 0xFFFFFFFF)
        self.mm[MODE] = mode
        nativehold.wake_peers(self.path.parent, by)  # the ranks with no client read it now


class Pydevd:
    """What all-stop asks of the rank's debugger: pause every thread, as a client's ``pause`` would; resume them."""

    def pause_all(self) -> None:
        import pydevd
        from _pydevd_bundle.pydevd_api import PyDevdAPI

        PyDevdAPI().request_suspend_thread(pydevd.get_global_debugger(), "*")

    def resume_all(self) -> None:
        from _pydevd_bundle.pydevd_api import PyDevdAPI

        PyDevdAPI().request_resume_thread("*")


class AllStop:
    """One rank's part: ``on_dap`` (what its relay sees), ``hold`` (its collective wrapper, while a peer is
    stopped), and the watcher thread while a client is attached."""

    def __init__(self, board: Board, rank: int, endpoint: Any, record: Any, debugger: Any = None) -> None:
        self.board, self.rank, self.endpoint, self.record = board, rank, endpoint, record
        self.debugger = debugger or Pydevd()  # ``Pydevd``'s two calls (a test gives its own)
        self.state = "running"
        self.pausing_by: int | None = None  # a pause all-stop asked for and that has not landed yet
        self.in_episode = False  # stopped as part of an all-stop (its origin, or paused by it): a continue ends it
        self.quiet = False  # the next stop is one that pauses no one (the one-shot stop at the next collective)
        self._lock = threading.Lock()
        self._watching = False
        self.native: nativehold.NativeHold | None = None  # the wake-up of a rank with no client
        self.continues = 0  # the client's continue requests, counted
        self.stop_gen = -1  # the board's generation when this rank last stopped: older continues are not for it
        self.closed = False  # ``close``: an adopted rank's detach; any hold lets the rank go
        # a step asked for by this rank's client and not stopped yet: it runs alone while it can (``_let_go``)
        self.stepping = False
        self.step_since = 0.0
        self.let_go = False  # this step has let the held peers go
        self.step_gen = -1  # the board's generation when the step began (or let go): a later stop is a peer's
        self._step_lock = threading.Lock()  # a step's stop and its letting go are never out of order
        self.resumes = 0  # resumed by all-stop (``_resume``): a hold suspended in the debugger tells it apart
        self.asked_pause = False  # all-stop asked pydevd for a pause that has not landed yet

    # -- what the relay sees --------------------------------------------------------------------------------
    def on_dap(self, kind: str, body: dict) -> None:
        if kind == "stopped":
            self._stopped(body)
        elif kind == "continued":
            self._running()
        elif kind == "continue":
            self.continues += 1  # told before pydevd sees it: a hold knows a continue from a client that left
            ending = self.in_episode
            self.stepping = False
            self._running()
            if ending and self.board.read()[1] == STOPPED:
                self.board.publish(RUNNING, self.rank)
        elif kind == "step":
            self.continues += 1  # a rank held at a collective and stepped there goes into it (``_hold``)
            with self._step_lock:
                self.stepping, self.step_since, self.let_go = True, time.monotonic(), False
                self.step_gen = self.board.gen()
            self._running()
        elif kind == "attached":
            self._attached()
        elif kind == "detached":
            self.stepping = False
            if self.state != "running":  # pydevd resumes on a disconnect; a client that just went leaves it held
                self._resume()
            self._running()
            _, mode, by = self.board.read()
            if mode == STOPPED and by == self.rank:
                self.board.publish(RUNNING, self.rank)

    def _stopped(self, body: dict) -> None:
        with self._step_lock:  # a step's letting go (``_let_go``) is never published after its stop
            self._stopped_locked(body)

    def _stopped_locked(self, body: dict) -> None:
        reason = str(body.get("reason") or "")
        alone = reason == "step" and self.stepping and not self.let_go  # a step that moved no other rank
        self.stepping = False
        if reason != "pause":  # a pause asked for before a continue and landing after it is resumed as before
            try:
                self.stop_gen = self.board.gen()
            except ValueError:  # the board was closed (``close``)
                pass
        by = self.pausing_by
        if reason == "pause" and self.asked_pause:
            self.asked_pause = False
            holder = self.peer_stopped()
            if holder is None:  # all-stop's pause landing after the board let go (it cannot be taken back):
                self._resume()  # the rank runs on, or it would wait for a continue nobody will send
                return
            by = holder if by is None else by
        where = debugstate.where_suspended()
        if by is not None and reason == "pause":
            self.state, self.in_episode = "paused", True
            debugstate.record(self.record, "paused", "all-stop", where, by)
            return
        self.state = "stopped"
        debugstate.record(self.record, "stopped", reason, where)
        quiet, self.quiet = self.quiet, False
        description = str(body.get("description") or "")
        if quiet or reason == "pause" or description.startswith("rtdebug --stop-on") or not self.board.stop_all:
            return  # --stop-on stops every rank by itself; a pause (a user's, or to evaluate) is that rank's own
        self.in_episode = True
        if alone and self.peer_stopped() is not None:
            return  # a paused rank's step that ran it alone: the peer's stop still holds the job, and stays its
        self.board.publish(STOPPED, self.rank, step=reason == "step")

    def _running(self) -> None:
        self.pausing_by, self.in_episode = None, False
        if self.state != "running" and not self.closed:  # closed: the entry is final (``detached``)
            self.state = "running"
            debugstate.record(self.record, "running")

    def _attached(self) -> None:
        if self.state == "running":
            debugstate.record(self.record, "running")
        with self._lock:
            if self._watching:
                return
            self._watching = True
        hidden_thread(self._watch, f"rtdebug-allstop-{self.rank}")

    # -- a client attached: the watcher ---------------------------------------------------------------------
    def _watch(self) -> None:
        seen = self.board.gen()
        while True:
            with self._lock:
                if self.endpoint.clients == 0 or self.closed:
                    self._watching = False
                    return
            time.sleep(POLL_S)
            try:
                if self.stepping and not self.let_go and time.monotonic() - self.step_since > STEP_ALONE_S:
                    self._let_go()  # a step that is not back may wait for the held peers (DDP's all-reduce)
                if self.board.gen() == seen:
                    continue
                seen, mode, by = self.board.read()
                pause = self.pauses_for(mode, by)
            except ValueError:  # the board was closed (``close``): the next round ends the thread
                continue
            try:
                if pause:
                    self._pause(by)
                elif (
                    mode == RUNNING and by != self.rank and self.state != "running" and self.board.continue_all
                    and self.stop_gen != seen  # a stop after that continue (its client's own) is not resumed
                ):  # fmt: skip
                    self._resume()
            except Exception:  # pydevd went away under us (the client left): the next round sees it
                log.swallowed("rank.allstop: pause or resume failed")

    def pauses_for(self, mode: int, by: int) -> bool:
        """Whether the board's ``mode`` set by rank ``by`` pauses this rank (with a client, running). A rank
        stepping itself (VS Code's Step All Ranks) is not paused by a peer's step: it stops where its own ends."""
        if mode != STOPPED or by == self.rank or self.state != "running" or not self.board.stop_all:
            return False
        return not (self.stepping and self.board.step_stop())

    def _pause(self, by: int) -> None:
        self.pausing_by, self.state, self.asked_pause = by, "pausing", True
        debugstate.record(self.record, "pausing", "all-stop", nativehold.main_site(), by)
        self.debugger.pause_all()

    def _resume(self) -> None:
        self.resumes += 1
        self.debugger.resume_all()
        self._running()

    def _let_go(self) -> None:
        """This rank's step needs its peers, or may (it goes into a collective, or is not back after
        ``STEP_ALONE_S``): the held ones go on, as at a continue; the step's stop pauses them again. A step that
        is back sooner has run this rank alone, and its peers never moved."""
        with self._step_lock:
            if not self.stepping or self.let_go:
                return
            self.let_go = True
            try:
                gen, mode, by = self.board.read()
                if mode == STOPPED and self.board.stop_all and self._step_lets_go(gen, by):
                    self.board.publish(RUNNING, self.rank)
                self.step_gen = self.board.gen()
            except ValueError:  # the board was closed (``close``)
                pass

    # -- a rank with no client: woken by the board (``rtdebug.rank.nativehold``) ---------------------------
    def peer_stopped(self) -> int | None:
        """The rank whose stop holds this one (all-stop on), or None (also once the board is closed)."""
        try:
            _, mode, by = self.board.read()
            return by if mode == STOPPED and by != self.rank and self.board.stop_all else None
        except ValueError:  # the board was closed (``close``)
            return None

    def native_pausing(self, by: int, where: tuple[str, int] | None) -> None:
        """A peer stopped; this rank (no client) is held as soon as its main thread runs Python (``where``)."""
        self.pausing_by, self.state = by, "pausing"
        debugstate.record(self.record, "pausing", "all-stop", where, by)

    def not_pausing(self) -> None:
        """The board says running before the hold landed: the rank runs on."""
        self._running()

    # -- every rank: the collective boundary ---------------------------------------------------------------
    def hold(self, frame: Any, after_native: bool = False) -> None:
        """Called before a collective while the board says stopped: do not enter it until the peer continues.
        With a client, suspended in the debugger (its own continue lets it go); with none, waiting here.
        ``after_native``: called where the main thread was, back from a native call (``nativehold``)."""
        try:
            self._hold(frame, after_native)
        finally:
            if self.state != "running" and self.endpoint.clients == 0:
                self._running()  # let go (or Ctrl-C): the entry says running again

    def _step_lets_go(self, gen: int, by: int) -> bool:
        """Whether this rank's step may let go the board's stop: the one it began under (or let go), its own
        rank's, or a peer's step's; not a peer's own stop that came during the step (a breakpoint): that one
        stays, and holds this rank as any other."""
        return gen == self.step_gen or by == self.rank or self.board.step_stop()

    def _holder(self) -> int | None:
        """The peer whose stop holds this rank at a collective, or None."""
        gen, mode, by = self.board.read()
        if mode != STOPPED or not self.board.stop_all:
            return None
        if self.stepping and self._step_lets_go(gen, by):
            self._let_go()  # stepping over (or into) a collective: the held peers must come to it
            return None  # (a peer that stopped by itself during the step holds it, as it would any rank)
        return None if by == self.rank else by

    def _hold(self, frame: Any, after_native: bool) -> None:
        by = self._holder()
        if by is None:
            return
        waiting, checked, suspended_for = False, time.monotonic(), -1
        while not self.closed and self.board.read()[1] == STOPPED:
            # once per client: one that is leaving still reads as connected for a moment, and a suspend then
            # would wait for a client that is gone
            attached = self.endpoint.attach_count != suspended_for and self._attached_now()
            if time.monotonic() - checked > 1.0:  # the rank that stopped was killed: nobody would continue it
                checked = time.monotonic()
                if self.board.setter_gone():
                    self.board.publish(RUNNING, self.rank)
                    break
            if attached:
                suspended_for, continues, resumes = self.endpoint.attach_count, self.continues, self.resumes
                self._suspend_here(frame, by)  # back when resumed: continued, or its client left
                if self.continues != continues:
                    if self.stepping:  # stepped here, into the collective: the peers must come to it
                        self._let_go()
                    break  # continued (or stepped) in its own client: it goes on
                if self.resumes != resumes:  # resumed by all-stop, its client still there: held again if need be
                    suspended_for = -1
                waiting = False
                continue
            if not waiting:
                self._say_paused(frame, by, after_native)
                waiting = True
            elif self.state != "paused":  # a client that left said "running" meanwhile: it is still held here
                self._mark_paused(frame, by)
            time.sleep(POLL_S)
        self._running()

    def _attached_now(self) -> bool:
        return self.endpoint.clients > 0 and self.endpoint.client_connected()

    def _mark_paused(self, frame: Any, by: int) -> tuple[str, int] | None:
        where = debugstate.at(frame)
        self.state = "paused"
        debugstate.record(self.record, "paused", "all-stop", where, by)
        return where

    def _say_paused(self, frame: Any, by: int, after_native: bool) -> None:
        where = self._mark_paused(frame, by)
        shown = f" at {os.path.basename(where[0])}:{where[1]}" if where else ""
        when = "" if after_native else " before its next collective"
        print(
            f"rtdebug: rank {self.rank} paused{shown}{when}: rank {by} stopped (all-stop);"
            f" it goes on when rank {by} continues",
            file=sys.stderr,
            flush=True,
        )

    def _suspend_here(self, frame: Any, by: int) -> None:
        """Suspend this thread (and the others) in the debugger at the user's line, as a pause: its stop is
        all-stop's, so it pauses no one else."""
        import pydevd
        from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
        from _pydevd_bundle.pydevd_comm_constants import CMD_THREAD_SUSPEND

        py_db = pydevd.get_global_debugger()
        user = debugstate.user_frame(frame)
        if py_db is None or user is None:
            return
        self.pausing_by, self.state, self.asked_pause = by, "pausing", True
        thread = threading.current_thread()
        info = set_additional_thread_info(thread)
        # as inside pydevd's tracer: this thread must not suspend in rtdebug's own lines on the way, nor again
        # in what the client evaluates while it is held
        info.is_tracing += 1
        try:
            py_db.set_trace_for_frame_and_parents(thread.ident, user)
            py_db.set_suspend(thread, CMD_THREAD_SUSPEND, suspend_other_threads=True, is_pause=True)
            py_db.do_wait_suspend(thread, user, "line", None)
        finally:
            info.is_tracing -= 1

    # -- an adopted rank's detach -----------------------------------------------------------------------------
    def close(self, hold_with: Any) -> None:
        """Undo ``arm`` (``rtdebug.rank.adopted``'s detach): the endpoint's hook and the collective wrapper's
        hold (``hold_with``) reset, the wake-up's thread ended and its FIFO gone, a queued hold made a no-op, a
        rank held here let go, a stop of this rank's own ended for its peers, the board's mmap closed."""
        self.closed = True  # a hold in progress (maybe in the thread that runs this) ends at its next check
        self.endpoint.on_dap = lambda kind, body: None
        hold_with(None, 0, None)
        if self.native is not None:
            self.native.close()
            self.native = None
        try:
            _, mode, by = self.board.read()
            if mode == STOPPED and by == self.rank:  # its peers would wait for a continue that cannot come
                self.board.publish(RUNNING, self.rank)
        except (OSError, ValueError):
            log.swallowed("rank.allstop: close: the board is let go anyway")
        self.board.close()


def arm(
    session_dir: Path | str,
    rank: int,
    endpoint: Any,
    record: Any,
    hold_with: Any,
    env: Mapping[str, str] | None = None,
    native: bool = True,
) -> AllStop | None:
    """This rank's all-stop and debug state (written to ``record``, its ``RankState``), wired to its endpoint
    and, through ``hold_with`` (the collective record's ``recorder.hold_with``), to its collective wrapper.
    ``env``: where the job's setting is read (this process's environment by default); ``native``: also hold
    the main thread when back from C++ (``nativehold``; not where the user's code runs in another thread)."""
    env = os.environ if env is None else env
    try:
        flags = (0 if switch_on(env, ALL_STOP_VAR) else NO_ALL_STOP) | (
            0 if switch_on(env, CONTINUE_ALL_VAR) else NO_CONTINUE_ALL
        )
        board = Board(Path(session_dir) / FILE, flags)
    except OSError as exc:
        print(f"rtdebug: rank {rank}: all-stop is off in this rank (its board: {exc})", file=sys.stderr)
        return None
    part = AllStop(board, rank, endpoint, record)
    # what a client reads to leave all-stop, continue-all and step-all to the ranks (the extension)
    record.set(all_stop=board.stop_all, continue_all=board.continue_all)
    endpoint.on_dap = part.on_dap
    hold_with(board.mm, MODE, part.hold)
    if native:  # held when back from C++, with no client
        part.native = nativehold.arm(Path(session_dir), rank, part)
    return part


def configure(part: AllStop | None, on: bool | None, continue_all: bool | None) -> str:
    """Set the job's all-stop (every rank that shares the board) and say the setting in one line; turning it
    off lets go of ranks held by it."""
    if part is None:
        return "rtdebug: all-stop is not available in this rank (no session directory)"
    part.board.configure(on, continue_all)
    # this rank's entry; the others' say it from their next start
    part.record.set(all_stop=part.board.stop_all, continue_all=part.board.continue_all)
    if on is False and part.board.read()[1] == STOPPED:
        part.board.publish(RUNNING, part.rank)
    return (
        f"rtdebug: all-stop {'on' if part.board.stop_all else 'off'},"
        f" continue-all {'on' if part.board.continue_all else 'off'}"
    )
