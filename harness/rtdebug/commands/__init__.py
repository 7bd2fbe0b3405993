"""The user's shell: what each ``rtdebug`` subcommand does behind ``rtdebug.cli``'s parsing.

``ps``, ``attach``, ``stop`` act on sessions through ``rtdebug.views``; ``stacks`` prints grouped
stacks; ``vsconfigs`` builds VS Code configurations; ``options`` are the debug flags shared by
``run`` and ``torchrun``. Imports the shared layers; the launcher only through ``rtdebug.launcher.start``,
lazily, and never the rank package.
"""
