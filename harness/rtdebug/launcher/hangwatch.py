"""The launcher's automatic hang report: grouped stacks in the job's own log.

Two triggers, both watched from one thread of the launcher:

- **A rank fails** (its registry entry turns ``failed``: an exception, a
  collective timeout). torchrun would tear the other ranks down within its
  0.1 s monitor interval, so the launcher pauses the torchrun agent (SIGSTOP,
  never the ranks), dumps the ranks still running, and lets the agent go on.
- **No rank moves**: every ``hang_s / 3`` seconds the launcher samples all
  ranks' stacks (a signal each, nothing per step); when every rank's main-thread
  stack and collective position stayed the same for ``hang_s`` seconds it writes
  the report once, and again only if the picture changes. Its verdict is then
  true of ranks that stand still, as ``rtdebug stacks`` requires. Skipped while a client is attached or a
  rank waits for one: then standing still is the point.

On the node that hosts a multi-node job's store, the no-progress report covers every node's ranks:
they are asked through the store (``rtdebug.stacks.jobwide``), as ``rtdebug stacks --store`` does;
ranks of a lost node are listed, not waited on. The failure report is taken while this node's torchrun
agent (the store's host) is paused, so it covers this node's ranks, by signal; so does either report
elsewhere, or when the store does not answer.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any, Protocol, TextIO

from rtdebug.common import log
from rtdebug.common.addresses import is_own
from rtdebug.common.errors import HarnessError
from rtdebug.common.threads import hidden_thread
from rtdebug.registry import c10d
from rtdebug.registry.entry import LIVE_RANK_STATES
from rtdebug.registry.files import Registry
from rtdebug.registry.schema import RankEntry, SessionEntry
from rtdebug.stacks import collect as stacks
from rtdebug.stacks import jobwide, motion
from rtdebug.stacks import text as stacktext

POLL_S = 0.05  # a failed rank is caught before torchrun (0.1 s monitor) tears the others down
MAX_DEFAULT_HANG_S = 300.0


def default_hang_s(pg_timeout_s: float) -> float:
    """Report well before torch's collective timeout would end the job (and its evidence)."""
    return min(MAX_DEFAULT_HANG_S, pg_timeout_s / 2)


def report(
    reg: Registry,
    session_id: str,
    stream: TextIO,
    header: str,
    ranks: frozenset[int] | None = None,
    timeout: float = 2.0,
    job_wide: bool = True,
) -> dict[str, Any] | None:
    """Write ``header`` and the grouped stacks of the running (selected) ranks; returns the snapshot.
    ``job_wide``: every node's ranks through the store, where this node hosts it."""
    session = reg.read_session(session_id)
    if session is None:
        return None
    snap = (job_wide and job_snapshot(session, timeout)) or stacks.collect(reg, session, ranks, timeout)
    if not snap["groups"] and not snap["unresponsive"]:
        return None
    body = render(snap)
    stream.write(f"{header}\n  {body}\n")
    stream.flush()
    return snap


def job_snapshot(session: SessionEntry, timeout: float) -> dict[str, Any] | None:
    """Every live rank of the job through its store, on the node hosting it; else (or on failure) None."""
    from rtdebug.views.store import StoreView

    try:
        host, port = c10d.split_endpoint(str(session.get("store") or ""))
    except ValueError:
        return None
    if not session.get("store") or not is_own(host):
        return None
    try:
        view = StoreView(host, port, explicit=True, local_ids=frozenset({session["session_id"]}))
        try:
            job = view.session(session["session_id"])
            if job is None:
                return None
            return jobwide.from_store(view.client(), job, view.known, None, timeout)
        finally:
            view.close()
    except (HarnessError, OSError):
        return None


def render(snap: dict[str, Any]) -> str:
    return jobwide.with_notes(stacktext.render(snap), snap).replace("\n", "\n  ")


def first_line(text: str, width: int = 200) -> str:
    """A rank's error can be a gloo paragraph; the header keeps one line of it."""
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= width else line[: width - 3] + "..."


def still_key(snap: dict[str, Any]) -> tuple[object, ...]:
    """What must stay the same for ``hang_s``: every rank's main-thread stack, and its collective position
    (the Flight Recorder's or the record's): a rank whose stack is the same (a long backward()) while DDP's
    all-reduces go on under it is moving, as ``rtdebug stacks`` says (``rtdebug.stacks.motion``)."""
    return (
        tuple(
            (tuple(g["ranks"]), tuple((f["file"], f["line"], f["function"]) for f in g["frames"]))
            for g in snap["groups"]
        ),
        tuple(snap["unresponsive"]),
        tuple(sorted(motion.positions(snap).items(), key=lambda kv: kv[0])),
    )


