"""Where local mode with the cluster's semantics gives the script a different value from Ray's own local mode,
one ``rtdebug:`` line says so when the script first sees it, before anything the value breaks (real ``rtdebug
run`` / ``rtdebug run -m pytest`` / ``rtdebug torchrun``). The lines' wording is in ``rank.localmode.notes``
and docs/local-mode.md; that the values are the cluster's is ``test_raylocal_parity.py``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from support.jobs import rtdebug
from support.paths import PY, ROOT, SCRIPTS
from support.ports import free_port_base

pytestmark = pytest.mark.e2e
WAY_OUT = "--ray-local-mode=ray"
CKPT = r"checkpoint_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d\.\d{6}"
NONE_OF_3 = (
    "rtdebug: Result.metrics is None, as on a Ray cluster: it holds the metrics of the last report() with a "
    "checkpoint, and none of this run's 3 reports had one (Ray's own local mode returns the last report's "
    f"metrics: {WAY_OUT})"
)


@pytest.fixture(autouse=True)
def own_registry(registry_dir):
    """Every job here registers in the test's own registry, never the machine's."""
    return registry_dir


def _merged(args: list[str], cwd, home) -> subprocess.CompletedProcess:
    """``rtdebug ARGS`` with stdout and stderr in one stream, in the order the user sees them; HOME of the
    test's own (the guide's scripts use the default ``~/ray_results``)."""
    env = dict(os.environ, HOME=str(home), PYTHONUNBUFFERED="1")
    return subprocess.run(
        [PY, "-m", "rtdebug", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, text=True, timeout=300,
    )  # fmt: skip


def _rtdebug_lines(out: str) -> list[str]:
    skip = ("rtdebug: session ", "rtdebug: set ", "rtdebug: all ", "rtdebug: Ray Train local mode with")
    return [line for line in out.splitlines() if line.startswith("rtdebug: ") and not line.startswith(skip)]


def test_the_guides_first_example_says_why_before_its_traceback(tmp_path):
    """Ray's guide prints ``result.metrics['loss']`` after three reports without a checkpoint: None on a
    cluster, and here. The user reads why, and the way out, before the TypeError."""
    r = _merged(["run", "--port", str(free_port_base(2)), str(SCRIPTS / "guide_local_mode.py")], ROOT, tmp_path)
    assert r.returncode == 1, r.stdout[-3000:]
    lines = r.stdout.splitlines()
    assert lines[-1] == "TypeError: 'NoneType' object is not subscriptable", r.stdout[-3000:]
    assert _rtdebug_lines(r.stdout) == [NONE_OF_3]
    assert lines.index(NONE_OF_3) < lines.index("Traceback (most recent call last):")


def test_the_guides_unit_test_under_pytest_shows_the_line_before_its_failure(tmp_path):
    """``rtdebug run -m pytest``: pytest captures the test's output and reports it after the traceback; the
    line is said on the terminal as it happens (and in the captured output too)."""
    shutil.copy(SCRIPTS / "guide_testing_local_mode.py", tmp_path / "test_training.py")
    args = ["run", "--port", str(free_port_base(2)), "-m", "pytest", "-p", "no:cacheprovider", "test_training.py"]
    r = _merged(args, tmp_path, tmp_path)
    assert r.returncode == 1, r.stdout[-3000:]
    line = NONE_OF_3.replace("none of this run's 3 reports had one", "this run's one report had none")
    lines = r.stdout.splitlines()
    assert "E       TypeError: 'NoneType' object is not subscriptable" in lines, r.stdout[-3000:]
    assert lines.index(line) < lines.index("E       TypeError: 'NoneType' object is not subscriptable")
    assert lines.count(line) == 2  # live, and in pytest's "Captured stderr call"
    assert lines.index(line) < next(i for i, x in enumerate(lines) if "Captured stderr call" in x) < len(lines) - 1


def test_two_ranks_say_each_difference_once_and_where(tmp_path):
    """2 ranks, three ``fit()`` calls in one job. The first: rank 0 alone passes a checkpoint to report 1 of 2;
    report 2 has none. Every rank would say the same of ``Result`` and of ``get_checkpoint()`` after report 2:
    said once. After report 1 only rank 1's ``get_checkpoint()`` differs from Ray's (it passed no checkpoint):
    said by rank 1. The second resumes (said once) and every rank checkpoints its own metrics: rank 1's
    ``Result.metrics`` are rank 0's. The third raises on both ranks: each says so."""
    base = str(free_port_base(4))
    job = ["torchrun", "--debug-port-base", base, "--nproc-per-node", "2", str(SCRIPTS / "raylocal_values.py")]
    r = rtdebug(*job, str(tmp_path / "storage"), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    said = _rtdebug_lines(r.stderr)
    ckpt = re.search(rf"rank 0: result checkpoint ({CKPT})", r.stdout)
    assert ckpt, r.stdout
    name = ckpt.group(1)
    late = (
        f"{name}, of report 1 of 2, as on a Ray cluster: it is the run's latest checkpoint, and the last report "
        "had none"
    )
    expected = [
        "rtdebug: broadcast_from_rank_zero() gave rank 1 rank 0's value instead of its own, as on a Ray cluster: "
        f"every worker gets rank 0's (Ray's own local mode returns each rank's own: {WAY_OUT})",
        f"rtdebug: rank 1: get_checkpoint() is {name}, of the last report, as on a Ray cluster: a report() keeps a "
        f"checkpoint any rank passes, and this rank passed none (Ray's own local mode returns this rank's "
        f"last report's checkpoint, None: {WAY_OUT})",
        f"rtdebug: get_checkpoint() is {late} (Ray's own local mode returns the last report's checkpoint, None: "
        f"{WAY_OUT})",
        "rtdebug: get_all_reported_checkpoints() lists 1 checkpoint, as on a Ray cluster: the run's history with "
        f"each one's metrics (Ray's own local mode returns []: {WAY_OUT})",
        "rtdebug: Result.metrics are those of report 1 of 2, as on a Ray cluster: it holds the metrics of the last "
        "report() with a checkpoint, and the last report had none (Ray's own local mode returns the last report's "
        f"metrics: {WAY_OUT})",
        f"rtdebug: Result.checkpoint is {late} (Ray's own local mode returns the last report's checkpoint, None: "
        f"{WAY_OUT})",
        # the second fit()
        f"rtdebug: get_checkpoint() is {name}, from an earlier run of 'values', as on a Ray cluster: a run with the "
        "same RunConfig(name, storage_path) resumes from its latest checkpoint, and this run has reported none "
        f"(Ray's own local mode starts over: None: {WAY_OUT})",
        "rtdebug: rank 1: Result.metrics are rank 0's, as on a Ray cluster: the controller keeps rank 0's metrics "
        f"of each report() (Ray's own local mode returns this rank's own last report's metrics: {WAY_OUT})",
        # the third
        *[
            f"rtdebug: rank {rank}: fit() raises ray.train.WorkerGroupError, as on a Ray cluster: the controller "
            f"wraps the train function's ValueError (Ray's own local mode raises the ValueError itself: {WAY_OUT})"
            for rank in (0, 1)
        ],
    ]
    assert sorted(said) == sorted(expected), "\n".join(said)
    # the values themselves are the cluster's (test_raylocal_parity.py compares them with a real cluster)
    for rank in (0, 1):
        assert f"rank {rank}: broadcast {{'seed': 1000}}" in r.stdout
        assert f"rank {rank}: after report 1 get_checkpoint {name}" in r.stdout
        assert f"rank {rank}: result metrics {{'loss': 1.0, 'rank': 0}}" in r.stdout
        assert f"rank {rank}: second result metrics {{'loss': 0.25, 'rank': 0}}" in r.stdout
        assert f"rank {rank}: caught WorkerGroupError" in r.stdout


def test_one_process_resumed_run_and_a_failing_train_function(tmp_path):
    """A second ``fit()`` with the same name resumes (Ray's own local mode starts over); a train function that
    raises makes ``fit()`` raise the cluster's ``WorkerGroupError`` (Ray's own raises the ValueError)."""
    r = rtdebug("run", "--port", str(free_port_base(2)), str(SCRIPTS / "raylocal_values.py"), str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    said = _rtdebug_lines(r.stderr)
    name = re.search(rf"rank 0: resumed from ({CKPT})", r.stdout)
    assert name, r.stdout
    resumed = (
        f"rtdebug: get_checkpoint() is {name.group(1)}, from an earlier run of 'values', as on a Ray cluster: a run "
        "with the same RunConfig(name, storage_path) resumes from its latest checkpoint, and this run has reported "
        f"none (Ray's own local mode starts over: None: {WAY_OUT})"
    )
    raises = (
        "rtdebug: fit() raises ray.train.WorkerGroupError, as on a Ray cluster: the controller wraps the train "
        f"function's ValueError (Ray's own local mode raises the ValueError itself: {WAY_OUT})"
    )
    assert resumed in said and raises in said, "\n".join(said)
    assert [s for s in said if "broadcast" in s or s.startswith("rtdebug: rank ")] == []  # one rank: its own
    assert "rank 0: caught WorkerGroupError" in r.stdout
