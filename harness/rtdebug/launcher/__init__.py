"""The controller process: ``start`` (the shell's entry), ``torchrun`` (the plan: torchrun's own
command line with ``rtdebug.rank.bootstrap`` as every rank's ``-m`` target, and the ``Launcher``),
``agent`` (torchrun's agent, forked from the launcher), ``multinode`` (the job's store, ``--debug-host
auto``), ``hangwatch`` (grouped stacks when a rank fails or nothing moves), ``session`` (one lifecycle
for ``rtdebug torchrun`` and ``rtdebug run``), ``single`` (``rtdebug run``: launcher and rank 0 in one
process) and ``ray_driver`` (what the driver arms so Ray Train workers get endpoints).

``start`` is its one entry point, imported lazily by the shell. The launcher imports the shared layers
(common, registry, stacks); ``rtdebug run`` is launcher and rank 0 in one process, so ``single`` imports
``rtdebug.rank.bootstrap`` lazily, at that one place. ``hangwatch`` reads a multi-node job's store
through ``rtdebug.views.store`` (a lower layer). Never imports the shell.
"""
