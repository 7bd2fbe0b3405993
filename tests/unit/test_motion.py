"""``rtdebug.stacks.motion``: a verdict only for ranks that stand still, on snapshots taken by the verdict itself.

The snapshots are made by ``verdict.annotate`` from records, as a local ``stacks`` makes them; ``take`` and
``records`` stand for the dump and the record reads, which return the next state of a scripted job.
"""

from __future__ import annotations

from rtdebug.stacks import motion, verdict

ARROW = "\u2190"
REDUCE = f"all_reduce {ARROW} train_step (train.py:42)"
FORWARD = "forward (model.py:7)"


def rec(seq=812, state="entered", op="ALLREDUCE", since=1.0):
    return {"op": op, "seq": seq, "state": state, "file": "/job/train.py", "line": 42, "func": "f", "shapes": "[4]",
            "dtype": "float32", "pg": "0", "since": since}  # fmt: skip


def snap_of(by_label: dict[str, dict[int, dict | None]], debugger: str = "", exited: tuple[int, ...] = ()) -> dict:
    groups, dumps = [], {}
    for label, ranks in by_label.items():
        groups.append(
            {"ranks": sorted(ranks), "label": label, "frames": [], "threads": [], "debugger": label == debugger}
        )
        dumps.update({r: {"threads": [], "collective": c} for r, c in ranks.items()})
    snap = {"groups": groups, "exited": [{"rank": r, "state": "exited", "exit_code": 0} for r in exited]}
    return verdict.annotate(snap, dumps)


class Job:
    """A scripted job: each dump returns the next snapshot, each record read the next records."""

    def __init__(self, snaps: list[dict], records: list[dict] | None = None) -> None:
        self.snaps, self.recs = list(snaps), list(records or [])
        self.dumps = self.reads = 0

    def take(self) -> dict:
        self.dumps += 1
        return self.snaps.pop(0)

    def records(self) -> dict:
        self.reads += 1
        return self.recs.pop(0)


def test_a_job_whose_records_move_is_progressing_without_a_second_dump():
    """The issue's first call: rank 0 in #8748, rank 1 in #8747 at one instant; 0.25 s later both far past."""
    at_once = snap_of({REDUCE: {0: rec(8748)}, FORWARD: {1: rec(8747)}})
    assert at_once["verdict"] is not None  # what one instant says: the claim the second look must withdraw
    job = Job([at_once], [{0: rec(8748), 1: rec(8747)}, {0: rec(9060, since=2.0), 1: rec(9059, since=2.0)}])
    s = motion.settle(job.take, job.records, window=0.01)
    assert (s["verdict"], s["culprit"], job.dumps) == (None, None, 1)
    assert s["motion"]["state"] == "moving" and s["motion"]["advanced"] == {"0": 312, "1": 312}
    assert s["motion_line"].startswith("the job is progressing: every rank advanced (rank 1 by 312 collectives in ")
    assert s["motion_line"].endswith(" ms); no hang. Where each rank is now:")  # a 10 ms window here


def test_records_that_stand_still_take_a_second_dump_whose_positions_decide():
    """DDP's all-reduces are issued from C++: the record stays put while the job moves; the dumps differ."""
    a = snap_of({REDUCE: {0: rec(9762)}, FORWARD: {1: rec(9761, "returned")}})
    b = snap_of({REDUCE: {0: rec(9800)}, FORWARD: {1: rec(9799, "returned")}})
    job = Job([a, b], [{0: None, 1: None}, {0: None, 1: None}])
    s = motion.settle(job.take, job.records, window=0.01)
    assert (s["verdict"], s["culprit"], job.dumps) == (None, None, 2)
    assert s["motion"]["how"] == "dump" and s["motion"]["advanced"] == {"0": 38, "1": 38}


def test_a_hung_job_keeps_its_verdict_after_the_window():
    hung = {REDUCE: {0: rec(), 2: rec()}, FORWARD: {1: rec(811, "returned")}}
    job = Job([snap_of(hung), snap_of(hung)], [{0: rec(), 1: rec(811, "returned")}] * 2)
    s = motion.settle(job.take, job.records, window=0.01)
    assert s["culprit"] == 1 and s["verdict"].startswith("rank 1 never entered ALLREDUCE #812 (train.py:42)")
    assert s["motion"]["state"] == "still" and s["motion_line"] is None and job.dumps == 2


