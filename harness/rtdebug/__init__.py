"""rtdebug: debug Ray Train local-mode and torchrun jobs, one debug port per rank.

The in-script API is ``rtdebug.breakpoint(rank=0)`` (and ``rtdebug.current_rank()``); everything
else is the ``rtdebug`` command (``python -m rtdebug``). The package is laid out by the process
its code runs in, as debugpy's is:

==============  ==========================================================================
``cli``,        the user's shell: ``cli`` is the table of commands, each imported only when it runs;
``commands/``   ``commands/<name>`` owns its options, checks them and runs (``rtdebug ps/attach/...``)
``connect/``    the user's shell on a laptop: a job on other machines through ssh (``rtdebug connect``)
``launcher/``   the controller: real torchrun, its agent, multi-node, hang watch, Ray driver
``rank/``       inside every rank or Ray worker: start-up, endpoint, stacks dump, stop-on, local mode
``views/``      where sessions are found: this machine's files, a c10d store, a Ray GCS
``stacks/``     the requester's half of ``rtdebug stacks``: collect, group, format, verdict, job-wide
``inject/``     running a few lines inside a process rtdebug did not start (``adopt``, detach)
``registry/``   the registry entry, its schema, liveness, each store's key layout
``common/``     errors, config, ports, process identity, locks
==============  ==========================================================================

Layers, bottom up: common < {registry, inject} < views < {stacks, connect} < {shell, launcher, rank}. A
package imports only layers below it; the three process packages never import each other except lazily at
named entry points (``tests/project/test_layout.py`` checks this from the source, string module paths
included): the shell starts the launcher through ``rtdebug.launcher.start``; the launcher names
``rtdebug.rank.bootstrap`` as torchrun's ``-m`` target and runs ``rtdebug run``'s rank 0 through it
in its own process; the Ray driver setup names ``rtdebug.rank.ray_worker`` in ``RAY_TRAIN_CALLBACKS``;
``rtdebug adopt`` (and the detach ``rtdebug.inject.runner`` sends) names ``rtdebug.rank.adopted`` in the code
it injects into a running rank; and this module resolves ``breakpoint`` from ``rtdebug.rank.api`` on first
use.

``breakpoint`` is resolved lazily so that ``import rtdebug.<anything>`` costs no rank code.
"""

from typing import Any

__all__ = ["breakpoint", "current_rank"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rtdebug.rank import api

        return getattr(api, name)
    raise AttributeError(f"module 'rtdebug' has no attribute {name!r}")
