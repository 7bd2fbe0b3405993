"""Shared by every process: errors, validated config, ports, process identity, locks, lifetime guards.

Runs wherever it is imported (the shell, the launcher, every rank). Imports the standard library
only (psutil lazily, off the ranks' start path) and nothing else of rtdebug: it is the bottom layer.
"""