def test_recheck_takes_the_second_look_and_the_first_snapshot_is_shown():
    """--native: py-spy's frames are in the first snapshot only; the second look is for positions."""
    hung = {REDUCE: {0: rec(), 2: rec()}, FORWARD: {1: rec(811, "returned")}}
    first = dict(snap_of(hung), native="py-spy's frames")
    job, cheap = Job([first]), Job([snap_of(hung)])
    s = motion.settle(job.take, window=0.01, recheck=cheap.take)
    assert s is first and s["culprit"] == 1 and (job.dumps, cheap.dumps) == (1, 1)
    moved = Job([snap_of({REDUCE: {0: rec(9000), 2: rec(9000)}, FORWARD: {1: rec(8999, "returned")}})])
    s = motion.settle(Job([dict(snap_of(hung), native="x")]).take, window=0.01, recheck=moved.take)
    assert s["native"] == "x" and s["culprit"] is None and s["motion"]["advanced"] == {"0": 8188, "1": 8188, "2": 8188}


def test_a_rank_in_the_debugger_or_exited_gives_the_verdict_at_once():
    s = motion.settle(Job([snap_of({REDUCE: {0: rec()}, FORWARD: {1: None}}, debugger=FORWARD)]).take, window=5)
    assert s["culprit"] == 1 and s["motion"]["state"] == "stopped"
    assert (
        s["motion_line"]
        == "rank 1 is stopped in the debugger: the verdict is this instant's (the others cannot move past it)"
    )
    s = motion.settle(Job([snap_of({REDUCE: {0: rec()}}, exited=(1,))]).take, window=5)
    assert s["culprit"] == 1 and s["motion_line"].startswith("rank 1 has exited: ")


def test_no_verdict_on_the_table_but_records_that_moved_around_the_dump_still_say_moving():
    job = Job([snap_of({FORWARD: {0: None, 1: None}})], [{0: rec(3, "returned")}, {0: rec(9, "returned")}])
    s = motion.settle(job.take, job.records, window=5)  # no wait: the move was seen across the dump alone
    assert s["motion"]["advanced"] == {"0": 6} and job.dumps == 1 and s["verdict"] is None
    assert s["motion_line"].startswith("the job is progressing: rank 0 advanced (rank 0 by 6 collectives in ")
    assert s["motion_line"].endswith(" ms), rank 1 did not; no verdict while ranks move. Where each rank is now:")
    assert s["motion_line"].split(" in ", 1)[1].startswith(tuple("123456789"))


def test_snapshot_flag_is_the_instant_and_no_verdict_means_no_wait():
    moving = snap_of({REDUCE: {0: rec(8748)}, FORWARD: {1: rec(8747)}})
    job = Job([moving], [{0: rec(1)}])
    s = motion.settle(job.take, job.records, window=5, instant=True)
    assert s["verdict"] is not None and s["motion"]["state"] == "instant" and job.reads == 0
    quiet = Job([snap_of({FORWARD: {0: None, 1: None}})], [{0: None, 1: None}, {0: None, 1: None}])
    s = motion.settle(quiet.take, quiet.records, window=5)  # nothing to decide: returned at once, one dump
    assert s["verdict"] is None and s["motion"]["state"] == "none" and quiet.dumps == 1


def test_the_verdict_never_says_never_entered_of_a_rank_past_the_collective():
    """The issue's second call: 'rank 1 never entered ALLREDUCE #9762 ...: it is in ..., after ALLREDUCE #9762
    returned'. A rank that returned from the collective waited on (or is in a later one) is past it."""
    for past in (rec(9762, "returned"), rec(9763), rec(9763, "returned")):
        s = snap_of({REDUCE: {0: rec(9762)}, FORWARD: {1: past}})
        assert s["culprit"] is None and "never entered" not in s["verdict"], s["verdict"]
        assert s["verdict"].startswith(
            "no rank named: rank 1 has already left ALLREDUCE #9762 (train.py:42), which rank 0 is in (it is "
        )
        assert s["verdict"].endswith("): the ranks were read at different moments")
    # one rank behind is still named when another is past
    s = snap_of({REDUCE: {0: rec(9762)}, FORWARD: {1: rec(9762, "returned"), 2: rec(9761, "returned")}})
    assert s["culprit"] == 2 and s["verdict"].startswith(
        "rank 2 never entered ALLREDUCE #9762 (train.py:42): it is in "
    )
