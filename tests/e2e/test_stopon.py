"""``--stop-on``: every rank stops in the debugger at the step training goes wrong (3 ranks, gloo, real
torchrun, real DAP clients), before the optimizer changes the weights, the origin named.

The job (``scripts/stopon_train.py``) keeps ``step`` (the loop's) and ``steps_done`` (optimizer steps
taken): at a stop before ``optimizer.step()`` both read the same through DAP.
"""

from __future__ import annotations

import json
import time

import pytest

from support.dap import DAPClient
from support.jobs import rtdebug, wait_ranks
from support.paths import EXAMPLES, SCRIPTS
from support.wait import until

pytestmark = pytest.mark.e2e

TRAIN = SCRIPTS / "stopon_train.py"


def start(job, registry_dir, port_base, stop_on, *args, n=3):
    j = job(
        "torchrun", "--debug-port-base", str(port_base), "--stop-on", stop_on, "--nproc-per-node", str(n),
        "--rdzv-endpoint", f"127.0.0.1:{port_base + n}", str(TRAIN), *args,
    )  # fmt: skip
    sid = j.session_id()
    wait_ranks(registry_dir, sid, n)
    return j, sid


def stops(sid: str, n: int, timeout: float = 120) -> dict[int, dict]:
    """Each rank's ``stop`` entry once all ``n`` ranks say they are stopped (``ps --json``)."""
    deadline = time.monotonic() + timeout
    got: dict[int, dict] = {}
    while time.monotonic() < deadline:
        out = rtdebug("ps", "--json")
        assert out.returncode == 0, out.stderr
        session = next((s for s in json.loads(out.stdout)["sessions"] if s["session_id"] == sid), None)
        got = {r["rank"]: r["stop"] for r in (session or {}).get("ranks", []) if r.get("stop")}
        if len(got) == n:
            return got
        time.sleep(0.3)
    raise AssertionError(f"not every rank stopped: {got}")


def attach_all(port_base: int, n: int) -> dict[int, tuple[DAPClient, dict]]:
    out = {}
    for r in range(n):
        c = DAPClient("127.0.0.1", port_base + r)
        c.attach()
        out[r] = (c, c.wait_stopped(60))
    return out


def test_nan_in_one_ranks_batch_stops_every_rank_at_that_step_origin_named(job, registry_dir, port_base):
    j, sid = start(job, registry_dir, port_base, "nonfinite", "--nan-rank", "1", "--nan-step", "5")
    got = stops(sid, 3)
    why = "non-finite loss and grad of fc1.weight (+3 more) at step 5 (origin)"
    assert got[1] == {"kind": "nonfinite", "reason": why, "origin": True, "step": 5}
    for r in (0, 2):
        assert got[r]["reason"] == "non-finite grad at step 5: received in the all-reduce (origin: rank 1)"
        assert got[r]["origin"] is False
    text = rtdebug("stacks", "--session", sid).stdout
    assert text.splitlines()[0] == (
        "stopped by --stop-on nonfinite: rank 1: non-finite loss and grad of fc1.weight (+3 more) at step 5 "
        "(origin); "
        "ranks 0,2 received it in the all-reduce"
    )
    ps = rtdebug("ps").stdout
    assert "stopped (nonfinite: non-finite loss and grad of fc1.weight (+3 more) at step 5 (origin))" in ps
    clients = attach_all(port_base, 3)
    for r, (c, ev) in clients.items():
        assert ev["reason"] == "breakpoint" and ev["description"].startswith("rtdebug --stop-on nonfinite: ")
        assert ev["preserveFocusHint"] is (r != 1)  # the origin rank takes the focus
        frame = c.top_frame(ev["threadId"])
        assert frame["name"] == "<module>" and frame["source"]["path"] == str(TRAIN)
        assert (c.evaluate("step", frame["id"]), c.evaluate("steps_done", frame["id"])) == ("5", "5")
        assert c.evaluate("bool(torch.isfinite(net.fc1.weight).all())", frame["id"]) == "True"  # no step yet
    for c, ev in clients.values():
        c.continue_(ev["threadId"])
    # the NaN gradients are applied now; the next step's loss is non-finite on every rank: it fires again
    for c, _ in clients.values():
        ev = c.wait_stopped(60)
        frame = c.top_frame(ev["threadId"])
        assert c.evaluate("step", frame["id"]) == "6" and "at step 6 (origin)" in ev["description"]
    for c, _ in clients.values():
        c.close()
    assert rtdebug("stop", "--session", sid).returncode == 0


def test_deep_names_the_first_module_whose_output_went_non_finite_on_the_origin(job, registry_dir, port_base):
    j, sid = start(job, registry_dir, port_base, "nonfinite:deep", "--nan-rank", "1", "--nan-step", "5")
    got = stops(sid, 3)
    assert got[1]["reason"] == (
        "non-finite loss and grad of fc1.weight (+3 more) at step 5 (origin); first non-finite output: fc1"
    )
    for r in (0, 2):  # their forward was finite: nothing to name
        assert got[r]["reason"] == "non-finite grad at step 5: received in the all-reduce (origin: rank 1)"
    assert rtdebug("stop", "--session", sid).returncode == 0


