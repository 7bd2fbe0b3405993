"""Each rank's place in the collective sequence: the last collective it entered, and whether it returned.

torch's Flight Recorder keeps much of this, but in the rank's memory, where only Python code in the rank can
read it; ``ps``, ``stacks`` and the hang report read ranks from outside. So the ``torch.distributed``
collectives are wrapped (``torch.distributed.X`` and ``distributed_c10d.X``, the moment torch.distributed is
imported): entering one writes op, per-group sequence number, shapes, dtype, group and the user's call site
into a fixed-size record (``rtdebug.registry.collseq``) in an mmap of ``coll-<rank>.bin``; returning flips
one byte. No thread, no lock: one cache lookup per call finds what a loop repeats (call site, group, shapes,
dtype, as record bytes built once), so a call rewrites the header, the tail's generation and, only when
those changed, the static block. Anyone can read the file without signalling the rank, even while it is
blocked in C++. What it costs: bench/results/2026-12-04-collective-record.md.

Limits: collectives issued from C++ (DDP's gradient buckets) never pass through Python and are not counted;
``seq`` counts the Python-level collectives this rank entered on a group (1-based), which agrees across ranks
that run the same code; ``async_op=True`` records ``returned`` when the call returns its Work. Ops outside
torch.distributed (``collseq.NAMED_OPS``: Ray Train's) are recorded by the code that calls them, through
``entering`` and ``returned``, numbered in one group of their own (``collseq.NAMED_GROUP``).

``stop_at_next()`` arms a one-shot stop: the next collective this rank enters suspends in the debugger
(``nextstop``) in the user's frame, before it runs. ``RTDEBUG_COLLECTIVES=0`` turns the record off.
"""

from __future__ import annotations

import functools
import inspect
import mmap
import os
import sys
import time
from pathlib import Path
from typing import Any

from rtdebug.common import log
from rtdebug.common.imports import cancel, when_imported
from rtdebug.common.paths import PACKAGE_DIR
from rtdebug.registry import collseq
from rtdebug.registry.schema import CollectiveRecord

ENV = "RTDEBUG_COLLECTIVES"
_OWN_DIRS = (PACKAGE_DIR, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep)
_rec: dict[str, Any] = {"mm": None, "gen": 0, "stop": False, "static": None, "internal": _OWN_DIRS}
_seq: dict[bytes, list[int]] = {}  # process-group name -> [collectives entered on it]
_user: dict[str, bool] = {}  # code file -> is it the user's (not torch's, not rtdebug's)
# (file, func, group, shapes key, dtype) -> (pg name, the record's static block): one lookup per call;
# holds its groups only until destroy_process_group, as c10d itself does
_static: dict[Any, tuple[Any, list[int], int, bytes]] = {}
_pg: dict[str, Any] = {"tensor": ()}  # the patched module's pieces the wrapper needs (no torch: no tensor)
_hold: list[Any] = [None, 0, None]  # all-stop's board (an mmap), its mode byte's offset, what holds the rank there
_NAMED = type("NamedGroup", (), {"group_name": collseq.NAMED_GROUP})  # the group named ops are numbered in
_PATCHED = (*collseq.OP_CODES, "destroy_process_group")
_HEAD, _TAIL = collseq.MOVING.pack_into, collseq.TAIL.pack_into  # the header after its magic and version
_STATE, _ENTERED, _RETURNED = collseq.STATE_OFFSET, collseq.ENTERED, collseq.RETURNED


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def arm(session_dir: str | os.PathLike[str] | None, rank: int) -> dict[str, str] | None:
    """Start recording in this rank; returns the rank entry's ``collectives`` field (None: no file). Without a
    session directory (a Ray worker, whose entry is in the KV) the record lives in anonymous memory."""
    if not enabled():
        return None
    mm = None if session_dir is None else collseq.map_new(Path(session_dir) / collseq.coll_file(rank))
    field = None if mm is None else {"file": collseq.coll_file(rank)}
    _rec["mm"] = mm if mm is not None else mmap.mmap(-1, collseq.SIZE)
    _rec["mm"][: collseq.SIZE] = collseq.ARMED  # its magic and version are never rewritten
    _rec["static"] = None
    when_imported("torch.distributed", _patch)
    return field


def disarm() -> None:
    """Undo ``arm``: torch's own collectives back in place of the wrapper, no hook left (an adopted rank's detach,
    after which nothing of rtdebug runs there). The record moves to anonymous memory: a collective in flight
    still flips its byte when it returns, and the file's mapping goes with its last reference."""
    if _rec["mm"] is not None:
        _rec["mm"] = mmap.mmap(-1, collseq.SIZE)
    cancel("torch.distributed", _patch)
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None or not getattr(c10d, "_rtdebug_collrec", False):
        return
    for fn_name in _PATCHED:
        for module in (c10d, sys.modules.get("torch.distributed")):
            fn = getattr(module, fn_name, None)
            if fn is not None and getattr(fn, "__rtdebug_collrec__", False):
                setattr(module, fn_name, fn.__wrapped__)
    delattr(c10d, "_rtdebug_collrec")
    _rec["stop"] = False
    _static.clear()
    _seq.clear()  # a later adoption counts from its own start, as every rank of the job then does


