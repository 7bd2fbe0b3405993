"""The collective record in real ranks: what the wrapper keeps, that it changes nothing, and stop_at_next().

Real torch (gloo, CPU), real `rtdebug torchrun`, a real DAP client per rank (tests/dap.py).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from rtdebug.registry import collseq

from support.dap import DAPClient
from support.jobs import rtdebug, wait_ranks
from support.paths import EXAMPLES, PY, SCRIPTS, marker_line

HANG = EXAMPLES / "hang.py"
STOP_EXPR = "__import__('rtdebug.rank.api', fromlist=['_']).stop_at_next_collective()"  # as the extension sends it
SNAP_EXPR = "__import__('rtdebug.rank.collectives.recorder', fromlist=['_']).snapshot()"


def single(tmp_path, **env) -> dict:
    script = SCRIPTS / "collrec_single.py"
    out = subprocess.run(
        [PY, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120, env={**_env(), **env}
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.split("RESULT ", 1)[1])


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "RTDEBUG_COLLECTIVES"}


def test_wrapper_records_each_collective_and_changes_nothing(tmp_path):
    r = single(tmp_path)
    script = str(SCRIPTS / "collrec_single.py")
    assert r["field"] == {"file": "coll-0.bin"} and r["before"] is None
    assert r["wrapped"] and r["signature"]
    assert r["ret_sync"] == "None" and r["async_type"] == "Work"  # return values and async_op pass through
    sync = r["after_sync"]
    assert (sync["op"], sync["seq"], sync["state"], sync["shapes"], sync["dtype"]) == (
        "ALLREDUCE", 1, "returned", "[3, 2]", "float32",
    )  # fmt: skip
    assert (sync["file"], sync["line"], sync["func"]) == (
        script,
        marker_line(SCRIPTS / "collrec_single.py", "collrec sync"),
        "<module>",
    )
    assert r["after_async"]["seq"] == 2 and r["after_barrier"]["op"] == "BARRIER" and r["after_barrier"]["seq"] == 3
    assert r["raised"] == "RuntimeError"  # the collective's own exception propagates
    assert (r["after_raise"]["op"], r["after_raise"]["seq"]) == ("BROADCAST", 4)
    g = r["after_group"]  # another group counts from 1, under its own name
    assert (g["op"], g["seq"], g["dtype"], g["shapes"]) == ("ALLREDUCE", 1, "int64", "[2]") and g["pg"] != sync["pg"]
    assert r["compiled"] == [3.0, 3.0]  # a torch.compile'd caller still runs
    c = r["from_c"]  # called from C with no Python caller: recorded, without a call site, and it ran
    assert (c["op"], c["shapes"], c["state"], c["file"], c["line"]) == ("ALLREDUCE", "[1]", "returned", "", 0)
    assert r["file_record"]["seq"] >= 1 and r["file_record"]["state"] == "returned"  # the file says the same
    co = r["coalesced"]
    assert (co["op"], co["shapes"], co["state"], co["seq"]) == ("ALLREDUCE", "[3]", "returned", c["seq"] + 2)
    *alt, positional, barrier = r["alternate"]
    assert [a[0] for a in alt] == ["[2]", "[3]", "[2]"] and [a[1]["shapes"] for a in alt] == ["[2]", "[3]", "[2]"]
    assert [a[1]["seq"] for a in alt] == [alt[0][1]["seq"], alt[0][1]["seq"] + 1, alt[0][1]["seq"] + 2]
    assert alt[0][1]["line"] == marker_line(SCRIPTS / "collrec_single.py", "collrec alternate")
    assert (positional["pg"], positional["seq"]) == (g["pg"], 2)  # a group passed by position is that group
    assert positional["line"] == marker_line(SCRIPTS / "collrec_single.py", "collrec positional group")
    assert (barrier["op"], barrier["pg"], barrier["seq"]) == ("BARRIER", g["pg"], 3)
    assert r["cached_after_destroy"] == 0


def test_off_switch_leaves_torch_alone(tmp_path):
    r = single(tmp_path, RTDEBUG_COLLECTIVES="0")
    assert r["field"] is None and r["wrapped"] is False and r["after_sync"] is None
    assert not (tmp_path / "coll-0.bin").exists()


def records(registry_dir, sid: str, ranks) -> dict[int, dict | None]:
    return {e["rank"]: collseq.read_entry(registry_dir / sid, e) for e in ranks.values()}


@pytest.mark.e2e
def test_hang_example_record_shows_who_is_elsewhere(job, registry_dir, port_base):
    """Rank 1 skips an all_reduce: rank 0 is `entered` in ALLREDUCE #4, rank 1 in BARRIER #4."""
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", str(HANG))
    sid = j.session_id()
    ranks = wait_ranks(registry_dir, sid, 2)
    assert {r: e["collectives"] for r, e in ranks.items()} == {0: {"file": "coll-0.bin"}, 1: {"file": "coll-1.bin"}}
    deadline = time.monotonic() + 120
    while True:
        recs = records(registry_dir, sid, ranks)
        if all(r is not None and r["state"] == "entered" and r["seq"] == 4 for r in recs.values()):
            break
        assert time.monotonic() < deadline, recs
        time.sleep(0.3)
    assert (recs[0]["op"], recs[0]["func"], recs[0]["line"]) == (
        "ALLREDUCE",
        "train_step",
        marker_line(HANG, "hang all_reduce"),
    )
    assert (recs[1]["op"], recs[1]["func"], recs[1]["line"]) == (
        "BARRIER",
        "evaluate",
        marker_line(HANG, "hang barrier"),
    )
    assert recs[0]["file"] == str(HANG) and recs[0]["shapes"] == "[4]" and recs[1]["shapes"] == ""
    # ps shows the same, per rank, read from the files
    ps = rtdebug("ps", "--json")
    assert ps.returncode == 0, ps.stderr
    session = next(s for s in json.loads(ps.stdout)["sessions"] if s["session_id"] == sid)
    assert {r["rank"]: r["collective"] for r in session["ranks"]} == recs
    table = rtdebug("ps").stdout
    assert f"in ALLREDUCE #4 (hang.py:{marker_line(HANG, 'hang all_reduce')}) " in table
    assert f"in BARRIER #4 (hang.py:{marker_line(HANG, 'hang barrier')}) " in table


