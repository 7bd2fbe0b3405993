"""The one error type the CLI turns into a one-line message and an exit code.

Everything a user can get wrong (bad flags, busy ports, missing sessions) raises
``HarnessError``; the CLI prints ``rtdebug: error: <message>`` and returns ``exit_code``
instead of a traceback. Exit code 2 marks usage errors, 1 runtime failures. Every command's parser is a
``UsageParser``, so argparse's own mistakes take the same one line.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

USAGE = 2
RUNTIME = 1
# control characters (C0 but tab, DEL, C1): a message may quote what another machine sent, which must never
# move the cursor, retitle the terminal or forge a line of its own
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0A, 0x20), *range(0x7F, 0xA0))}


def printable(text: str) -> str:
    """``text`` with every control character written as an escape (``\\x1b``): safe to print on a terminal."""
    return text.translate(_CONTROL)


class HarnessError(Exception):
    def __init__(self, message: str, exit_code: int = RUNTIME) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


def usage(message: str) -> HarnessError:
    return HarnessError(message, USAGE)


class UsageParser(argparse.ArgumentParser):
    """An argparse parser whose mistakes are ``HarnessError``s: one line, ``rtdebug: error: <what> (see
    '<prog> --help')``, exit 2, never argparse's usage dump (torchrun's alone is 26 lines) before it."""

    def error(self, message: str) -> NoReturn:
        raise usage(message if "see `" in message else f"{message} (see '{self.prog} --help')")
