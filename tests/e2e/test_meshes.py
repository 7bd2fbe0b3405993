"""Ranks by mesh coordinates (4 ranks, gloo, real torchrun): each rank publishes the DeviceMeshes the job
makes, and one selector grammar chooses ranks by them (rtdebug.common.selector, rtdebug.rank.meshes)."""

from __future__ import annotations

import json
import time

import pytest

from rtdebug.common import selector
from rtdebug.common.errors import HarnessError

from support.dap import DAPClient
from support.jobs import rtdebug, wait_ranks
from support.paths import SCRIPTS

JOB = SCRIPTS / "mesh_job.py"


def entry(rank, dims, shape, coord):
    return {"rank": rank, "meshes": [{"dims": dims, "shape": shape, "coord": coord}]}


GRID = [entry(r, ["dp", "tp"], [2, 2], [r // 2, r % 2]) for r in range(4)]


@pytest.mark.parametrize(
    "text,want",
    [("tp=1", {1, 3}), ("dp=0", {0, 1}), ("dp=0,tp=*", {0, 1}), ("dp=1,tp=0", {2}), ("dp=(0,1),tp=1", {1, 3}),
     ("tp=0:1", {0, 2}), ("dp=*", {0, 1, 2, 3})],
)  # fmt: skip
def test_the_grammar_chooses_by_coordinates(text, want):
    assert selector.resolve(text, GRID) == want


@pytest.mark.parametrize(
    "text,message",
    [
        ("pp=0", "--rank pp=0: unknown mesh dimension 'pp'; the dimensions are dp (0-1), tp (0-1)"),
        ("tp=2", "--rank tp=2: tp=2 is out of range; tp is 0-1"),
        ("tp=x", "--rank 'tp=x': 'tp=x' is not DIM=N, DIM=*, DIM=A:B or DIM=(A,B,...)"),
    ],
)
def test_a_bad_selector_is_one_line_that_lists_the_valid_ones(text, message):
    with pytest.raises(HarnessError) as exc:
        selector.resolve(text, GRID)
    assert exc.value.message == message


def test_forged_meshes_in_an_entry_are_never_coordinates():
    forged = [
        {"rank": 9, "meshes": [{"dims": ["tp"], "shape": [2], "coord": [5]}]},  # coordinate out of its shape
        {"rank": 8, "meshes": [{"dims": ["t\\x1bp"], "shape": [2], "coord": [1]}]},
        {"rank": 7, "meshes": "x"},
        {"rank": 6, "meshes": [{"dims": ["tp"], "shape": [True], "coord": [0]}]},
    ]
    assert [selector.coords_of(e) for e in forged] == [{}, {}, {}, {}]
    assert selector.resolve("tp=1", GRID + forged) == {1, 3}


def start(job, registry_dir, port_base, *args):
    j = job(
        "torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "4",
        "--rdzv-endpoint", f"127.0.0.1:{port_base + 4}", str(JOB), *args,
    )  # fmt: skip
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 4)
    for r in range(4):
        j.wait_output(f"rank {r}: mesh ready")
    return j, sid


@pytest.mark.e2e
def test_a_2x2_mesh_attach_tp1_gives_ranks_1_and_3_and_stacks_dp0_ranks_0_and_1(job, registry_dir, port_base):
    j, sid = start(job, registry_dir, port_base, "--layout", "2d")
    ps = rtdebug("ps").stdout
    assert "COORDS" in ps and "dp=0, tp=1" in ps and "dp=1, tp=1" in ps, ps
    only = json.loads(rtdebug("ps", "--json", "--rank", "tp=1").stdout)["sessions"]
    assert [r["rank"] for s in only if s["session_id"] == sid for r in s["ranks"]] == [1, 3]
    out = rtdebug("attach", "--rank", "tp=1", "--json", "--session", sid)
    assert out.returncode == 0, out.stderr
    answers = json.loads(out.stdout)
    assert [(a["rank"], a["coords"]) for a in answers] == [(1, "dp=0, tp=1"), (3, "dp=1, tp=1")]
    for a in answers:  # the DAP truth: the rank behind each port is the one chosen
        c = DAPClient(a["host"], a["port"])
        c.attach()
        main = next(t for t in c.request("threads")["threads"] if t["name"] == "MainThread")
        c.request("pause", threadId=main["id"])
        ev = c.wait_stopped(60)
        frame = next(f for f in c.frames(ev["threadId"]) if f["source"].get("path") == str(JOB))
        assert c.evaluate("dist.get_rank()", frame["id"]) == str(a["rank"])
        c.continue_(ev["threadId"])
        c.disconnect()
    snap = json.loads(rtdebug("stacks", "--json", "--rank", "dp=0", "--session", sid).stdout)
    assert sorted(r for g in snap["groups"] for r in g["ranks"]) == [0, 1]
    text = rtdebug("stacks", "--rank", "dp=0", "--session", sid).stdout
    assert "ranks 0-1 [dp=0, tp=*]: " in text, text
    bad = rtdebug("attach", "--rank", "pp=0", "--session", sid)
    assert bad.returncode == 2 and bad.stderr.strip().endswith(
        "rtdebug: error: --rank pp=0: unknown mesh dimension 'pp'; the dimensions are dp (0-1), tp (0-1)"
    )
    assert rtdebug("stop", "--session", sid).returncode == 0


@pytest.mark.e2e
def test_torchtitan_style_overlapping_meshes_resolve_both(job, registry_dir, port_base):
    j, sid = start(job, registry_dir, port_base, "--layout", "titan")
    got = {}
    for spec in ("dp_shard=1", "cp=0", "dp_shard_cp=3", "dp_shard=0,cp=1"):
        snap = json.loads(rtdebug("stacks", "--json", "--rank", spec, "--session", sid).stdout)
        got[spec] = sorted(r for g in snap["groups"] for r in g["ranks"])
    assert got == {"dp_shard=1": [2, 3], "cp=0": [0, 2], "dp_shard_cp=3": [3], "dp_shard=0,cp=1": [1]}
    assert rtdebug("stop", "--session", sid).returncode == 0


@pytest.mark.e2e
def test_a_hang_in_a_tp_group_names_mesh_tp_and_the_coordinates(job, registry_dir, port_base):
    j, sid = start(job, registry_dir, port_base, "--layout", "2d", "--hang-tp")
    deadline, snap = time.monotonic() + 120, {}
    while time.monotonic() < deadline:
        snap = json.loads(rtdebug("stacks", "--json", "--session", sid).stdout)
        if snap.get("verdict") and "mesh_tp" in snap["verdict"]:
            break
        time.sleep(0.5)
    v = snap.get("verdict") or ""
    assert "on mesh_tp" in v and "rank 3 (dp=1, tp=1)" in v, v
    assert rtdebug("stop", "--session", sid).returncode == 0


@pytest.mark.e2e
def test_wait_by_coordinates_holds_the_chosen_ranks_once_their_mesh_places_them(job, registry_dir, port_base):
    j = job(
        "torchrun", "--debug-port-base", str(port_base), "--wait", "tp=1", "--nproc-per-node", "4",
        "--rdzv-endpoint", f"127.0.0.1:{port_base + 4}", str(JOB), "--layout", "2d",
    )  # fmt: skip
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 4)
    for r in (0, 2):
        j.wait_output(f"rank {r}: mesh ready")
    j.wait_output(f"rtdebug: rank 1 (dp=0, tp=1) waiting for a debugger on 127.0.0.1:{port_base + 1}")
    j.wait_output(f"rtdebug: rank 3 (dp=1, tp=1) waiting for a debugger on 127.0.0.1:{port_base + 3}")
    assert "rank 1: mesh ready" not in j.output() and "rank 3: mesh ready" not in j.output()
    for r in (1, 3):
        c = DAPClient("127.0.0.1", port_base + r)
        c.attach()
        j.wait_output(f"rank {r}: mesh ready")
        c.disconnect()
    bad = rtdebug("torchrun", "--wait", "tp=x", "--nproc-per-node", "1", str(JOB))
    assert bad.returncode == 2 and "rtdebug: error: --wait 'tp=x': 'tp=x' is not DIM=N" in bad.stderr
    assert rtdebug("stop", "--session", sid).returncode == 0
