"""torch's Flight Recorder as the verdict's source (rtdebug.rank.stacks.flight, rtdebug.stacks.flight and .verdict).

The entries below have the shape torch 2.13 writes for gloo and for NCCL (``_dump_fr_trace_json``): the
same code reads both, so NCCL's decisions (its op names, a ring that wrapped, p2p entries) are tested
here, without a GPU. Forged summaries (a rank's answer may come from anyone who can write the store)
change no verdict.
"""

from __future__ import annotations

import json

import pytest

from rtdebug.rank.stacks import flight as rankflight
from rtdebug.stacks import flight, verdict
from rtdebug.stacks import group as stackgroup


def fr_entry(seq, name, pg="0", retired=True, sizes=((81,),), p2p=False, record_id=None):
    return {
        "collective_seq_id": 0 if p2p else seq,
        "p2p_seq_id": seq if p2p else 0,
        "is_p2p": p2p,
        "input_dtypes": ["Float"],
        "input_sizes": [list(s) for s in sizes],
        "process_group": [pg, "default_pg" if pg == "0" else "undefined"],
        "profiling_name": name,
        "record_id": seq - 1 if record_id is None else record_id,
        "retired": retired,
        "state": "scheduled",
        "thread_name": "python",
    }


def trace(*entries):
    return {"version": "2.10", "entries": list(entries), "pg_config": {}, "pg_status": {}}


def ddp_rank(n_allreduce, last, backend="gloo"):
    """A DDP rank: 2 init broadcasts, ``n_allreduce`` gradient all-reduces that returned, then ``last`` (not)."""
    es = [fr_entry(1, f"{backend}:broadcast"), fr_entry(2, f"{backend}:broadcast")]
    es += [fr_entry(3 + i, f"{backend}:all_reduce") for i in range(n_allreduce)]
    if last:
        es.append(
            fr_entry(3 + n_allreduce, f"{backend}:{last}", retired=False, sizes=() if last == "barrier" else ((81,),))
        )
    return rankflight.summarize(trace(*es))


