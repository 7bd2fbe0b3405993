"""What capture and replay share: the process-group methods served, their tensors, the seam, the call site.

torch makes every process group in ``distributed_c10d._new_process_group_helper`` (``init_process_group``,
``new_group``, DeviceMesh's groups); ``divert`` wraps it so that the backend the script named is built by our
registered Python backend instead, and puts the script's own backend name back where ``dist.get_backend``
reads it. A Python ``ProcessGroup`` subclass then sees every collective, Python's and the C++ ones (DDP's
reducer), as a call of one of ``METHODS``.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from typing import Any

from rtdebug.common.paths import PACKAGE_DIR

# the ProcessGroup method -> the name users know it by
METHODS = {
    "allreduce": "all_reduce",
    "broadcast": "broadcast",
    "allgather": "all_gather",
    "_allgather_base": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "alltoall_base": "all_to_all_single",
    "alltoall": "all_to_all",
    "barrier": "barrier",
    "send": "send",
    "recv": "recv",
    "gather": "gather",
    "scatter": "scatter",
    "reduce": "reduce",
    "all_gather_single": "all_gather_into_tensor",  # torch 2.13's names of the three above
    "reduce_scatter_single": "reduce_scatter_tensor",
    "all_to_all_single": "all_to_all_single",
}
# a method -> the one a backend has and a capsule records (torch calls either, by version and path)
CANON = {"all_gather_single": "_allgather_base", "reduce_scatter_single": "_reduce_scatter_base",
         "all_to_all_single": "alltoall_base"}  # fmt: skip
# methods a capture cannot record (a capsule ends before the first one), a replay cannot serve
UNKNOWN = (
    "allreduce_coalesced", "allgather_coalesced", "allgather_into_tensor_coalesced",
    "reduce_scatter_tensor_coalesced", "monitored_barrier", "recv_anysource", "all_gather_single_coalesced",
    "reduce_scatter_single_coalesced",
)  # fmt: skip
ST_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL", "uint16": "U16", "uint32": "U32",
    "uint64": "U64", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}  # fmt: skip
TORCH_DTYPES = {v: k for k, v in ST_DTYPES.items()}


def _root(opts: Any) -> int:
    return int(getattr(opts, "rootRank", 0))


def tensors(method: str, args: tuple[Any, ...], rank: int) -> tuple[list[Any], list[Any]]:
    """(what this rank sends, what it receives) in a call of ``method`` with ``args``."""
    a, method = args, CANON.get(method, method)
    if method in ("allreduce", "reduce"):
        return list(a[0]), list(a[0])
    if method == "broadcast":
        return (list(a[0]) if rank == _root(a[1]) else []), list(a[0])
    if method == "allgather":
        return list(a[1]), [t for row in a[0] for t in row]
    if method in ("_allgather_base", "_reduce_scatter_base", "alltoall_base"):
        return [a[1]], [a[0]]
    if method == "reduce_scatter":
        return [t for row in a[1] for t in row], list(a[0])
    if method == "alltoall":
        return list(a[1]), list(a[0])
    if method == "send":
        return list(a[0]), []
    if method == "recv":
        return [], list(a[0])
    if method == "gather":
        return list(a[1]), [t for row in a[0] for t in row]
    if method == "scatter":
        return ([t for row in a[1] for t in row] if rank == _root(a[2]) else []), list(a[0])
    return [], []  # barrier


def st_dtype(t: Any) -> str:
    name = str(t.dtype).removeprefix("torch.")
    if name not in ST_DTYPES:
        raise TypeError(f"a {name} tensor cannot be captured (safetensors has no such dtype)")
    return ST_DTYPES[name]


def raw(t: Any) -> Any:
    """A CPU tensor's bytes as a buffer (numpy uint8; no copy when it is contiguous)."""
    import torch

    c = t.detach()
    if c.device.type != "cpu":
        c = c.cpu()
    return c.contiguous().reshape(-1).view(torch.uint8).numpy()


def fingerprint(t: Any) -> dict[str, Any]:
    """What a capture keeps of a tensor the rank sent: shape, dtype, float64 sum and abs-sum, a hash of bytes."""
    import torch

    c = t.detach()
    c = c.cpu() if c.device.type != "cpu" else c
    d = c.to(torch.float64) if c.numel() else torch.zeros(1, dtype=torch.float64)
    return {
        "shape": list(c.shape),
        "dtype": st_dtype(c),
        "sum": float(d.sum()),
        "abs": float(d.abs().sum()),
        "hash": hashlib.blake2b(raw(c), digest_size=16).hexdigest(),
    }


