"""The rank's public surface: ``rtdebug.breakpoint(rank=0)`` for scripts, and what a debugger evaluates in a rank.

``breakpoint`` stops only the named rank(s). Choice for a rank with no client attached: wait up to ``timeout``
seconds (default 0) for one, then return ``False`` with a one-line notice on stderr. Never blocking forever keeps
an unattended run (CI, a colleague's job) alive.

A debugger (the VS Code extension, through DAP ``evaluate``) calls only the functions of this module inside a
rank, as ``__import__('rtdebug.rank.api', fromlist=['_']).NAME(...)``: ``stop_at_next_collective``,
``configure_stop_on`` and ``all_stop``. Each answers one line and imports what it needs when called
(``tests/project/test_layout.py`` checks that the extension names nothing else).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from rtdebug.rank import runtime


def current_rank() -> int:
    """Global rank from torchrun's ``RANK`` (0 for a single process)."""
    return int(os.environ.get("RANK", "0") or 0)


def _wanted(rank: int | Iterable[int] | None) -> set[int] | None:
    if rank is None:
        return None
    if isinstance(rank, int):
        return {rank}
    return {int(r) for r in rank}


def _connected() -> bool:
    ep = runtime.endpoint
    if ep is not None:
        return ep.client_connected()
    if "debugpy" in sys.modules:
        import debugpy

        return debugpy.is_client_connected()
    return False


def _chosen(selector_text: str, me: int) -> bool:
    """Whether this rank's mesh coordinates match ``selector_text`` (``tp=1``); a bad selector is one line."""
    from rtdebug.common import selector
    from rtdebug.common.errors import HarnessError
    from rtdebug.rank import meshes

    mine = meshes.coords()
    try:
        terms = selector.parse(selector_text, "rtdebug.breakpoint(rank=...)")
        sizes = {d: s for m in meshes.published() for d, s in zip(m["dims"], m["shape"], strict=False)}
        selector.check(terms, sizes, "rtdebug.breakpoint(rank=...)")
    except HarnessError as exc:
        print(f"rtdebug: rank {me}: {exc.message}", file=sys.stderr)
        return False
    return selector.matches(terms, mine)


def breakpoint(rank: int | Iterable[int] | str | None = None, *, timeout: float = 0.0) -> bool:  # noqa: A001
    """Stop in the caller's frame if this is one of ``rank`` (a rank, ranks, or mesh coordinates such as
    ``"tp=1"`` or ``"dp=0,tp=*"``) and a client is attached.

    Returns True if the debugger stopped here, False if this rank was skipped or
    no client attached within ``timeout`` seconds.
    """
    me = current_rank()
    if isinstance(rank, str):
        if not _chosen(rank, me):
            return False
        wanted = None
    else:
        wanted = _wanted(rank)
    if wanted is not None and me not in wanted:
        return False
    if not _connected() and timeout > 0 and runtime.endpoint is not None:
        runtime.endpoint.wait_for_client(timeout)
    return stop_in(sys._getframe(1), me)


def stop_in(frame, rank: object) -> bool:
    """Suspend in ``frame`` if a client is attached, else say in one line where to attach.

    Shared by ``breakpoint(rank=...)`` and the ``breakpoint()`` hook of Ray workers.
    """
    if not _connected():
        where = f" (attach to {runtime.endpoint.host}:{runtime.endpoint.port})" if runtime.endpoint else ""
        print(f"rtdebug: rank {rank}: breakpoint() skipped, no debugger attached{where}", file=sys.stderr)
        return False
    import pydevd

    pydevd.settrace(
        suspend=True,
        trace_only_current_thread=True,
        patch_multiprocessing=False,
        stop_at_frame=frame,
        notify_stdin=False,
    )
    return True


def stop_at_next_collective() -> str:
    """Arm a one-shot stop at the next collective this rank enters; one line says whether it is armed."""
    from rtdebug.rank.collectives import recorder

    return recorder.stop_at_next()


def configure_stop_on(spec: str, gen: str | None = None) -> str:
    """``--stop-on`` set (or, with ``""``, turned off) on this running rank; one line says what it stops on."""
    from rtdebug.rank.stopon import arm

    return arm.configure(spec, gen)


def all_stop(on: bool | None = None, continue_all: bool | None = None) -> str:
    """All-stop for the whole job (every rank that shares this one's session directory): ``on`` (one rank stops,
    the others pause), ``continue_all`` (a continue in one rank continues all); None leaves either as it is. One
    line says the setting. Turning all-stop off lets go of the ranks it holds."""
    from rtdebug.rank import allstop

    return allstop.configure(runtime.allstop, on, continue_all)
