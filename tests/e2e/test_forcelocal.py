"""--force-local: an unmodified num_workers=4, use_gpu=True script runs in Ray Train local mode."""

from __future__ import annotations

import ast
import re

import pytest

from rtdebug.rank.localmode import forcelocal

from support.dap import DAPClient
from support.jobs import wait_ranks
from support.paths import SCRIPTS, marker_line
from support.ports import port_free

SCRIPT = SCRIPTS / "force_local_4gpu.py"


def test_local_copy_and_ignored_options():
    from ray.train.v2.api.config import ScalingConfig

    sc = ScalingConfig(
        num_workers=4, use_gpu=True, resources_per_worker={"GPU": 1, "CPU": 2}, placement_strategy="SPREAD"
    )
    assert forcelocal.ignored_options(sc) == [
        "use_gpu=True",
        "resources_per_worker={'GPU': 1, 'CPU': 2}",
        "placement_strategy='SPREAD'",
    ]
    local = forcelocal.local_copy(sc)
    assert (local.num_workers, local.use_gpu, local.resources_per_worker) == (0, False, None)
    assert sc.num_workers == 4  # the user's object is untouched
    assert forcelocal.ignored_options(ScalingConfig(num_workers=2)) == []


def _metrics(out: str) -> list[dict]:
    """Each rank's metrics dict; two ranks' unbuffered prints can share a line, so match one dict each."""
    return [ast.literal_eval(m) for m in re.findall(r"result metrics (\{[^{}]*\})", out)]


@pytest.mark.e2e
def test_run_force_local_breakpoint_in_train_fn(job, registry_dir, port_base):
    j = job("run", "--port", str(port_base), "--wait", "--force-local", str(SCRIPT))
    sid = j.session_id()
    wait_ranks(registry_dir, sid, 1)
    line = marker_line(SCRIPT, "train")
    c = DAPClient("127.0.0.1", port_base)
    c.attach({str(SCRIPT): [line]})
    stopped = c.wait_stopped(180)
    frame = c.top_frame(stopped["threadId"])
    assert frame["line"] == line
    assert c.evaluate("world", frame["id"]) == "1"
    c.request("setBreakpoints", source={"path": str(SCRIPT)}, breakpoints=[])
    c.continue_(stopped["threadId"])
    c.disconnect()
    assert j.wait(180) == 0, j.output()[-3000:]
    out = j.output()
    assert (
        "rtdebug: --force-local: ScalingConfig(num_workers=4) runs in local mode (num_workers=0); "
        "local mode ignores use_gpu=True"
    ) in out
    assert out.count("rtdebug: --force-local:") == 1
    assert _metrics(out) == [{"rank": 0, "world": 1}]
    assert port_free(port_base)


@pytest.mark.e2e
def test_torchrun_force_local_two_ranks(job, port_base):
    j = job("torchrun", "--debug-port-base", str(port_base), "--force-local", "--nproc-per-node", "2", str(SCRIPT))
    assert j.wait(240) == 0, j.output()[-3000:]
    out = j.output()
    assert out.count("rtdebug: --force-local: ScalingConfig(num_workers=4) runs in local mode") == 1
    assert "train_fn rank 0 of 2" in out and "train_fn rank 1 of 2" in out
    assert _metrics(out) == [{"rank": 0, "world": 2}] * 2  # every rank's Result: rank 0's metrics, as a cluster's


@pytest.mark.e2e
def test_force_local_refuses_v1_trainer_in_one_line(job, port_base):
    j = job("run", "--port", str(port_base), "--force-local", str(SCRIPTS / "force_local_v1.py"))
    assert j.wait(180) == 1
    out = j.output()
    assert (
        "rtdebug: rank 0: --force-local: TorchTrainer is a Ray Train V1 trainer, which has no local mode; "
        "use the V2 trainer (ray.train.torch.TorchTrainer with RAY_TRAIN_V2_ENABLED=1)"
    ) in out
    assert "Traceback" not in out