class AgentLike(Protocol):
    """What the watch needs of the torchrun agent (``rtdebug.launcher.agent.Agent``): a poll that never
    reaps it, and a signal that is never sent once it has been reaped (its pid may be reused then)."""

    pid: int

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> bool: ...


class HangWatch:
    def __init__(
        self, reg: Registry, session_id: str, agent: AgentLike, hang_s: float, stream: TextIO | None = None
    ) -> None:
        self.reg, self.sid, self.agent, self.hang_s = reg, session_id, agent, hang_s
        self.stream = stream or sys.stdout
        self.failed: set[int] = set()
        self._last: tuple[object, ...] | None = None
        self._since = 0.0
        self._reported: tuple[object, ...] | None = None
        self._next_sample = time.monotonic() + self.interval

    @property
    def interval(self) -> float:
        return max(0.5, self.hang_s / 3)

    def run(self) -> None:
        warned = False
        while self.agent.poll() is None:
            try:
                self.tick()
            except Exception as exc:  # the watch must never take the launcher down
                log.swallowed("launcher.hangwatch: the watch must never take the launcher down")
                if not warned:
                    print(f"rtdebug: hang report failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                warned = True
            time.sleep(POLL_S)

    def tick(self) -> None:
        entries = self.reg.ranks(self.sid)
        new = [e for e in entries if e["state"] == "failed" and e["rank"] not in self.failed]
        if new:
            self.failed.update(e["rank"] for e in new)
            self.on_failure(new, entries)
        elif self.hang_s > 0 and time.monotonic() >= self._next_sample:
            self._next_sample = time.monotonic() + self.interval
            self.sample(entries)

    def on_failure(self, new: list[RankEntry], entries: list[RankEntry]) -> None:
        others = frozenset(e["rank"] for e in entries if e["state"] in LIVE_RANK_STATES)
        if not others:
            return
        who = ", ".join(f"rank {e['rank']}" + (f" ({first_line(err)})" if (err := e.get("error")) else "") for e in new)
        paused = self._signal_agent(signal.SIGSTOP)
        try:  # the paused agent may host the job's store: this node's ranks only, by signal
            header = f"rtdebug: {who} failed; where the other ranks are:"
            report(self.reg, self.sid, self.stream, header, others, job_wide=not paused)
        finally:
            if paused:
                self._signal_agent(signal.SIGCONT)

    def sample(self, entries: list[RankEntry]) -> None:
        live = [e for e in entries if e["state"] in LIVE_RANK_STATES]
        if not live or any(e["state"] != "ready" or (e.get("wait") and not e.get("attach_count")) for e in live):
            self._last = None  # starting, attached, or waiting for a client: not a hang
            return
        session = self.reg.read_session(self.sid)
        if session is None:
            return
        snap = job_snapshot(session, 2.0) or stacks.collect(self.reg, session, None, timeout=2.0)
        if any(g.get("debugger") for g in snap["groups"]):
            self._last = None  # a rank (maybe on another node) is stopped in the debugger: not a hang
            return
        key = still_key(snap)
        now = time.monotonic()
        if key != self._last:
            self._last, self._since = key, now
            return
        if now - self._since >= self.hang_s and key != self._reported:
            self._reported = key
            body = render(snap)
            self.stream.write(
                f"rtdebug: no rank's stack has changed for {now - self._since:.0f} s (a hang?); "
                f"where every rank is:\n  {body}\n"
            )
            self.stream.flush()

    def _signal_agent(self, sig: int) -> bool:
        return self.agent.send_signal(sig)


def start(reg: Registry, session_id: str, agent: AgentLike, cfg: Any) -> threading.Thread:
    """Launcher hook: watch the session until torchrun (``agent``) ends."""
    hang_s = getattr(cfg, "hang_report_s", None)
    if hang_s is None:
        hang_s = default_hang_s(cfg.pg_timeout_s)
    watch = HangWatch(reg, session_id, agent, hang_s)
    return hidden_thread(watch.run, "rtdebug-hangwatch")
