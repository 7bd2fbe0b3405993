"""The one support package for everything that drives jobs from outside: the tests, ``bench/``, the GPU check
(``scripts/gpu_check``) and the extension's e2e hosts (``vscode-extension/e2e/sshhost.py``). Imported as
``support.<module>``, with ``tests/`` on the path by configuration, never by editing ``sys.path``: pytest's
``pythonpath`` (pyproject.toml); ``PYTHONPATH`` from the script that runs the others (``scripts/bench.sh``,
``scripts/gpu-check.sh``, ``e2e/connectFlow.js``). rtdebug's own runtime code keeps its helpers in ``rtdebug.common``.
``tests/conftest.py`` holds only fixtures.

paths      the repository's directories, the interpreter, ``marker_line``
ports      ``port_free``, ``free_port``, ``free_port_base``, ``PortRanges`` (ranges handed out in turn)
procs      ``kill_tree``, ``end_group`` (a process group: TERM, then KILL), ``alive``, ``dead_pid``
jobs       ``Job`` (a real ``rtdebug ...`` process, or any argv, logged to a file), ``Jobs`` (the ``job``
           fixture's machinery), ``read_ranks``, ``wait_ranks``, ``rtdebug``
wait       ``until``: a wait on a state, with a deadline
dap        a real DAP client over TCP
raycluster a small real Ray cluster on this machine (``ray start``, ended by its own pids)
entries    registry entries (session, rank; a store's rank and node entries) that several tests build
users      acting as another uid (``NOBODY``, ``SETPRIV``, ``needs_setpriv``)
hostile    bytes a hostile peer sends a rank's port, and ``send``
netns      separate hosts as network namespaces
sshhosts   a laptop, a jump host and two nodes with real sshd's (``connect``'s tests)
venvjobs   jobs in another Python's ``.venv-3.X``
sigs       children's signal dispositions, and which tests send signals
"""
