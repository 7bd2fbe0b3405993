"""Helpers the tests share (``tests/conftest.py`` holds only fixtures). Imported as ``support.<module>``: pytest
puts ``tests/`` on ``sys.path`` (its rootdir conftest), and so does ``bench/__init__.py`` for the DAP client.

paths     the repository's directories, the interpreter, ``marker_line``
ports     ``port_free``, ``free_port_base``
procs     ``kill_tree``, ``alive``, ``dead_pid``
jobs      ``Job`` (a real ``rtdebug ...`` process), ``Jobs`` (the ``job`` fixture's machinery), ``read_ranks``,
          ``wait_ranks``, ``rtdebug``
wait      ``until``: a wait on a state, with a deadline
dap       a real DAP client over TCP
entries   registry entries (session, rank; a store's rank and node entries) that several tests build
users     acting as another uid (``NOBODY``, ``SETPRIV``, ``needs_setpriv``)
hostile   bytes a hostile peer sends a rank's port, and ``send``
netns     separate hosts as network namespaces
sshhosts  a laptop, a jump host and two nodes with real sshd's (``connect``'s tests)
venvjobs  jobs in another Python's ``.venv-3.X``
"""
