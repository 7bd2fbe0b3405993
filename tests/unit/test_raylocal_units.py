"""Local mode with the cluster's semantics: its decisions, without a job (``rtdebug.rank.raylocal``)."""

from __future__ import annotations

import pytest

from rtdebug.rank.raylocal import controller, patch
from rtdebug.rank.raylocal.exchange import Exchange, World


def test_this_ray_has_every_piece_the_controller_is_built_on():
    assert patch.missing() is None


def test_the_probe_names_every_piece_of_ray_the_modules_import():
    """A name imported from Ray by ``rtdebug.rank.raylocal`` but not probed would fail in the middle of a run on
    a Ray that lacks it, instead of keeping Ray's own local mode, said at the start."""
    import ast
    from pathlib import Path

    imported: dict[str, set[str]] = {}
    for path in Path(patch.__file__).parent.glob("*.py"):
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
    ex = Exchange(World())
    seq = [ex.next_call(op) for op in (controller.FIT, "ray.train.report", "ray.train.collective.barrier")]
    seq += [ex.next_call("ray.train.report"), ex.next_call("rtdebug.data"), ex.next_call(controller.FIT)]
    assert seq == [1, 1, 2, 3, 1, 2]


def test_a_world_of_one_meets_no_one():
    ex = Exchange.create(World())
    assert ex.store is None and ex.meet("ray.train.report", 1, "mine") == ["mine"]
