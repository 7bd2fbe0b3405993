"""Ray Train's local mode (``ScalingConfig(num_workers=0)``) as rtdebug runs it: what you debug is what will
run (runs in each rank: a torchrun rank, or ``rtdebug run``'s one process).

Three parts, each armed by ``rank.startup`` as a post-import hook before the user's code runs, so a process
that never imports torch or Ray pays nothing:

- ``fixes``: a long default process-group timeout (a rank paused at a breakpoint must not make its peers
  time out), the Ray Train V2 check, and one clear line for Ray's bare asserts and V1 errors (``explain``);
- ``forcelocal``: ``--force-local``, an unmodified ``num_workers=N`` script run in local mode;
- the cluster's semantics (``--ray-local-mode=cluster``, the default), the rest of this package.

Ray 2.60's local mode keeps only part of the API's promise: ``barrier()`` is a no-op,
``broadcast_from_rank_zero(x)`` returns ``x`` on every rank, ``report()`` remembers the last call in memory
(nothing persisted, a ``TemporaryDirectory`` checkpoint gone after ``fit()``), nothing is ever restored,
``RunConfig(callbacks=)`` and ``FailureConfig`` are ignored, and Ray Data is refused on more than one rank.
With the cluster's semantics the V2 trainer's local controller is replaced by ``controller.run``:

- ``sync``: where the ranks meet for ``barrier``, ``broadcast_from_rank_zero`` and ``report``
  (``CallExchange``): the job's own c10d store, nothing through NCCL or a process group, so never queued
  behind the training's collectives; ``recording`` puts each call in the collective record as
  ``ray.train.*``, so ``stacks`` names them;
- ``checkpoints``: rank 0 plays the controller: Ray's own ``CheckpointManager`` (the same snapshot file, so a
  second run with the same ``name`` resumes, ``CheckpointConfig`` is honoured and dropped checkpoints are
  deleted), and the user's callbacks;
- ``controller``: ``fit()``'s lifecycle (the process group, the run's name and storage, ``FailureConfig``,
  the ``Result``); ``localrun``: what each of the train function's calls does;
- ``fnutils``: the ``TrainFnUtils`` the train function's ``ray.train.*`` calls reach;
- ``data``: Ray Data shards for any number of ranks (``ShardExchange``: what the ranks exchange for it);
- ``notes``: the one line where the cluster's value differs from Ray's own local mode.

``--ray-local-mode=ray`` leaves Ray's own local mode untouched.

What runs where: all of it in the rank. ``patch.install`` is the seam (and the Ray it needs); it imports
nothing of Ray until the job does, and the rest is imported at ``fit()``. It imports ``rtdebug.common`` and
the rank's own modules only.
"""
