"""The collective verdict on synthetic snapshots: who the others wait for, and when to say nothing."""

from __future__ import annotations

import sys

import pytest

from rtdebug.stacks import verdict

ARROW = "\u2190"
REDUCE = f"all_reduce {ARROW} train_step (train.py:42)"
BARRIER = f"barrier {ARROW} evaluate (train.py:26)"
FORWARD = "forward (model.py:7)"


def rec(op="ALLREDUCE", seq=812, state="entered", line=42, file="/job/train.py", pg="0"):
    return {"op": op, "seq": seq, "state": state, "file": file, "line": line, "func": "f", "shapes": "[4]",
            "dtype": "float32", "pg": pg, "since": 1.0}  # fmt: skip


def snap_of(by_label: dict[str, dict[int, dict | None]], drop: tuple[int, ...] = ()) -> tuple[dict, dict]:
    """A stacks snapshot with one group per label, and dumps carrying each rank's record (``drop``: no key)."""
    groups, dumps = [], {}
    for label, ranks in by_label.items():
        groups.append({"ranks": sorted(ranks), "label": label, "frames": [], "threads": []})
        for rank, r in ranks.items():
            dumps[rank] = {"threads": []} if rank in drop else {"threads": [], "collective": r}
    return {"groups": groups}, dumps


def annotate(by_label, drop=()):
    snap, dumps = snap_of(by_label, drop)
    return verdict.annotate(snap, dumps)


def test_all_ranks_in_the_same_collective_has_no_culprit():
    s = annotate({REDUCE: {r: rec() for r in range(4)}})
    assert s["verdict"] == "all 4 ranks are in ALLREDUCE #812 (train.py:42)" and s["culprit"] is None
    one = annotate({REDUCE: {1: rec()}})  # stacks --rank 1
    assert one["verdict"] == "rank 1 is in ALLREDUCE #812 (train.py:42)" and one["culprit"] is None


def test_rank_in_another_op_at_the_same_seq_is_named():
    s = annotate({REDUCE: {0: rec(), 2: rec(), 3: rec()}, BARRIER: {1: rec("BARRIER", line=26)}})
    assert s["culprit"] == 1
    assert s["verdict"] == (
        f"rank 1 never entered ALLREDUCE #812 (train.py:42): it is in {BARRIER}, inside BARRIER #812; "
        "ranks 0,2-3 wait in it"
    )


def test_rank_behind_with_a_lower_seq():
    s = annotate({REDUCE: {0: rec(), 1: rec(), 3: rec(seq=811)}})
    assert s["culprit"] == 3
    assert s["verdict"].startswith(
        f"rank 3 never entered ALLREDUCE #812 (train.py:42): it is in {REDUCE}, inside ALLREDUCE #811;"
    )


def test_rank_in_no_collective_or_past_one():
    s = annotate({REDUCE: {0: rec(), 1: rec()}, FORWARD: {2: None}})
    assert (s["culprit"], s["verdict"].split(": ", 1)[1]) == (
        2,
        f"it is in {FORWARD}, before any collective; ranks 0-1 wait in it",
    )
    s = annotate({REDUCE: {0: rec()}, FORWARD: {1: rec(seq=811, state="returned")}})
    assert s["culprit"] == 1
    assert f"it is in {FORWARD}, after ALLREDUCE #811 returned; rank 0 waits in it" in s["verdict"]


def test_several_elsewhere_names_them_all_and_the_first_as_culprit():
    s = annotate(
        {REDUCE: {0: rec(), 1: rec(), 2: rec()}, BARRIER: {3: rec("BARRIER"), 5: rec("BARRIER")}, FORWARD: {4: None}}
    )
    assert s["culprit"] == 3
    assert s["verdict"].startswith(
        f"ranks 3-5 never entered ALLREDUCE #812 (train.py:42): rank 3 is in {BARRIER}, inside BARRIER #812"
    )


def test_a_tie_names_no_culprit():
    """hang.py --skip-rank 0: rank 0 in barrier, rank 1 in all_reduce, 1 against 1. The records cannot
    say which side skipped; naming the lowest rank's other side named the wrong rank."""
    for by_label in ({REDUCE: {0: rec()}, BARRIER: {1: rec("BARRIER", line=26)}},
                     {BARRIER: {0: rec("BARRIER", line=26)}, REDUCE: {1: rec()}}):  # fmt: skip
        s = annotate(by_label)
        assert s["culprit"] is None, s["verdict"]
        assert s["verdict"].startswith("ranks are blocked in different collectives: rank 0 in ")
        assert "ALLREDUCE #812 (train.py:42)" in s["verdict"] and "BARRIER #812 (train.py:26)" in s["verdict"]
    two = annotate({REDUCE: {0: rec(), 1: rec()}, BARRIER: {2: rec("BARRIER"), 3: rec("BARRIER")}})
    assert two["culprit"] is None  # 2 against 2 as well
    # a tie with a rank in no collective: every side is said, that rank too (it was left out)
    mixed = annotate({REDUCE: {0: rec()}, BARRIER: {1: rec("BARRIER", line=26)}, FORWARD: {2: None}})
    assert mixed["culprit"] is None and mixed["verdict"].startswith("no rank named: rank 0 in ALLREDUCE #812")
    assert mixed["verdict"].endswith("; rank 2 before any collective"), mixed["verdict"]