def test_an_inf_in_one_loss_only_stops_every_rank_and_continue_leaves_the_gradients_true(job, registry_dir, port_base):
    """The loss alone is non-finite: rtdebug carries it to the other ranks in DDP's own all-reduce (one
    NaN element) and puts that element back before anyone looks; continuing trains on with finite weights."""
    j, sid = start(job, registry_dir, port_base, "nonfinite", "--inf-loss-rank", "2", "--inf-loss-step", "3")
    got = stops(sid, 3)
    assert got[2]["reason"] == "non-finite loss at step 3 (origin)" and got[2]["origin"] is True
    assert got[0]["reason"] == got[1]["reason"] == "non-finite loss on rank 2 at step 3"
    clients = attach_all(port_base, 3)
    grads = "all(bool(torch.isfinite(p.grad).all()) for p in net.parameters())"
    for c, ev in clients.values():
        frame = c.top_frame(ev["threadId"])
        assert c.evaluate("steps_done", frame["id"]) == "3" and c.evaluate(grads, frame["id"]) == "True"
    for c, ev in clients.values():
        c.continue_(ev["threadId"])
    assert j.wait(120) == 0, j.output()[-3000:]
    assert j.output().count("trained 20 steps; weights finite: True") == 3


def test_a_loss_gone_bad_in_a_no_sync_micro_batch_stops_every_rank_at_that_steps_sync(job, registry_dir, port_base):
    """Gradient accumulation under DDP's no_sync(): nothing is reduced in micro-batches 0-1, so nothing is
    decided there (a collective of ours would hang); the finding rides the step's synchronised backward."""
    j, sid = start(
        job, registry_dir, port_base, "nonfinite", "--accumulate", "3",
        "--inf-loss-rank", "1", "--inf-loss-step", "2", "--inf-micro", "0",
    )  # fmt: skip
    got = stops(sid, 3)
    assert got[1] == {"kind": "nonfinite", "origin": True, "step": 2,
                      "reason": "non-finite loss at step 2 (micro-batch 0 under no_sync) (origin)"}  # fmt: skip
    assert got[0]["reason"] == got[2]["reason"] == "non-finite loss on rank 1 at step 2"
    clients = attach_all(port_base, 3)
    for c, ev in clients.values():
        frame = c.top_frame(ev["threadId"])
        assert (c.evaluate("step", frame["id"]), c.evaluate("micro", frame["id"])) == ("2", "2")
        c.close()
    assert rtdebug("stop", "--session", sid).returncode == 0


def test_under_a_comm_hook_that_reduces_nothing_only_the_origin_stops_and_no_rank_waits_on_us(
    job, registry_dir, port_base
):
    """DDP's noop_hook: the replicas do not end backward alike, so no collective of ours may follow it
    (the others would never enter it): the origin stops alone and says so, the others train to the end."""
    j, sid = start(job, registry_dir, port_base, "nonfinite", "--noop-hook", "--nan-rank", "1", "--nan-step", "3")
    got = stops(sid, 1)
    assert got[1]["reason"] == (
        "non-finite loss and grad of fc1.weight (+3 more) at step 3 (origin); this rank alone: no gradient sync "
        "in this backward that every rank sees alike"
    )
    until(lambda: j.output().count("trained 20 steps") == 2, 120, "ranks 0 and 2 trained on", context=j.output)
    assert rtdebug("stop", "--session", sid).returncode == 0


def test_an_overflow_only_in_the_allreduce_has_no_origin_and_says_so(job, registry_dir, port_base):
    """The user's own fp16_compress_hook: each rank's gradients are finite, their fp16 sum is not. The
    user's hook still runs (inside rtdebug's)."""
    j, sid = start(job, registry_dir, port_base, "nonfinite", "--overflow-step", "2")
    got = stops(sid, 3)
    want = "non-finite grad after the all-reduce at step 2: no rank had one before it (an overflow)"
    assert {r: s["reason"] for r, s in got.items()} == {0: want, 1: want, 2: want}
    assert all(s["origin"] is False for s in got.values())
    assert rtdebug("stop", "--session", sid).returncode == 0


def test_a_perturbed_replica_is_named_at_the_next_check(job, registry_dir, port_base):
    j, sid = start(job, registry_dir, port_base, "disagree:3", "--perturb-rank", "2", "--perturb-step", "4")
    got = stops(sid, 3)
    for r, s in got.items():
        assert s == {"kind": "disagree", "reason": "rank 2 differs from 0, 1 in fc1.weight at step 6",
                     "origin": r == 2, "step": 6}  # fmt: skip
    text = rtdebug("stacks", "--session", sid).stdout
    assert text.splitlines()[0].startswith("stopped by --stop-on disagree: rank 2: rank 2 differs from 0, 1 in")
    assert rtdebug("stop", "--session", sid).returncode == 0


def test_two_thousand_clean_steps_with_every_condition_never_stop(job, registry_dir, port_base):
    j, _ = start(job, registry_dir, port_base, "nonfinite,disagree:100,step=999999", "--steps", "2000")
    assert j.wait(300) == 0, j.output()[-3000:]
    out = j.output()
    assert "stopped (" not in out and out.count("trained 2000 steps") == 3


