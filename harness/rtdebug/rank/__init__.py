"""Inside every rank (torchrun worker, ``rtdebug run``'s process) or Ray Train worker.

``bootstrap`` is the per-rank entry point torchrun starts. In order, it: arms the ``localmode`` and
``forcelocal`` fixes (post-import hooks), the launcher-watch guard (``rtdebug.common.lifetime``), the
rank's ``state`` (its registry entry and state machine) and, in a multi-node job, the store
``publish``er; arms the stacks dump (``rtdebug.rank.stacks.dump``); opens the lazy ``endpoint`` (each
client checked by ``access``, handed to pydevd through ``pydevd_socket``, traced only while attached by
``tracing``, with a short GIL switch interval while it connects: ``gil``); with ``--wait`` pre-imports
torch and waits for a client; then ``execute``s the user's script. A raise is reported as python would
(``localmode``/``collectives.mismatch`` explain known ones) and, with ``--post-mortem``, held for a client
(``postmortem``). ``ray_worker`` is the same runtime behind Ray's worker callback; ``adopted`` the
same runtime injected into a running rank (``rtdebug adopt``; ``unadopt`` takes it out again); ``api``
is ``rtdebug.breakpoint``, which finds the endpoint through ``runtime``. ``collectives/`` keeps each rank's
place in the collective sequence (``recorder``; ``stop``: "run all ranks to the next collective"; ``mismatch``);
``stackwatch`` answers job-wide ``stacks`` requests from the store or the Ray KV; ``warmup`` imports
debugpy's server in the background a minute in; ``dapgate`` admits a client only if its first bytes are
a DAP ``initialize``; ``refusals`` reports refused clients, at most one line a second.

A rank's start path must stay lean (``tests/unit/test_imports.py``): no psutil, filelock or debugpy before
the user's script runs. Imports the shared layers (common, registry, stacks) only: never the shell,
the views or the launcher.
"""
