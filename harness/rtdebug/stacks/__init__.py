"""Stacks of every rank without a debugger, the requester's half: ``ask`` and ``collect`` (write a nonce
into each rank's FIFO, read its dump thread's answer; the signal fallback for a rank that cannot answer),
``group`` and ``text``, ``native`` (py-spy), ``flight`` (a rank's Flight Recorder summary, read as
forgeable input), ``verdict`` (who the others wait for: each rank's ``position``, the ``finding`` said
once), ``history``, ``stops`` and ``jobwide`` (every rank of a job through its store or the Ray KV).

The rank's half (its dump thread, the stacks it takes, the Flight Recorder it reads) runs in each rank:
``rtdebug.rank.stacks``. What both halves share is here, below the rank: ``contract`` (the files, the
signal, the size of a dump) and ``wire`` (the job-wide protocol, both ends). Everything else runs in the
shell (``rtdebug stacks``) and the launcher (hang watch). Imports ``rtdebug.common`` and
``rtdebug.registry`` only (it may use ``rtdebug.views``, below it).
"""