BACKWARD = [
    stackgroup.frame("/v/lib/python3.11/site-packages/torch/autograd/graph.py", 979, "_engine_run_backward"),
    stackgroup.frame("/v/lib/python3.11/site-packages/torch/_tensor.py", 623, "backward"),
    stackgroup.frame("/job/train.py", 22, "train"),
]
BARRIER = [
    stackgroup.frame("/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 5356, "barrier"),
    stackgroup.frame("/job/train.py", 25, "<module>"),
]


def snap_of(frames_by_rank):
    return {
        "groups": stackgroup.group(
            {r: {"threads": [{"id": "0x1", "frames": f}], "main_id": "0x1"} for r, f in frames_by_rank.items()}
        )
    }


def uneven_dumps(backend="gloo"):
    barrier_rec = {"op": "BARRIER", "seq": 1, "state": "entered", "file": "/job/train.py", "line": 25, "pg": "0"}
    return {
        0: {"flight": ddp_rank(6, "all_reduce", backend), "collective": None},
        1: {"flight": ddp_rank(6, "barrier", backend), "collective": barrier_rec},
        2: {"flight": ddp_rank(6, "barrier", backend), "collective": dict(barrier_rec)},
    }


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_uneven_ddp_from_recorded_entries_gloo_and_nccl_alike(backend):
    dumps = uneven_dumps(backend)
    snap = verdict.annotate(snap_of({0: BACKWARD, 1: BARRIER, 2: BARRIER}), dumps)
    assert snap["culprit"] == 0 and snap["collectives_from"] == "flight recorder"
    assert snap["verdict"] == (
        "rank 0 is in ALLREDUCE #9 (train.py:22) issued by DDP during backward(), which ranks 1-2 never entered: "
        "they wait in BARRIER #9 (train.py:25); rank 0 ran 7 ALLREDUCE, ranks 1-2 ran 6. Usual cause: uneven "
        "inputs under DDP (rank 0 has more batches): wrap the loop in DDP's join() context manager, or shard "
        "the data evenly (DistributedSampler(drop_last=True))"
    )


def test_without_the_recorder_the_same_hang_reads_as_before_any_collective():
    """The falsehood the recorder fixes: the record alone sees only the Python-level barrier."""
    dumps = uneven_dumps()
    for d in dumps.values():
        d.pop("flight")
    snap = verdict.annotate(snap_of({0: BACKWARD, 1: BARRIER, 2: BARRIER}), dumps)
    assert "before any collective" in snap["verdict"] and snap["collectives_from"] == "record"


def test_a_ring_that_wrapped_gives_no_counts_but_the_same_culprit():
    dumps = uneven_dumps("nccl")
    for d in dumps.values():
        d["flight"]["wrapped"] = True
    snap = verdict.annotate(snap_of({0: BACKWARD, 1: BARRIER, 2: BARRIER}), dumps)
    assert snap["culprit"] == 0 and " ran " not in snap["verdict"] and "join()" in snap["verdict"]


def test_nccl_op_names_map_to_the_records_spelling():
    assert rankflight.op_name("nccl:all_reduce") == "ALLREDUCE"
    assert rankflight.op_name("nccl:_reduce_scatter_base") == "REDUCE_SCATTER_BASE"
    assert rankflight.op_name("nccl:all_gather_into_tensor_coalesced") == "ALL_GATHER_INTO_TENSOR_COALESCED"
    assert rankflight.op_name("gloo:barrier") == "BARRIER"


def test_p2p_entries_are_not_a_ranks_collective_position():
    s = rankflight.summarize(trace(fr_entry(1, "nccl:all_reduce"), fr_entry(1, "nccl:send", p2p=True, retired=False)))
    assert flight.last(s)["op"] == "ALLREDUCE" and flight.last(s)["state"] == "returned"


def test_a_python_level_collective_keeps_the_records_call_site():
    s = rankflight.summarize(trace(fr_entry(1, "gloo:all_reduce", retired=False)))
    rec = {"op": "ALLREDUCE", "seq": 1, "state": "entered", "file": "/job/t.py", "line": 9, "func": "f", "pg": "0"}
    pos = flight.position(s, rec, BARRIER)
    assert (pos["file"], pos["line"], pos["issued"]) == ("/job/t.py", 9, "python")


FORGED = [
    {"entries": "x", "counts": {}},
    {
        "entries": [
            {
                "pg": "0",
                "seq": True,
                "op": "ALLREDUCE",
                "p2p": False,
                "sizes": "",
                "dtypes": "",
                "desc": "",
                "state": "entered",
            }
        ],
        "counts": {},
    },
    {
        "entries": [
            {
                "pg": "0",
                "seq": 1,
                "op": "ALL\x1b[2JREDUCE",
                "p2p": False,
                "sizes": "",
                "dtypes": "",
                "desc": "",
                "state": "entered",
            }
        ],
        "counts": {},
    },
    {"entries": [], "counts": {}, "pad": "x" * (flight.MAX_JSON + 1)},
    {
        "entries": [{"pg": "0", "seq": 1, "op": "A", "p2p": False, "sizes": "", "dtypes": "", "desc": "", "state": "x"}]
        * 3,
        "counts": {},
    },
    {"entries": [rankflight._compact(fr_entry(1, "gloo:all_reduce"))] * (flight.KEEP + 1), "counts": {}},
]


@pytest.mark.parametrize("forged", FORGED, ids=range(len(FORGED)))
def test_a_forged_or_oversized_summary_changes_no_verdict(forged):
    """One rank's summary is forged: the verdict falls back to the records, exactly as with no recorder."""
    dumps = uneven_dumps()
    dumps[1]["flight"] = forged
    assert not flight.plausible(forged)
    got = verdict.annotate(snap_of({0: BACKWARD, 1: BARRIER, 2: BARRIER}), dumps)
    for d in dumps.values():
        d.pop("flight")
    want = verdict.annotate(snap_of({0: BACKWARD, 1: BARRIER, 2: BARRIER}), dumps)
    assert (got["verdict"], got["culprit"], got["collectives_from"]) == (want["verdict"], want["culprit"], "record")


def test_forged_counts_and_groups_are_read_as_unknown():
    s = ddp_rank(6, "barrier")
    s["counts"] = {"0": ["x"]}
    s["groups"] = {"0": {"ranks": "0-99999999"}, "1": {"ranks": "a-b"}, "2": "x"}
    assert flight.count(s, "0", "ALLREDUCE") is None
    assert flight.members(s, "0") is None and flight.members(s, "1") is None and flight.members(s, "2") is None
    assert json.dumps(s)  # still a JSON value


def test_off_reasons_are_printable_and_bounded():
    assert flight.off_reason({"off": "x\x1b" + "y" * 500}) == "x?" + "y" * 118
    assert flight.off_reason({"entries": []}) is None


def test_history_aligns_by_group_and_sequence_and_groups_identical_ranks():
    from rtdebug.stacks import history

    flights = {r: d["flight"] for r, d in uneven_dumps().items()}
    flights[3] = ddp_rank(4, None)  # fell behind: seqs past its newest are "not reached"
    flights[4] = {"off": "disabled by TORCH_FR_BUFFER_SIZE=0"}
    hist = history.align(flights, 3)
    (g,) = hist["groups"]
    assert [r["seq"] for r in g["rows"]] == [7, 8, 9] and g["first_divergence"] == 9
    assert g["rows"][0]["cells"][3] == history.NOT_REACHED and hist["without"] == [4]
    text = history.render(hist)
    assert "  SEQ  ranks 1-2" in text and text.endswith("no Flight Recorder history from rank 4")
    assert sum("first divergence" in line for line in text.splitlines()) == 1


def test_two_ranks_uneven_is_no_tie_the_rank_in_ddps_allreduce_is_named():
    dumps = {r: d for r, d in uneven_dumps().items() if r < 2}
    snap = verdict.annotate(snap_of({0: BACKWARD, 1: BARRIER}), dumps)
    assert snap["culprit"] == 0 and snap["verdict"].startswith(
        "rank 0 is in ALLREDUCE #9 (train.py:22) issued by DDP during backward(), which rank 1 never entered: "
        "it waits in BARRIER #9 (train.py:25); rank 0 ran 7 ALLREDUCE, rank 1 ran 6. Usual cause: uneven inputs"
    ), snap["verdict"]


def test_a_plain_tie_still_names_nobody():
    dumps = {r: d for r, d in uneven_dumps().items() if r < 2}
    snap = verdict.annotate(snap_of({0: BARRIER[:1] + BACKWARD[2:], 1: BARRIER}), dumps)  # no backward frames
    assert snap["culprit"] is None and snap["verdict"].startswith("ranks are blocked in different collectives")


def test_a_ray_train_op_the_flight_recorder_never_sees_is_taken_from_the_record():
    """Ranks 0 and 2 wait in ray.train.report (Ray's own collective: torch's recorder shows only their last
    all-reduce, returned); rank 1 computes, past the same all-reduce. The records of the named op decide."""
    report = {"op": "ray.train.report", "seq": 3, "state": "entered", "file": "/job/train.py", "line": 30,
              "pg": "ray.train"}  # fmt: skip
    dumps = {r: {"flight": ddp_rank(6, None), "collective": dict(report)} for r in (0, 2)}
    dumps[1] = {"flight": ddp_rank(6, None), "collective": dict(report, seq=2, state="returned")}
    snap = verdict.annotate(snap_of({0: BARRIER, 1: BACKWARD, 2: BARRIER}), dumps)
    assert snap["collectives_from"] == "flight recorder" and snap["culprit"] == 1
    assert snap["verdict"] == "rank 1 never entered ray.train.report #3; ranks 0,2 wait in it"
