"""rtdebug.rank.state: one state machine for torchrun ranks, rtdebug run and Ray workers."""

from __future__ import annotations

from typing import Any

from rtdebug.rank.state import RankState


class Writer:
    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []

    def write_rank(self, entry: dict[str, Any]) -> None:
        self.writes.append(dict(entry))


class FakeEndpoint:
    """What RankState wires: the endpoint reports clients and refusals through these callbacks."""

    def __init__(self) -> None:
        self.label, self.attach_count, self.refused_count = "port 1", 0, 0
        self.on_state: Any = None
        self.on_refused: Any = None

    @property
    def lazy(self) -> bool:
        return self.attach_count == 0

    def client(self, state: str) -> None:
        if state == "attached":
            self.attach_count += 1
        self.on_state(state)


def record() -> tuple[RankState, Writer, FakeEndpoint]:
    w, ep = Writer(), FakeEndpoint()
    rec = RankState(w, "s1", 3, "127.0.0.1", 5681, False, "train.py", local_rank=1, world_size=4)
    rec.connect(ep)
    return rec, w, ep


def test_clients_move_a_live_rank_between_ready_and_attached():
    rec, w, ep = record()
    assert ep.label == "rank 3" and w.writes[0]["state"] == "starting"
    rec.ready(ep)
    ep.client("attached")
    assert (rec.state, rec.entry["attach_count"], rec.entry["lazy"]) == ("attached", 1, False)
    ep.client("ready")
    assert w.writes[-1]["state"] == "ready"


def test_a_failed_rank_stays_failed_when_a_post_mortem_client_comes_and_goes():
    """The guard the Ray worker had lost: its endpoint now reports through the same object."""
    rec, w, ep = record()
    rec.ready(ep)
    rec.failed("ZeroDivisionError: bad batch")
    ep.client("attached")
    ep.client("ready")
    assert rec.state == "failed" and w.writes[-1]["state"] == "failed"
    assert w.writes[-1]["attach_count"] == 1 and w.writes[-1]["error"] == "ZeroDivisionError: bad batch"


def test_exit_codes_and_refusals():
    rec, w, ep = record()
    rec.exited(0)
    assert (rec.state, rec.entry["exit_code"]) == ("exited", 0)
    rec2, _, ep2 = record()
    rec2.exited(3)
    assert (rec2.state, rec2.entry["exit_code"]) == ("failed", 3)
    ep.refused_count = 2
    ep.on_refused()
    assert w.writes[-1]["refused_count"] == 2 and w.writes[-1]["state"] == "exited"


def test_ray_worker_wires_its_endpoint_through_the_record():
    """Ray workers use RankState.connect, not callbacks of their own (which lost the failed guard)."""
    import ast
    from pathlib import Path

    import rtdebug

    tree = ast.parse((Path(rtdebug.__file__).parent / "rank" / "ray_worker.py").read_text())
    assigned = [
        t.attr for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Attribute)
    ]
    assert "on_state" not in assigned and "on_refused" not in assigned
    calls = [n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert "connect" in calls
