"""Step-all done by the ranks (``rtdebug.rank.allstop``): a step runs its rank alone while it can, lets the held
peers go when it needs them (into a collective, or not back after ``STEP_ALONE_S``), and its stop pauses them
again. Two ranks' parts on one real board, what each publishes seen through ``Board.on_publish``; no debugger
(the real one, end to end: tests/e2e/test_allstop.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from rtdebug.rank.allstop import RUNNING, STOPPED, AllStop, Board

from support.wait import until


@dataclass
class Endpoint:
    """What ``AllStop`` reads of the rank's endpoint."""

    clients: int = 0
    attach_count: int = 0

    def client_connected(self) -> bool:
        return self.clients > 0


@dataclass
class Debugger:
    """What all-stop asks of the rank's debugger (``allstop.Pydevd``), counted."""

    pauses: int = 0
    resumes: int = 0

    def pause_all(self) -> None:
        self.pauses += 1

    def resume_all(self) -> None:
        self.resumes += 1


@dataclass
class Rank:
    part: AllStop
    endpoint: Endpoint
    debugger: Debugger
    published: list[tuple[int, int]] = field(default_factory=list)


@pytest.fixture
def ranks(tmp_path):
    made: list[Rank] = []

    def make(rank: int) -> Rank:
        board = Board(tmp_path / "allstop.bin")
        endpoint, debugger = Endpoint(), Debugger()
        r = Rank(AllStop(board, rank, endpoint, None, debugger), endpoint, debugger)
        board.on_publish.append(lambda mode, by, step: r.published.append((mode, by)))
        made.append(r)
        return r

    yield make
    for r in made:
        r.endpoint.clients = 0  # the watcher thread ends at its next round
        r.part.board.close()


def test_a_step_that_is_back_at_once_moves_no_peer(ranks):
    r1 = ranks(1)
    r1.part.on_dap("stopped", {"reason": "breakpoint"})
    r1.part.on_dap("step", {})
    r1.part.on_dap("stopped", {"reason": "step"})
    assert r1.published == [(STOPPED, 1), (STOPPED, 1)]  # never running in between: the peers stayed held
    assert r1.part.board.step_stop()
    r1.part.on_dap("continue", {})
    assert r1.published[-1] == (RUNNING, 1) and not r1.part.board.step_stop()


def test_a_step_into_a_collective_lets_the_held_peers_go_and_its_stop_holds_them_again(ranks):
    r0, r1 = ranks(0), ranks(1)
    r1.part.on_dap("stopped", {"reason": "breakpoint"})
    assert r0.part.peer_stopped() == 1
    r1.part.on_dap("step", {})
    r1.part.hold(None)  # its collective wrapper, on the way into the collective: not held, lets go
    assert r1.published[-1] == (RUNNING, 1)
    assert r0.part.peer_stopped() is None  # rank 0 goes into the collective too
    r1.part.on_dap("stopped", {"reason": "step"})
    assert r1.published[-1] == (STOPPED, 1) and r0.part.peer_stopped() == 1


def test_a_held_rank_stepped_into_its_collective_lets_the_stopped_peer_go(ranks):
    """Rank 0, paused by rank 1's breakpoint and stepped over its all-reduce in its own client: rank 1 must
    come to it, so rank 0 lets go (as its continue would) rather than wait in C++ for a stopped peer."""
    r0, r1 = ranks(0), ranks(1)
    r1.part.on_dap("stopped", {"reason": "breakpoint"})
    r0.part.on_dap("step", {})
    r0.part.hold(None)
    assert r0.published == [(RUNNING, 0)]
    r0.part.on_dap("stopped", {"reason": "step"})
    assert r0.published[-1] == (STOPPED, 0)
    assert r1.part.peer_stopped() == 0  # rank 1 is held by rank 0's stop now


def test_a_peer_that_stops_by_itself_during_a_step_holds_the_stepping_rank(ranks):
    r0, r1 = ranks(0), ranks(1)
    r0.part.on_dap("step", {})  # stepping while nothing is stopped
    r1.part.on_dap("stopped", {"reason": "breakpoint"})  # a breakpoint in rank 1 meanwhile
    assert r0.part.pauses_for(STOPPED, 1)  # its debugger pauses it, and its collective wrapper holds it:
    held = threading.Thread(target=r0.part.hold, args=(None,))
    held.start()
    until(lambda: r0.part.state, 10, "rank 0 held at its collective", ok=lambda s: s == "paused")
    assert r0.published == []
    r1.part.on_dap("continue", {})
    held.join(10)
    assert not held.is_alive() and r0.part.state == "running"


