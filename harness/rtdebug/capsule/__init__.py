"""A capsule: what one or more ranks of a job received from their collectives, to replay a rank alone.

Runs everywhere (the capturing rank writes it, the shell reads it for ``rtdebug capsule``, the replaying rank
reads it); imports ``rtdebug.common`` only and never torch. ``format`` (the layout, safetensors bytes),
``write`` (``CapsuleWriter``: a writer thread behind a bounded queue), ``read`` (``open_capsule``, ``Capsule``,
``CapsuleError``). The format is documented in docs/replay.md ("The capsule format").
"""
