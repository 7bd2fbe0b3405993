"""rtdebug.capsule: the format written and read back, read without rtdebug, and every bad capsule one line.

Torch-free: the writer is fed bytes as the capturing rank feeds it (a job per collective on its own thread).
"""

from __future__ import annotations

import json
import pickle
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtdebug.capsule import format as fmt
from rtdebug.capsule.read import CapsuleError, open_capsule
from rtdebug.capsule.write import CapsuleWriter, close_unclosed

from support.paths import PY


def _coll(n: int, g: int = 0, values: np.ndarray | None = None) -> Any:
    data = np.arange(n, n + 6, dtype=np.float32) if values is None else values
    record = {"kind": "coll", "n": n, "op": "allreduce", "name": "all_reduce", "g": g, "seq": n, "site": "t.py:1"}
    record["in"] = [{"shape": [6], "dtype": "F32", "sum": float(data.sum()), "abs": 0.0, "hash": "x"}]
    record["out"] = [{"name": f"{n}.0", "shape": list(data.shape), "dtype": "F32"}]
    return lambda: (record, [(f"{n}.0", "F32", list(data.shape), data.tobytes())])


def make(root: Path, ranks: tuple[int, ...] = (0, 1), world: int = 2, colls: int = 3, **kw: Any) -> Path:
    for r in ranks:
        w = CapsuleWriter(root, r, **kw)
        w.write_json(fmt.RANK_JSON, {"rank": r, "world_size": world, "env": {"RANK": str(r), "WORLD_SIZE": str(world)}})
        w.write_json(fmt.MANIFEST, {"format": fmt.VERSION, "world_size": world, "script": "/x/t.py"}, top=True)
        w.submit(lambda: ({"kind": "group", "g": 0, "name": "0", "ranks": list(range(world))}, []))
        for n in range(1, colls + 1):
            w.submit(_coll(n))
        w.close()
    return root


def test_round_trip(tmp_path):
    cap = open_capsule(make(tmp_path))
    assert (cap.world_size, cap.ranks) == (2, [0, 1])
    log = cap.rank(1)
    assert [r["n"] for r in log.collectives()] == [1, 2, 3] and (log.complete_upto, log.end_reason) == (3, "ended")
    dtype, shape, data = log.tensor(log.collectives()[1]["out"][0])
    assert (dtype, shape) == ("F32", [6])
    assert np.array_equal(np.frombuffer(data, dtype=np.float32), np.arange(2, 8, dtype=np.float32))
    assert cap.env(1) == {"RANK": "1", "WORLD_SIZE": "2"}
    s = cap.summary()
    assert [(r["rank"], r["collectives"], r["complete_upto"], r["closed"]) for r in s["ranks"]] == [
        (0, 3, 3, True),
        (1, 3, 3, True),
    ]
    assert s["ranks"][0]["bytes"] > 3 * 24


def test_tensor_files_read_without_rtdebug(tmp_path):
    """A shard is safetensors' layout: 8-byte length, JSON header, raw bytes; any reader gets the values."""
    make(tmp_path, ranks=(0,), world=1, colls=2)
    index = [json.loads(x) for x in (tmp_path / "rank-0" / "index.jsonl").read_text().splitlines()]
    out = index[2]["out"][0]
    raw = (tmp_path / "rank-0" / out["file"]).read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    begin, end = header[out["name"]]["data_offsets"]
    values = np.frombuffer(raw[8 + length + begin : 8 + length + end], dtype=np.float32)
    assert header[out["name"]]["dtype"] == "F32" and length % 8 == 0
    assert values.tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]


def test_max_bytes_closes_at_a_collective_boundary(tmp_path):
    cap = open_capsule(make(tmp_path, ranks=(0,), world=1, colls=5, max_bytes=24 * 2 + 1))
    log = cap.rank(0)
    assert log.complete_upto == 2 and [r["n"] for r in log.collectives()] == [1, 2]
    assert log.end_reason == "capture-max-gb reached before collective #3"


def test_unclosed_capture_ends_at_its_last_record(tmp_path):
    make(tmp_path, ranks=(0,), world=1, colls=2)
    (tmp_path / "rank-0" / fmt.END).unlink()
    log = open_capsule(tmp_path).rank(0)
    assert (log.complete_upto, log.end_reason) == (2, "")


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and text
    return text


