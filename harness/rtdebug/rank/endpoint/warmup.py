"""Import debugpy ahead of a first attach, in the background, once the rank has settled.

Why: a lazy rank's first attach spends ~93 % of its start in one import -- ``debugpy.server.api``
pulls in the vendored pydevd, 278 modules, 0.11 CPU-s on this machine; ``listen`` itself is
8 ms. Attaching to a whole job at once pays it in every rank on shared cores, behind the training
threads' GIL: 16 lazy ranks took 3.7x as long as ``--eager`` ones to be stopped (bench/attach_all.py).

So, ``delay_s`` after the endpoint opens (60 s by default, when a job is past its start and an
attach is about a stuck job), a daemon thread imports that module and nothing else: no thread of
debugpy's starts, no tracing, no hook, no port (checked in tests/e2e/test_warmup.py). Its one cost is
paid once, late, at the interpreter's normal switch interval (no GIL boost: the training thread
keeps its pace while the import crawls), and ~8 MB of modules. Launch -> first step is untouched
unless the job takes longer than the delay to start, and the steady step rate is untouched after.

``RTDEBUG_WARM_S``: the delay in seconds; ``0`` never imports ahead (the rank stays as lazy as
before). An eager rank, a rank a client reached first, and an adopted rank (attached at once) skip it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

from rtdebug.common import log
from rtdebug.common.threads import hidden_thread

DEFAULT_DELAY_S = 60.0
ENV = "RTDEBUG_WARM_S"
MODULE = "debugpy.server.api"


def delay_s(env: dict[str, str] | None = None) -> float:
    """The configured delay; a bad ``RTDEBUG_WARM_S`` says so in one line and keeps the default."""
    raw = (os.environ if env is None else env).get(ENV, "").strip()
    if not raw:
        return DEFAULT_DELAY_S
    try:
        value = float(raw)
        if value < 0 or value != value:  # negative or NaN
            raise ValueError
        return value
    except ValueError:
        print(
            f"rtdebug: ignoring {ENV}={raw!r} (want seconds >= 0; 0 = off); using {DEFAULT_DELAY_S:g}", file=sys.stderr
        )
        return DEFAULT_DELAY_S


def schedule(delay: float, wanted: Callable[[], bool]) -> threading.Thread | None:
    """Import debugpy's server ``delay`` seconds from now if ``wanted()`` still says so; None if off."""
    if delay <= 0 or MODULE in sys.modules:
        return None
    return hidden_thread(_later, "rtdebug-warmup", delay, wanted)  # never traced, as the endpoint's threads


def _later(delay: float, wanted: Callable[[], bool]) -> None:
    threading.Event().wait(delay)
    if MODULE in sys.modules or not wanted():
        return
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # as start_debugpy: no frozen-modules notice
    try:
        __import__(MODULE)
    except Exception as exc:  # debugpy broken or missing: the first attach will say so, not a background thread
        log.swallowed("rank.warmup: debugpy broken or missing: the first attach will say so, not a background thread")
        print(f"rtdebug: could not import debugpy ahead of an attach: {exc}", file=sys.stderr)
