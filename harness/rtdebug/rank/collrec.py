"""Each rank's place in the collective sequence: the last collective it entered, and whether it returned.

torch's Flight Recorder keeps this for NCCL only, and rtdebug's ranks run gloo on CPU as often as
NCCL; so the ``torch.distributed`` collectives are wrapped instead (both ``torch.distributed.X``
and ``torch.distributed.distributed_c10d.X``, the moment torch.distributed is imported). Entering
one packs op, per-group sequence number, shapes, dtype, group and the user's call site into a
fixed-size record (``rtdebug.registry.collseq``) with one ``struct.pack_into`` into an mmap of
``coll-<rank>.bin``; returning flips one byte. No thread, no lock, no allocation beyond a few
small strings: the step rate stays at plain speed (bench/collrec_bench.py), and anyone can read
the file without signalling the rank, even while it is blocked in C++.

Limits, said plainly: collectives issued from C++ (DDP's gradient buckets, the reducer) never pass
through Python and are not counted; ``seq`` counts the Python-level collectives this rank entered
on a group (1-based), which agrees across ranks that run the same code. ``async_op=True`` calls
record ``returned`` when the call returns its Work, not when the work completes.

``stop_at_next()`` arms a one-shot stop: the next collective this rank enters suspends in the
debugger, in the user's calling frame at the collective's line, before the collective runs, so
"run every rank to its next collective" shows each rank's op and seq before any of them blocks.
``RTDEBUG_COLLECTIVES=0`` turns the record off (the bench's baseline).
"""

from __future__ import annotations

import functools
import mmap
import os
import sys
import time
from pathlib import Path
from typing import Any

from rtdebug.common.imports import cancel, when_imported
from rtdebug.common.paths import PACKAGE_DIR
from rtdebug.registry import collseq

ENV = "RTDEBUG_COLLECTIVES"
_OWN_DIRS = (PACKAGE_DIR, os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)
_rec: dict[str, Any] = {"mm": None, "gen": 0, "stop": False, "internal": _OWN_DIRS}
_seq: dict[bytes, int] = {}  # process-group name -> collectives entered on it
_sites: dict[Any, Any] = {}  # code object -> (file, func) as stored; None: not the user's
_dtypes: dict[Any, bytes] = {}
_shapes: dict[Any, bytes] = {}
_pgnames: dict[Any, bytes] = {}
_pg: dict[str, Any] = {}  # the patched module's pieces the wrapper needs


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def arm(session_dir: str | os.PathLike[str] | None, rank: int) -> dict[str, str] | None:
    """Start recording in this rank; returns the rank entry's ``collectives`` field (None: no file).

    Without a session directory (a Ray worker, whose entry is in the KV) the record lives in anonymous
    memory: ``snapshot()`` still answers inside the rank.
    """
    if not enabled():
        return None
    field = None
    mm = None
    if session_dir is not None:
        path = Path(session_dir) / collseq.coll_file(rank)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.ftruncate(fd, collseq.SIZE)
                mm = mmap.mmap(fd, collseq.SIZE)
            finally:
                os.close(fd)
            field = {"file": path.name}
        except OSError:
            mm = None
    _rec["mm"] = mm if mm is not None else mmap.mmap(-1, collseq.SIZE)
    when_imported("torch.distributed", _patch)
    return field


def disarm() -> None:
    """Undo ``arm``: torch's own collectives back in place of the wrapper, no hook left (an adopted rank's
    detach, after which nothing of rtdebug runs there). The record stays mapped: a collective in flight
    still flips its byte when it returns, and nothing writes it after."""
    cancel("torch.distributed", _patch)
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None or not getattr(c10d, "_rtdebug_collrec", False):
        return
    for fn_name in collseq.OP_CODES:
        for module in (c10d, sys.modules.get("torch.distributed")):
            fn = getattr(module, fn_name, None)
            if fn is not None and getattr(fn, "__rtdebug_collrec__", False):
                setattr(module, fn_name, fn.__wrapped__)
    delattr(c10d, "_rtdebug_collrec")
    _rec["stop"] = False
    _seq.clear()  # a later adoption counts from its own start, as every rank of the job then does


def snapshot() -> dict[str, Any] | None:
    """This rank's last collective (the contract's dict), or None before the first; any thread may call it."""
    mm = _rec["mm"]
    return None if mm is None else collseq.decode(bytes(mm[: collseq.SIZE]))


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

    _rec["internal"] = (*_OWN_DIRS, os.path.dirname(torch.__file__) + os.sep)
    _pg.update(c10d=c10d, pg_type=getattr(c10d, "ProcessGroup", ()), tensor=torch.Tensor, compiling=_compiling)
    for fn_name, code in collseq.OP_CODES.items():
        original = getattr(c10d, fn_name, None)
        if original is None:
            continue
        wrapped = _wrap(original, code)
        for module in (c10d, dist):
            if getattr(module, fn_name, None) is original:
                setattr(module, fn_name, wrapped)
    setattr(c10d, "_rtdebug_collrec", True)  # noqa: B010  (patched once, even if armed twice)


