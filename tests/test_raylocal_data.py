"""Ray Data for any number of ranks (``rtdebug.rank.raylocal.data``): real torchrun jobs with real Ray.

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
from rtdebug.rank.raylocal import data  # noqa: E402


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
    pids = [p for s in seen for p in s["ray_pids"] + s["own_pids"]]
    assert seen[0]["ray_pids"], "rank 0's Ray processes were not found"
    until(lambda: alive(pids), 60, "every Ray process of the job ended", ok=lambda a: not a, context=log.read_text)


@pytest.mark.parametrize("mode", ["script", "callables"])
def test_two_ranks_share_range_40_as_the_cluster_does(tmp_path, mode):
    """script: ``ray.data.range`` at the top level auto-starts Ray in each rank (rank 1 leaves its own and
    joins rank 0's); callables: nothing runs yet, rank 0 starts a head in a temp dir of its own."""
    proc, out, log = _torchrun(tmp_path, RAYDATA_MODE=mode)
    assert _finish(proc, log) == 0, log.read_text(errors="replace")[-4000:]
    seen = _seen(out)
    shares = [set(s["epochs"][0]) for s in seen]
    assert [len(s["epochs"][0]) for s in seen] == [20, 20]  # no row twice within a share
    assert not shares[0] & shares[1]
    assert shares[0] | shares[1] == set(range(40))
    for s, share in zip(seen, shares, strict=True):
        assert s["type"] == "StreamSplitDataIterator"
        assert sorted(s["epochs"][1]) == sorted(share)  # epoch 2: the same share again, all of it
        assert s["torch_type"] == "Tensor" and sorted(s["torch"]) == sorted(share)
        assert s["materialize"] == sorted(share)
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
    shares = [set(s["epochs"][0]) for s in seen]
    assert [len(s["epochs"][0]) for s in seen] == [20, 20]
    assert not shares[0] & shares[1] and shares[0] | shares[1] == set(range(40))
    for s, share in zip(seen, shares, strict=True):
        assert s["type"] == "StreamSplitDataIterator"
        assert sorted(s["epochs"][1]) == sorted(s["torch"]) == s["materialize"] == sorted(share)
    pids = [p for s in seen for p in s["ray_pids"]]
    assert pids
    until(lambda: alive(pids), 60, "every Ray process of the job ended", ok=lambda a: not a, context=j.output)