def test_a_stepping_rank_is_not_paused_by_a_peers_step_but_is_by_its_breakpoint(ranks):
    r0, r1 = ranks(0), ranks(1)
    r1.part.on_dap("stopped", {"reason": "breakpoint"})
    r0.part.on_dap("step", {})  # VS Code's Step All Ranks: a step in each
    r1.part.on_dap("step", {})
    r1.part.on_dap("stopped", {"reason": "step"})
    assert not r0.part.pauses_for(STOPPED, 1)  # rank 0 stops where its own step ends
    r0.part.on_dap("stopped", {"reason": "step"})
    r0.part.on_dap("continue", {})
    r1.part.on_dap("continue", {})
    r0.part.on_dap("step", {})
    r1.part.on_dap("stopped", {"reason": "exception"})
    assert r0.part.pauses_for(STOPPED, 1)  # a peer's own stop during the step pauses it


def test_a_step_not_back_in_time_lets_the_peers_go_and_a_stop_first_never_does(ranks):
    r1 = ranks(1)
    r1.endpoint.clients = 1
    r1.part.on_dap("stopped", {"reason": "breakpoint"})
    r1.part.on_dap("attached", {})  # the watcher: its round lets a slow step's peers go
    r1.part.on_dap("step", {})
    until(lambda: r1.published[-1], 10, "a slow step lets the peers go", ok=lambda p: p == (RUNNING, 1))
    r1.part.on_dap("stopped", {"reason": "step"})
    assert r1.published[-1] == (STOPPED, 1)
    r1.part.on_dap("step", {})
    r1.part.on_dap("stopped", {"reason": "step"})
    n = len(r1.published)
    r1.part.hold(None)  # into a collective after the step's stop: no letting go, nor held by its own stop
    assert len(r1.published) == n and r1.published[-1] == (STOPPED, 1)


def test_all_stops_pause_that_lands_after_the_board_let_go_is_resumed_and_a_users_pause_stays(ranks):
    """A pause cannot be taken back: asked while rank 1 was stopped, it may land after rank 1 went on (its
    continue, or a step that let go). Left there, rank 0 would wait for a continue nobody sends, and rank 1's
    step into a collective would wait for rank 0: found at 4 ranks, a step in 7 trials hung."""
    r0, r1 = ranks(0), ranks(1)
    r0.endpoint.clients = r1.endpoint.clients = 1
    r0.part.on_dap("attached", {})  # the watcher: it pauses rank 0 when rank 1 stops
    r1.part.on_dap("stopped", {"reason": "breakpoint"})
    until(lambda: r0.debugger.pauses, 10, "rank 0's debugger asked to pause", ok=lambda n: n == 1)
    r1.part.on_dap("step", {})
    r1.part.hold(None)  # rank 1's step goes into a collective: lets go before rank 0's pause landed
    until(lambda: r0.debugger.resumes, 10, "rank 0 resumed by the let-go", ok=lambda n: n == 1)
    r0.part.on_dap("stopped", {"reason": "pause"})  # the pause lands now
    assert r0.debugger.resumes == 2 and r0.part.state == "running"  # resumed at once
    r0.part.on_dap("stopped", {"reason": "pause"})  # the user's own Pause: that rank's, it stays
    assert r0.debugger.resumes == 2 and r0.part.state == "stopped"


def test_all_stops_pause_that_lands_while_the_stop_holds_is_a_pause_by_that_rank(ranks):
    r0, r1 = ranks(0), ranks(1)
    r0.endpoint.clients = 1
    r0.part.on_dap("attached", {})
    r1.part.on_dap("stopped", {"reason": "breakpoint"})
    until(lambda: r0.debugger.pauses, 10, "rank 0's debugger asked to pause", ok=lambda n: n == 1)
    r0.part.on_dap("stopped", {"reason": "pause"})
    assert r0.part.state == "paused" and r0.debugger.resumes == 0
    r1.part.on_dap("continue", {})
    until(lambda: r0.debugger.resumes, 10, "rank 0 continued with rank 1", ok=lambda n: n == 1)


def test_a_paused_ranks_step_that_ran_it_alone_leaves_the_board_to_the_stopped_rank(ranks):
    """Rank 0, paused by rank 1's breakpoint, steps a line (quick: no one moves): rank 1's stop still holds the
    job. Rank 0's client leaving then continues no one: rank 1 is still at its breakpoint."""
    r0, r1 = ranks(0), ranks(1)
    r1.part.on_dap("stopped", {"reason": "breakpoint"})
    r0.part.on_dap("step", {})
    r0.part.on_dap("stopped", {"reason": "step"})
    r0.part.on_dap("detached", {})
    assert r0.published == [] and r0.part.board.read()[1:] == (STOPPED, 1)
    r0.part.on_dap("step", {})
    r0.part.hold(None)  # a step into a collective: it lets go, and its stop is then the job's
    r0.part.on_dap("stopped", {"reason": "step"})
    assert r0.published == [(RUNNING, 0), (STOPPED, 0)]
