"""One DAP endpoint for a whole job (``rtdebug dap``, ``rtdebug torchrun --dap-port``): runs in your shell, or
beside the launcher as its child.

A client attaches to it once, as to any debugpy server, and is handed one ``startDebugging`` child session
per rank (the child attaches to the rank's own endpoint, which checks it as any client), then one for each
rank that appears later. ``wire`` (DAP's framing, read as hostile input), ``children`` (which ranks, under
what names, with what configuration; when the session is over), ``server`` (the listening socket, each
client's conversation, ``terminate`` = stop the job), ``relay`` (a child that connects back here, as dape's
do, relayed to its rank). Imports ``common``, ``registry`` and ``views``.
"""
