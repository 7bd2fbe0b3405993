"""Stacks of every rank without a debugger: ``dump`` (armed inside each rank, written by the kernel-level
faulthandler at signal time), ``collect`` (the requester: signal, read, wait), ``group`` and ``format``.

``dump`` runs in ranks; the rest in the shell (``rtdebug stacks``) and the launcher (hang watch).
Imports ``rtdebug.common`` and ``rtdebug.registry`` only (it may use ``rtdebug.views``, below it).
"""
