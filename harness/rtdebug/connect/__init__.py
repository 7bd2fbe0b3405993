"""``rtdebug connect``: a job on other machines, debugged from this one (the shell's process, on the laptop).

``transport`` is the seam (a ``Transport`` opens one ``Link`` per node of the job: one long-lived child that
runs commands there and forwards local ports to it); ``SshTransport`` uses the system's ``ssh`` with a control
master per node. ``listing`` reads the remote ``rtdebug ps --json`` as hostile input. ``session`` keeps the
local session whose rank entries point at the forwarded ports, and ``secretsock`` hands the job secret (read
over ssh, kept in memory only) to this user's other rtdebug commands; ``stacksrelay`` runs the node's own ``rtdebug
stacks --json`` for them where no store answers (a single-node job), and ``remotesnap`` reads that answer as
hostile input. Imports ``rtdebug.common``,
``rtdebug.registry`` and ``rtdebug.views`` (a job's store and a Ray cluster's KV, read through the forwards).
"""
