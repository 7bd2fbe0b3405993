"""The no-progress report's rule (``rtdebug.launcher.hangwatch.still_key``): the same stacks are not enough.

A rank in a long ``backward()`` has the same main-thread stack at every sample while DDP's all-reduces go on
under it (issued from C++): its collective position moves, so the report must not fire; a hung job's
position stays, so it must.
"""

from __future__ import annotations

from rtdebug.launcher.hangwatch import still_key

FRAMES = [{"file": "/job/train.py", "line": 27, "function": "<module>"}]


def snap(seq0: int, seq1: int) -> dict:
    def entry(rank: int, seq: int) -> dict:
        return {"rank": rank, "op": "ALLREDUCE", "seq": seq, "state": "entered", "pg": "0", "file": None, "line": None}

    group = {"ranks": [0, 1], "frames": FRAMES, "collectives": [entry(0, seq0), entry(1, seq1)]}
    return {"groups": [group], "unresponsive": []}


def test_same_stacks_but_moved_positions_is_not_standing_still():
    assert still_key(snap(812, 812)) != still_key(snap(1100, 1100))


def test_same_stacks_and_positions_is_standing_still():
    assert still_key(snap(812, 811)) == still_key(snap(812, 811))
    assert still_key(snap(812, 811)) != still_key(snap(811, 812))  # whose position it is counts too
