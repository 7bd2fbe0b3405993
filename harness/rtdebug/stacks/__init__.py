"""Stacks of every rank without a debugger: ``dump`` (armed inside each rank, written by CPython's C-level
faulthandler at signal time), ``collect`` (the requester: signal, read, wait), ``group`` and ``format``,
``native`` (py-spy), ``verdict`` (who the others wait for, from the collective records), ``jobwide``
(every rank of a job through its store or the Ray KV) and ``answer`` (a rank's signed answer to it).

``dump`` and ``answer`` run in ranks; the rest in the shell (``rtdebug stacks``) and the launcher
(hang watch).
Imports ``rtdebug.common`` and ``rtdebug.registry`` only (it may use ``rtdebug.views``, below it).
"""
