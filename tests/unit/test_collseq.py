"""The collective record's format: a valid record reads back, anything forged reads as None (never raises)."""

from __future__ import annotations

import os
import struct

import pytest

from rtdebug.registry import collseq


def record(**over) -> bytearray:
    fields = {
        "magic": collseq.MAGIC, "version": collseq.VERSION, "state": collseq.ENTERED,
        "op": collseq.OP_CODES["all_reduce"], "gen": 7, "seq": 812, "since": 1700000000.5, "line": 42,
        "pg": b"0", "dtype": b"float32", "shapes": b"[4]", "file": b"/job/train.py", "func": b"train_step", "gen2": 7,
    }  # fmt: skip
    fields.update(over)
    buf = bytearray(collseq.SIZE)
    f = fields
    collseq.RECORD.pack_into(
        buf, 0, f["magic"], f["version"], f["state"], f["op"], f["gen"], f["seq"], f["since"], f["line"],
        len(f["pg"]), f["pg"], len(f["dtype"]), f["dtype"], len(f["shapes"]), f["shapes"],
        len(f["file"]), f["file"], len(f["func"]), f["func"], f["gen2"],
    )  # fmt: skip
    return buf


def test_valid_record_reads_back(tmp_path):
    p = tmp_path / collseq.coll_file(3)
    p.write_bytes(record())
    assert collseq.read(p) == {
        "op": "ALLREDUCE", "seq": 812, "state": "entered", "file": "/job/train.py", "line": 42,
        "func": "train_step", "shapes": "[4]", "dtype": "float32", "pg": "0", "since": 1700000000.5,
    }  # fmt: skip
    buf = record()
    buf[collseq.STATE_OFFSET] = collseq.RETURNED  # what a returning collective writes
    assert collseq.decode(bytes(buf))["state"] == "returned"


@pytest.mark.parametrize(
    "over",
    [
        {"magic": b"XXXX"},
        {"version": 9},
        {"state": 0},
        {"state": 3},
        {"op": 0},
        {"op": len(collseq.OP_NAMES)},
        {"gen2": 8},  # a torn write: the two generations differ
        {"gen": 0, "gen2": 0},  # never written
        {"seq": 0},
        {"since": float("nan")},
        {"since": -1.0},
        {"func": b"\xff\xfe"},  # not UTF-8
        {"file": b"a.py\n\x1b[1A\x1b[2Kall healthy"},  # control characters would rewrite the terminal
        {"pg": "0\u009b".encode()},  # a C1 control (CSI) in valid UTF-8
    ],
)
def test_forged_fields_read_as_none(tmp_path, over):
    p = tmp_path / "coll-0.bin"
    p.write_bytes(record(**over))
    assert collseq.read(p) is None


def test_forged_lengths_and_padding_read_as_none():
    buf = record()
    off = struct.calcsize("<4sBBHQ QdI")
    buf[off] = 200  # pg length past its 32-byte field
    assert collseq.decode(bytes(buf)) is None
    buf = record()
    buf[off + 1 + 5] = ord("x")  # a byte after the pg text, inside its field
    assert collseq.decode(bytes(buf)) is None


def test_short_long_garbage_missing_and_odd_files(tmp_path):
    good = bytes(record())
    cases = {"short": good[:-1], "long": good + b"\0", "empty": b"", "garbage": os.urandom(collseq.SIZE)}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert collseq.read(tmp_path / name) is None, name
    assert collseq.read(tmp_path / "missing") is None
    assert collseq.read(tmp_path) is None  # a directory
    (tmp_path / "good").write_bytes(good)
    (tmp_path / "link").symlink_to(tmp_path / "good")
    assert collseq.read(tmp_path / "link") is None  # a planted link is never followed
    os.mkfifo(tmp_path / "fifo")
    assert collseq.read(tmp_path / "fifo") is None  # and a FIFO never blocks the reader
    for _ in range(200):  # random bytes of the right size, behind a valid magic, never raise
        assert collseq.decode(collseq.MAGIC + os.urandom(collseq.SIZE - 4)) is None


