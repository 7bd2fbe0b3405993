"""Where sessions are found: one ``View`` interface, a backend per store (the shell's process).

``api.Views`` asks this machine's files (``local``) and, when configured, a multi-node job's c10d
store (``store``) or a Ray cluster's GCS (``ray``); backends are named as strings in ``api.BACKENDS``
and imported only when asked, so ``ps`` on a laptop never imports torch or Ray. ``teardown`` ends
a local session's processes (an adopted session's ranks are detached through ``rtdebug.inject``).
Imports ``rtdebug.common``, ``rtdebug.registry`` and ``rtdebug.inject`` only.
"""
