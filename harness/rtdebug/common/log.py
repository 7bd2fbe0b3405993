"""Opt-in logs, on debugpy's model: ``RTDEBUG_LOG=debug|info|warning`` and ``RTDEBUG_LOG_DIR``.

rtdebug runs inside the user's job, so it prints nothing of its own unless something is the user's
business; yet every place that swallows an exception to keep the job alive (a store that went away, a
client that hung up) must leave a trace someone can ask for. With ``RTDEBUG_LOG_DIR`` set, each process
(shell, launcher, every rank) appends to ``<dir>/rtdebug-<role>-<pid>.log`` (the directory made 0700, the
file 0600, opened without following links); with ``RTDEBUG_LOG`` alone, lines go to stderr. Level
``info`` by default once either is set; ``debug`` adds each swallowed exception's traceback. Unset,
every call is one dictionary lookup. Stdlib only (it is on every rank's start path) and no ``logging``
import: a job's own logging configuration is never touched.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import IO, Any

ENV_LEVEL, ENV_DIR = "RTDEBUG_LOG", "RTDEBUG_LOG_DIR"
LEVELS = {"debug": 10, "info": 20, "warning": 30}
_UNSET: Any = object()


class _Sink:
    """This process's log level and stream, each read from the environment on first use (a plain class: this
    module is on every rank's start path, which imports nothing it can do without)."""

    __slots__ = ("level", "stream")

    def __init__(self) -> None:
        self.level: int | None = None
        self.stream: IO[str] | None = _UNSET  # None: nowhere to write


_sink = _Sink()
_lock = threading.Lock()


def _level() -> int:
    if _sink.level is None:
        name = os.environ.get(ENV_LEVEL, "").strip().lower()
        on = bool(name) or bool(os.environ.get(ENV_DIR))
        _sink.level = LEVELS.get(name, 20) if on else 100
    return _sink.level


def _stream() -> IO[str] | None:
    if _sink.stream is not _UNSET:
        return _sink.stream
    stream: IO[str] | None = sys.stderr
    folder = os.environ.get(ENV_DIR)
    if folder:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            role = os.environ.get("RANK") and f"rank{os.environ['RANK']}" or "rtdebug"
            name = os.path.join(folder, f"rtdebug-{role}-{os.getpid()}.log")
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
            stream = os.fdopen(os.open(name, flags, 0o600), "a", buffering=1)
        except OSError:
            stream = None  # nowhere to write: the logs are opt-in, the job goes on
    _sink.stream = stream
    return stream


def _write(level: str, message: str) -> None:
    stream = _stream()
    if stream is None:
        return
    line = f"{time.strftime('%H:%M:%S')} {os.getpid()} {threading.current_thread().name} {level}: {message}\n"
    with _lock:
        try:
            stream.write(line)
            stream.flush()
        except (OSError, ValueError):
            pass


def debug(message: str) -> None:
    if _level() <= 10:
        _write("debug", message)


def info(message: str) -> None:
    if _level() <= 20:
        _write("info", message)


def swallowed(why: str) -> None:
    """Call inside an ``except`` that keeps going: ``why`` says in one line why going on is right."""
    if _level() > 20:
        return
    exc = sys.exc_info()[1]
    what = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}" if exc is not None else ""
    _write("info", f"{why} ({what})" if what else why)
    if _level() <= 10 and exc is not None:
        _write("debug", "".join(traceback.format_exception(exc)).rstrip())
