"""`rtdebug stacks` on a healthy DDP job (real torchrun, gloo, CPU): a job that moves is never called hung.

Issue 43 item 5: one snapshot of a job at hundreds of collectives a second reads as a hang (the ranks are dumped
milliseconds apart, each "in" some all-reduce). ``stacks`` looks twice (``rtdebug.stacks.motion``) and gives a
verdict only to ranks that stand still; the hang tests (test_stacks_e2e.py, test_hangs_real.py) keep theirs.
"""

from __future__ import annotations

import json
import os

import pytest

from support.jobs import rtdebug, wait_ranks
from support.paths import SCRIPTS
from support.wait import until

pytestmark = pytest.mark.e2e

FULL = os.environ.get("RTDEBUG_FULL") == "1"
STEPPER = SCRIPTS / "ddp_stepper.py"
CALLS = 20
# words only a verdict says: none may appear for a job that trains
VERDICT_WORDS = ("never entered", "blocked in different", "wait in it", "waits in it", "no rank named", " are in ")


def steps(path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def start(job, registry_dir, port_base, tmp_path, nproc: int, *flags: str) -> tuple[str, object]:
    counter = tmp_path / "steps"
    j = job("torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", str(nproc), str(STEPPER),
            str(counter), *flags)  # fmt: skip
    sid = j.session_id()
    wait_ranks(registry_dir, sid, nproc)
    first = until(lambda: steps(counter), 120, "the job's first 50 steps")
    until(lambda: steps(counter), 60, "50 steps more", ok=lambda n: n > first)  # training, not starting
    return sid, counter


def check_calls(sid: str, counter, nproc: int) -> list[dict]:
    """``CALLS`` stacks calls, half --json: none has a verdict or a culprit; returns the JSON answers."""
    answers, texts = [], []
    for i in range(CALLS):
        if i % 2:
            out = rtdebug("stacks", "--session", sid, "--json", timeout=60)
            assert out.returncode == 0, out.stderr
            snap = json.loads(out.stdout)
            assert (snap["verdict"], snap["culprit"]) == (None, None), snap["verdict"]
            assert snap["motion"]["state"] in ("moving", "none"), snap["motion"]
            assert sorted(r for g in snap["groups"] for r in g["ranks"]) == list(range(nproc))
            answers.append(snap)
        else:
            out = rtdebug("stacks", "--session", sid, timeout=60)
            assert out.returncode == 0, out.stderr
            head = out.stdout.split("\nsession ", 1)[0]
            assert not any(w in head for w in VERDICT_WORDS), head
            texts.append(head)
    before = steps(counter)
    until(lambda: steps(counter), 60, "steps after the calls", ok=lambda n: n > before)  # still training
    moving = [s for s in answers if s["motion"]["state"] == "moving"]
    for s in moving:
        assert s["motion"]["advanced"] and s["motion"]["how"] in ("record", "dump"), s["motion"]
    said = [t for t in texts if t.startswith("the job is progressing: ")]
    assert all("; no hang. Where each rank is now:" in t for t in said), texts
    # most calls find the ranks inside an all-reduce, which one instant would call a verdict: seen moving
    assert len(moving) + len(said) >= CALLS // 4, ([s["motion"] for s in answers], texts)
    return answers


def test_healthy_two_rank_ddp_job_is_never_called_hung(job, registry_dir, port_base, tmp_path):
    """DDP's all-reduce is issued from C++: the collective record does not move, so a second dump decides."""
    sid, counter = start(job, registry_dir, port_base, tmp_path, 2)
    answers = check_calls(sid, counter, 2)
    assert any(s["motion"]["how"] == "dump" for s in answers if s["motion"]["state"] == "moving")
    # the instant snapshot is still there for whoever wants it, said as such
    out = rtdebug("stacks", "--session", sid, "--json", "--snapshot", timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["motion"] == {
        "state": "instant", "window_s": 0.0, "advanced": {}, "how": None, "why": None
    }  # fmt: skip


@pytest.mark.skipif(not FULL, reason="RTDEBUG_FULL=1: 4 ranks, 20 calls, the loss all-reduced from Python too")
def test_healthy_four_rank_ddp_job_is_never_called_hung(job, registry_dir, port_base, tmp_path):
    """With a Python-level all-reduce each step, the record moves: no second dump is needed."""
    sid, counter = start(job, registry_dir, port_base, tmp_path, 4, "--loss-reduce")
    answers = check_calls(sid, counter, 4)
    assert any(s["motion"]["how"] == "record" for s in answers if s["motion"]["state"] == "moving")
