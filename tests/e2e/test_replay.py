"""Replay one rank alone: a real gloo job captured with ``rtdebug torchrun --capture``, then each rank run alone
with ``rtdebug replay``; what it computes must equal what it computed in the job, bit for bit (CPU).

The job (``tests/scripts/replay_job.py``) makes DDP steps, then one of each other collective (object
collectives, barrier, all_to_all_single, send/recv, all_gather_into_tensor, reduce_scatter_tensor, a
``new_group`` sub-group), and writes each value a rank computed or received to ``lines-R.txt`` and its final
parameters to ``params-R.pt``. ``RTDEBUG_FULL=1`` adds a 4-rank job and FSDP2 on a 2x2 DeviceMesh
(``tests/scripts/replay_mesh.py``). ``tests/scripts/replay_nan.py`` is a rank-specific NaN,
``tests/scripts/replay_raylocal.py`` Ray Train local mode's meetings under torchrun.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from support.dap import DAPClient
from support.jobs import rtdebug, wait_ranks
from support.paths import SCRIPTS, marker_line
from support.ports import free_port_base

pytestmark = pytest.mark.e2e
JOB = SCRIPTS / "replay_job.py"
NAN = SCRIPTS / "replay_nan.py"
MESH = SCRIPTS / "replay_mesh.py"
RAYLOCAL = SCRIPTS / "replay_raylocal.py"
FULL = os.environ.get("RTDEBUG_FULL") == "1"


def capture(where: Path, out: Path, nproc: int, script: Path = JOB, *script_args: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    args = ["torchrun", "--debug-port-base", str(free_port_base(nproc + 1)), "--nproc-per-node", str(nproc)]
    r = rtdebug(*args, "--capture", str(where), str(script), *script_args, env={"OUT": str(out)}, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def replay(where: Path, rank: int, out: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    args = ["replay", str(where), "--rank", str(rank), "--port", str(free_port_base(2)), *extra]
    return rtdebug(*args, env={"OUT": str(out), **env}, timeout=180)


def rtdebug_lines(r: subprocess.CompletedProcess) -> list[str]:
    return [line for line in r.stderr.splitlines() if line.startswith("rtdebug: replay of rank")]


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(capsule, the job's outputs, the script it ran: a copy, so a test can edit it after the capture)."""
    d = tmp_path_factory.mktemp("replay")
    script = d / "job.py"
    shutil.copy(JOB, script)
    capture(d / "cap", d / "job", 2, script)
    return d / "cap", d / "job", script


