"""``rtdebug stacks``: the grouped Python stacks of every rank of one live session.

This machine's ranks answer a signal (``rtdebug.stacks.collect``). A multi-node job's ranks, and a Ray
run's workers, answer through the job's store or the cluster's KV (``rtdebug.stacks.jobwide``): with
``--store``/``--ray-address`` from any machine (no registry needed), and without a flag on any node of
a multi-node job, whose session records its store. Same text, same ``--json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
from typing import TYPE_CHECKING, Any

from rtdebug.commands.options import Options, session_arg
from rtdebug.common import selector
from rtdebug.common.errors import HarnessError, usage
from rtdebug.common.ports import parse_rank_list
from rtdebug.registry.entry import LIVE_RANK_STATES, LIVE_SESSION_STATES
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune
from rtdebug.registry.schema import ListedSession, RankEntry
from rtdebug.registry.table import world_size
from rtdebug.stacks import history as stackhistory
from rtdebug.stacks import jobwide, motion
from rtdebug.stacks import text as stacktext
from rtdebug.stacks.collect import collect, records, select_ranks
from rtdebug.stacks.native import find_py_spy
from rtdebug.views.api import Views
from rtdebug.views.local import LocalView

if TYPE_CHECKING:
    from rtdebug.views.remote import RemoteView

HISTORY_MAX = 64  # what each rank sends (rtdebug.stacks.flight.KEEP)
TIMEOUT_S = 3.0
# what --pid (one process tree on this machine, read by py-spy) cannot take, in this order
NOT_WITH_PID = ("session", "rank", "native", "store", "ray_address", "history", "snapshot")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StacksOptions(Options):
    """``rank``: rank numbers (``0,2-3``) or mesh coordinates (``dp=0,tp=*``), resolved against the session.
    ``pid``: a job rtdebug did not start, read through py-spy, which takes only ``json``, ``threads`` and
    ``timeout``. No ``views``: ``--store`` and ``--ray-address`` name the job, they do not add to a listing."""

    session: str | None = None
    rank: str | None = None
    json: bool = False
    native: bool = False
    threads: bool = False
    pid: int | None = None
    store: str | None = None
    ray_address: str | None = None
    history: int | None = None
    timeout: float = TIMEOUT_S
    snapshot: bool = False

    def __post_init__(self) -> None:
        if self.pid is not None:
            given = [k for k in NOT_WITH_PID if getattr(self, k) not in (None, False)]
            if given:
                flag = "--" + given[0].replace("_", "-")
                raise usage(f"--pid reads one process tree on this machine with py-spy: not with {flag}")
            return
        if not 0 < self.timeout < float("inf"):  # nan and inf too: a rank is waited on for a number of seconds
            raise usage(f"--timeout must be > 0 seconds, got {self.timeout:g}")
        if self.history is not None and not 1 <= self.history <= HISTORY_MAX:
            raise usage(f"--history takes 1 to {HISTORY_MAX} collectives, got {self.history}")
        if self.native and (self.store or self.ray_address):
            raise usage("--native reads this machine's ranks with py-spy: not with --store or --ray-address")
        if self.store and self.ray_address:
            raise usage("--store and --ray-address name two different jobs: give one")


OPTIONS = StacksOptions


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], summary: str) -> None:
    p = sub.add_parser(
        "stacks",
        help=summary,
        description="Dump every thread's Python stack of each live rank (taken by the rank's own dump thread: no "
        "debugger, no ptrace, works while a rank is blocked in a C++ collective or stopped at a breakpoint) and "
        "group ranks by identical main-thread stack, with the verdict from torch's Flight Recorder. "
        "With no session here: the job $RTDEBUG_STORE or $RAY_ADDRESS names (as for ps).",
    )
    p.add_argument("--session", type=session_arg, help="session id (default: the newest live session)")
    p.add_argument(
        "--rank", metavar="RANKS", help="ranks to dump: 0 or 0,2-3, or mesh coordinates: dp=0,tp=* (default: all)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object (what the VS Code extension reads)")
    p.add_argument("--native", action="store_true", help="add native frames with py-spy (needs ptrace rights)")
    p.add_argument("--threads", action="store_true", help="also print every rank's other threads")
    p.add_argument("--pid", type=int, help="a job rtdebug did not start: its torchrun agent or a rank (py-spy)")
    p.add_argument("--store", metavar="HOST:PORT", help="every rank of a multi-node job, through its store")
    p.add_argument("--ray-address", metavar="HOST:PORT", help="every worker of a Ray Train run, through its GCS")
    p.add_argument(
        "--history",
        type=int,
        nargs="?",
        const=16,
        metavar="N",
        help="each rank's last N collectives (default 16), aligned per group, the first divergence marked",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT_S,
        metavar="S",
        help="a rank that has not answered after S seconds is listed as unresponsive (default 3)",
    )
    p.add_argument(
        "--snapshot",
        action="store_true",
        help="the verdict of this one instant: skip the second look (by default a verdict is given only when "
        f"every rank's collective position stays put for {motion.WINDOW_S:g} s, or a rank is stopped in the "
        "debugger or exited; a job that moves is said to be progressing, with no verdict)",
    )


def _ranks(
    session: ListedSession, rank_spec: str | None, entries: list[RankEntry] | None = None
) -> frozenset[int] | None:
    """The ranks ``--rank`` chooses: rank numbers, or mesh coordinates (``dp=0,tp=*``) resolved against the
    session's verified rank entries (``entries``, else the session's own ``ranks``)."""
    if rank_spec is None:
        return None
    if selector.is_mesh(rank_spec):
        known = [
            e for e in (entries if entries is not None else session.get("ranks", [])) if e.get("verified") is not False
        ]
        chosen = selector.resolve(rank_spec, known)
        if not chosen:
            raise usage(f"--rank {rank_spec} selects no rank")
        return chosen
    try:
        ranks = parse_rank_list(rank_spec, world_size(session))  # None = all
    except HarnessError as exc:
        raise usage(exc.message.replace("--wait", "--rank")) from None
    if ranks == frozenset():
        raise usage(f"--rank {rank_spec} selects no rank")
    return ranks


def _store_snapshot(
    endpoint: str, session_id: str | None, rank_spec: str | None, timeout: float, instant: bool = False
) -> dict[str, Any]:
    from rtdebug.views import store

    view = store.StoreView(*_endpoint(endpoint), explicit=True)
    session = _remote_session(view, session_id, f"the job store at {endpoint}")
    try:
        chosen = _ranks(session, rank_spec)
        take = functools.partial(jobwide.from_store, view.client(), session, view.known, chosen, timeout)
        return motion.settle(take, instant=instant)
    except OSError as exc:
        raise HarnessError(f"the job store at {endpoint} stopped answering: {exc}") from None
    finally:
        view.close()


def _remote_session(view: RemoteView, session_id: str | None, where: str) -> ListedSession:
    """The named session (any of a multi-node job's node ids), else the newest verified one; must be live."""
    if session_id is None:
        session = Views([view]).find_session(None)
    else:
        found = view.session(session_id)
        if found is None or found.get("state") not in LIVE_SESSION_STATES:
            raise HarnessError(f"no live session {session_id!r} in {where}; see `rtdebug ps`")
        session = found
    if not any(r.get("state") in LIVE_RANK_STATES for r in session.get("ranks", [])):
        raise HarnessError(f"session {session['session_id']} has no running rank")
    return session


def _endpoint(endpoint: str) -> tuple[str, int]:
    from rtdebug.registry.c10d import split_endpoint

    try:
        return split_endpoint(endpoint)
    except ValueError:
        raise HarnessError(f"--store {endpoint!r}: expected HOST:PORT") from None


def _ray_snapshot(
    address: str, session_id: str | None, rank_spec: str | None, timeout: float, instant: bool = False
) -> dict[str, Any]:
    from rtdebug.views import ray

    view = ray.open_view(type("Opts", (), {"ray_address": address})())
    assert isinstance(view, ray.RayView)
    session = _remote_session(view, session_id, f"the Ray cluster at {address}")
    try:
        chosen = _ranks(session, rank_spec)
        take = functools.partial(jobwide.from_kv, view.kv, session, view.known, chosen, timeout)
        return motion.settle(take, instant=instant)
    except HarnessError:
        raise
    except Exception as exc:  # RpcError and friends: the cluster went away mid-read
        raise HarnessError(f"cannot read the Ray cluster at {address}: {exc}") from None


def _local_snapshot(
    session_id: str | None,
    rank_spec: str | None,
    native: bool,
    timeout: float,
    instant: bool = False,
    history: int | None = None,
) -> dict[str, Any]:
    reg = Registry()
    prune(reg)
    # stacks are taken by signal, so only this machine's sessions (its files) can answer
    try:
        session = Views([LocalView(reg)]).find_session(session_id)
    except HarnessError as exc:
        if native:
            raise
        return _from_env(session_id, rank_spec, timeout, exc, instant)
    if session.get("mode") == "connected" and session.get("ray_address") and not native:  # a Ray run, connected
        return _ray_snapshot(session["ray_address"], session["session_id"], rank_spec, timeout, instant)
    if session.get("store") and not native:  # a multi-node job: every node's ranks, through its store
        try:
            return _store_snapshot(session["store"], session["session_id"], rank_spec, timeout, instant)
        except HarnessError:
            pass  # the store is not answering: this node's ranks at least
    if session.get("mode") == "connected":  # its ranks run elsewhere: the node's own stacks, over connect's link
        from rtdebug.connect import stacksrelay

        req = stacksrelay.StacksRequest(rank_spec, timeout, native, history, instant)
        return stacksrelay.stacks(reg.session_dir(session["session_id"]), session, req)
    if native and find_py_spy() is None:  # checked where py-spy runs: a connected node checks its own, above
        raise HarnessError("--native needs py-spy: pip install 'rtdebug[stacks]' (or pip install py-spy)")
    ranks = _ranks(session, rank_spec, reg.ranks(session["session_id"]))
    live, _ = select_ranks(reg, session, ranks)
    if not live:
        raise HarnessError(
            f"session {session['session_id']} has no running rank" + (f" among {rank_spec}" if rank_spec else "")
        )
    take = functools.partial(collect, reg, session, ranks, timeout)
    return motion.settle(
        functools.partial(take, native),
        functools.partial(records, reg, session, ranks),
        instant=instant,
        recheck=functools.partial(take, False) if native else None,  # py-spy once: the second look needs positions
    )


def _from_env(
    session_id: str | None, rank_spec: str | None, timeout: float, local: HarnessError, instant: bool = False
) -> dict[str, Any]:
    """No such session here: the job ``ps`` shows from ``$RTDEBUG_STORE`` / ``$RAY_ADDRESS`` (a laptop set up
    once, and the VS Code extension, which names a session ``ps`` listed), else the local error."""
    for var, take in (("RTDEBUG_STORE", _store_snapshot), ("RAY_ADDRESS", _ray_snapshot)):
        address = os.environ.get(var, "").strip()
        if address:
            try:
                return take(address, session_id, rank_spec, timeout, instant)
            except HarnessError as exc:
                raise HarnessError(f"{local.message}; through ${var} ({address}): {exc.message}") from None
    raise local


def run(opts: StacksOptions) -> int:
    """Print the grouped snapshot of one live session (the one ``find_session`` every command uses)."""
    if opts.pid is not None:  # a job rtdebug did not start (nor adopt): read-only, through py-spy
        from rtdebug.commands import pidstacks  # (py-spy's reader, loaded only for --pid)

        return pidstacks.show(opts.pid, opts.json, opts.threads, opts.timeout)
    if opts.store:
        snap = _store_snapshot(opts.store, opts.session, opts.rank, opts.timeout, opts.snapshot)
    elif opts.ray_address:
        snap = _ray_snapshot(opts.ray_address, opts.session, opts.rank, opts.timeout, opts.snapshot)
    else:
        snap = _local_snapshot(opts.session, opts.rank, opts.native, opts.timeout, opts.snapshot, history=opts.history)
    flights = snap.pop("_flights", {})
    if opts.history is not None and "history" not in snap:  # (a connected node's stacks brings its own)
        snap["history"] = stackhistory.align(flights, opts.history)
    if opts.json:
        print(json.dumps(snap, indent=1))
        return 0
    text = jobwide.with_notes(stacktext.render(snap, threads=opts.threads, native=opts.native), snap)
    if opts.history is not None:
        text += "\n\n" + stackhistory.render(snap["history"])
    print(text)
    return 0
