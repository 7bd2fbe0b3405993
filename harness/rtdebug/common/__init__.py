"""Shared by every process: errors, validated config (``config``), ports, addresses, process identity
(``procinfo``) and process trees (``processes``), locks, lifetime guards, post-import hooks
(``imports``), the ranks' environment (``rankenv``), rtdebug's own paths, and the pieces ``rtdebug
adopt`` needs to find and enter a running job.

Runs wherever it is imported (the shell, the launcher, every rank). Imports the standard library and
psutil, nothing else of rtdebug: it is the bottom layer. What a rank imports on its start path must
not pull in psutil (``tests/unit/test_imports.py``): the modules it uses import psutil lazily.
"""