def test_a_rank_waiting_in_another_group_is_not_the_culprit():
    """Rank 2 is inside a collective of group 1: it may be waiting for a rank of that group (one that
    skipped it), so it is said where it waits, not named; a rank in no collective still is."""
    s = annotate({REDUCE: {0: rec(), 1: rec()}, BARRIER: {2: rec("BARRIER", seq=3, pg="1")}})
    assert s["culprit"] is None and "rank 2 in BARRIER #3 (train.py:42) of group 1" in s["verdict"]
    s = annotate({REDUCE: {0: rec(), 1: rec()}, BARRIER: {2: rec("BARRIER", seq=3, pg="1")}, FORWARD: {3: None}})
    assert s["culprit"] == 3 and s["verdict"].startswith("ranks 2-3 never entered ALLREDUCE #812")


@pytest.mark.parametrize(
    "by_label,drop",
    [
        ({REDUCE: {0: rec(), 1: rec()}, BARRIER: {2: rec("BARRIER")}}, (2,)),  # an old rank: no record at all
        ({FORWARD: {0: rec(state="returned"), 1: None}}, ()),  # nobody inside a collective
        ({}, ()),
    ],
)
def test_no_verdict(by_label, drop):
    s = annotate(by_label, drop)
    assert s["verdict"] is None and s["culprit"] is None


def test_group_collectives_carry_exactly_the_contract_keys():
    s = annotate({REDUCE: {0: rec(), 1: rec()}, FORWARD: {2: None}}, drop=())
    g0, g1 = s["groups"]
    assert g0["collectives"] == [
        {"rank": 0, "op": "ALLREDUCE", "seq": 812, "state": "entered", "file": "/job/train.py", "line": 42},
        {"rank": 1, "op": "ALLREDUCE", "seq": 812, "state": "entered", "file": "/job/train.py", "line": 42},
    ]
    assert g1["collectives"] == []


@pytest.mark.parametrize(
    "forged",
    ["ALLREDUCE", 7, {"op": 1, "seq": 2, "state": "entered"}, {"op": "X", "seq": "2", "state": "entered"},
     {"op": "X", "seq": True, "state": "entered"}, {"op": "X", "seq": 2, "state": "maybe"},
     {"op": "X\n\x1b[2Kall healthy", "seq": 2, "state": "entered"},
     {"op": "X", "seq": 2, "state": "entered", "file": "a\x9bb"}],
)  # fmt: skip
def test_forged_records_give_no_verdict(forged):
    """An unreadable record is unknown, not "before any collective": naming that rank would be a guess."""
    s = annotate({REDUCE: {0: rec(), 1: rec()}, FORWARD: {2: forged}})
    assert s["culprit"] is None and s["verdict"] is None
    assert [c["rank"] for g in s["groups"] for c in g["collectives"]] == [0, 1]


def test_render_prints_the_verdict_first():
    from rtdebug.stacks.text import render

    s = annotate({REDUCE: {0: rec()}, BARRIER: {1: rec("BARRIER", line=26)}})
    s.update(session_id="s1", taken_at=0.0, elapsed_s=0.1)
    lines = render(s).split("\n")
    assert lines[0] == s["verdict"] and lines[1].startswith("session s1: 2 ranks")
    s = annotate({REDUCE: {0: rec()}}, drop=(0,))
    s.update(session_id="s1", taken_at=0.0, elapsed_s=0.1)
    assert render(s).startswith("session s1: 1 rank,")


def test_an_adopted_jobs_skewed_numbers_do_not_name_a_healthy_rank():
    """Adopted ranks count from their own injection: ranks 0-2 wait in the same all_reduce call at #812/#811."""
    by_label = {REDUCE: {0: rec(), 1: rec(seq=811), 2: rec(seq=811)}, BARRIER: {3: rec("BARRIER", seq=811, line=26)}}
    snap, dumps = snap_of(by_label)
    launched = verdict.annotate(snap, dumps)  # numbers taken at face value: rank 0 looks past the others
    assert launched["culprit"] != 0  # a rank past the collective waited on is never named (it left it)
    snap, dumps = snap_of(by_label)
    adopted = verdict.annotate(snap, dumps, by_site=True)
    assert adopted["culprit"] == 3
    assert adopted["verdict"].startswith("rank 3 never entered ALLREDUCE #812 (train.py:42): it is in barrier")
    assert adopted["verdict"].endswith("ranks 0-2 wait in it")


