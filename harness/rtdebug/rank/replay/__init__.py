"""Replay one rank alone: capture what each collective returned in a job, serve it back in one process.

Runs in the rank. ``ops`` (the process-group methods both sides handle: which tensors are sent and which
received, the call site, the fingerprint, the seam where torch makes a group), ``capture`` (a wrapping
process group that lets the real backend run and records its outputs into a capsule), ``serve`` (a process
group that answers every collective from the capsule and checks what the rank sends). Imports
``rtdebug.common`` and ``rtdebug.capsule``; torch only once the job imports it.
"""
