"""``--stop-on``: every rank of a job stops in the debugger at the moment training goes wrong.

Runs inside every rank (torchrun rank, ``rtdebug run``, Ray Train worker). ``arm.install`` waits for torch
to be imported, then rides on what the job already does, so that every rank detects the same event at
the same point and stops there, before the optimizer changes the weights:

- ``arm`` -- ``Tensor.backward`` (the loss given to it) and torch's global optimizer step pre-hook (a
  step counter: ``step=N``, ``disagree:N``, and the stop point before ``optimizer.step()``);
- ``ddp`` -- per-gradient checks before DDP's all-reduce (or FSDP2's reduce-scatter): the origin, the
  parameter's name; a non-finite loss carried to the other replicas in DDP's own all-reduce;
- ``finite`` -- the one NaN/Inf test, as cheap as the device allows;
- ``reduction`` -- whether a DDP model's reduction leaves every replica alike (what ``agree`` may do);
- ``agree`` -- after backward: the event every rank that must stop together sees alike, decided by what
  that backward synchronised (DDP, FSDP2, no_sync, none), never a collective some rank would not enter;
- ``disagree`` -- a hash of the replicas' parameters, compared with one small all-gather;
- ``halt`` -- the stop itself: the rank's registry entry says why, the endpoint starts and waits for a
  client if none is attached, and the thread suspends in the user's frame with the reason as the stop's
  description (the origin rank takes the focus).

Off means nothing is installed. Imports torch only once the job has (``rtdebug.common.imports``).
"""
