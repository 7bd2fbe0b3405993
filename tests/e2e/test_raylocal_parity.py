"""Parity, measured: one train function on a real Ray cluster (``num_workers=2``) and under ``rtdebug torchrun
--nproc-per-node 2`` in local mode (``--ray-local-mode=cluster``, the default), each run twice with the same
``name`` (the second resumes). What each observed is compared field by field; a difference fails, except
the ones ``KNOWN`` lists (and docs/local-mode.md says why).

The same script in Ray's own local mode (``--ray-local-mode=ray``) is run too, and must differ where the
issue says it does (the barrier, the broadcast, the history, the resume): the comparison can fail.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.jobs import rtdebug
from support.paths import SCRIPTS
from support.ports import free_port_base
from support.raycluster import AUTH_MODE, RayCluster

pytestmark = [pytest.mark.ray_cluster, pytest.mark.e2e]
JOB = SCRIPTS / "parity_job.py"
NAME = re.compile(r"^checkpoint_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d\.\d{6}$")
# Differences that are not differences of semantics, each with its reason (docs/local-mode.md, "Known").
KNOWN = {
    # on a cluster only the driver gets a Result; in local mode every rank's fit() returns one (the same)
    "results": "every rank's fit() returns the Result",
}


def _load(out: Path, pattern: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob(pattern))]


def _observe(out: Path, run: int) -> dict:
    ranks = {d["rank"]: d for d in _load(out, f"rank-*-run{run}.json")}
    callbacks = _load(out, f"callback-run{run}-*.json")
    results = _load(out, f"result-run{run}-*.json")
    seen = {
        "ranks": sorted(ranks),
        "marker_after_barrier": [ranks[r]["marker_after_barrier"] for r in sorted(ranks)],
        "broadcast": [ranks[r]["broadcast"] for r in sorted(ranks)],
        "start_files": [ranks[r]["start_files"] for r in sorted(ranks)],
        "names_agree": len({tuple(ranks[r]["names"]) for r in ranks}) == 1,
        "names_pattern": all(NAME.match(n) for r in ranks for n in ranks[r]["names"]),
        "history": [len(ranks[r]["history"]) for r in sorted(ranks)],
        "history_runs": [[h[1] for h in ranks[r]["history"]] for r in sorted(ranks)],
        "storage": sorted({ranks[r]["storage"] for r in ranks}),
        "callback_processes": len(callbacks),
        "callback_reports": [c["reports"] for c in callbacks],
        "callback_ranks": [c["ranks"] for c in callbacks],
        "result": results[0] if results else None,
        "results_agree": all(r == results[0] for r in results),
    }
    if "shard" in next(iter(ranks.values()), {}):
        shards = [ranks[r]["shard"] for r in sorted(ranks)]
        seen["shard_sizes"] = [len(s) for s in shards]
        seen["shards_disjoint"] = not set(shards[0]) & set(shards[1])
        seen["shards_union"] = sorted(set().union(*map(set, shards))) == list(range(40))
        seen["shard_epoch2"] = [ranks[r]["shard_epoch2"] for r in sorted(ranks)]
    return seen


@pytest.fixture(autouse=True)
def own_registry(registry_dir):
    """Every job here registers in the test's own registry, never the machine's."""
    return registry_dir


@pytest.fixture(scope="module")
def cluster():
    c = RayCluster()
    old = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = AUTH_MODE
    try:
        c.start_head(num_cpus=4)
        yield c
    finally:
        c.stop()
        if old is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = old
        assert not c.processes()


def _cluster_runs(cluster, tmp: Path, data: bool) -> list[dict]:
    out, storage = tmp / "cluster-out", tmp / "cluster-storage"
    out.mkdir()
    seen = []
    env = dict(os.environ, RAY_TRAIN_V2_ENABLED="1", RAY_AUTH_MODE=AUTH_MODE, RAY_DEDUP_LOGS="0")
    for run in (1, 2):
        args = [sys.executable, str(JOB), "--workers", "2", "--address", cluster.address]
        args += ["--storage", str(storage), "--out", str(out), "--pass", str(run)] + (["--data"] if data else [])
        args += ["--metrics-only", "also"] if run == 1 else []
        p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        seen.append(_observe(out, run))
    return seen


def _local_runs(tmp: Path, data: bool, mode: str = "cluster") -> list[dict]:
    out, storage = tmp / f"local-{mode}-out", tmp / f"local-{mode}-storage"
    out.mkdir()
    seen = []
    for run in (1, 2):
        args = ["torchrun", "--debug-port-base", str(free_port_base(4)), "--ray-local-mode", mode]
        args += ["--nproc-per-node", "2", str(JOB), "--workers", "0"]
        args += ["--storage", str(storage), "--out", str(out), "--pass", str(run)] + (["--data"] if data else [])
        # a second fit(): under Ray's own local mode torchrun's ranks would reuse the first group's store keys
        args += ["--metrics-only", "also"] if run == 1 and mode == "cluster" else []
        r = rtdebug(*args, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        if run == 1 and mode == "cluster":
            assert "rtdebug: Ray Train local mode with the cluster's semantics on 2 ranks" in r.stderr
            assert f"checkpoints go to {storage}/parity" in r.stderr
            assert "rtdebug: Result.metrics is None, as on a Ray cluster: " in r.stderr  # said where it differs
        seen.append(_observe(out, run))
    return seen


def _compare(cluster_seen: list[dict], local_seen: list[dict]) -> list[str]:
    diffs = []
    for run, (c, loc) in enumerate(zip(cluster_seen, local_seen, strict=True), 1):
        for key in sorted(set(c) | set(loc)):
            if key in ("callback_processes", "results_agree"):
                continue
            if c.get(key) != loc.get(key):
                diffs.append(f"run {run} {key}: cluster {c.get(key)!r} != local {loc.get(key)!r}")
        # the callback runs in exactly one process in both
        if c["callback_processes"] != 1 or loc["callback_processes"] != 1:
            diffs.append(f"run {run} callback processes: {c['callback_processes']} vs {loc['callback_processes']}")
        if not loc["results_agree"]:
            diffs.append(f"run {run}: the ranks' Results differ")
    return diffs


def test_local_mode_behaves_like_the_cluster(cluster, tmp_path):
    data = True
    cluster_seen = _cluster_runs(cluster, tmp_path, data)
    local_seen = _local_runs(tmp_path, data)
    # what the cluster did, so a test that compares nothing cannot pass
    first, second = cluster_seen
    assert first["marker_after_barrier"] == [True, True]
    assert first["broadcast"] == [{"seed": 1000}, {"seed": 1000}]
    assert first["history"] == [3, 3] and second["history"] == [6, 6]
    assert second["start_files"] == [["rank0.txt", "rank1.txt"]] * 2
    assert first["result"]["checkpoint_exists"] and first["result"]["checkpoint_files"] == ["rank0.txt", "rank1.txt"]
    assert _compare(cluster_seen, local_seen) == []
    # a second fit() of reports with metrics and no checkpoint: Result.metrics is None on a cluster (Ray's guide
    # reads it), and here on every rank
    assert _load(tmp_path / "cluster-out", "metrics-only-*.json") == [{"metrics": None, "checkpoint": False}]
    assert _load(tmp_path / "local-cluster-out", "metrics-only-*.json") == [{"metrics": None, "checkpoint": False}] * 2


def test_rays_own_local_mode_differs(tmp_path):
    """``--ray-local-mode=ray``: Ray's own local mode, which the cluster comparison above would reject."""
    ray_seen = _local_runs(tmp_path, data=False, mode="ray")
    first, second = ray_seen
    assert first["broadcast"] == [{"seed": 1000}, {"seed": 1001}]  # each rank keeps its own
    assert first["history"] == [0, 0] and second["start_files"] == [None, None]  # nothing kept, nothing resumed
    assert first["result"]["path"] is None
