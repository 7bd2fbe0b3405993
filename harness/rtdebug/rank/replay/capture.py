"""Capture: every group a capturing rank makes wraps the real backend and records what it returned.

``install`` (from ``rank.startup.fixes``) arms a post-import hook; nothing runs before the job imports
torch.distributed, and nothing at all in a rank that is not captured. Then every group torch builds
(``ops.divert``) is a ``CaptureGroup``: a Python ``ProcessGroup`` that holds the backend the script named
(gloo, nccl, both) and hands it each collective. At the call it takes a copy of what the rank sends; when the
backend's work completes (a callback on its future, before the caller's ``wait`` returns) a copy of what it
received; the writer thread fingerprints, converts and writes them (``rtdebug.capsule.write``). What cannot
be captured is said in one line when it first shows: a backend that cannot be wrapped, an op not in
``ops.METHODS`` (the capsule then ends before it; the job runs on).
"""

from __future__ import annotations

import atexit
import datetime
import hashlib
import importlib.metadata
import os
import platform
import random
import sys
import threading
import time
from typing import Any

from rtdebug.capsule import format as fmt
from rtdebug.capsule.read import RANK_ENV
from rtdebug.capsule.write import CapsuleWriter
from rtdebug.common import log
from rtdebug.common.imports import when_imported
from rtdebug.common.ports import parse_rank_list
from rtdebug.rank.replay import meetings, ops

OURS = "rtdebug_capture"


class _State:
    writer: CapsuleWriter | None = None
    rank = 0
    n = 0  # collectives issued (the capsule's numbering, 1-based)
    groups = 0
    manifest = False
    internal: tuple[str, ...] = ()
    device = "cpu"
    lock = threading.Lock()
    info: dict[str, Any] = {}
    launch: dict[str, Any] = {}


_s = _State()


def install(
    capture_dir: str, rank: int, capture_ranks: str = "", capture_max_gb: float = 0.0, launch: Any = None
) -> None:
    """Capture this rank into ``capture_dir`` if ``capture_ranks`` selects it ("" = every rank); ``launch``
    (``common.config.LaunchFacts``) is what the launcher knows of the job, for the manifest."""
    if not capture_dir:
        return
    selected = parse_rank_list(capture_ranks or "all", flag="--capture-ranks")
    if selected is not None and rank not in selected:
        return
    _s.rank, _s.launch = rank, (dict(launch.__dict__) if launch is not None else {})
    try:
        _s.writer = CapsuleWriter(capture_dir, rank, max_bytes=int(capture_max_gb * (1 << 30)))
    except OSError as exc:  # a capture that cannot start never stops the job
        print(f"rtdebug: capture of rank {rank}: cannot write {capture_dir}: {exc.strerror}; this rank is not captured",
              file=sys.stderr, flush=True)  # fmt: skip
        return
    _s.info = {
        "rank": rank,
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "env": {k: os.environ[k] for k in RANK_ENV if k in os.environ},
        "random_state": _jsonable(random.getstate()),
    }
    _write(fmt.RANK_JSON, _s.info)
    atexit.register(close)
    meetings.arm_capture(_s.writer)
    when_imported("torch.distributed", _patch)
    when_imported("numpy.random", _numpy_state)


def close(reason: str = "ended") -> None:
    """End the capsule; a job that never made a process group (one process) still gets its manifest."""
    if _s.writer is not None:
        _ensure_manifest(int(_s.info.get("world_size", 1)))
        _s.writer.close(reason)


def _ensure_manifest(world_size: int) -> None:
    if not _s.manifest:
        _s.manifest = True
        _write(fmt.MANIFEST, _manifest(world_size), top=True)


def _write(name: str, data: dict[str, Any], top: bool = False) -> None:
    """A JSON file of the capsule; a full disk ends the capsule here (one line), never the job."""
    writer = _s.writer
    if writer is None or writer.closed:
        return
    try:
        writer.write_json(name, data, top=top)
    except OSError as exc:
        print(f"rtdebug: capture of rank {_s.rank}: {exc.strerror}; the capsule ends here, the job runs on",
              file=sys.stderr, flush=True)  # fmt: skip
        writer.close(f"disk: {exc.strerror}")


