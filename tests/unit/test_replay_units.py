"""rtdebug.rank.replay's decisions that need no job: the fingerprint check, and Ray Train meetings served
with the job's storage path said as the replay's scratch folder."""

from __future__ import annotations

import base64
import math
import pickle
from dataclasses import dataclass

import pytest

from rtdebug.rank.replay import meetings, ops


def fp(**kw):
    return {"shape": [4], "dtype": "F32", "sum": 1.0, "abs": 2.0, "hash": "h", **kw}


def test_the_check_passes_equal_bytes_and_names_how_far_others_are():
    assert ops.differs(fp(), fp(), 0.0) is None
    assert ops.differs(fp(hash="x", sum=1.5), fp(), 0.0) == 0.5
    assert ops.differs(fp(hash="x", sum=1.5), fp(), 0.5) is None  # --check-tolerance: absolute
    assert ops.differs(fp(hash="x", sum=1.5, abs=3.0), fp(), 0.5) == 1.0  # the abs-sum counts too
    assert ops.differs(fp(shape=[5]), fp(), 1e9) == math.inf
    assert ops.differs(fp(dtype="BF16"), fp(), 1e9) == math.inf
    assert math.isnan(ops.differs(fp(hash="x", sum=math.nan), fp(), 1e9))  # a NaN is never within tolerance


@dataclass(frozen=True)
class Proposal:
    dir_name: str
    paths: tuple[str, ...]


class Checkpoint:  # as Ray's: a plain object with a path attribute
    def __init__(self, path: str) -> None:
        self.path = path


def meet(value: object) -> dict:
    return {
        "kind": "meet",
        "call": "meet",
        "op": "x",
        "call_n": 1,
        "value": [base64.b64encode(pickle.dumps(value)).decode()],
    }


def test_paths_under_the_jobs_storage_are_said_under_scratch():
    fit = {"kind": "meet", "call": "meet", "op": meetings.FIT, "call_n": 1,
           "value": [base64.b64encode(pickle.dumps(("run", "/job/st"))).decode()]}  # fmt: skip
    sent = {"a": [Proposal("c1", ("/job/st/run/c1", "/job/stx/other"))], "b": Checkpoint("/job/st/run/c1")}
    tap = meetings.ServeTap([fit, meet(sent)], 1, "/cap/scratch/rank-1")
    assert [pickle.loads(v) for v in tap.serve("meet", meetings.FIT, 1)] == [("run", "/cap/scratch/rank-1")]
    (got,) = [pickle.loads(v) for v in tap.serve("meet", "x", 1)]
    assert got["a"] == [Proposal("c1", ("/cap/scratch/rank-1/run/c1", "/job/stx/other"))]  # a prefix, not a substring
    assert got["b"].path == "/cap/scratch/rank-1/run/c1" and sent["b"].path == "/job/st/run/c1"


def test_a_meeting_the_capture_does_not_have_is_one_line_and_exit_1(capsys):
    tap = meetings.ServeTap([meet(1)], 1, "")
    with pytest.raises(SystemExit) as exc:
        tap.serve("answer", "x", 1)
    assert exc.value.code == 1
    assert capsys.readouterr().err == (
        "rtdebug: replay of rank 1 diverged: Ray Train's x #1 (answer) is where the capture has x #1 (meet); "
        "a replay cannot go on\n"
    )
    with pytest.raises(SystemExit):
        tap.serve("meet", "x", 2)
    assert "is past the capture's last meeting" in capsys.readouterr().err