def test_step_n_in_ray_local_mode_stops_before_that_optimizer_step(job, registry_dir, port_base):
    script = EXAMPLES / "local_linear.py"
    j = job("run", "--port", str(port_base), "--stop-on", "step=2", str(script))
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 1)
    got = stops(sid, 1)
    assert got[0] == {"kind": "step", "reason": "before optimizer step 2", "origin": None, "step": 2}
    c = DAPClient("127.0.0.1", port_base)
    c.attach()
    ev = c.wait_stopped(60)
    assert ev["description"] == "rtdebug --stop-on step: before optimizer step 2"
    frame = c.top_frame(ev["threadId"])
    assert frame["source"]["path"] == str(script) and "opt.step()" in script.read_text().splitlines()[frame["line"] - 1]
    assert c.evaluate("__import__('ray').train.get_context().get_world_rank()", frame["id"]) == "0"
    c.continue_(ev["threadId"])
    c.close()
    assert j.wait(180) == 0, j.output()[-3000:]


@pytest.mark.parametrize(
    "spec,message",
    [
        ("nan", "rtdebug: error: --stop-on: unknown condition 'nan'; the conditions are nonfinite, "
                "nonfinite:deep, disagree, disagree:N, step=N"),
        ("disagree:0", "rtdebug: error: --stop-on disagree:0: N must be at least 1"),
        ("step=x", "rtdebug: error: --stop-on: unknown condition 'step=x'"),
    ],
)  # fmt: skip
def test_a_bad_condition_is_one_line_and_nothing_starts(spec, message, registry_dir, tmp_path):
    for cmd in (["torchrun", "--stop-on", spec, "--nproc-per-node", "1"], ["run", "--stop-on", spec]):
        r = rtdebug(*cmd, str(TRAIN))
        assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(message), r.stderr
    assert not any(registry_dir.iterdir()) if registry_dir.exists() else True


PROBE = """
import torch, torch.optim.optimizer as o
from torch.nn.parallel import DistributedDataParallel as DDP
print("PROBE", hasattr(torch.Tensor.backward, "__wrapped__"), len(o._global_optimizer_pre_hooks),
      getattr(DDP, "_rtdebug_stopon", False))
"""


@pytest.mark.parametrize("stop_on,want", [(None, "PROBE False 0 False"), ("nonfinite", "PROBE True 1 True")])
def test_off_installs_nothing(job, registry_dir, port_base, tmp_path, stop_on, want):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    j = job("run", "--port", str(port_base), *(["--stop-on", stop_on] if stop_on else []), str(script))
    assert j.wait(120) == 0, j.output()[-2000:]
    assert want in j.output()


def test_fsdp2_nan_in_one_rank_stops_every_rank_without_a_collective_of_ours_on_dtensors(job, registry_dir, port_base):
    """Under FSDP2 the gradients are sharded DTensors: the checks read each rank's own shard (a reduction
    of the DTensor would be a collective); the loss's vote still tells every rank."""
    script = SCRIPTS / "stopon_fsdp.py"
    j = job(
        "torchrun", "--debug-port-base", str(port_base), "--stop-on", "nonfinite", "--nproc-per-node", "3",
        "--rdzv-endpoint", f"127.0.0.1:{port_base + 3}", str(script), "--nan-rank", "1", "--nan-step", "2",
    )  # fmt: skip
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 3)
    got = stops(sid, 3)
    assert got[1]["origin"] is True and got[1]["step"] == 2
    why = got[1]["reason"]
    assert why.startswith("non-finite loss and grad in FSDP's reduce-scatter input") and why.endswith("step 2 (origin)")
    assert all(got[r]["origin"] is False and got[r]["step"] == 2 for r in (0, 2)), got
    assert rtdebug("stop", "--session", sid).returncode == 0


def test_fsdp2_nan_in_one_shard_only_stops_every_rank_by_their_vote(job, registry_dir, port_base):
    """The NaN lands in rank 0's shard alone: ranks 1-2 hold finite reduced gradients. Each FSDP backward
    ends in one small vote on the reduce-scatter's group, so all three stop, none hangs."""
    script = SCRIPTS / "stopon_fsdp.py"
    j = job(
        "torchrun", "--debug-port-base", str(port_base), "--stop-on", "nonfinite", "--nproc-per-node", "3",
        "--rdzv-endpoint", f"127.0.0.1:{port_base + 3}", str(script), "--nan-rank", "1", "--nan-step", "2",
        "--one-row",
    )  # fmt: skip
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 3)
    got = stops(sid, 3)
    assert got[1]["reason"] == "non-finite grad in FSDP's reduce-scatter input at step 2 (origin)", got
    assert got[0]["reason"] == "non-finite grad at step 2: received in the reduce-scatter (origin: rank 1)"
    assert got[2]["reason"] == "non-finite grad on rank 1 at step 2"
    assert all(got[r]["origin"] is False and got[r]["step"] == 2 for r in (0, 2)), got
    assert rtdebug("stop", "--session", sid).returncode == 0
