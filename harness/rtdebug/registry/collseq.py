"""The collective record's bytes: one fixed-size binary record per rank, read from outside the rank.

A rank (``rtdebug.rank.collectives.recorder``) keeps the last collective it entered in a ``SIZE``-byte file
``coll-<rank>.bin`` of its session directory, mapped into memory, so that entering a collective
costs two small ``struct.pack_into`` writes (the header, then its generation at the tail; the static
block only when it changed) and returning costs one byte. ``ps``, ``stacks`` and the hang
report read that file without signalling the rank -- a rank blocked inside a C++ collective
answers as well as a running one.

The file lives in a directory others may write to, so every byte is checked here: anything that
is not exactly one well-formed record (wrong size, magic, version, op, state, lengths, UTF-8, a
torn write) reads as ``None``, never as an exception. It lives in the registry layer, next to the
entries that name it, so that the rank, the views and the shell share one definition of the format.
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, TypeGuard

from rtdebug.registry.schema import CollectiveRecord, RankEntry

MAGIC = b"RTDC"
VERSION = 1
ENTERED, RETURNED = 1, 2
STATES: dict[int, Literal["entered", "returned"]] = {ENTERED: "entered", RETURNED: "returned"}
STATE_OFFSET = 5  # the byte a returning collective flips
# torch.distributed function -> the op name shown (torch's upper-case OpType spelling where one exists)
OPS: dict[str, str] = {
    "all_reduce": "ALLREDUCE",
    "broadcast": "BROADCAST",
    "all_gather": "ALLGATHER",
    "all_gather_into_tensor": "ALLGATHER_INTO_TENSOR",
    "reduce_scatter": "REDUCE_SCATTER",
    "reduce_scatter_tensor": "REDUCE_SCATTER_TENSOR",
    "reduce": "REDUCE",
    "gather": "GATHER",
    "scatter": "SCATTER",
    "all_to_all": "ALLTOALL",
    "all_to_all_single": "ALLTOALL_SINGLE",
    "barrier": "BARRIER",
    "send": "SEND",
    "recv": "RECV",
}
# Ops outside torch.distributed, recorded by name from Python code in the rank (``recorder.entering``):
# Ray Train's own collectives. Their codes are reserved apart from torch's, which keep 1 to 63.
NAMED_OPS: dict[str, int] = {
    "ray.train.report": 64,
    "ray.train.collective.barrier": 65,
    "ray.train.collective.broadcast_from_rank_zero": 66,
}
NAMED_GROUP = "ray.train"  # the group a named op is numbered in: one sequence for the whole Ray Train run
OP_CODES = {fn: code for code, fn in enumerate(OPS, 1)}  # the torch.distributed functions the recorder wraps
OP_NAMES: dict[int, str] = {OP_CODES[fn]: name for fn, name in OPS.items()} | {c: n for n, c in NAMED_OPS.items()}
# The record is three parts, so a rank rewrites only what changed (bytes are identical to one struct):
HEAD = struct.Struct("<4sBBHQ QdI")  # magic, version, state, op, gen | seq, since, line: every collective
STATIC = struct.Struct("<B32s B16s B96s H240s B80s")  # pg, dtype, shapes, file, func: when one changes
TAIL = struct.Struct("<Q")  # gen again, written last: a reader that sees two generations saw a torn write
RECORD = struct.Struct(HEAD.format + STATIC.format[1:] + TAIL.format[1:])
SIZE = RECORD.size
STATIC_OFFSET, TAIL_OFFSET = HEAD.size, HEAD.size + STATIC.size
MOVING = struct.Struct("<BHQ QdI")  # the header from STATE_OFFSET on: what each collective rewrites
LIMITS = {"pg": 32, "dtype": 16, "shapes": 96, "file": 240, "func": 80}


ARMED = MAGIC + bytes([VERSION]) + bytes(SIZE - STATE_OFFSET)  # what a rank writes at arm: nothing entered yet


def map_new(path: Path) -> mmap.mmap | None:
    """A fresh ``SIZE``-byte record file at ``path`` (replacing what was there, never through a link), mapped
    for the rank to write; None when it cannot be made."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        os.ftruncate(fd, SIZE)
        return mmap.mmap(fd, SIZE)
    except OSError:
        return None
    finally:
        os.close(fd)


def coll_file(rank: int) -> str:
    """The name of rank ``rank``'s record in its session directory (the only name a reader opens)."""
    return f"coll-{rank}.bin"


def fit(text: str, field: str) -> bytes:
    """``text`` as UTF-8 cut to its field (a file path keeps its tail: the name is what matters)."""
    raw = text.encode("utf-8", "replace")
    limit = LIMITS[field]
    if len(raw) <= limit:
        return raw
    cut = raw[-limit:] if field == "file" else raw[:limit]
    return cut.decode("utf-8", "ignore").encode("utf-8")