# -- the verdict is a value, rendered once ------------------------------------------------------------


def test_the_verdict_is_a_value_with_its_kind_ranks_and_collective():
    from rtdebug.stacks.position import Position

    found = {r: Position.of(rec(), "record") for r in (0, 2, 3)} | {1: Position.of(rec("BARRIER", line=26), "record")}
    v = verdict.decide(found, {1: BARRIER})
    assert v is not None and (v.kind, v.culprit, v.waiting, v.missing) == ("never_entered", 1, [0, 2, 3], [1])
    assert (v.op, v.seq, v.group, v.waited.where(), v.culprit_label) == (
        "ALLREDUCE",
        812,
        "0",
        "ALLREDUCE #812 (train.py:42)",
        BARRIER,
    )
    assert v.render() == (
        f"rank 1 never entered ALLREDUCE #812 (train.py:42): it is in {BARRIER}, inside BARRIER #812; "
        "ranks 0,2-3 wait in it"
    )
    v.coords = {1: "dp=0, tp=1", 0: "dp=0, tp=0"}  # said at a rank's first mention alone, never in "ranks ..."
    assert (
        v.render().startswith("rank 1 (dp=0, tp=1) never entered ALLREDUCE #812") and "(dp=0, tp=0)" not in v.render()
    )


def test_mesh_coordinates_go_to_each_ranks_first_mention_alone():
    snap, dumps = snap_of({REDUCE: {0: rec(), 2: rec()}, FORWARD: {1: None, 3: None}})
    snap["coords"] = {0: "tp=0", 1: "tp=1", 3: "tp=1"}
    s = verdict.annotate(snap, dumps)
    assert s["verdict"] == (
        f"ranks 1,3 never entered ALLREDUCE #812 (train.py:42): rank 1 (tp=1) is in {FORWARD}, before any "
        "collective; ranks 0,2 wait in it"
    )


def test_a_records_source_is_its_own_not_guessed_from_its_keys():
    """A record that carries Flight Recorder keys (a forged answer, say) is still a record: it says who issued
    nothing, and its group entry keeps the record's keys only."""
    forged = dict(rec("BARRIER", line=26), issued="torch", by="DDP", during="backward()")
    s = annotate({REDUCE: {0: rec(), 2: rec()}, BARRIER: {1: forged}})
    assert "issued by" not in s["verdict"] and s["collectives_from"] == "record"
    assert set(s["groups"][1]["collectives"][0]) == {"rank", "op", "seq", "state", "file", "line"}


# -- Ray Train's own collectives (named ops, rtdebug.registry.collseq.NAMED_OPS) ---------------------


def ray(op="ray.train.report", seq=3, state="entered", line=30):
    return rec(op, seq=seq, state=state, line=line, pg="ray.train")


def test_a_rank_that_never_entered_a_ray_train_op_is_named_by_the_op_and_its_number():
    s = annotate({"report (train.py:30)": {0: ray(), 2: ray()}, FORWARD: {1: ray(seq=2, state="returned")}})
    assert s["culprit"] == 1
    assert s["verdict"] == "rank 1 never entered ray.train.report #3; ranks 0,2 wait in it"
    s = annotate({"b": {0: ray("ray.train.collective.barrier", seq=1)}, FORWARD: {1: None, 2: None}})
    assert s["verdict"] == "ranks 1-2 never entered ray.train.collective.barrier #1; rank 0 waits in it"


def test_a_ray_train_op_recorded_in_the_rank_reads_back_and_is_said(tmp_path):
    """The rank's API (``recorder.entering``/``returned``) writes the real record file; ``collseq`` reads it."""
    from rtdebug.rank.collectives import recorder
    from rtdebug.registry import collseq

    assert recorder.arm(tmp_path, 1) == {"file": "coll-1.bin"}
    try:
        for _ in range(2):
            gen = recorder.entering("ray.train.report")
            recorder.returned(gen)
        gen, line = recorder.entering("ray.train.report"), sys._getframe().f_lineno
        entered = collseq.read(tmp_path / "coll-1.bin")
        recorder.returned(gen)
        back = collseq.read(tmp_path / "coll-1.bin")
        assert recorder.entering("not.an.op") == -1
    finally:
        recorder.disarm()
    assert entered is not None and back is not None
    assert (entered["op"], entered["seq"], entered["pg"], entered["state"]) == (
        "ray.train.report",
        3,
        "ray.train",
        "entered",
    )
    assert (entered["file"], entered["line"], entered["func"]) == (__file__, line, sys._getframe().f_code.co_name)
    assert back["state"] == "returned" and back["seq"] == 3
    s = annotate({"x": {0: entered, 2: dict(entered)}, FORWARD: {1: dict(back, seq=2)}})
    assert s["verdict"] == "rank 1 never entered ray.train.report #3; ranks 0,2 wait in it"
