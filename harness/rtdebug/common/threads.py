"""rtdebug's own background threads: daemons the debugger never traces or stops.

pydevd skips a thread marked ``pydev_do_not_trace`` and ``is_pydev_daemon_thread``; without the marks a
breakpoint that suspends the process would also suspend the thread that carries the client's
``continue`` (the relay), dumps stacks or keeps a heartbeat. The marks must be set before ``start``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def hidden_thread(target: Callable[..., Any], name: str, *args: Any, start: bool = True) -> threading.Thread:
    """A daemon thread the debugger leaves alone; started unless ``start`` is False."""
    t = threading.Thread(target=target, name=name, args=args, daemon=True)
    t.pydev_do_not_trace = True  # type: ignore[attr-defined]
    t.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
    if start:
        t.start()
    return t
