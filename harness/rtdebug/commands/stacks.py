"""``rtdebug stacks``: the grouped Python stacks of every rank of one live session.

This machine's ranks answer a signal (``rtdebug.stacks.collect``). A multi-node job's ranks, and a Ray
run's workers, answer through the job's store or the cluster's KV (``rtdebug.stacks.jobwide``): with
``--store``/``--ray-address`` from any machine (no registry needed), and without a flag on any node of
a multi-node job, whose session records its store. Same text, same ``--json``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from rtdebug.common import selector
from rtdebug.common.errors import HarnessError, usage
from rtdebug.common.ports import parse_rank_list
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune
from rtdebug.registry.record import LIVE_RANK_STATES, LIVE_SESSION_STATES
from rtdebug.registry.table import world_size
from rtdebug.stacks import format as stackformat
from rtdebug.stacks import history as stackhistory
from rtdebug.stacks import jobwide
from rtdebug.stacks.collect import collect, select_ranks
from rtdebug.stacks.native import find_py_spy
from rtdebug.views.api import Views
from rtdebug.views.local import LocalView

HISTORY_MAX = 64  # what each rank sends (rtdebug.stacks.flight.KEEP)


def _ranks(session: dict[str, Any], rank_spec: str | None, entries: list[dict] | None = None) -> frozenset[int] | None:
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


def _store_snapshot(endpoint: str, session_id: str | None, rank_spec: str | None, timeout: float) -> dict:
    from rtdebug.views import store

    view = store.StoreView(*_endpoint(endpoint), explicit=True)
    session = _remote_session(view, session_id, f"the job store at {endpoint}")
    try:
        return jobwide.from_store(view.client(), session, view.known, _ranks(session, rank_spec), timeout)
    except OSError as exc:
        raise HarnessError(f"the job store at {endpoint} stopped answering: {exc}") from None
    finally:
        view.close()


def _remote_session(view: Any, session_id: str | None, where: str) -> dict[str, Any]:
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


def _ray_snapshot(address: str, session_id: str | None, rank_spec: str | None, timeout: float) -> dict:
    from rtdebug.views import ray

    view = ray.open_view(type("Opts", (), {"ray_address": address})())
    assert isinstance(view, ray.RayView)
    session = _remote_session(view, session_id, f"the Ray cluster at {address}")
    try:
        return jobwide.from_kv(view.kv, session, view.known, _ranks(session, rank_spec), timeout)
    except HarnessError:
        raise
    except Exception as exc:  # RpcError and friends: the cluster went away mid-read
        raise HarnessError(f"cannot read the Ray cluster at {address}: {exc}") from None


def _local_snapshot(session_id: str | None, rank_spec: str | None, native: bool, timeout: float) -> dict:
    reg = Registry()
    prune(reg)
    # stacks are taken by signal, so only this machine's sessions (its files) can answer
    try:
        session = Views([LocalView(reg)]).find_session(session_id)
    except HarnessError as exc:
        if native:
            raise
        return _from_env(session_id, rank_spec, timeout, exc)
    if session.get("store") and not native:  # a multi-node job: every node's ranks, through its store
        try:
            return _store_snapshot(session["store"], session["session_id"], rank_spec, timeout)
        except HarnessError:
            pass  # the store is not answering: this node's ranks at least
    ranks = _ranks(session, rank_spec, reg.ranks(session["session_id"]))
    live, _ = select_ranks(reg, session, ranks)
    if not live:
        raise HarnessError(
            f"session {session['session_id']} has no running rank" + (f" among {rank_spec}" if rank_spec else "")
        )
    return collect(reg, session, ranks, timeout, native)


def _from_env(session_id: str | None, rank_spec: str | None, timeout: float, local: HarnessError) -> dict:
    """No such session here: the job ``ps`` shows from ``$RTDEBUG_STORE`` / ``$RAY_ADDRESS`` (a laptop set up
    once, and the VS Code extension, which names a session ``ps`` listed), else the local error."""
    for var, take in (("RTDEBUG_STORE", _store_snapshot), ("RAY_ADDRESS", _ray_snapshot)):
        address = os.environ.get(var, "").strip()
        if address:
            try:
                return take(address, session_id, rank_spec, timeout)
            except HarnessError as exc:
                raise HarnessError(f"{local.message}; through ${var} ({address}): {exc.message}") from None
    raise local


def command(
    session_id: str | None,
    rank_spec: str | None,
    as_json: bool,
    native: bool,
    timeout: float,
    threads: bool,
    store: str | None = None,
    ray_address: str | None = None,
    history: int | None = None,
) -> int:
    """Print the grouped snapshot of one live session (the one ``find_session`` every command uses)."""
    if timeout <= 0:
        raise usage(f"--timeout must be > 0 seconds, got {timeout:g}")
    if history is not None and not 1 <= history <= HISTORY_MAX:
        raise usage(f"--history takes 1 to {HISTORY_MAX} collectives, got {history}")
    if native and (store or ray_address):
        raise usage("--native reads this machine's ranks with py-spy: not with --store or --ray-address")
    if store and ray_address:
        raise usage("--store and --ray-address name two different jobs: give one")
    if native and find_py_spy() is None:
        raise HarnessError("--native needs py-spy: pip install 'rtdebug[stacks]' (or pip install py-spy)")
    if store:
        snap = _store_snapshot(store, session_id, rank_spec, timeout)
    elif ray_address:
        snap = _ray_snapshot(ray_address, session_id, rank_spec, timeout)
    else:
        snap = _local_snapshot(session_id, rank_spec, native, timeout)
    flights = snap.pop("_flights", {})
    if history is not None:
        snap["history"] = stackhistory.align(flights, history)
    if as_json:
        print(json.dumps(snap, indent=1))
        return 0
    text = jobwide.with_notes(stackformat.render(snap, threads=threads, native=native), snap)
    if history is not None:
        text += "\n\n" + stackhistory.render(snap["history"])
    print(text)
    return 0
