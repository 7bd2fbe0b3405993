"""Ray Data for any number of ranks (``rtdebug.rank.localmode.data``): real torchrun jobs with real Ray.

The 2-rank jobs run ``tests/scripts/raydata_shares.py`` under ``python -m torch.distributed.run``: each rank
inits gloo and calls ``shard_datasets`` itself. Each rank writes what it saw; the test checks the shares as
the cluster gives them (``streaming_split(2, equal=True)``: 20 of ``ray.data.range(40)`` each, disjoint,
their union the whole), over two epochs, ``iter_torch_batches`` and ``materialize``, the unsplit dataset
whole on every rank, and that every Ray process of the job is gone after it (by pid), also when a rank is
killed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support.paths import PY, SCRIPTS
from support.procs import alive, kill_tree
from support.wait import until

pytest.importorskip("ray.data")

from rtdebug.common.errors import HarnessError  # noqa: E402
from rtdebug.rank.localmode import data  # noqa: E402


class NoExchange:
    """An exchange no test call may reach (world 1 and the refusals need no collective)."""

    def broadcast(self, obj, src=0):
        raise AssertionError("broadcast called")

    def barrier(self):
        raise AssertionError("barrier called")


def test_split_decisions():
    from ray.train import DataConfig

    names = ["train", "eval", "test"]
    assert data.datasets_to_split(names, None) == set(names)  # the trainer's default DataConfig
    assert data.datasets_to_split(names, DataConfig()) == set(names)
    assert data.datasets_to_split(names, DataConfig(datasets_to_split=["train"])) == {"train"}
    assert data.datasets_to_split(names, DataConfig(datasets_to_split=[])) == set()
    assert data.datasets_to_split(names, DataConfig(datasets_to_split=["train", "gone"])) == {"train"}


def test_one_rank_keeps_ray_local_mode_datasets():
    """World 1: the datasets as Ray's local mode gives them (callables called), no Ray started here."""
    import ray

    was = ray.is_initialized()
    whole = object()
    got = data.shard_datasets({"train": whole, "eval": lambda: "made"}, None, 1, 0, NoExchange())
    assert got == {"train": whole, "eval": "made"}
    assert data.shard_datasets(None, None, 1, 0, NoExchange()) == {}
    assert data.shard_datasets({}, None, 2, 1, NoExchange()) == {}
    assert ray.is_initialized() == was
    data.close()  # nothing to close: returns at once


def test_multi_node_refused_in_one_line():
    with pytest.raises(HarnessError) as e:
        data.shard_datasets({"train": object()}, None, 4, 0, NoExchange(), local_world_size=2)
    assert str(e.value) == data.MULTI_NODE_MESSAGE and "\n" not in str(e.value)


def _torchrun(tmp_path: Path, **env: str) -> tuple[subprocess.Popen, Path, Path]:
    out = tmp_path / "seen"
    out.mkdir()
    log = tmp_path / "job.log"
    e = dict(os.environ, PYTHONUNBUFFERED="1", RAYDATA_OUT=str(out), **env)
    script = str(SCRIPTS / "raydata_shares.py")
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", script]
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=e, stdout=f, stderr=subprocess.STDOUT)
    return proc, out, log


def _finish(proc: subprocess.Popen, log: Path, timeout: float = 240) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        tail = log.read_text(errors="replace")[-4000:]
        raise AssertionError(f"job still running after {timeout}s:\n{tail}") from None


