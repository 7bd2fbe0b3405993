"""Inside every rank: the rank's half of ``rtdebug stacks``, run by a thread of the rank's own.

``dump`` is the rank's dump thread (armed at the rank's start by ``rtdebug.rank.startup``): it waits on its
FIFO and answers each request with the stacks ``take`` takes as Python, with the GIL, and the Flight Recorder
summary ``flight`` reads from torch at that moment; ``watch`` answers job-wide requests (a multi-node job's
store, a Ray job's KV) with the same dump. The requester's half (asking, grouping, the verdict) is
in ``rtdebug.stacks``, and what both halves share (the files, the signal, the limits, the job-wide protocol)
is there too: ``rtdebug.stacks.contract``, ``rtdebug.stacks.wire``. Imports the shared layers only, stdlib
on the rank's start path.
"""