def test_read_entry_opens_only_rtdebugs_own_name(tmp_path):
    (tmp_path / "coll-1.bin").write_bytes(record())
    (tmp_path / "other.bin").write_bytes(record())
    assert collseq.read_entry(tmp_path, {"rank": 1, "collectives": {"file": "coll-1.bin"}})["seq"] == 812
    for entry in (
        {"rank": 1, "collectives": {"file": "other.bin"}},
        {"rank": 1, "collectives": {"file": "../coll-1.bin"}},
        {"rank": 2, "collectives": {"file": "coll-1.bin"}},
        {"rank": "1", "collectives": {"file": "coll-1.bin"}},
        {"rank": 1, "collectives": None},
        {"rank": 1},
    ):
        assert collseq.read_entry(tmp_path, entry) is None, entry


def test_read_known_tells_a_record_before_its_first_collective_from_an_unreadable_one(tmp_path):
    """Armed, nothing entered yet: known, no record ("before any collective"). Truncated, garbled or not
    rtdebug's name: not known, so the verdict says nothing rather than naming that rank."""
    entry = {"rank": 0, "collectives": {"file": "coll-0.bin"}}
    path = tmp_path / "coll-0.bin"
    path.write_bytes(collseq.MAGIC + bytes([collseq.VERSION]) + bytes(collseq.SIZE - collseq.STATE_OFFSET))
    assert collseq.read_known(tmp_path, entry) == (True, None)
    path.write_bytes(record())
    assert collseq.read_known(tmp_path, entry)[0] is True and collseq.read_known(tmp_path, entry)[1]["seq"] == 812
    for data in (b"", bytes(collseq.SIZE), bytes(record(gen2=8))):
        path.write_bytes(data)
        assert collseq.read_known(tmp_path, entry) == (False, None), data[:8]
    assert collseq.read_known(tmp_path, {"rank": 0, "collectives": {"file": "x.bin"}}) == (False, None)


def test_fit_keeps_a_long_paths_tail_and_whole_characters():
    long = "/very" * 100 + "/train.py"
    assert collseq.fit(long, "file").endswith(b"/train.py") and len(collseq.fit(long, "file")) == 240
    cut = collseq.fit("é" * 50, "func")
    assert len(cut) <= 80 and cut.decode("utf-8") == "é" * 40


def test_ps_table_says_the_collective_short():
    from rtdebug.registry.table import collective, format_table

    entered = collseq.decode(bytes(record()))
    base = {"rank": 0, "local_rank": 0, "pid": 1, "host": "h", "port": 1, "state": "ready"}
    assert collective({"collective": entered}, now=entered["since"] + 40.2) == "in ALLREDUCE #812 (train.py:42) 40s"
    assert collective({"collective": dict(entered, state="returned")}) == "after ALLREDUCE #812 (train.py:42)"
    assert collective({"collective": None}) == "" and collective({}) == ""
    assert "COLLECTIVE" not in format_table([dict(base, collective=None)], "s")
    table = format_table([dict(base, collective=entered), dict(base, rank=1, collective=None)], "s")
    assert table.splitlines()[0].endswith("COLLECTIVE") and "in ALLREDUCE #812 (train.py:42)" in table.splitlines()[1]
    # a store entry's "collective" is forgeable: wrong shapes and control characters show nothing
    for forged in ({"op": [1, 2], "seq": 1, "state": "entered"}, {"op": "X", "seq": True, "state": "entered"},
                   dict(entered, file="a\x1b[2K.py"), "ALLREDUCE #1"):  # fmt: skip
        assert collective({"collective": forged}) == "", forged
    assert collective({"collective": dict(entered, since=-1e308)}) == "in ALLREDUCE #812 (train.py:42)"
