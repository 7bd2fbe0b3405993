"""``rtdebug stacks``: the grouped Python stacks of every rank of one live session."""

from __future__ import annotations

import json

from rtdebug.common.errors import HarnessError, usage
from rtdebug.common.ports import parse_rank_list
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune
from rtdebug.registry.table import world_size
from rtdebug.stacks import format as stackformat
from rtdebug.stacks.collect import collect, select_ranks
from rtdebug.stacks.native import find_py_spy
from rtdebug.views.api import Views
from rtdebug.views.local import LocalView


def command(
    session_id: str | None, rank_spec: str | None, as_json: bool, native: bool, timeout: float, threads: bool
) -> int:
    """Print the grouped snapshot of one live session (the one ``find_session`` every command uses)."""
    if timeout <= 0:
        raise usage(f"--timeout must be > 0 seconds, got {timeout:g}")
    if native and find_py_spy() is None:
        raise HarnessError("--native needs py-spy: pip install 'rtdebug[stacks]' (or pip install py-spy)")
    reg = Registry()
    prune(reg)
    # stacks are taken by signal, so only this machine's sessions (its files) can answer
    session = Views([LocalView(reg)]).find_session(session_id)
    world = world_size(session)
    ranks = None
    if rank_spec is not None:
        try:
            ranks = parse_rank_list(rank_spec, world)  # None = all
        except HarnessError as exc:
            raise usage(exc.message.replace("--wait", "--rank")) from None
        if ranks == frozenset():
            raise usage(f"--rank {rank_spec} selects no rank")
    live, _ = select_ranks(reg, session, ranks)
    if not live:
        raise HarnessError(
            f"session {session['session_id']} has no running rank" + (f" among {rank_spec}" if rank_spec else "")
        )
    snap = collect(reg, session, ranks, timeout, native)
    if as_json:
        print(json.dumps(snap, indent=1))
    else:
        print(stackformat.render(snap, threads=threads, native=native))
    return 0