def differs(sent: dict[str, Any], captured: dict[str, Any], tolerance: float) -> float | None:
    """None when ``sent`` matches the capture (the same bytes, or sum and abs-sum within ``tolerance``,
    absolute: a GPU capture replayed on CPU); else how far apart (inf: another shape or dtype)."""
    if sent["shape"] != captured.get("shape") or sent["dtype"] != captured.get("dtype"):
        return float("inf")
    if sent["hash"] == captured.get("hash"):
        return None
    delta = max(abs(sent["sum"] - float(captured.get("sum", 0.0))), abs(sent["abs"] - float(captured.get("abs", 0.0))))
    if delta != delta:  # a NaN on one side: not within any tolerance
        return float("nan")
    return None if delta <= tolerance else delta


def internal_dirs() -> tuple[str, ...]:
    import torch

    return (PACKAGE_DIR, os.path.dirname(torch.__file__) + os.sep)


def user_frame(internal: tuple[str, ...]) -> Any:
    """The innermost frame outside torch and rtdebug: the user's line that made this collective."""
    frame: Any = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        frame = frame.f_back
    return frame


def site(frame: Any) -> str:
    return "?" if frame is None else f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def by_rtdebug(torch_dir: str) -> bool:
    """Whether rtdebug itself made this collective (``--stop-on``'s agreement between ranks), not the script:
    the first frame above torch's is rtdebug's (the collective record's wrapper and this package aside)."""
    frame: Any = sys._getframe(2)
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith((torch_dir, here)) or name.endswith(RECORDER)):
            return name.startswith(PACKAGE_DIR)
        frame = frame.f_back
    return False


RECORDER = os.path.join("rank", "collectives", "recorder.py")


def alone(method: str, args: tuple[Any, ...], rank: int) -> None:
    """rtdebug's own collective in a replay, answered as a world of one would: what this rank sent is all
    there is (an all_reduce keeps its input, an all_gather repeats it; anything else receives zeros)."""
    sent, received = tensors(method, args, rank)
    method = CANON.get(method, method)
    if method in ("allreduce", "reduce", "broadcast", "barrier", "send"):
        return
    for i, t in enumerate(received):
        src = sent[i % len(sent)] if method in ("allgather", "_allgather_base") and sent else None
        if src is not None and src.numel() * len(received) == t.numel() and len(received) == 1:
            t.copy_(src.reshape(-1).repeat(t.numel() // max(src.numel(), 1)).reshape(t.shape))
        elif src is not None and src.shape == t.shape:
            t.copy_(src)
        else:
            t.zero_()


def in_backward(internal: tuple[str, ...]) -> bool:
    """Whether autograd's backward made this call (DDP's reducer hands a gradient bucket to the group)."""
    frame: Any = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(internal):
        if frame.f_code.co_name == "backward" or os.sep + "autograd" + os.sep in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def from_python_api() -> bool:
    """Whether torch.distributed's Python API made this call (its ``wait`` lets go of the GIL), not C++ code
    that waits holding it (DDP's ``_verify_params_across_processes``, ``_broadcast_coalesced``)."""
    caller = sys._getframe(3)  # ops -> capture's _capture -> the method -> its caller
    return caller.f_code.co_filename.endswith(os.sep + "distributed_c10d.py")


def divert(c10d: Any, ours: str, factory: Callable[..., Any], devices: list[str]) -> None:
    """Make every group torch builds come from ``factory`` (registered as backend ``ours``), which is handed
    the backend the script named (``factory.real`` is set for the duration of the call)."""
    if getattr(c10d, "_rtdebug_replay", None):
        return
    c10d.Backend.register_backend(ours, factory, extended_api=True, devices=devices)
    original = c10d._new_process_group_helper

    def helper(group_size: int, group_rank: int, global_ranks: list[int], backend: Any, *args: Any, **kw: Any) -> Any:
        factory.real = str(backend) if backend is not None else "undefined"  # type: ignore[attr-defined]
        pg, prefix_store = original(group_size, group_rank, global_ranks, ours, *args, **kw)
        c10d._world.pg_map[pg] = (backend, prefix_store)  # dist.get_backend(group) says what the script named
        return pg, prefix_store

    c10d._new_process_group_helper = helper
    c10d._rtdebug_replay = ours
