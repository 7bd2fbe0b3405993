"""Reading a capsule: ``open_capsule(dir) -> Capsule``, every fault one line (``CapsuleError``).

A capsule is input, not code: it is as trusted as the job's own peers, and nothing in it is ever unpickled.
A tensor file that is a pickle or a ``torch.save`` archive is refused; JSON that is not what the format says,
a file cut short, an index that names a missing shard, another world size, a rank it does not hold and a
format version this rtdebug does not know each end in one line that names the file.
"""

from __future__ import annotations

import json
import mmap
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtdebug.capsule import format as fmt
from rtdebug.common.errors import HarnessError

# the rank's environment a replay sets (read from rank.json's "env")
RANK_ENV = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR", "MASTER_PORT",  # a replay meets no one (no rendezvous), but Ray Train asks for them
)  # fmt: skip


class CapsuleError(HarnessError):
    """A capsule that cannot be used, said in one line."""


JSON_MAX = 1 << 28  # a manifest, rank.json or end.json past this is not one --capture wrote
INDEX_MAX = 1 << 33  # an index past this (~30 million collectives) is a sparse file, not a capture
MAX_WORLD = 1 << 20  # a world size past this is a manifest's lie (rtdebug capsule lists every rank)


def _open_file(path: Path) -> int:
    """A descriptor of ``path``, a regular file: a FIFO or device named in a capsule never blocks nor streams."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CapsuleError(f"{path}: not a regular file (a capsule holds only files --capture wrote)")
    return fd


def _read_file(path: Path, limit: int = JSON_MAX) -> bytes:
    with os.fdopen(_open_file(path), "rb") as f:
        if os.fstat(f.fileno()).st_size > limit:
            raise CapsuleError(f"{path}: larger than any file --capture writes (corrupted)")
        return f.read()


def _load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        raw = _read_file(path)
    except FileNotFoundError:
        raise CapsuleError(f"{path}: missing ({what}); is this a capsule made with --capture?") from None
    except OSError as exc:
        raise CapsuleError(f"{path}: cannot read it: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CapsuleError(f"{path}: not valid JSON (truncated or corrupted)") from None
    if not isinstance(data, dict):
        raise CapsuleError(f"{path}: not a JSON object (corrupted)")
    return data


@dataclass
class RankLog:
    """One rank's part: its environment, its ordered records, where its capture ends."""

    capsule: Capsule
    rank: int
    info: dict[str, Any]
    records: list[dict[str, Any]]
    complete_upto: int
    end_reason: str  # "" when the capture was not closed (the rank died, or is still running)
    _maps: dict[str, tuple[mmap.mmap, int, dict[str, Any]]] = field(default_factory=dict, repr=False)

    @property
    def dir(self) -> Path:
        return self.capsule.dir / fmt.rank_dir(self.rank)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)

    def collectives(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("kind") == "coll"]

    def tensor(self, out: dict[str, Any]) -> tuple[str, list[int], memoryview]:
        """(dtype, shape, bytes) of an output a record names (``{"file", "name"}``)."""
        mm, start, header = self._shard(str(out.get("file", "")))
        info = header.get(str(out.get("name")))
        if info is None:
            raise CapsuleError(f"{self.dir}/{out.get('file')}: has no tensor {out.get('name')!r} (corrupted)")
        begin, end = info["data_offsets"]
        return info["dtype"], info["shape"], memoryview(mm)[start + begin : start + end]

    def _shard(self, name: str) -> tuple[mmap.mmap, int, dict[str, Any]]:
        if name in self._maps:
            return self._maps[name]
        path = self.dir / name
        if os.sep in name or not name.endswith(fmt.SHARD_SUFFIX) or name.startswith("."):
            raise CapsuleError(f"{self.dir}/index.jsonl: names a tensor file {name!r} that is not a safetensors file")
        try:
            with os.fdopen(_open_file(path), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        except FileNotFoundError:
            raise CapsuleError(f"{path}: missing (the index names it)") from None
        if mm is None:
            raise CapsuleError(f"{path}: empty (truncated)")
        head = bytes(mm[: min(size, 8 + fmt.HEADER_MAX)])
        if fmt.needs_unpickling(head):
            raise CapsuleError(f"{path}: a pickle / torch.save file would need unpickling: refused")
        try:
            start, header = fmt.decode_header(head, size)
        except ValueError as exc:
            raise CapsuleError(f"{path}: not a valid safetensors file: {exc}") from None
        self._maps[name] = (mm, start, header)
        return self._maps[name]

    def check_tensors(self) -> None:
        """Open every shard the index names (``rtdebug capsule``/pre-flight: a bad file shows before a replay)."""
        for record in self.collectives():
            for out in record.get("out", ()):
                self.tensor(out)


@dataclass
class Capsule:
    dir: Path
    manifest: dict[str, Any]
    world_size: int
    ranks: list[int]  # the ranks captured
    _logs: dict[int, RankLog] = field(default_factory=dict, repr=False)

    def check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            had = "rank 0" if self.world_size == 1 else f"ranks 0-{self.world_size - 1}"
            raise CapsuleError(f"--rank {rank} is out of range: the job had {had}")
        if rank not in self.ranks:
            held = ("rank " if len(self.ranks) == 1 else "ranks ") + (",".join(map(str, self.ranks)) or "none")
            raise CapsuleError(f"rank {rank} was not captured: {self.dir} holds {held}")

    def rank(self, rank: int) -> RankLog:
        self.check_rank(rank)
        if rank not in self._logs:
            self._logs[rank] = _read_rank(self, rank)
        return self._logs[rank]

    def env(self, rank: int) -> dict[str, str]:
        """The torchrun / Ray Train variables rank ``rank`` had (what a replay sets)."""
        env = self.rank(rank).info.get("env", {})
        if not isinstance(env, dict):
            raise CapsuleError(f"{self.dir / fmt.rank_dir(rank) / fmt.RANK_JSON}: its env is not an object (corrupted)")
        # only the variables a capture records: a capsule never sets LD_PRELOAD, PYTHONPATH, ... for a replay
        kept = {k: str(v) for k, v in env.items() if k in RANK_ENV and "\0" not in str(v)}
        return {**kept, "RANK": str(rank), "WORLD_SIZE": str(self.world_size)}

    def summary(self) -> dict[str, Any]:
        """What ``rtdebug capsule DIR --json`` prints: the job, and per rank its collectives, size and end."""
        ranks = []
        for r in self.ranks:
            log = self.rank(r)
            size = sum(p.stat().st_size for p in log.dir.glob("*" + fmt.SHARD_SUFFIX))
            ranks.append(
                {
                    "rank": r,
                    "collectives": len(log.collectives()),
                    "groups": sum(1 for x in log.records if x.get("kind") == "group"),
                    "bytes": size,
                    "complete_upto": log.complete_upto,
                    "closed": bool(log.end_reason),
                    "end_reason": log.end_reason,
                }
            )
        keys = ("script", "module", "argv", "cwd", "script_sha256", "python", "torch", "ray", "device", "created")
        return {
            "dir": str(self.dir),
            "format": self.manifest.get("format"),
            "world_size": self.world_size,
            **{k: self.manifest.get(k) for k in keys},
            "ranks": ranks,
        }


def open_capsule(path: str | os.PathLike[str], world_size: int | None = None) -> Capsule:
    """The capsule in ``path``; ``world_size`` (where the caller knows the job's) must match."""
    root = Path(path)
    if not root.is_dir():
        raise CapsuleError(f"{root}: not a directory (a capsule is the folder --capture wrote)")
    manifest = _load_json(root / fmt.MANIFEST, "the capsule's manifest")
    version = manifest.get("format")
    if not fmt.is_int(version) or version != fmt.VERSION:
        raise CapsuleError(
            f"{root / fmt.MANIFEST}: capsule format {version!r} is not one this rtdebug reads (it reads {fmt.VERSION})"
        )
    ws = manifest.get("world_size")
    if not fmt.is_int(ws) or not 1 <= ws <= MAX_WORLD:
        raise CapsuleError(f"{root / fmt.MANIFEST}: no valid world_size (corrupted)")
    if world_size is not None and world_size != ws:
        raise CapsuleError(f"{root}: captured from a job of {ws} ranks, not {world_size}")
    ranks = sorted(
        int(p.name[5:]) for p in root.glob("rank-*") if p.name[5:].isdigit() and (p / fmt.RANK_JSON).exists()
    )
    for r in ranks:
        if r >= ws:
            raise CapsuleError(f"{root / fmt.rank_dir(r)}: rank {r} in a capsule of world size {ws} (corrupted)")
    return Capsule(root, manifest, ws, ranks)


def _read_rank(capsule: Capsule, rank: int) -> RankLog:
    d = capsule.dir / fmt.rank_dir(rank)
    info = _load_json(d / fmt.RANK_JSON, f"rank {rank}'s environment")
    ws = info.get("world_size", capsule.world_size)
    if not fmt.is_int(ws) or ws != capsule.world_size:
        raise CapsuleError(f"{d / fmt.RANK_JSON}: world size {ws!r} differs from the manifest's")
    if not fmt.is_int(info.get("rank", rank)) or info.get("rank", rank) != rank:
        raise CapsuleError(
            f"{d / fmt.RANK_JSON}: holds rank {info.get('rank')!r}, not {rank} (a copied or linked folder?)"
        )
    end_path = d / fmt.END
    records = _read_index(d / fmt.INDEX, closed=end_path.exists())
    last = max((r["n"] for r in records if r.get("kind") == "coll"), default=0)
    if end_path.exists():
        end = _load_json(end_path, "where the capture ends")
        upto, reason = end.get("complete_upto"), str(end.get("reason", ""))
        if not fmt.is_int(upto) or not 0 <= upto <= last:
            raise CapsuleError(f"{end_path}: says complete up to #{upto} but the index ends at #{last} (truncated?)")
        return RankLog(capsule, rank, info, records, upto, reason or "ended")
    return RankLog(capsule, rank, info, records, last, "")


def _read_index(path: Path, closed: bool = True) -> list[dict[str, Any]]:
    """The records; ``closed`` (``end.json`` is there): a last line cut short is damage, else a rank killed
    mid-write, whose capture ends at the last complete line."""
    try:
        raw = _read_file(path, INDEX_MAX)
    except FileNotFoundError:
        raise CapsuleError(f"{path}: missing (the rank's index of collectives)") from None
    except OSError as exc:
        raise CapsuleError(f"{path}: cannot read it: {exc.strerror}") from None
    lines = raw.split(b"\n")
    if not closed:
        lines[-1] = b""
    if lines and lines[-1] != b"":
        raise CapsuleError(f"{path}: its last line is cut short (truncated)")
    records, expect = [], 1
    for number, line in enumerate(lines[:-1], 1):
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise CapsuleError(f"{path}:{number}: not valid JSON (corrupted)") from None
        if not isinstance(record, dict) or record.get("kind") not in ("group", "coll", "meet"):
            raise CapsuleError(f"{path}:{number}: not a capsule record (corrupted)")
        if record["kind"] == "coll":
            if not all(_dicts(record.get(k, [])) for k in ("in", "out")):
                raise CapsuleError(f"{path}:{number}: its in/out are not lists of tensors (corrupted)")
            if not fmt.is_int(record.get("n")) or record.get("n") != expect:
                raise CapsuleError(
                    f"{path}:{number}: collective #{record.get('n')} where #{expect} was due (corrupted)"
                )
            expect += 1
        records.append(record)
    return records


def _dicts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, dict) for x in value)
