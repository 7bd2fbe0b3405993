"""The user's shell: one module per ``rtdebug`` subcommand, as pip's ``commands/``.

``run``, ``torchrun``, ``ps``, ``attach``, ``stop``, ``vscode``, ``stacks``, ``adopt``, ``check`` and
``connect`` each own their options: ``add_parser(subparsers, summary)`` (flags, help, description), an
``OPTIONS`` dataclass built from the namespace (``from_args``) whose ``__post_init__`` refuses user mistakes
in one line, and ``run(opts) -> int``. ``rtdebug.cli`` is only the table of them, importing the one that runs.
Helpers: ``options`` (what several commands share, and torchrun's own parser), ``vsconfigs`` (VS Code
configurations), ``pidstacks`` (``stacks --pid``), ``adoptranks`` / ``adoptlist`` / ``adoptray`` /
``adoptstopon`` (``adopt``'s injection, ``--list``, Ray workers, ``--stop-on`` on adopted ranks). Imports the
shared layers and never the launcher or the rank package: ``run`` and ``torchrun`` start the launcher, lazily,
through ``rtdebug.launcher.start``; ``adopt`` names ``rtdebug.rank.adopted`` in the code it injects into a
running rank, as a string, never imported here.
"""
