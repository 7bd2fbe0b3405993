"""The record of sessions and ranks: its schema, this machine's files, liveness, each store's key layout.

Written by the launcher and by every rank (and by the shell's explicit prune and stop); read by the
shell, the views and the VS Code extension
(``registry.schema.json`` is the contract both test suites validate against). Imports
``rtdebug.common`` only. Reading never changes a file; ``liveness.prune`` is the one explicit step
that brings entries in line with their processes.
"""