def _compiling() -> bool:
    """torch.compiler.is_compiling, looked up on the first call (torch.compiler loads after torch.distributed)."""
    import torch

    _pg["compiling"] = torch.compiler.is_compiling
    return torch.compiler.is_compiling()


def _wrap(fn: Any, code: int) -> Any:
    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if _pg["compiling"]():  # dynamo traces straight to torch's own function
            return fn(*args, **kwargs)
        gen = _enter(code, args, kwargs)
        try:
            return fn(*args, **kwargs)
        finally:
            if _rec["gen"] == gen:
                _rec["mm"][collseq.STATE_OFFSET] = collseq.RETURNED

    collective.__rtdebug_collrec__ = True  # type: ignore[attr-defined]
    return collective


def _site(frame: Any) -> tuple[Any, tuple[bytes, bytes]]:
    """The first frame outside torch and rtdebug, and its (file, function) as stored."""
    sites, internal = _sites, _rec["internal"]
    while frame is not None:
        code = frame.f_code
        site = sites.get(code, False)
        if site is False:
            name = code.co_filename
            site = None if name.startswith(internal) else (collseq.fit(name, "file"), collseq.fit(code.co_name, "func"))
            sites[code] = site
        if site is not None:
            return frame, site
        frame = frame.f_back
    return None, (b"", b"")


def _describe(args: tuple, kwargs: dict) -> tuple[bytes, bytes]:
    """(shapes, dtype) of a call's first tensor argument, as stored (cached: a loop repeats its shapes)."""
    first = args[0] if args else next(iter(kwargs.values()), None)
    tensor = _pg["tensor"]
    if isinstance(first, tensor):
        t, key = first, first.shape
    elif isinstance(first, (list, tuple)) and first and isinstance(first[0], tensor):
        t = first[0]
        key = (len(first), t.shape)
    else:
        return b"", b""
    shapes = _shapes.get(key)
    if shapes is None:
        if len(_shapes) > 4096:
            _shapes.clear()
        text = str(list(key)) if t is first else f"{key[0]}x{list(key[1])}"
        shapes = _shapes[key] = collseq.fit(text, "shapes")
    dtype = _dtypes.get(t.dtype)
    if dtype is None:
        dtype = _dtypes[t.dtype] = collseq.fit(str(t.dtype).removeprefix("torch."), "dtype")
    return shapes, dtype


def _pg_name(args: tuple, kwargs: dict) -> bytes:
    """The name torch gave the call's process group (``group=`` or positional; else the default group)."""
    group = kwargs.get("group")
    if group is None and len(args) > 1:
        pg_type = _pg["pg_type"]
        for a in args:
            if isinstance(a, pg_type):
                group = a
                break
    try:
        if group is None:
            group = _pg["c10d"].GroupMember.WORLD
        name = group.group_name
    except Exception:  # no group yet, or one torch cannot name: still counted, as "?"
        return b"?"
    pg = _pgnames.get(name)
    if pg is None:
        pg = _pgnames[name] = collseq.fit(str(name), "pg")
    return pg


def _enter(code: int, args: tuple, kwargs: dict) -> int:
    """Write the record for a collective being entered; returns its generation (stop first if armed)."""
    try:
        caller = sys._getframe(2)  # whoever called the collective
    except ValueError:  # called straight from C (a thread with no Python frames above): no call site
        caller = None
    frame, (file, func) = _site(caller)
    shapes, dtype = _describe(args, kwargs)
    pg = _pg_name(args, kwargs)
    seq = _seq[pg] = _seq.get(pg, 0) + 1
    gen = _rec["gen"] = _rec["gen"] + 1
    line = frame.f_lineno if frame is not None else 0
    collseq.RECORD.pack_into(
        _rec["mm"], 0, collseq.MAGIC, collseq.VERSION, collseq.ENTERED, code, gen, seq, time.time(), line,
        len(pg), pg, len(dtype), dtype, len(shapes), shapes, len(file), file, len(func), func, gen,
    )  # fmt: skip
    if _rec["stop"] and frame is not None:
        _rec["stop"] = False
        _suspend(frame)
    return gen


def _suspend(frame: Any) -> None:
    """Suspend this thread in the debugger at ``frame``'s current line (the collective's), if one is attached."""
    from rtdebug.rank import runtime

    endpoint = runtime.endpoint
    if "pydevd" not in sys.modules or endpoint is None or not endpoint.client_connected():
        return
    import threading

    import pydevd
    from _pydevd_bundle.pydevd_additional_thread_info import set_additional_thread_info
    from _pydevd_bundle.pydevd_comm_constants import CMD_SET_BREAK

    py_db = pydevd.get_global_debugger()
    if py_db is None:
        return
    thread = threading.current_thread()
    info = set_additional_thread_info(thread)
    py_db.set_trace_for_frame_and_parents(thread.ident, frame)
    py_db.set_suspend(thread, CMD_SET_BREAK)
    # as if inside pydevd's own tracer: code the client evaluates while stopped must not suspend again
    info.is_tracing += 1
    try:
        py_db.do_wait_suspend(thread, frame, "line", None)
    finally:
        info.is_tracing -= 1
