"""Local mode with the cluster's semantics: its decisions, without a job (``rtdebug.rank.localmode``)."""

from __future__ import annotations

import os

import pytest

from rtdebug.rank.localmode import controller, notes, patch
from rtdebug.rank.localmode.sync import CallExchange, World


def test_this_ray_has_every_piece_the_controller_is_built_on():
    assert patch.missing() is None


def test_the_probe_names_every_piece_of_ray_the_modules_import():
    """A name imported from Ray by the cluster semantics (``rtdebug.rank.localmode``, less ``fixes`` and
    ``forcelocal``, which arm hooks of their own) but not probed would fail in the middle of a run on a Ray
    that lacks it, instead of keeping Ray's own local mode, said at the start."""
    import ast
    from pathlib import Path

    imported: dict[str, set[str]] = {}
    for path in Path(patch.__file__).parent.glob("*.py"):
        if path.stem in ("fixes", "forcelocal"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ray."):
                imported.setdefault(str(node.module), set()).update(a.name for a in node.names)
    assert imported, "the walk found nothing: it could not fail"
    probed = {mod: set(names) for mod, names in patch.NEEDED.items()}
    unprobed = {f"{m}.{n}" for m, names in imported.items() for n in names if n not in probed.get(m, set())}
    assert not unprobed, sorted(unprobed)


def test_a_ray_without_one_of_them_is_named(monkeypatch):
    monkeypatch.setitem(patch.NEEDED, "ray.train.v2.api.context", ("LocalTrainContext", "NoSuchThing"))
    assert patch.missing() == "ray.train.v2.api.context.NoSuchThing"
    monkeypatch.setitem(patch.NEEDED, "ray.train.v2.no_such_module", ("X",))
    monkeypatch.delitem(patch.NEEDED, "ray.train.v2.api.context")
    assert patch.missing() == "ray.train.v2.no_such_module"


@pytest.mark.parametrize(
    ("max_failures", "max_restarts", "attempt", "restart"),
    [
        (0, 0, 0, False),  # nothing asked, nothing allowed
        (1, 0, 0, False),  # FailureConfig asks, torchrun cannot: fit() raises as a cluster's would at the end
        (1, 1, 0, True),
        (1, 1, 1, False),  # the one restart is used up
        (2, 1, 0, True),
        (0, 3, 0, False),  # torchrun could, FailureConfig says no
        (-1, 2, 1, True),  # unlimited: as many as torchrun gives
        (-1, 2, 2, False),
    ],
)
def test_torchrun_restarts_only_what_both_allow(monkeypatch, max_failures, max_restarts, attempt, restart):
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", str(max_restarts))
    assert controller._torchrun_restarts_left(max_failures, attempt) is restart


def test_ray_trains_collectives_share_one_sequence_and_others_count_alone():
    ex = CallExchange(World())
    seq = [ex.next_call(op) for op in (controller.FIT, "ray.train.report", "ray.train.collective.barrier")]
    seq += [ex.next_call("ray.train.report"), ex.next_call("rtdebug.data"), ex.next_call(controller.FIT)]
    assert seq == [1, 1, 2, 3, 1, 2]


def test_a_world_of_one_meets_no_one():
    ex = CallExchange.create(World())
    assert ex.store is None and ex.meet("ray.train.report", 1, "mine") == ["mine"]


# -- the lines where the cluster's value differs from Ray's own local mode (rank.localmode.notes) -------------

WAY_OUT = "(Ray's own local mode returns the last report's metrics: --ray-local-mode=ray)"


def _seen(world: int, *reports: tuple[list, list[bool]]) -> notes.Reports:
    seen = notes.Reports(world)
    for metrics, passed in reports:
        seen.add(metrics, passed)
    return seen


def test_result_metrics_none_after_reports_without_a_checkpoint_is_the_issues_line():
    seen = _seen(1, *[([{"loss": x}], [False]) for x in (3.0, 2.0, 1.0)])
    assert notes.result_metrics(seen, None, "r") == [
        "Result.metrics is None, as on a Ray cluster: it holds the metrics of the last report() with a checkpoint, "
        f"and none of this run's 3 reports had one {WAY_OUT}"
    ]
    one = _seen(1, ([{"loss": 0.5}], [False]))
    assert "and this run's one report had none (" in str(notes.result_metrics(one, None, "r")[0])


def test_result_metrics_say_nothing_where_rays_value_is_the_same():
    assert notes.result_metrics(_seen(1), None, "r") == [None]  # no report: None in both
    seen = _seen(2, ([{"loss": 1}, {"loss": 1}], [True, False]))
    assert notes.result_metrics(seen, ("/s/r/checkpoint_a", {"loss": 1}), "r") == [None, None]
    # a later report without a checkpoint, with the same metrics: the same value
    seen.add([{"loss": 1}, {"loss": 1}], [False, False])
    assert notes.result_metrics(seen, ("/s/r/checkpoint_a", {"loss": 1}), "r") == [None, None]


def test_result_metrics_of_an_earlier_report_and_of_rank_0_name_which():
    seen = _seen(
        2, ([{"r": 0, "s": 1}, {"r": 1, "s": 1}], [True, True]), ([{"r": 0, "s": 2}, {"r": 1, "s": 2}], [False] * 2)
    )
    lines = notes.result_metrics(seen, ("/s/r/checkpoint_a", {"r": 0, "s": 1}), "r")
    assert lines[0] == lines[1]  # every rank would say the same: said once
    assert str(lines[0]).startswith("Result.metrics are those of report 1 of 2, as on a Ray cluster: ")
    last = _seen(2, ([{"r": 0}, {"r": 1}], [True, True]))
    lines = notes.result_metrics(last, ("/s/r/checkpoint_a", {"r": 0}), "r")
    assert lines[0] is None and str(lines[1]).startswith("Result.metrics are rank 0's, as on a Ray cluster: ")
    resumed = _seen(1, ([{"s": 9}], [False]))
    assert str(notes.result_metrics(resumed, ("/s/r/checkpoint_old", {"s": 1}), "r")[0]).startswith(
        "Result.metrics are those of checkpoint_old, from an earlier run of 'r', as on a Ray cluster: "
    )


def test_checkpoint_lines_follow_each_ranks_own_last_report():
    # rank 0 alone passes a checkpoint to the last report: rank 1's Ray value is None, rank 0's a checkpoint
    seen = _seen(2, ([{}, {}], [True, False]))
    latest = ("/s/r/checkpoint_a", {})
    got = notes.get_checkpoint(seen, latest, "r")
    assert got[0] is None
    assert got[1] == (
        "get_checkpoint() is checkpoint_a, of the last report, as on a Ray cluster: a report() keeps a checkpoint "
        "any rank passes, and this rank passed none (Ray's own local mode returns this rank's last report's "
        "checkpoint, None: --ray-local-mode=ray)"
    )
    assert notes.result_checkpoint(seen, latest, "r")[0] is None
    # a resumed run, nothing reported yet: Ray's own starts over
    fresh = notes.Reports(2)
    assert (
        notes.get_checkpoint(fresh, latest, "r")
        == [
            "get_checkpoint() is checkpoint_a, from an earlier run of 'r', as on a Ray cluster: a run with the same "
            "RunConfig(name, storage_path) resumes from its latest checkpoint, and this run has reported none (Ray's "
            "own local mode starts over: None: --ray-local-mode=ray)"
        ]
        * 2
    )
    assert notes.get_checkpoint(fresh, None, "r") == [None, None]


def test_reported_checkpoints_and_fit_raises():
    assert notes.reported_checkpoints(2, 0) == [None, None]
    assert notes.reported_checkpoints(1, 3) == [
        "get_all_reported_checkpoints() lists 3 checkpoints, as on a Ray cluster: the run's history with each one's "
        "metrics (Ray's own local mode returns []: --ray-local-mode=ray)"
    ]
    assert notes.fit_raises(KeyError("k")) == (
        "fit() raises ray.train.WorkerGroupError, as on a Ray cluster: the controller wraps the train function's "
        "KeyError (Ray's own local mode raises the KeyError itself: --ray-local-mode=ray)"
    )


def test_values_eq_cannot_compare_are_compared_by_their_pickles():
    np = pytest.importorskip("numpy")  # == gives an element-wise answer, not a bool
    assert notes.same({"a": 1}, {"a": 1}) and not notes.same({"a": 1}, {"a": 2})
    assert notes.same({"w": np.array([1, 2])}, {"w": np.array([1, 2])})
    assert not notes.same({"w": np.array([1, 2])}, {"w": np.array([1, 3])})

    class Opaque:  # == raises and pickle cannot (a local class): neither can tell, so nothing is said
        def __eq__(self, other):
            raise TypeError("no")

    assert notes.same(Opaque(), Opaque())


def test_a_line_goes_to_the_stderr_the_rank_started_with_and_into_a_capture(capfd, monkeypatch):
    """pytest's fd capture (as a user's `rtdebug run -m pytest`) would show the line only after the failure it
    explains: it goes to the rank's own stderr at once, and into the capture too."""
    r, w = os.pipe()
    try:
        monkeypatch.setattr(notes, "_stderr", w)
        notes.say("Result.metrics is None, as on a Ray cluster")
        assert os.read(r, 4096) == b"\nrtdebug: Result.metrics is None, as on a Ray cluster\n"
        assert capfd.readouterr().err == "rtdebug: Result.metrics is None, as on a Ray cluster\n"
    finally:
        os.close(r)
        os.close(w)