def same_as_job(job: Path, alone: Path, rank: int) -> None:
    """Every value rank ``rank`` printed and its final parameters equal the job's (torch.equal, not a tolerance)."""
    lines = (alone / f"lines-{rank}.txt").read_text().splitlines()
    assert lines == (job / f"lines-{rank}.txt").read_text().splitlines()
    assert any(" step 3 loss " in x for x in lines) and any(" recv " in x or rank % 2 == 0 for x in lines)
    want = torch.load(job / f"params-{rank}.pt", weights_only=True)
    got = torch.load(alone / f"params-{rank}.pt", weights_only=True)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_alone_computes_what_it_computed_in_the_job(captured, tmp_path, rank):
    cap, job, _ = captured
    r = replay(cap, rank, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert rtdebug_lines(r) == []  # no divergence: what the rank sent is what it sent in the job
    same_as_job(job, tmp_path, rank)


def test_the_ranks_differ_so_the_comparison_can_fail(captured):
    _, job, _ = captured
    assert (job / "lines-0.txt").read_text() != (job / "lines-1.txt").read_text()


def test_an_edited_script_names_the_first_diverging_collective(captured, tmp_path):
    cap, _, script = captured
    edited = tmp_path / "job.py"
    edited.write_text(script.read_text().replace("lr=0.1", "lr=0.2"))
    r = replay(cap, 1, tmp_path / "out", "--script", str(edited))
    assert r.returncode == 0, r.stderr[-3000:]
    # step 0's gradients are the same; step 1's (after an update at lr 0.2) are not: DDP's first bucket then
    where = marker_line(edited, "backward", ("replay-marker: ",))
    [line] = rtdebug_lines(r)
    prefix = (
        f"rtdebug: replay of rank 1 diverged at collective #7 (all_reduce, DDP gradient bucket, job.py:{where}): "
        "the input differs from the capture (|Δ sum| "
    )
    assert line.startswith(prefix) and line.endswith(")") and float(line[len(prefix) : -1]) > 0, line
    step0 = (tmp_path / "out" / "lines-1.txt").read_text().splitlines()[0]
    assert step0 == (captured[1] / "lines-1.txt").read_text().splitlines()[0]  # before #7, the same


def test_more_collectives_than_captured_is_one_line_and_exit_1(captured, tmp_path):
    cap, _, script = captured
    r = replay(cap, 0, tmp_path, EXTRA="1")
    assert r.returncode == 1, r.stderr[-3000:]
    extra = marker_line(script, "extra", ("replay-marker: ",))
    assert rtdebug_lines(r) == [
        "rtdebug: replay of rank 0: the script makes more collectives than the capture holds: capture ends at "
        f"collective #20 (then all_reduce, job.py:{extra})"
    ]
    assert "Traceback" not in r.stderr


def test_the_capsule_says_what_it_holds(captured):
    from rtdebug.capsule.read import open_capsule

    cap, _, script = captured
    c = open_capsule(cap)
    assert (c.world_size, c.ranks, c.manifest["script"], c.manifest["format"]) == (2, [0, 1], str(script), 1)
    log = c.rank(1)
    assert (log.complete_upto, log.end_reason) == (20, "ended")
    ops = [r["name"] for r in log.collectives()]
    for name in ("all_reduce", "broadcast", "all_gather", "barrier", "all_to_all_single", "recv"):
        assert name in ops
    assert ops.count("all_gather_into_tensor") == 1 and ops.count("reduce_scatter_tensor") == 1
    groups = [r for r in log.records if r["kind"] == "group"]
    assert [(g["g"], g["ranks"]) for g in groups] == [(0, [0, 1]), (1, [0, 1])]
    log.check_tensors()


@pytest.fixture(scope="module")
def nan_capsule(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("replay-nan")
    capture(d / "cap", d / "job", 2, NAN)
    return d / "cap", d / "job"


def test_a_rank_specific_nan_stops_the_replay_at_the_same_step_and_line(nan_capsule, tmp_path, job, registry_dir):
    """Rank 1's shard holds a NaN at step 3: rank 1 alone, --stop-on nonfinite, stops at step 3 on the
    backward line, and a real DAP client reads there the values the job printed for that step."""
    cap, out = nan_capsule
    want = (out / "lines-1.txt").read_text().splitlines()[3]  # rank 1 step 3 ysum Y loss nan
    assert want.startswith("rank 1 step 3 ysum ") and want.endswith(" loss nan")
    port = free_port_base(2)
    j = job("replay", str(cap), "--rank", "1", "--port", str(port), "--stop-on", "nonfinite",
            env={"OUT": str(tmp_path)})  # fmt: skip
    wait_ranks(registry_dir, j.session_id(), 1, states=("ready", "attached", "stopped"))
    c = DAPClient("127.0.0.1", port)
    try:
        c.attach()
        ev = c.wait_stopped(120)
        assert ev["description"].startswith("rtdebug --stop-on nonfinite: "), ev
        frame = c.top_frame(ev["threadId"])
        assert frame["source"]["path"] == str(NAN)
        assert c.evaluate("step", frame["id"]) == "3"
        ysum = want.split(" ysum ", 1)[1].split(" loss ", 1)[0]
        assert c.evaluate("repr(float(y.sum()))", frame["id"]) == repr(ysum)
        assert c.evaluate("loss.item()", frame["id"]) == "nan"
    finally:
        c.close()
    assert rtdebug("stop", "--session", j.session_id()).returncode == 0


def test_stop_at_collective_stops_before_it_at_the_users_line(nan_capsule, tmp_path, job, registry_dir):
    cap, _ = nan_capsule
    index = (cap / "rank-0" / "index.jsonl").read_text().splitlines()
    seventh = next(json.loads(x) for x in index if '"n":7,' in x)
    port = free_port_base(2)
    j = job("replay", str(cap), "--rank", "0", "--port", str(port), "--wait", "--stop-at-collective", "7",
            env={"OUT": str(tmp_path)})  # fmt: skip
    wait_ranks(registry_dir, j.session_id(), 1)
    c = DAPClient("127.0.0.1", port)
    try:
        c.attach()
        ev = c.wait_stopped(120)
        frame = c.top_frame(ev["threadId"])
        assert (frame["source"]["path"], frame["line"]) == (
            str(NAN),
            marker_line(NAN, "backward", ("replay-marker: ",)),
        )
        assert seventh["site"] == f"replay_nan.py:{frame['line']}" and seventh["ddp"] is True
        # collective #7 is step 1's bucket: step 0 is done (one line written), step 1's not yet
        assert c.evaluate("step", frame["id"]) == "1"
        assert (tmp_path / "lines-0.txt").read_text().count("\n") == 1
    finally:
        c.close()
    assert rtdebug("stop", "--session", j.session_id()).returncode == 0


@pytest.mark.skipif(not FULL, reason="RTDEBUG_FULL=1: a 4-rank capture (~20 s) and a replay")
def test_fsdp2_on_a_2x2_mesh_replays_a_rank_alone(tmp_path):
    """FSDP2 (all_gather_into_tensor, reduce_scatter_tensor) on the mesh's dp groups, an all_reduce on tp."""
    capture(tmp_path / "cap", tmp_path / "job", 4, MESH)
    groups = [r for r in open_rank(tmp_path / "cap", 3).records if r["kind"] == "group"]
    assert [g["ranks"] for g in groups] == [[0, 1, 2, 3], [1, 3], [2, 3]]  # the world, rank 3's dp, its tp
    r = replay(tmp_path / "cap", 3, tmp_path / "alone")
    assert r.returncode == 0 and rtdebug_lines(r) == [], r.stderr[-3000:]
    lines = (tmp_path / "alone" / "lines-3.txt").read_text()
    assert lines == (tmp_path / "job" / "lines-3.txt").read_text() and lines.count(" tp ") == 3
    want = torch.load(tmp_path / "job" / "params-3.pt", weights_only=True)
    got = torch.load(tmp_path / "alone" / "params-3.pt", weights_only=True)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_ray_train_local_mode_meetings_replay_and_write_only_to_scratch(tmp_path):
    """Ray Train local mode under torchrun: rank 1 alone sees rank 0's broadcast_from_rank_zero value and the
    checkpoint directory the ranks agreed on in report(), and writes its checkpoint under the scratch folder."""
    storage = tmp_path / "storage"
    capture(tmp_path / "cap", tmp_path / "job", 2, RAYLOCAL, str(storage))
    job_lines = (tmp_path / "job" / "lines-1.txt").read_text()
    assert "{'from': 0, 'r': " in job_lines and " checkpoint checkpoint_" in job_lines
    before = sorted(str(p.relative_to(storage)) for p in storage.rglob("*"))
    r = replay(tmp_path / "cap", 1, tmp_path / "alone")
    assert r.returncode == 0 and rtdebug_lines(r) == [], r.stderr[-3000:]
    assert (tmp_path / "alone" / "lines-1.txt").read_text() == job_lines
    assert sorted(str(p.relative_to(storage)) for p in storage.rglob("*")) == before  # the job's storage as it was
    name = job_lines.rsplit(" checkpoint ", 1)[1].strip()
    assert (tmp_path / "cap" / "scratch" / "rank-1" / "replay-run" / name / "rank1.txt").is_file()


UNCAPTURABLE = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + os.path.join(os.environ["OUT"], "store"), rank=0, world_size=1)
t = torch.ones(2)
dist.all_reduce(t)
dist.monitored_barrier()  # not an op a capture knows
dist.all_reduce(t)
print("done", t.tolist())
"""


def test_an_op_the_capture_does_not_know_is_one_line_and_the_job_runs_on(tmp_path):
    script = tmp_path / "uncapturable.py"
    script.write_text(UNCAPTURABLE)
    (tmp_path / "job").mkdir()
    r = rtdebug("run", "--port", str(free_port_base(2)), "--capture", str(tmp_path / "cap"), str(script),
                env={"OUT": str(tmp_path / "job")})  # fmt: skip
    assert r.returncode == 0 and "done [1.0, 1.0]" in r.stdout, r.stderr[-3000:]
    said = [x for x in r.stderr.splitlines() if x.startswith("rtdebug: capture of rank")]
    assert said == [
        "rtdebug: capture of rank 0: monitored_barrier cannot be captured; the capsule ends before it "
        "(collective #2); the job runs on"
    ]
    log = open_rank(tmp_path / "cap", 0)
    assert (log.complete_upto, log.end_reason) == (1, "monitored_barrier cannot be captured")
    r = replay(tmp_path / "cap", 0, tmp_path / "alone")
    where = next(i for i, x in enumerate(UNCAPTURABLE.splitlines(), 1) if "monitored_barrier" in x)
    assert r.returncode == 1 and rtdebug_lines(r) == [
        "rtdebug: replay of rank 0: the script makes more collectives than the capture holds: capture ends at "
        f"collective #1 (then monitored_barrier, uncapturable.py:{where})"
    ], r.stderr[-3000:]


def open_rank(cap: Path, rank: int):
    from rtdebug.capsule.read import open_capsule

    return open_capsule(cap).rank(rank)


@pytest.mark.skipif(not FULL, reason="RTDEBUG_FULL=1: a 4-rank capture and four replays")
def test_four_ranks_each_alone(tmp_path):
    capture(tmp_path / "cap", tmp_path / "job", 4)
    for rank in range(4):
        r = replay(tmp_path / "cap", rank, tmp_path / f"alone-{rank}")
        assert r.returncode == 0 and rtdebug_lines(r) == [], r.stderr[-3000:]
        same_as_job(tmp_path / "job", tmp_path / f"alone-{rank}", rank)
