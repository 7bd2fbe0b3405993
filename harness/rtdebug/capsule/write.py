"""``CapsuleWriter``: one rank's part of a capsule, written by a thread of its own, off the step's path.

The capturing rank ``submit``\\ s a job per collective (a callable run on the writer thread, which waits for
the collective's outputs and returns the record and its tensors' bytes); the queue is bounded, so a rank that
produces faster than the disk takes is held back rather than growing memory. Tensors are batched into
safetensors shards; a record's index line is appended only after its shard is on disk, so the index never
names a file that is not there. ``max_bytes`` (``--capture-max-gb``) closes the capsule at a collective
boundary, and a full disk closes it the same way: the job runs on, and ``end.json`` says up to which
collective the capture is complete. A job stopped by a signal says so: ``interrupted`` makes this process's
writers close with ``interrupted (SIGINT)``, and ``close_unclosed`` lets the launcher close the part of a
rank its job's teardown killed before it could.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rtdebug.capsule import format as fmt
from rtdebug.common import atomic, log

# (name, safetensors dtype, shape, the bytes)
Tensor = tuple[str, str, list[int], Any]
Job = Callable[[], "tuple[dict[str, Any], list[Tensor]] | None"]
BATCH_BYTES = 32 * 1024 * 1024
INFLIGHT_BYTES = 512 * 1024 * 1024  # copies queued for the writer: past this a collective waits for room
_STOP = object()
_interrupt: list[str] = []  # set by ``interrupted``: how this process was stopped (a writer's end reason)


def interrupted(signum: int) -> None:
    """This process was stopped by ``signum`` (Ctrl-C): a capsule it closes from now on ends ``interrupted``,
    not ``ended``. Called from a signal handler: it only records the reason (no lock, no I/O)."""
    if not _interrupt:
        _interrupt.append(f"interrupted ({signal.Signals(signum).name})")


def close_unclosed(root: str | os.PathLike[str], rank: int, reason: str) -> int | None:
    """Close rank ``rank``'s part of the capsule in ``root`` that its process left open (the job's teardown
    killed it): cut a last index line it was writing, write ``end.json`` with ``reason`` and the last whole
    collective. Returns that collective's number; None (nothing done) for a part that is closed already, is
    not there, or is not a plain folder. Only for a part no process writes any more."""
    d = Path(root) / fmt.rank_dir(rank)
    try:
        if not stat.S_ISDIR(os.lstat(d).st_mode) or os.path.lexists(d / fmt.END):
            return None
        fd = os.open(d / fmt.INDEX, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    upto = whole = 0
    with os.fdopen(fd, "r+b") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        for line in f:
            if not line.endswith(b"\n"):
                break  # cut short: the rank was killed while writing it
            whole += len(line)
            try:
                record = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue  # the reader names a damaged line; it is not this function's to judge
            if isinstance(record, dict) and record.get("kind") == "coll" and fmt.is_int(record.get("n")):
                upto = record["n"]
        f.truncate(whole)
    size = sum(p.stat().st_size for p in d.glob("*" + fmt.SHARD_SUFFIX) if p.is_file())
    end = {"complete_upto": upto, "reason": reason, "bytes": size}
    atomic.write(d / fmt.END, json.dumps(end, indent=1, sort_keys=True).encode(), mode=0o644)
    return upto


class CapsuleWriter:
    def __init__(self, root: str | os.PathLike[str], rank: int, max_bytes: int = 0, queue_size: int = 64) -> None:
        self.root = Path(root)
        self.dir = self.root / fmt.rank_dir(rank)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.closed = False  # no more records are kept (closed, over max_bytes, disk full)
        self.reason = ""
        self.stopping = False  # close() was called: a job must not wait for what may never come
        self.written = 0  # tensor bytes on disk
        self.complete_upto = 0  # the last collective number whose record is on disk
        self._shards = 0
        self._pending: list[tuple[dict[str, Any], list[Tensor]]] = []
        self._pending_bytes = 0
        self._index = open(self.dir / fmt.INDEX, "a", encoding="utf-8")  # noqa: SIM115  # closed by close()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._inflight = 0  # bytes the queued jobs hold (their copies)
        self._room = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="rtdebug-capsule-writer", daemon=True)
        self._thread.start()

    def write_json(self, name: str, data: dict[str, Any], top: bool = False) -> None:
        """``manifest.json`` (``top``: the capsule's, the same from every rank) or a file of this rank's."""
        where = self.root if top else self.dir
        atomic.write(where / name, json.dumps(data, indent=1, sort_keys=True).encode(), mode=0o644)

    def submit(self, job: Job, nbytes: int = 0) -> None:
        """Queue ``job``, which holds ``nbytes`` of copies; blocks while the queue is full or holds
        ``INFLIGHT_BYTES`` already (a job alone may be larger); nothing once the capsule is closed."""
        if self.closed:
            return
        with self._room:
            while self._inflight and self._inflight + nbytes > INFLIGHT_BYTES and not self.closed:
                self._room.wait(1.0)
            self._inflight += nbytes
        self._queue.put((job, nbytes))

    def close(self, reason: str = "ended") -> None:
        """Write what is queued, then ``end.json``; later submits are dropped. Safe to call twice. A process
        stopped by a signal (``interrupted``) ends ``interrupted (SIG...)``, not ``ended``."""
        if reason == "ended" and _interrupt:
            reason = _interrupt[0]
        self.stopping = True
        if self._thread.is_alive():
            self._queue.put((_STOP, 0))
            self._thread.join()
        self._finish(reason)

    def _run(self) -> None:
        while True:
            job, nbytes = self._queue.get()
            if job is _STOP:
                self._flush()
                return
            try:
                if not self.closed:
                    self._do(job)
            finally:
                with self._room:
                    self._inflight -= nbytes
                    self._room.notify_all()

    def _do(self, job: Job) -> None:
        try:
            out = job()
        except Exception as exc:  # a record we cannot make ends the capsule there, never the job
            log.swallowed("capsule.write: a job failed; the capsule ends before it")
            self._flush()
            self._finish(f"error: {type(exc).__name__}: {exc}")
            return
        if out is not None:
            self._add(*out)
        if self._queue.empty() or self._pending_bytes >= BATCH_BYTES:
            self._flush()

    def _add(self, record: dict[str, Any], tensors: list[Tensor]) -> None:
        size = sum(len(memoryview(b).cast("B")) for _, _, _, b in tensors)
        if self.max_bytes and self.written + self._pending_bytes + size > self.max_bytes:
            self._flush()
            self._finish(f"capture-max-gb reached before collective #{record.get('n', '?')}")
            return
        self._pending.append((record, tensors))
        self._pending_bytes += size

    def _flush(self) -> None:
        if not self._pending or self.closed:
            return
        pending, self._pending, size = self._pending, [], self._pending_bytes
        self._pending_bytes = 0
        try:
            if size or any(t for _, t in pending):
                self._write_shard(pending)
            self._index.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r, _ in pending))
            self._index.flush()
        except OSError as exc:  # the disk is full (or gone): the capsule ends at the last record on disk
            self._finish(f"disk: {exc.strerror or exc}")
            return
        self.written += size
        for record, _ in pending:
            if record.get("kind") == "coll":
                self.complete_upto = record["n"]

    def _write_shard(self, pending: list[tuple[dict[str, Any], list[Tensor]]]) -> None:
        self._shards += 1
        name = fmt.shard_name(self._shards)
        entries = []
        for record, tensors in pending:
            for tname, dtype, shape, data in tensors:
                entries.append((tname, dtype, shape, len(memoryview(data).cast("B"))))
            for out in record.get("out", ()):
                out["file"] = name
        path = self.dir / name
        with open(path, "wb") as f:
            f.write(fmt.encode_header(entries))
            for _, tensors in pending:
                for _, _, _, data in tensors:
                    f.write(data)

    def _finish(self, reason: str) -> None:
        if self.closed:
            return
        self.closed, self.reason = True, reason
        try:
            self._index.close()
            end = {"complete_upto": self.complete_upto, "reason": reason, "bytes": self.written}
            self.write_json(fmt.END, end)
        except OSError:
            log.swallowed("capsule.write: end.json not written (disk full?); the reader sees an unclosed capture")