def recording() -> bool:
    """Whether this rank keeps a record (armed and on), so that "no record" is never read as "none yet"."""
    return _rec["mm"] is not None


def snapshot() -> CollectiveRecord | None:
    """This rank's last collective (a ``CollectiveRecord``), or None before the first; any thread may call it."""
    mm = _rec["mm"]
    return None if mm is None else collseq.decode(bytes(mm[: collseq.SIZE]))


def entering(op: str) -> int:
    """Record that this rank enters ``op``, one of ``collseq.NAMED_OPS`` (``"ray.train.report"``), called by
    the first frame outside rtdebug and torch; returns the generation ``returned`` takes (-1: not recorded)."""
    if _rec["mm"] is None or op not in collseq.NAMED_OPS:
        return -1
    try:
        return _enter(collseq.NAMED_OPS[op], 0, None, (_NAMED,), {})
    except Exception:  # the record never breaks the user's call
        log.swallowed("rank.collectives.recorder: a named op is recorded or not; it never fails the call")
        return -1


def not_the_call_site(path: str) -> None:
    """Frames under ``path`` are never a collective's call site either (Ray Train's API around a named op: the
    site is the user's line that called ``ray.train.report``, not Ray's wrapper of it)."""
    prefix = path.rstrip(os.sep) + os.sep
    if prefix not in _rec["internal"]:
        _rec["also"] = (*_rec.get("also", ()), prefix)  # kept when torch.distributed is patched later
        _rec["internal"] = (*_rec["internal"], prefix)
        _user.clear()


def returned(gen: int) -> None:
    """The op ``entering`` recorded as ``gen`` returned (unless a later collective was entered since)."""
    if gen != -1 and _rec["gen"] == gen:
        _rec["mm"][_STATE] = _RETURNED


def hold_with(board: Any, offset: int, hold: Any) -> None:
    """Before each collective, while ``board[offset]`` is set, call ``hold(frame)`` (``rtdebug.rank.allstop``)."""
    _hold[:] = [board, offset, hold]


def stop_at_next() -> str:
    """Arm a one-shot stop at the next collective this rank enters (called through DAP ``evaluate``)."""
    if _rec["mm"] is None:
        return "rtdebug: the collective record is off in this rank; it cannot stop at the next collective"
    _rec["stop"] = True
    return f"rtdebug: rank {os.environ.get('RANK', '0')} stops at its next collective"


def _patch(dist: Any) -> None:
    """Wrap the collectives on torch.distributed and on distributed_c10d (user code may call either)."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None or getattr(c10d, "_rtdebug_collrec", False):
        return
    import torch

    _rec["internal"] = (*_OWN_DIRS, os.path.dirname(torch.__file__) + os.sep, *_rec.get("also", ()))
    world = getattr(c10d, "_world", None)  # its _default_pg is GroupMember.WORLD without two property calls
    _pg.update(c10d=c10d, world=world if hasattr(world, "_default_pg") else None, tensor=torch.Tensor)
    _pg["compiling"] = _compiling
    for fn_name in _PATCHED:
        original = getattr(c10d, fn_name, None)
        if original is None:
            continue
        wrapped = _forget(original) if fn_name == "destroy_process_group" else _wrap(original, fn_name)
        for module in (c10d, dist):
            if getattr(module, fn_name, None) is original:
                setattr(module, fn_name, wrapped)
    setattr(c10d, "_rtdebug_collrec", True)  # noqa: B010  (patched once, even if armed twice)


def _compiling() -> bool:
    """torch.compiler.is_compiling, looked up on the first call (torch.compiler loads after torch.distributed)."""
    import torch

    _pg["compiling"] = torch.compiler.is_compiling
    return torch.compiler.is_compiling()


def _params(fn: Any) -> tuple[int, str | None]:
    """Where ``fn`` takes its group (position) and its first tensor argument (name; None: it has none)."""
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return 1 << 30, None  # unknown: the group only by keyword, no shapes
    gpos = names.index("group") if "group" in names else 1 << 30
    return gpos, (names[0] if names and gpos != 0 else None)


def _wrap(fn: Any, fn_name: str) -> Any:
    op = collseq.OP_CODES[fn_name]
    gpos, first = _params(fn)

    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if _pg["compiling"]():  # dynamo traces straight to torch's own function
            return fn(*args, **kwargs)
        try:
            gen = _enter(op, gpos, first, args, kwargs)
        except Exception:  # the record never breaks the user's call (a group torch will refuse, say)
            log.swallowed(
                "rank.collectives.recorder: the record never breaks the user's call (a group torch will refuse, say)"
            )
            gen = -1
        if _rec["stop"]:
            _stop_here()
        if _hold[0] is not None and _hold[0][_hold[1]]:  # a peer is stopped (all-stop): not into this one yet
            _hold_here()
        try:
            return fn(*args, **kwargs)
        finally:
            if _rec["gen"] == gen:
                _rec["mm"][_STATE] = _RETURNED

    collective.__rtdebug_collrec__ = True  # type: ignore[attr-defined]
    return collective


def _forget(fn: Any) -> Any:
    """destroy_process_group, which also lets the record's cache go of the groups it names."""

    @functools.wraps(fn)
    def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
        _static.clear()
        return fn(*args, **kwargs)

    destroy_process_group.__rtdebug_collrec__ = True  # type: ignore[attr-defined]
    return destroy_process_group


