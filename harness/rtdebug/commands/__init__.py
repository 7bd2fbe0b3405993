"""The user's shell: what each ``rtdebug`` subcommand does behind ``rtdebug.cli``'s parsing.

``ps``, ``attach``, ``stop`` act on sessions through ``rtdebug.views``; ``stacks`` prints grouped
stacks; ``vsconfigs`` builds VS Code configurations; ``options`` are the debug flags shared by
``run`` and ``torchrun``; ``adopt`` takes over a job started without rtdebug. Imports the shared
layers and never the launcher or the rank package (``rtdebug.cli`` starts the launcher, lazily,
through ``rtdebug.launcher.start``; ``adopt`` names ``rtdebug.rank.adopted`` in the code it injects
into a running rank, as a string, never imported here).
"""
