"""``rtdebug`` command line: a table of commands, each in its own module, imported only when it runs.

As pip's ``cli`` and ``commands``: ``rtdebug.commands.<name>`` owns its options (``add_parser``), checks
them once (its ``OPTIONS`` dataclass, ``from_args``) and does the work (``run(opts) -> int``). Only the
command given is imported, so ``rtdebug ps`` loads neither the launcher nor torch; each command's one-line
summary lives here so that ``rtdebug --help`` imports none of them.

``main(argv) -> int`` never lets a user mistake become a traceback: a ``HarnessError`` becomes
``rtdebug: error: <message>`` and its exit code (2 = usage).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from rtdebug.common import warns
from rtdebug.common.errors import HarnessError, UsageParser, printable, usage

# name -> (module, the summary `rtdebug --help` lists)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("rtdebug.commands.run", "run a single-process (local mode) script under the debugger"),
    "torchrun": ("rtdebug.commands.torchrun", "run a job under real torchrun, one debug port per rank"),
    "ps": ("rtdebug.commands.ps", "list live sessions and their ranks"),
    "attach": ("rtdebug.commands.attach", "wait for rank N and print what a client needs to attach"),
    "stop": ("rtdebug.commands.stop", "stop a session's whole process tree"),
    "vscode": ("rtdebug.commands.vscode", "print VS Code launch/task configurations as JSON"),
    "dap": ("rtdebug.commands.dap", "serve one DAP endpoint for a whole job: a child session per rank, any editor"),
    "stacks": ("rtdebug.commands.stacks", "where is every rank? Python stacks of all ranks, grouped"),
    "adopt": (
        "rtdebug.commands.adopt",
        "give every rank of a running torchrun job or Ray Train worker (started without rtdebug) a debug endpoint",
    ),
    "connect": (
        "rtdebug.commands.connect",
        "debug a job on other machines from this one: forward every rank through ssh and register it here",
    ),
    "replay": (
        "rtdebug.commands.replay",
        "run one captured rank alone as one process (a job run with --capture DIR), with a debug endpoint",
    ),
    "capsule": ("rtdebug.commands.capsule", "show what a --capture folder holds: ranks, collectives, where each ends"),
    "check": (
        "rtdebug.commands.check",
        "check a --stop-on spec, --wait policy or rank selector: its meaning, or the refusal",
    ),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command, listed with its summary; only ``command``'s module is imported, to add its options
    (None: the listing alone, which is all ``rtdebug --help`` and a wrong command name need)."""
    p = UsageParser(
        prog="rtdebug", description="Debug Ray Train local-mode and torchrun jobs: one debug port per rank."
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=UsageParser)
    for name, (module, summary) in COMMANDS.items():
        if name == command:
            importlib.import_module(module).add_parser(sub, summary)
        else:
            sub.add_parser(name, help=summary)
    return p


def _command_in(argv: list[str]) -> str | None:
    """The command argparse will pick: the first word that is not an option (``rtdebug`` has only -h)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    warns.install()  # rtdebug's own warnings read "rtdebug: warning: ..."; the script's keep Python's format
    try:
        args, extra = build_parser(_command_in(argv)).parse_known_args(argv)
        if extra:  # argparse would blame `rtdebug`; the words are the command's
            raise usage(f"unrecognized arguments: {' '.join(extra)} (see 'rtdebug {args.command} --help')")
        command = importlib.import_module(COMMANDS[args.command][0])
        return command.run(command.OPTIONS.from_args(args))
    except HarnessError as exc:
        print(f"rtdebug: error: {printable(exc.message)}", file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:  # argparse's --help (0); its mistakes are HarnessErrors (``UsageParser``)
        return exc.code if isinstance(exc.code, int) else 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `rtdebug stacks | head`: the reader left; say nothing, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0


if __name__ == "__main__":
    sys.exit(main())
