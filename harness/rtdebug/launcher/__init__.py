"""The controller process: ``rtdebug torchrun`` (the real torchrun agent, forked), multi-node
stores, the hang watch, and the session lifecycle shared with ``rtdebug run`` (``session``) and the
Ray driver's setup (``ray_driver``).

``start`` is its one entry point, imported lazily by the shell. The launcher imports the shared layers
(common, registry, stacks); ``rtdebug run`` is launcher and rank 0 in one process, so ``single`` imports
``rtdebug.rank.bootstrap`` lazily, at that one place. Never imports the shell or the views.
"""