def static_block(pg: bytes, dtype: bytes, shapes: bytes, file: bytes, func: bytes) -> bytes:
    """The STATIC part of a record, from texts already ``fit`` to their fields."""
    return STATIC.pack(len(pg), pg, len(dtype), dtype, len(shapes), shapes, len(file), file, len(func), func)


def _text(length: int, raw: bytes) -> str | None:
    if length > len(raw) or any(raw[length:]):  # bytes past the length must be the zero padding
        return None
    try:
        text = raw[:length].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if has_control(text) else text


def has_control(text: str) -> bool:
    """A C0/C1 control character (a newline, an escape): printed, it could rewrite the terminal's lines."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)


def decode(buf: bytes) -> CollectiveRecord | None:
    """One record decoded (``CollectiveRecord``: ``ps --json``'s ``collective``), or None when ``buf`` is not
    exactly a whole, valid record."""
    if len(buf) != SIZE:
        return None
    magic, version, state, op, gen, seq, since, line, *rest, gen2 = RECORD.unpack(buf)
    if magic != MAGIC or version != VERSION or state not in STATES or gen != gen2 or gen == 0:
        return None
    if op not in OP_NAMES or seq < 1 or not math.isfinite(since) or since < 0:
        return None
    texts = [text for i in range(0, len(rest), 2) if (text := _text(rest[i], rest[i + 1])) is not None]
    if len(texts) != len(rest) // 2:
        return None
    pg, dtype, shapes, file, func = texts
    record: CollectiveRecord = {
        "op": OP_NAMES[op],
        "seq": seq,
        "state": STATES[state],
        "file": file,
        "line": line,
        "func": func,
        "shapes": shapes,
        "dtype": dtype,
        "pg": pg,
        "since": since,
    }
    return record


def plausible(rec: object) -> TypeGuard[CollectiveRecord]:
    """A record dict from a store or KV answer (or an entry's ``collective``) is as forgeable as any text:
    only the shapes its readers use, and no control characters in what they print."""
    return (
        isinstance(rec, dict)
        and isinstance(rec.get("op"), str)
        and isinstance(rec.get("seq"), int)
        and not isinstance(rec.get("seq"), bool)
        and rec.get("state") in ("entered", "returned")
        and isinstance(rec.get("line", 0), int)
        and not isinstance(rec.get("line", 0), bool)
        and isinstance(rec.get("file", ""), str)
        and isinstance(rec.get("pg", ""), (str, type(None)))
        and isinstance(rec.get("since", 0.0), (int, float))
        and not any(has_control(str(rec.get(k) or "")) for k in ("op", "file", "pg"))
    )


def name(op: object, seq: object) -> str:
    """``ALLREDUCE #812``: a collective by its op and its number in the group."""
    return f"{op} #{seq}"


def call_site(file: object, line: object) -> str:
    """``train.py:42``: where the user called it (``?`` for a file the record does not have)."""
    return f"{os.path.basename(str(file or '?'))}:{line}"


def where(rec: Mapping[str, object]) -> str:
    """``ALLREDUCE #812 (train.py:42)``: how ``ps``, the verdict and the views name a record's collective."""
    return f"{name(rec.get('op'), rec.get('seq'))} ({call_site(rec.get('file'), rec.get('line', '?'))})"


def read(path: str | os.PathLike[str]) -> CollectiveRecord | None:
    """The record in ``path``, or None (missing, not a regular file, wrong size, garbage, torn)."""
    buf = _read_bytes(path)
    return None if buf is None else decode(buf)


def read_known(session_dir: str | os.PathLike[str], entry: RankEntry) -> tuple[bool, CollectiveRecord | None]:
    """(known, record) for what a rank entry names: known with None is a record armed before its first
    collective; not known is anything else unreadable, which must make no verdict rather than a wrong one."""
    info, rank = entry.get("collectives"), entry.get("rank")
    if not isinstance(info, dict) or not isinstance(rank, int) or info.get("file") != coll_file(rank):
        return False, None
    buf = _read_bytes(Path(session_dir) / coll_file(rank))
    rec = None if buf is None else decode(buf)
    return (rec is not None or buf == ARMED), rec


def _read_bytes(path: str | os.PathLike[str]) -> bytes | None:
    """The file's ``SIZE`` bytes, or None. Two reads must agree: one that overlaps the rank's write is
    retried, never half-believed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != SIZE:
            return None
        prev = os.pread(fd, SIZE + 1, 0)
        for _ in range(4):
            buf = os.pread(fd, SIZE + 1, 0)
            if buf == prev:
                return buf if len(buf) == SIZE else None
            prev = buf
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def read_entry(session_dir: str | os.PathLike[str], entry: RankEntry) -> CollectiveRecord | None:
    """The record a rank entry names, only if it names rtdebug's own file for that rank."""
    return read_known(session_dir, entry)[1]