@pytest.mark.parametrize(
    ("damage", "expect"),
    [
        (lambda d: (d / "manifest.json").unlink(), "manifest.json: missing (the capsule's manifest)"),
        (lambda d: (d / "manifest.json").write_text('{"format": 1, "world'), "manifest.json: not valid JSON"),
        (lambda d: (d / "manifest.json").write_text('{"format": 99, "world_size": 2}'), "capsule format 99 is not"),
        (lambda d: (d / "rank-1" / "index.jsonl").write_bytes(b'{"kind": "coll", "n"'), "last line is cut short"),
        (lambda d: (d / "rank-1" / "index.jsonl").write_bytes(b"garbage\n"), "index.jsonl:1: not valid JSON"),
        (lambda d: (d / "rank-1" / "index.jsonl").unlink(), "index.jsonl: missing"),
        (lambda d: (d / "rank-1" / "end.json").write_text('{"complete_upto": 9}'), "says complete up to #9"),
        (lambda d: _drop_line(d / "rank-1" / "index.jsonl", 2), "collective #3 where #2 was due"),
        # a JSON bool is never read as an int (True == 1 in Python): hostile input, not format 1
        (lambda d: (d / "manifest.json").write_text('{"format": true, "world_size": 2}'), "capsule format True is"),
        (lambda d: (d / "rank-1" / "end.json").write_text('{"complete_upto": true}'), "says complete up to #True"),
        (lambda d: (d / "rank-1" / "rank.json").write_text('{"rank": true}'), "holds rank True, not 1"),
        (lambda d: (d / "rank-1" / "rank.json").write_text('{"world_size": 2.0}'), "world size 2.0 differs"),
    ],
)
def test_bad_capsule_is_one_line(tmp_path, damage, expect):
    make(tmp_path)
    damage(tmp_path)
    with pytest.raises(CapsuleError) as exc:
        open_capsule(tmp_path).rank(1)
    assert expect in one_line(exc)


def _drop_line(path: Path, number: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:number] + lines[number + 1 :]))


def _bool_shard(raw: bytes) -> bytes:
    """The same shard with its first tensor's shape ``[6]`` written as ``[true, 6]`` (6 elements to Python)."""
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    name = next(k for k in header if k != "__metadata__")
    header[name]["shape"] = [True, *header[name]["shape"]]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + raw[8 + length :]


def _shard(d: Path) -> Path:
    return sorted((d / "rank-1").glob("t-*.safetensors"))[0]


@pytest.mark.parametrize(
    ("damage", "expect"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-5]), "runs past the file (truncated?)"),
        (lambda p: p.write_bytes(p.read_bytes()[:20]), "its header length runs past the file"),
        (lambda p: p.write_bytes(b""), "empty (truncated)"),
        (lambda p: p.unlink(), "missing (the index names it)"),
        (lambda p: p.write_bytes(struct.pack("<Q", 4) + b"[1] " + b"\0" * 24), "its header is not a JSON object"),
        (lambda p: p.write_bytes(pickle.dumps({"x": 1}, protocol=4)), "would need unpickling: refused"),
        (lambda p: p.write_bytes(b"PK\x03\x04" + b"\0" * 60), "would need unpickling: refused"),
        (lambda p: p.write_bytes(_bool_shard(p.read_bytes())), "has a bad shape"),
    ],
)
def test_bad_tensor_file_is_one_line(tmp_path, damage, expect):
    make(tmp_path)
    damage(_shard(tmp_path))
    log = open_capsule(tmp_path).rank(1)
    with pytest.raises(CapsuleError) as exc:
        log.check_tensors()
    assert expect in one_line(exc)


def test_a_tensor_file_outside_the_rank_folder_is_refused(tmp_path):
    make(tmp_path)
    index = tmp_path / "rank-1" / "index.jsonl"
    index.write_text(index.read_text().replace('"file":"t-', '"file":"../../t-', 1))
    with pytest.raises(CapsuleError) as exc:
        open_capsule(tmp_path).rank(1).check_tensors()
    assert "names a tensor file '../../t-" in one_line(exc) and "not a safetensors file" in one_line(exc)