def _stop_all(clients: dict[int, DAPClient], thread: dict[int, int]) -> dict[int, dict]:
    """Arm stop_at_next in each stopped rank, continue all, return each rank's next stop (frame + record)."""
    for rank, c in clients.items():
        frame = c.top_frame(thread[rank])
        assert "stops at its next collective" in c.evaluate(STOP_EXPR, frame["id"])
    for rank, c in clients.items():
        c.continue_(thread[rank])
    out = {}
    for rank, c in clients.items():
        stopped = c.wait_stopped(120)
        thread[rank] = stopped["threadId"]
        frame = c.top_frame(stopped["threadId"])
        snap = c.evaluate(SNAP_EXPR, frame["id"])
        out[rank] = {"frame": frame, "snap": snap}
    return out


@pytest.mark.e2e
@pytest.mark.parametrize("skip_rank", [1, 9], ids=["hang", "healthy"])
def test_stop_at_next_collective_in_each_rank(job, registry_dir, port_base, skip_rank):
    """Both ranks at a breakpoint; stop_at_next + continue, twice: the second round shows where each goes."""
    line = marker_line(HANG, "hang all_reduce")
    j = job(
        "torchrun", "--debug-port-base", str(port_base), "--wait", "all", "--nproc-per-node", "2", str(HANG),
        "--steps", "1", "--skip-rank", str(skip_rank),
    )  # fmt: skip
    sid = j.session_id()
    ranks = wait_ranks(registry_dir, sid, 2)
    j.wait_output("rtdebug: all 2 local ranks ready")
    clients, thread = {}, {}
    for rank in (0, 1):
        clients[rank] = DAPClient("127.0.0.1", port_base + rank)
        clients[rank].attach({str(HANG): [line]})
    for rank, c in clients.items():
        thread[rank] = c.wait_stopped(120)["threadId"]
        c.request("setBreakpoints", source={"path": str(HANG)}, breakpoints=[])
    first = _stop_all(clients, thread)  # stopped at the breakpoint, before the all_reduce: it is the next one
    for rank in (0, 1):
        assert (first[rank]["frame"]["name"], first[rank]["frame"]["line"]) == ("train_step", line)
        assert "'op': 'ALLREDUCE', 'seq': 1, 'state': 'entered'" in first[rank]["snap"]
    second = _stop_all(clients, thread)
    recs = records(registry_dir, sid, ranks)
    assert second[0]["frame"]["name"] == "train_step" and second[0]["frame"]["line"] == line
    assert (recs[0]["op"], recs[0]["seq"], recs[0]["state"]) == ("ALLREDUCE", 2, "entered")
    if skip_rank == 9:  # healthy: the same op and seq in both
        assert (second[1]["frame"]["name"], second[1]["frame"]["line"]) == ("train_step", line)
        assert (recs[1]["op"], recs[1]["seq"]) == ("ALLREDUCE", 2)
    else:  # rank 1 skipped its all_reduce: the mismatch is visible before anything blocks
        assert (second[1]["frame"]["name"], second[1]["frame"]["line"]) == (
            "evaluate",
            marker_line(HANG, "hang barrier"),
        )
        assert (recs[1]["op"], recs[1]["seq"]) == ("BARRIER", 2)
    for rank in (0, 1):
        assert f"'seq': {recs[rank]['seq']}" in second[rank]["snap"] and recs[rank]["op"] in second[rank]["snap"]
    if skip_rank == 9:  # stepping over from that stop, in every rank together, completes the all_reduce
        for rank, c in clients.items():
            c.request("next", threadId=thread[rank])
        for c in clients.values():
            stopped = c.wait_stopped(120)
            assert stopped["reason"] == "step"
            assert c.top_frame(stopped["threadId"])["name"] == "main"
        assert all(r["state"] == "returned" for r in records(registry_dir, sid, ranks).values())
    for c in clients.values():
        c.disconnect()


def test_stack_groups_see_through_the_wrapper():
    """The wrapper's frame sits between the user's call and torch's all_reduce; the group still shows all_reduce."""
    from rtdebug.common.paths import PACKAGE_DIR
    from rtdebug.stacks.group import frame, group

    lib = "/x/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
    frames = [frame(lib, 3252, "all_reduce"), frame(PACKAGE_DIR + "rank/collectives/recorder.py", 118, "collective")]
    frames += [frame("/job/train.py", 42, "train_step"), frame("/job/train.py", 9, "<module>")]
    g = group(
        {0: {"threads": [{"id": "0x1", "current": True, "frames": frames, "truncated": False}], "main_id": "0x1"}}
    )
    assert g[0]["label"] == "all_reduce \u2190 train_step (train.py:42)"
    assert [f["function"] for f in g[0]["frames"]] == ["all_reduce", "train_step", "<module>"]
