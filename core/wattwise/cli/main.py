"""Entry point of the `wattwise` command.

Each sub-command is a module of `wattwise.cli` (named as the command, `_` for `-`) with
`register(subparsers)`; the parser it adds sets `func(args) -> int`. Only the module of the command being
run is imported: the others stay placeholders that carry the one-line help `COMMANDS` gives them, so
`wattwise --help` still lists every command while `wattwise plan` never pays for CP-SAT, SQLAlchemy or the
demo (tests/integration/cli/test_cli_startup.py keeps `COMMANDS` in step with what each module registers).

Bad input raises `wattwise.errors.UsageError` (or argparse rejects it): one line on stderr, exit code 2, no
traceback. The library names the setting it refuses (`eta`, `power_limit.eta`) as a `wattwise.errors.Key`;
a parser that sets `setting_flags` (setting -> flag) has the message show its flags instead
(`WattwiseError.message`). Something unavailable (`wattwise.errors.Unavailable`: a device or a backend
this machine lacks, the job store, the node agent) and an `OSError` on a path the user gave are also one
line and exit 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NoReturn

from wattwise import __version__
from wattwise.errors import Unavailable, UsageError, WattwiseError
from wattwise.extras import EXTRA_OF, MissingExtra, missing_extra

#: Each sub-command module and its one-line help, in the order `wattwise --help` lists them. A module's
#: `register` takes its help from here (`add_command`), so that it is spelled once.
COMMANDS: Mapping[str, str] = {
    "run": "run a training command with wattwise on, no code changes",
    "devices": "list the GPUs and CPU domains wattwise can measure",
    "measure": "run a command and report its time and energy",
    "demo": "train a tiny model on the simulated GPU with power-limit tuning",
    "restore": "restore GPU settings left changed by a crashed run",
    "advise": "best start time for a job within a window, by grid carbon intensity, PUE or price",
    "report": "energy report and paper-ready energy statement of a run (facility energy, emissions, cost)",
    "carbon": "list the grid carbon intensity codes --intensity takes (countries, cloud regions)",
    "jobs": "list, show, reset or sync the recurring jobs in the store",
    "runs": "list, show, compare or forget the runs wattwise measured (the run history)",
    "simulate": "simulate the recurring-job optimizer on real GPU traces (Zeus's format)",
    "frontier": "time-energy frontier of a pipeline's frequency plans, from a per-stage profile (Perseus)",
    "plan": "choose a frequency plan from a frontier (no slowdown, or for a straggler)",
    "acceptance": "check the NVML or amdsmi path on a real GPU (skips without one), or the three levers (--levers)",
    "agent": "the node agent: GPU settings for users who are not root",
    "cap": "run a command under a GPU power cap",
    "example-data": "write the example inputs the documentation uses into a folder",
    "dashboard": "serve a local, read-only web page of past runs, recurring jobs and a pipeline frontier",
}


def add_command(sub: argparse._SubParsersAction, name: str, **options: Any) -> argparse.ArgumentParser:
    """The parser of the command `name` under `sub`, with the one-line help `COMMANDS` gives it.

    Each command module's `register` makes its parser with it, so that a command's help is spelled once:
    the same words in `wattwise --help` whether the module was imported or not.
    """
    return sub.add_parser(name, help=COMMANDS[name], **options)


#: The extra that makes a command work, where it is more than the `store` extra its modules' NumPy,
#: SQLAlchemy or Alembic come from (each of these extras brings `store`): a command run without NumPy is
#: told the extra it needs, `wattwise frontier` the pipeline planner's, not only the store's.
EXTRA_OF_COMMAND: Mapping[str, str] = {
    "frontier": "pipeline",
    "plan": "pipeline",
    "demo": "lightning",
    "dashboard": "dashboard",
}

EXIT_USAGE = 2

#: Commands that only compute on numbers already in hand (no user code, no training, no child process) and
#: do no matrix product worth threading: numpy's OpenBLAS would start a thread per core at import and keep
#: them busy-waiting, about 0.15 CPU s of a 0.8 s `wattwise frontier` on two cores, for nothing (the
#: frontier's kernels run threads of their own). A value the user set is kept.
SINGLE_THREADED_BLAS = frozenset({"frontier", "plan"})


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and still exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(load: Collection[str] = tuple(COMMANDS)) -> argparse.ArgumentParser:
    """The `wattwise` parser; only the commands in `load` are imported, the others are placeholders."""
    parser = _Parser(prog="wattwise", description="Cut the energy bloat of deep-learning training.")
    parser.add_argument("--version", action="version", version=f"wattwise {__version__}")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        if name in load:
            importlib.import_module(f"wattwise.cli.{name.replace('-', '_')}").register(sub)
        else:
            add_command(sub, name)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The sub-command `argv` names: its first word that is not an option (`wattwise` takes no option values)."""
    word = next((w for w in argv if not w.startswith("-")), None)
    return word if word in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `wattwise` command line.

    Args:
        argv: the arguments after `wattwise`; None: `sys.argv[1:]`.

    Returns:
        The exit status: the command's own, 2 for a usage error or something unavailable (one line on
        stderr), 130 on Ctrl-C, 141 when the reader of the output went away.
    """
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:  # Ctrl-C while the command's modules load or its arguments are read
        return 130


def _missing_for(command: str | None, err: ModuleNotFoundError) -> ImportError:
    """The one-line error for `command` whose modules failed to import with `err`.

    It names the extra that makes the command work: the command's own (`EXTRA_OF_COMMAND`) when the missing
    module is one of the `store` extra's, which that extra brings; else the extra the module comes with.
    """
    extra = EXTRA_OF_COMMAND.get(command or "")
    top = (err.name or "").split(".")[0]
    if extra is None or EXTRA_OF.get(top, ("", ""))[1] != "store":
        extra = None
    return missing_extra(err, f"`wattwise {command}`", extra)


def _main(argv: list[str]) -> int:
    """`main`, its Ctrl-C aside."""
    command = command_of(argv)
    if command in SINGLE_THREADED_BLAS and "numpy" not in sys.modules:
        # Read once, when numpy is first imported; a caller that already has numpy keeps its environment.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        parser = build_parser(load=() if command is None else (command,))
    except MissingExtra as err:  # the command's module needs an extra this install lacks
        print(f"wattwise {command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as err:  # one it imports plainly (NumPy, SQLAlchemy: the `store` extra)
        missing = _missing_for(command, err)
        if not isinstance(missing, MissingExtra):
            raise
        print(f"wattwise {command}: error: {missing}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        print(
            f"wattwise: error: no command given; choose one of {', '.join(COMMANDS)} (see `wattwise --help`)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except (UsageError, Unavailable) as err:
        # Unavailable: the job store or the node agent cannot be reached, a backend asked for by name that
        # this machine lacks (`--backend nvml` without a driver), a device that refuses a call: the user's
        # choice or machine, not a bug. The message says what to do.
        print(f"wattwise {args.subcommand}: error: {_renamed(err, args)}", file=sys.stderr)
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


def _renamed(err: WattwiseError, args: argparse.Namespace) -> str:
    """The error's message with the settings it names shown as the command's flags."""
    flags = getattr(args, "setting_flags", {})
    return err.message(flags)


def _os_error(err: OSError) -> str:
    """One line: the path, what went wrong, and what to check."""
    what = err.strerror or str(err).splitlines()[0]
    paths = [str(p) for p in (err.filename, err.filename2) if p is not None]
    if not paths:
        return f"{what}; check the paths given"
    return f"{' -> '.join(paths)}: {what}; check the path (a file where a folder is needed, or the reverse?)"


if __name__ == "__main__":
    sys.exit(main())
