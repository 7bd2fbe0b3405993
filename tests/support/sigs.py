"""Children a test sends signals to set those signals' dispositions themselves.

A test run started from a background job of a script inherits SIGINT and SIGQUIT ignored (and SIGHUP under
``nohup``); a child inherits that, and rtdebug rightly keeps an ignored signal ignored. So a test that
sends a signal must not depend on how the suite was started: its child resets the signals it is sent to
their default before it execs (``preexec_fn=default_dispositions``), as if started from a terminal.
``scripts/test-signals-ignored.sh`` runs the signal tests with these signals ignored, to prove it.
"""

from __future__ import annotations

import signal

SENT = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)


def default_dispositions() -> None:
    """In the child (a ``preexec_fn``, or right after ``os.fork()``): every signal a test sends is default."""
    for signum in SENT:
        signal.signal(signum, signal.SIG_DFL)
