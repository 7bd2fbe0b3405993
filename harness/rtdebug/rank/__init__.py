"""Inside every rank (torchrun worker, ``rtdebug run``'s process) or Ray Train worker.

``bootstrap`` is the per-rank entry point torchrun starts; it opens the lazy ``endpoint`` (checked by
``access``, handed to pydevd through ``handoff``, traced only while attached by ``tracing``), keeps
the rank's ``record`` and its state, arms ``localmode``/``forcelocal`` fixes, the stacks dump, the
``lifetime`` guard and the store ``publish``er, then ``execute``s the user's script. ``ray_worker`` is
the same runtime behind Ray's worker callback; ``api`` is ``rtdebug.breakpoint``.

A rank's start path must stay lean (``tests/test_imports.py``): no psutil, filelock or debugpy before
the user's script runs. Imports the shared layers (common, registry, stacks) only: never the shell,
the views or the launcher.
"""
