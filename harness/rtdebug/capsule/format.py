"""The capsule's layout and its tensor files' bytes: one place both sides agree on.

::

    DIR/manifest.json            the job: format version, script, argv, cwd, world size, versions, script sha256
    DIR/rank-R/rank.json         that rank: its torchrun / Ray Train environment, its initial RNG states
    DIR/rank-R/index.jsonl       one JSON object a line, in the order the rank issued them: groups, collectives
    DIR/rank-R/t-NNNNNN.safetensors  the tensors the rank received (written by us; safetensors' layout)
    DIR/rank-R/end.json          where the capture ends (``complete_upto``) and why (``reason``)

A safetensors file is an 8-byte little-endian header length, a JSON header (``{name: {"dtype", "shape",
"data_offsets": [begin, end]}}``, offsets from the end of the header, padded with spaces to 8 bytes) and the
raw little-endian bytes. No pickle anywhere: the ``safetensors`` package and ``torch`` read these files as
they are.
"""

from __future__ import annotations

import json
import struct
from typing import Any, TypeGuard

VERSION = 1
MANIFEST = "manifest.json"
RANK_JSON = "rank.json"
INDEX = "index.jsonl"
END = "end.json"
SCRATCH = "scratch"
SHARD_SUFFIX = ".safetensors"
HEADER_MAX = 100 * 1024 * 1024  # safetensors' own cap on a header

# safetensors dtype -> bytes per element
DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip


def is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer, never a bool (``true`` is ``1`` to Python): every int a capsule's JSON holds is read so."""
    return type(value) is int


def rank_dir(rank: int) -> str:
    return f"rank-{rank}"


def shard_name(number: int) -> str:
    return f"t-{number:06d}{SHARD_SUFFIX}"


def nbytes(dtype: str, shape: list[int]) -> int:
    n = DTYPE_SIZES[dtype]
    for d in shape:
        n *= d
    return n


def encode_header(tensors: list[tuple[str, str, list[int], int]], metadata: dict[str, str] | None = None) -> bytes:
    """The 8-byte length and JSON header of a safetensors file holding ``(name, dtype, shape, nbytes)`` in order."""
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, dtype, shape, size in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def decode_header(head: bytes, file_size: int) -> tuple[int, dict[str, Any]]:
    """(where the data starts, the header's tensors) of a safetensors file; ValueError says what is wrong."""
    if len(head) < 8:
        raise ValueError("shorter than a safetensors header")
    (length,) = struct.unpack("<Q", head[:8])
    if length > HEADER_MAX or 8 + length > file_size:
        raise ValueError("its header length runs past the file")
    if len(head) < 8 + length:
        raise ValueError("its header is cut short")
    try:
        header = json.loads(head[8 : 8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("its header is not JSON") from None
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    header.pop("__metadata__", None)
    start = 8 + length
    for name, info in header.items():
        _check_entry(name, info, file_size - start)
    return start, header


def _check_entry(name: str, info: Any, data_size: int) -> None:
    if not isinstance(info, dict) or info.get("dtype") not in DTYPE_SIZES:
        raise ValueError(f"tensor {name!r} has no dtype safetensors knows")
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not (isinstance(shape, list) and all(is_int(d) and d >= 0 for d in shape)):
        raise ValueError(f"tensor {name!r} has a bad shape")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_int(o) for o in offsets)):
        raise ValueError(f"tensor {name!r} has bad data offsets")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size or end - begin != nbytes(info["dtype"], shape):
        raise ValueError(f"tensor {name!r} runs past the file (truncated?)")


PICKLE_MAGICS = (b"PK\x03\x04", b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


def needs_unpickling(head: bytes) -> bool:
    """Whether these first bytes are a pickle or a ``torch.save`` zip: a file a capsule must never hold."""
    return head.startswith(PICKLE_MAGICS)
