"""``rtdebug stop``: end one session (or ``--all``) through the view that found it."""

from __future__ import annotations

from rtdebug.common.errors import HarnessError, usage
from rtdebug.registry.files import Registry
from rtdebug.registry.liveness import prune
from rtdebug.views.api import ViewOptions, Views


def command(session_id: str | None, every: bool, opts: ViewOptions | None = None) -> int:
    reg = Registry()
    prune(reg)
    views = Views.open(opts, reg)
    live = views.sessions()
    if every:
        targets = live
    elif session_id is not None:
        targets = [views.find_session(session_id)]
    elif len(live) == 1:
        targets = live
    elif not live:
        raise HarnessError("no live rtdebug session to stop")
    else:
        raise usage(f"{len(live)} live sessions; pick one with --session ID or use --all")
    for s in targets:
        print(views.view_of(s).stop(s))
    if every and not live:
        print("rtdebug: no live sessions")
    return 0
