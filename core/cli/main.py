"""Entry point of the `wattwise` command.

Each sub-command is a module of `wattwise.cli` with `register(subparsers)`; the parser it adds sets
`func(args) -> int`. Bad input raises `wattwise.errors.UsageError` (or argparse rejects it): one line on
stderr, exit code 2, no traceback. The library names the setting it refuses (`eta`, `power_limit.eta`);
a parser that sets `setting_flags` (setting -> flag) has the message name its flags instead. A device
error (a backend this machine lacks) and an `OSError` on a path the user gave are also one line and exit 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from wattwise import __version__
from wattwise.config import rename_settings
from wattwise.devices.base import DeviceError
from wattwise.errors import UsageError

#: Sub-command modules, in the order `wattwise --help` lists them.
COMMANDS: tuple[str, ...] = (
    "run",
    "devices",
    "measure",
    "demo",
    "restore",
    "advise",
    "report",
    "jobs",
    "simulate",
    "frontier",
    "plan",
    "acceptance",
    "agent",
    "cap",
)

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and still exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="wattwise", description="Cut the energy bloat of deep-learning training.")
    parser.add_argument("--version", action="version", version=f"wattwise {__version__}")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        module = importlib.import_module(f"wattwise.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        print(f"wattwise: error: no command given; choose one of {', '.join(COMMANDS)} "
              "(see `wattwise --help`)", file=sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except UsageError as err:
        message = rename_settings(str(err), getattr(args, "setting_flags", {}))
        print(f"wattwise {args.subcommand}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except DeviceError as err:
        # A backend asked for by name that this machine lacks (`--backend nvml` without a driver), or a
        # device that refuses a call: the user's choice or machine, not a bug.
        message = rename_settings(str(err), getattr(args, "setting_flags", {}))
        print(f"wattwise {args.subcommand}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`wattwise jobs list | head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as err:
        # A path the user gave that cannot be written or read as asked (a file where a folder is needed,
        # a full disk): name it. Readers turn their own errors into `UsageError`s with the fix.
        print(f"wattwise {args.subcommand}: error: {_os_error(err)}", file=sys.stderr)
        return EXIT_USAGE


def _os_error(err: OSError) -> str:
    """One line: the path, what went wrong, and what to check."""
    what = err.strerror or str(err).splitlines()[0]
    paths = [str(p) for p in (err.filename, err.filename2) if p is not None]
    if not paths:
        return f"{what}; check the paths given"
    return f"{' -> '.join(paths)}: {what}; check the path (a file where a folder is needed, or the reverse?)"


if __name__ == "__main__":
    sys.exit(main())