def _user_frame(frame: Any) -> Any:
    """The first frame outside torch and rtdebug (the user's call site), or None."""
    while frame is not None:
        name = frame.f_code.co_filename
        user = _user.get(name)
        if user is None:
            user = _user[name] = not name.startswith(_rec["internal"])
        if user:
            return frame
        frame = frame.f_back
    return None


def _enter(op: int, gpos: int, first_name: str | None, args: tuple, kwargs: dict) -> int:
    """Write the record for a collective being entered; returns its generation.

    This runs right after the rank wakes from the previous collective, when every Python operation is cold (~4x
    its warm cost), so it does one cache lookup for all that a loop repeats (call site, line, group, shapes,
    dtype) and rewrites the static block only when that changed."""
    frame: Any
    try:
        frame = sys._getframe(2)  # whoever called the collective
    except ValueError:  # called straight from C (a thread with no Python frames above): no call site
        frame = None
    else:
        if not _user.get(frame.f_code.co_filename):  # not the user's own call, or not seen yet
            frame = _user_frame(frame)
    group = args[gpos] if len(args) > gpos else kwargs.get("group")
    if group is None:
        world = _pg["world"]
        group = world._default_pg if world is not None else _pg["c10d"].GroupMember.WORLD
    first = (args[0] if args else kwargs.get(first_name)) if first_name else None
    if isinstance(first, _pg["tensor"]):
        shape, dtype = first.shape, first.dtype
    elif isinstance(first, (list, tuple)) and first and isinstance(first[0], _pg["tensor"]):
        shape, dtype = (len(first), first[0].shape), first[0].dtype
    else:
        shape = dtype = None
    code = frame.f_code if frame is not None else None
    key = (id(code), frame.f_lasti if frame is not None else -1, group, shape, dtype)
    entry = _static.get(key)
    if entry is None or entry[0] is not code:
        entry = _static_entry(key, code, frame)
    _, counter, line, static = entry
    counter[0] = seq = counter[0] + 1
    gen = _rec["gen"] = _rec["gen"] + 1
    mm = _rec["mm"]
    _HEAD(mm, _STATE, _ENTERED, op, gen, seq, time.time(), line)
    if static is not _rec["static"]:
        mm[collseq.STATIC_OFFSET : collseq.TAIL_OFFSET] = static
        _rec["static"] = static
    _TAIL(mm, collseq.TAIL_OFFSET, gen)
    return gen


def _static_entry(key: tuple, code: Any, frame: Any) -> tuple[Any, list[int], int, bytes]:
    """(code, the group's counter, line, the record's static block) for one cache key, built once."""
    _, _, group, shape, dtype = key
    try:
        name = str(group.group_name)
    except Exception:  # no group yet, or one torch cannot name: still counted, as "?"
        log.swallowed("rank.collectives.recorder: no group yet, or one torch cannot name: still counted, as '?'")
        name = "?"
    if shape is None:
        shapes = ""
    elif type(shape) is tuple:  # a list of tensors: (count, shape of the first)
        shapes = f"{shape[0]}x{list(shape[1])}"
    else:
        shapes = str(list(shape))
    texts = (name, "pg"), (str(dtype or "").removeprefix("torch."), "dtype"), (shapes, "shapes")
    pg, dt, sh = (collseq.fit(text, field) for text, field in texts)
    file = collseq.fit(code.co_filename, "file") if code is not None else b""
    func = collseq.fit(code.co_name, "func") if code is not None else b""
    if len(_static) > 4096:
        _static.clear()
    counter = _seq.setdefault(pg, [0])  # one per group, shared by every entry that names it
    line = frame.f_lineno if frame is not None else 0
    entry = _static[key] = (code, counter, line, collseq.static_block(pg, dt, sh, file, func))
    return entry


def _hold_here() -> None:
    """All-stop: wait (or suspend in the debugger) in the user's frame, before the collective runs."""
    try:
        frame = _user_frame(sys._getframe(2))
    except ValueError:
        return
    try:
        _hold[2](frame)
    except Exception:  # all-stop never breaks the user's call
        log.swallowed("rank.collectives.recorder: all-stop's hold failed")


def _stop_here() -> None:
    """The armed one-shot stop: suspend in the user's frame at the collective's line (a debugger attached)."""
    _rec["stop"] = False
    try:
        frame = _user_frame(sys._getframe(2))
    except ValueError:
        return
    if frame is not None:
        from rtdebug.rank.collectives import nextstop

        nextstop.suspend(frame)