def _seen(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def _no_ray_left(seen: list[dict], log: Path) -> None:
    """After torchrun ended: every Ray process of the job ends within 20 s (a deadline for a hang, not a
    speed: without rtdebug's watchdog Ray's two agents outlive a SIGKILLed rank 0 by about 60 s)."""
    pids = [p for s in seen for p in s["ray_pids"] + s["own_pids"]]
    assert seen[0]["ray_pids"], "rank 0's Ray processes were not found"
    until(lambda: alive(pids), 20, "every Ray process of the job ended", ok=lambda a: not a, context=log.read_text)


def _partitions(seen: list[dict]) -> None:
    """Every pass over the shares (two epochs of iter_batches, iter_torch_batches, materialize) splits
    range(40) as the cluster does: 20 rows each, disjoint, together the whole. Which blocks a rank gets may
    change from one pass to the next (streaming_split hands blocks to whichever split asks), as on a cluster."""
    passes = {"epoch 1": lambda s: s["epochs"][0], "epoch 2": lambda s: s["epochs"][1]}
    passes.update(torch=lambda s: s["torch"], materialize=lambda s: s["materialize"])
    for name, rows in passes.items():
        got = [rows(s) for s in seen]
        assert [len(r) for r in got] == [20, 20], (name, got)  # no row twice within a share
        assert not set(got[0]) & set(got[1]), (name, got)
        assert set(got[0]) | set(got[1]) == set(range(40)), (name, got)


@pytest.mark.parametrize("mode", ["script", "callables"])
def test_two_ranks_share_range_40_as_the_cluster_does(tmp_path, mode):
    """script: ``ray.data.range`` at the top level auto-starts Ray in each rank (rank 1 leaves its own and
    joins rank 0's); callables: nothing runs yet, rank 0 starts a head in a temp dir of its own."""
    proc, out, log = _torchrun(tmp_path, RAYDATA_MODE=mode)
    assert _finish(proc, log) == 0, log.read_text(errors="replace")[-4000:]
    seen = _seen(out)
    _partitions(seen)
    for s in seen:
        assert s["type"] == "StreamSplitDataIterator" and s["torch_type"] == "Tensor"
        assert s["eval"] == list(range(6))  # not in datasets_to_split: whole on every rank
    assert seen[0]["session_dir"] == seen[1]["session_dir"]  # one Ray instance for the job
    assert not seen[1]["ray_pids"]  # a joined rank starts no Ray process of its own
    if mode == "callables":
        assert Path(seen[0]["session_dir"]).name.startswith("session_")
        assert not Path(seen[0]["session_dir"]).parent.exists()  # close() removed the head's temp dir
    _no_ray_left(seen, log)


@pytest.mark.parametrize("killed", [0, 1])
def test_a_killed_rank_leaves_no_ray_process(tmp_path, killed):
    """SIGKILL of a rank after both read their shares: torchrun ends the other, and the head's processes
    (rank 0's descendants) end with rank 0, by Ray's own reaper and parent-death signal."""
    proc, out, log = _torchrun(tmp_path, RAYDATA_MODE="callables", RAYDATA_KILL_RANK=str(killed))
    assert _finish(proc, log) != 0
    seen = _seen(out)
    _no_ray_left(seen, log)
    head_dir = Path(seen[0]["session_dir"]).parent  # rank 0's temp dir: its watchdog removes it too
    until(lambda: not head_dir.exists(), 20, f"{head_dir} removed", context=log.read_text)


def test_rtdebug_torchrun_trainer_shards_train_dataset(job, tmp_path, port_base):
    """End to end: ``rtdebug torchrun --nproc-per-node 2`` of ``TorchTrainer(datasets={"train": ds},
    ScalingConfig(num_workers=0))``: each rank's ``get_dataset_shard("train")`` is its share."""
    out = tmp_path / "seen"
    out.mkdir()
    script = str(SCRIPTS / "ray_data_two_ranks.py")
    j = job(
        "torchrun", "--debug-port-base", str(port_base), "--nproc-per-node", "2", script, env={"RAYDATA_OUT": str(out)}
    )
    assert j.wait(240) == 0, j.output()[-4000:]
    assert j.output().count("ray data done None") == 2
    seen = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    _partitions(seen)
    assert [s["type"] for s in seen] == ["StreamSplitDataIterator"] * 2
    pids = [p for s in seen for p in s["ray_pids"]]
    assert pids
    until(lambda: alive(pids), 60, "every Ray process of the job ended", ok=lambda a: not a, context=j.output)


def test_a_bad_data_config_fails_every_rank_in_one_line(tmp_path):
    """A ``DataConfig`` subclass that gives fewer shards than ranks: every rank raises the same one line
    (none waits on a peer), and each ends what it made: no Ray process is left."""
    proc, out, log = _torchrun(tmp_path, RAYDATA_MODE="callables", RAYDATA_BAD_CONFIG="1")
    assert _finish(proc, log) != 0
    seen = _seen(out)
    expected = "DataConfig.configure gave 1 shards of 'train' for 2 ranks"
    assert [s["error"] for s in seen] == [expected, expected]
    # rank 1 left rank 0's instance and rank 0 shut its head down before either wrote its file
    assert [s["ray_pids"] for s in seen] == [[], []], seen
