"""Inside every rank (torchrun worker, ``rtdebug run``'s process) or Ray Train worker.

``bootstrap`` is the entry point torchrun starts (``-m``). It and every other kind of rank (``ray_worker``
behind Ray's worker callback, ``adopted`` injected into a running rank) build the rank's ``state`` (its
registry entry and state machine; in a multi-node job, the store ``publish``er too) and go through the one
start-up, ``startup``, in one order: the fixes (post-import hooks: ``localmode/``'s ``fixes``,
``forcelocal`` and cluster semantics, the ``meshes`` record, ``stopon``), the stacks dump (``stacks/``:
``dump``, ``take``, ``flight``, and ``watch``, which answers job-wide ``stacks`` requests from the store or
the Ray KV), the collective record (``collectives/``: ``recorder``; ``nextstop``: "run all ranks to the
next collective"; ``mismatch``), and the lazy ``endpoint/`` (one public class, ``Endpoint``:
each client checked by ``rtdebug.common.access``, admitted by ``dapgate``, handed to pydevd without a
listening socket, traced only while attached, debugpy imported in the background by ``warmup``). A
launched rank also arms the launcher-watch guard (``rtdebug.common.lifetime``). With ``--wait`` it
pre-imports torch and waits for a client; then it ``execute``s the user's script. A raise is reported as
python would (``localmode.fixes``/``collectives.mismatch`` explain known ones) and, with ``--post-mortem``,
held for a client (``postmortem``). ``stopon/`` is ``--stop-on`` (its step state one typed object,
``stopon.stepstate``); ``localmode/`` is Ray Train local mode (``--force-local``, and the cluster's
semantics); ``unadopt`` takes an adoption out again; ``api`` is ``rtdebug.breakpoint``, which finds the
endpoint through ``runtime``.

A rank's start path must stay lean (``tests/unit/test_imports.py``): no psutil, filelock or debugpy before the
user's script runs. Imports the shared layers (common, registry, stacks) only: never the shell, the views or
the launcher.
"""
