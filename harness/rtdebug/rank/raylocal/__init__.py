"""Ray Train's local mode with the cluster's semantics: what you debug is what will run (runs in each rank:
a torchrun rank, or ``rtdebug run``'s one process).

Ray 2.60's local mode (``ScalingConfig(num_workers=0)``) keeps only part of the API's promise: ``barrier()``
is a no-op, ``broadcast_from_rank_zero(x)`` returns ``x`` on every rank, ``report()`` remembers the last call
in memory (nothing persisted, a ``TemporaryDirectory`` checkpoint gone after ``fit()``), nothing is ever
restored, ``RunConfig(callbacks=)`` and ``FailureConfig`` are ignored, and Ray Data is refused on more than
one rank. Under ``rtdebug run`` / ``rtdebug torchrun`` (``--ray-local-mode=cluster``, the default) the V2
trainer's local controller is replaced by ``controller.run``, which keeps the cluster's semantics:

- ``exchange``: where the ranks meet for ``barrier``, ``broadcast_from_rank_zero`` and ``report``: the
  job's own c10d store, nothing through NCCL or a process group, so never queued behind the training's
  collectives; ``recording`` puts each call in the collective record as ``ray.train.*``, so ``stacks``
  names them;
- ``history``: rank 0 plays the controller: Ray's own ``CheckpointManager`` (the same snapshot file, so a
  second run with the same ``name`` resumes, ``CheckpointConfig`` is honoured and dropped checkpoints are
  deleted), and the user's callbacks;
- ``controller``: ``fit()``'s lifecycle (the process group, the run's name and storage, ``FailureConfig``,
  the ``Result``); ``localrun``: what each of the train function's calls does;
- ``fnutils``: the ``TrainFnUtils`` the train function's ``ray.train.*`` calls reach;
- ``data``: Ray Data shards for any number of ranks.

``--ray-local-mode=ray`` leaves Ray's own local mode untouched.

What runs where: all of it in the rank. ``patch.install`` is armed by ``rank.startup`` before the user's
code runs and imports nothing of Ray until the job does; the rest is imported at ``fit()``. It imports
``rtdebug.common`` and the rank's own modules only.
"""