def test_world_size_and_rank_one_liners(tmp_path):
    make(tmp_path, ranks=(0,), world=2)
    with pytest.raises(CapsuleError) as exc:
        open_capsule(tmp_path, world_size=4)
    assert one_line(exc).endswith("captured from a job of 2 ranks, not 4")
    cap = open_capsule(tmp_path)
    with pytest.raises(CapsuleError) as exc:
        cap.rank(5)
    assert one_line(exc) == "--rank 5 is out of range: the job had ranks 0-1"
    with pytest.raises(CapsuleError) as exc:
        cap.rank(1)
    assert one_line(exc) == f"rank 1 was not captured: {tmp_path} holds rank 0"
    with pytest.raises(CapsuleError) as exc:
        open_capsule(tmp_path / "nowhere")
    assert "not a directory (a capsule is the folder --capture wrote)" in one_line(exc)


def test_rank_json_of_another_world_size(tmp_path):
    make(tmp_path)
    (tmp_path / "rank-1" / "rank.json").write_text('{"rank": 1, "world_size": 8}')
    with pytest.raises(CapsuleError) as exc:
        open_capsule(tmp_path).rank(1)
    assert "world size 8 differs from the manifest's" in one_line(exc)


def test_a_job_that_fails_ends_the_capsule_not_the_writer(tmp_path):
    w = CapsuleWriter(tmp_path, 0)
    w.write_json(fmt.RANK_JSON, {"rank": 0, "world_size": 1})
    w.write_json(fmt.MANIFEST, {"format": fmt.VERSION, "world_size": 1}, top=True)
    w.submit(_coll(1))

    def broken() -> Any:
        raise TypeError("a complex64 tensor cannot be captured")

    w.submit(broken)
    w.submit(_coll(2))
    w.close()
    log = open_capsule(tmp_path).rank(0)
    assert log.complete_upto == 1 and log.end_reason == "error: TypeError: a complex64 tensor cannot be captured"


def test_a_part_the_teardown_killed_is_closed_as_interrupted(tmp_path):
    """``close_unclosed`` (the launcher, after a job stopped by Ctrl-C): the index line the rank was writing
    is cut, ``end.json`` names the last whole collective and the reason; a closed part is left as it is."""
    make(tmp_path, colls=3)
    for r in (0, 1):
        (tmp_path / f"rank-{r}" / fmt.END).unlink()
    with open(tmp_path / "rank-1" / fmt.INDEX, "ab") as f:
        f.write(b'{"kind": "coll", "n": 4, "op"')  # killed mid-line
    assert close_unclosed(tmp_path, 1, "interrupted (SIGINT)") == 3
    assert close_unclosed(tmp_path, 1, "interrupted (SIGTERM)") is None  # closed now: never rewritten
    assert close_unclosed(tmp_path, 7, "interrupted (SIGINT)") is None  # not captured
    cap = open_capsule(tmp_path)
    log = cap.rank(1)
    assert (log.complete_upto, log.end_reason) == (3, "interrupted (SIGINT)")
    assert [r["n"] for r in log.collectives()] == [1, 2, 3]
    assert [(r["rank"], r["closed"], r["end_reason"]) for r in cap.summary()["ranks"]] == [
        (0, False, ""),
        (1, True, "interrupted (SIGINT)"),
    ]


def test_a_rank_folder_that_is_a_link_is_not_closed(tmp_path):
    make(tmp_path / "real", ranks=(0,), world=1, colls=1)
    (tmp_path / "real" / "rank-0" / fmt.END).unlink()
    (tmp_path / "cap").mkdir()
    (tmp_path / "cap" / "rank-0").symlink_to(tmp_path / "real" / "rank-0")
    assert close_unclosed(tmp_path / "cap", 0, "interrupted (SIGINT)") is None
    assert not (tmp_path / "real" / "rank-0" / fmt.END).exists()


def test_a_process_stopped_by_a_signal_closes_its_capsule_as_interrupted(tmp_path):
    """``rtdebug run --capture`` and Ctrl-C: the launcher's handler calls ``interrupted``; the capsule the
    process then closes (at exit) says so. In a child: the reason is the process's own."""
    code = (
        "import signal, sys; from rtdebug.capsule import write; "
        "w = write.CapsuleWriter(sys.argv[1], 0); write.interrupted(signal.SIGINT); w.close()"
    )
    subprocess.run([PY, "-c", code, str(tmp_path)], check=True)
    end = json.loads((tmp_path / "rank-0" / fmt.END).read_text())
    assert (end["reason"], end["complete_upto"]) == ("interrupted (SIGINT)", 0)