def _jsonable(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _numpy_state(np_random: Any) -> None:
    if _s.writer is None:
        return
    _s.info["numpy_state"] = _jsonable(np_random.get_state())
    _write(fmt.RANK_JSON, _s.info)


def _version(package: str) -> str:
    module = sys.modules.get(package)  # the one this process runs, else the installed one (no import)
    if module is not None and isinstance(getattr(module, "__version__", None), str):
        return str(module.__version__)
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _manifest(world_size: int) -> dict[str, Any]:
    ray = _version("ray")
    facts = {
        "mode": "",
        "script": os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else "",
        "module": False,
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "nproc_per_node": int(os.environ.get("LOCAL_WORLD_SIZE", world_size)),
        "nnodes": os.environ.get("GROUP_WORLD_SIZE", "1"),
        "torchrun_options": [],
        "session_id": "",
        **_s.launch,
    }
    digest = ""
    if not facts["module"]:
        try:
            with open(facts["script"], "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            log.swallowed("rank.replay.capture: the script is not readable: the manifest has no hash of it")
    return {
        **facts,
        "format": fmt.VERSION,
        "world_size": world_size,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "ray": ray,
        "device": _s.device,
        "script_sha256": digest,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _patch(dist: Any) -> None:
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    _s.internal = ops.internal_dirs()
    ops.divert(c10d, OURS, _factory, ["cpu", "cuda"])


def _make_backend(c10d: Any, name: str, o: Any) -> Any:
    if name == "gloo":
        b = c10d.ProcessGroupGloo(o.store, o.group_rank, o.group_size, o.timeout)
    elif name == "nccl":
        nccl_opts = c10d.ProcessGroupNCCL.Options()
        nccl_opts._timeout = o.timeout
        b = c10d.ProcessGroupNCCL(o.store, o.group_rank, o.group_size, nccl_opts)
        _s.device = "cuda"
    else:
        raise TypeError(f"backend {name!r} cannot be wrapped for capture (gloo and nccl can)")
    return b


def _factory(o: Any, backend_options: Any) -> Any:
    import torch
    from torch.distributed import distributed_c10d as c10d

    config = c10d.BackendConfig(c10d.Backend(_factory.real)).get_device_backend_map()  # type: ignore[attr-defined]
    try:  # one backend per name ("gloo" serves cpu and cuda: one mesh, as torch makes it)
        built = {name: _make_backend(c10d, str(name), o) for name in dict.fromkeys(config.values())}
    except TypeError as exc:
        return _uncaptured(c10d, str(exc), o, backend_options)
    backends = {device: built[name] for device, name in config.items()}
    with _s.lock:
        g = _s.groups
        _s.groups += 1
    pg = _group_class()(o.group_rank, o.group_size, backends, g)
    for device, b in backends.items():
        pg._register_backend(torch.device(device), c10d.Backend.backend_type_map[config[device]], b)
    writer = _s.writer
    if writer is not None:
        _ensure_manifest(int(os.environ.get("WORLD_SIZE", o.group_size)))
        record = {
            "kind": "group", "g": g, "name": str(o.group_id),
            "ranks": list(o.global_ranks_in_group) or list(range(o.group_size)),
            "backend": str(_factory.real), "rank": o.group_rank, "size": o.group_size,  # type: ignore[attr-defined]
        }  # fmt: skip
        writer.submit(lambda: (record, []))
    return pg


def _uncaptured(c10d: Any, why: str, o: Any, backend_options: Any) -> Any:
    """A backend we cannot wrap: said in one line, the capsule ends here, and the job gets its own backend."""
    print(
        f"rtdebug: capture of rank {_s.rank}: {why}; the capsule ends here, the job runs on",
        file=sys.stderr,
        flush=True,
    )
    close(why)
    plugin = c10d.Backend._plugins.get(str(_factory.real).upper())  # type: ignore[attr-defined]
    if plugin is None:
        raise RuntimeError(f"rtdebug --capture: {why}")
    if plugin.extended_api:
        return plugin.creator_fn(o, backend_options)
    return plugin.creator_fn(o.store, o.group_rank, o.group_size, o.timeout)


_factory.real = ""  # type: ignore[attr-defined]  # set by ops.divert around each call
_cls: list[Any] = []


def _group_class() -> Any:
    if _cls:
        return _cls[0]
    import torch.distributed as dist

    class CaptureGroup(dist.ProcessGroup):
        def __init__(self, rank: int, size: int, backends: dict[str, Any], g: int) -> None:
            super().__init__(rank, size)
            self.backends, self.g, self.seq = backends, g, 0

        def getBackendName(self) -> str:  # noqa: N802  (torch's name)
            return OURS

        def backend_for(self, args: tuple[Any, ...]) -> Any:
            if len(self.backends) == 1:
                return next(iter(self.backends.values()))
            for t in _first_tensors(args):
                return self.backends.get(t.device.type, next(iter(self.backends.values())))
            return next(iter(self.backends.values()))

    for method in ops.METHODS:
        setattr(CaptureGroup, method, _captured(method))
    for method in ops.UNKNOWN:
        setattr(CaptureGroup, method, _not_captured(method))
    _cls.append(CaptureGroup)
    return CaptureGroup


def _first_tensors(args: tuple[Any, ...]) -> list[Any]:
    for a in args:
        if hasattr(a, "device"):
            return [a]
        if isinstance(a, list) and a:
            inner = a[0]
            if hasattr(inner, "device"):
                return [inner]
            if isinstance(inner, list) and inner and hasattr(inner[0], "device"):
                return [inner[0]]
    return []


def _not_captured(method: str) -> Any:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        args = (*args, *kwargs.values())  # torch passes the trailing ones by name at times (barrier(opts=))
        if _s.writer is not None and not _s.writer.closed:
            print(
                f"rtdebug: capture of rank {_s.rank}: {method} cannot be captured; the capsule ends before it "
                f"(collective #{_s.n + 1}); the job runs on",
                file=sys.stderr,
                flush=True,
            )
            close(f"{method} cannot be captured")
        return getattr(self.backend_for(args), method)(*args)

    return call


def _captured(method: str) -> Any:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _capture(self, method, (*args, *kwargs.values()))  # barrier(opts=opts): trailing, in order

    call.__name__ = method
    return call


def _capture(pg: Any, method: str, args: tuple[Any, ...]) -> Any:
    backend = pg.backend_for(args)
    method = ops.CANON.get(method, method)
    writer = _s.writer
    if writer is None or writer.closed or ops.by_rtdebug(_s.internal[1]):  # rtdebug's own: not the job's
        return getattr(backend, method)(*args)
    from torch._C._distributed_c10d import _create_work_from_future  # type: ignore[attr-defined]

    sent, received = ops.tensors(method, args, pg.rank())
    frame = ops.user_frame(_s.internal)
    with _s.lock:
        _s.n += 1
        n = _s.n
    pg.seq += 1
    record: dict[str, Any] = {
        "kind": "coll", "n": n, "op": method, "name": ops.METHODS[method], "g": pg.g, "seq": pg.seq,
        "site": ops.site(frame), "path": "" if frame is None else os.path.abspath(frame.f_code.co_filename),
        "ddp": ops.in_backward(_s.internal), **_options(method, args),
    }  # fmt: skip
    sent_copies = [t.detach().clone() for t in sent]
    work = getattr(backend, method)(*args)
    if not received:
        writer.submit(lambda: _job(record, sent_copies, None, []), _nbytes(sent_copies))
        return work
    future = _future(work) if (record["ddp"] or ops.from_python_api()) else None
    if future is None:
        # torch's C++ helpers (DDP's start-up checks and broadcast) wait holding the GIL, so a Python callback on
        # the backend's thread would never run; a work without a future (gloo's recv) has none to run: wait
        # here, copy, and hand back the finished work
        work.wait()
        got_now = [t.detach().clone() for t in received]
        writer.submit(lambda: _job(record, sent_copies, None, got_now), _nbytes(sent_copies, got_now))
        return _done(received)  # a waited work is not waited again (gloo's recv would block)
    got: list[Any] = []

    def copy(fut: Any) -> Any:
        value = fut.value()  # raises if the collective failed: the caller sees torch's own error
        got.extend(t.detach().clone() for t in received)
        return value

    done = future.then(copy)
    writer.submit(lambda: _job(record, sent_copies, done, got), _nbytes(sent_copies, received))
    return _create_work_from_future(done)


def _nbytes(*lists: list[Any]) -> int:
    return sum(t.numel() * t.element_size() for ts in lists for t in ts)


def _done(received: list[Any]) -> Any:
    from torch._C._distributed_c10d import _create_work_from_future  # type: ignore[attr-defined]
    from torch.futures import Future

    fut: Any = Future()
    fut.set_result(received)
    return _create_work_from_future(fut)


def _future(work: Any) -> Any:
    try:
        return work.get_future()
    except RuntimeError:  # gloo's send/recv work has none
        return None


def _options(method: str, args: tuple[Any, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in args:
        if hasattr(a, "rootRank"):
            out["root"] = int(a.rootRank)
        if hasattr(a, "reduceOp"):
            op = getattr(a.reduceOp, "op", a.reduceOp)
            out["reduce_op"] = str(getattr(op, "name", op))
    if method == "alltoall_base":
        out["splits"] = [list(args[2]), list(args[3])]
    if method in ("send", "recv"):
        out["peer"], out["tag"] = int(args[1]), int(args[2])
    return out


def _job(record: dict[str, Any], sent: list[Any], waitable: Any, got: list[Any]) -> tuple[dict[str, Any], list[Any]]:
    if waitable is not None:  # the collective's future: its callback made the copies
        while not waitable.done():
            if _s.writer is not None and _s.writer.stopping:  # the rank exits with it in flight
                raise RuntimeError(f"collective #{record['n']} had not completed when the rank exited")
            time.sleep(0.002)
        waitable.wait()  # raises what the collective raised
    record["in"] = [ops.fingerprint(t) for t in sent]
    tensors, outs = [], []
    for i, t in enumerate(got):
        name = f"{record['n']}.{i}"
        dtype = ops.st_dtype(t)
        outs.append({"name": name, "shape": list(t.shape), "dtype": dtype})
        tensors.append((name, dtype, list(t.shape), ops.raw(t)))
    record["out"] = outs
    return record, tensors
