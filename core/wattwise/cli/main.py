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
from typing import Any, NamedTuple, NoReturn

from wattwise import __version__
from wattwise.errors import Unavailable, UsageError, WattwiseError
from wattwise.extras import EXTRA_OF, MissingExtra, missing_extra


class Command(NamedTuple):
    """A command's words: its one-line help in `wattwise --help`, and the description its own `--help` gives."""

    help: str
    #: None: the command module gives its own (`wattwise acceptance` takes its check's docstring).
    description: str | None = None


#: Each sub-command module, in the order `wattwise --help` lists them: its one-line help and the description
#: its own `--help` opens with. A module's `register` takes both from here (`add_command`), so that a command's
#: words are spelled once and `wattwise --help` gives them whether the module was imported or not.
COMMANDS: Mapping[str, Command] = {
    "run": Command(
        "run a training command with wattwise on, no code changes",
        "Run CMD with LIGHTNING_ENERGY=1 and ACCELERATE_ENERGY=1 and the settings below, so every Lightning Trainer "
        "and Accelerator it builds (in every process) is measured, tuned or capped. Prints where the summary went; "
        "exits with CMD's exit code (127 if CMD is not found).",
    ),
    "devices": Command(
        "list the GPUs and CPU domains wattwise can measure",
    ),
    "measure": Command(
        "run a command and report its time and energy",
        "Run CMD, then print its wall time and the energy of every device over that time. Exits with CMD's exit code "
        "(127 if CMD is not found).",
    ),
    "demo": Command(
        "train a tiny model on the simulated GPU with power-limit tuning",
        "Train the emulated workload with the energy plugin tuning the power limit of a simulated GPU, then the same "
        "steps at the maximum limit, and compare.",
    ),
    "restore": Command(
        "restore GPU settings left changed by a crashed run",
        "Restore the power limits and clocks recorded in the guard's journal by processes that ended without "
        "restoring them (e.g. killed with SIGKILL). Settings held by a running wattwise process are left to it.",
    ),
    "advise": Command(
        "best start time for a job within a window, by grid carbon intensity, PUE or price",
        "Find the start time within a window that minimises the job's emissions, facility energy or cost, from a "
        "forecast or history of carbon intensity, PUE and price (each a number or a CSV `timestamp,value` with "
        "timezone-aware timestamps). The job is taken to draw its energy at constant power. Candidate starts are "
        "exact: now, the window's end, and every instant where the job's start or end meets a step of a series. Ties "
        "go to the earliest start.",
    ),
    "report": Command(
        "energy report and paper-ready energy statement of a run (facility energy, emissions, cost)",
        "Read a run directory (summary.json, power.csv) and write report.json, report.csv and energy_statement.md. "
        "Facility energy integrates the run's power timeline against the PUE, emissions against the grid's carbon "
        "intensity, each a number or a CSV `timestamp,value` series with timezone-aware timestamps covering the run. "
        "--intensity (or $WATTWISE_INTENSITY) also takes a code of wattwise's bundled table of yearly averages: a "
        "country (DE) or a cloud region (gcp:europe-west1, aws:eu-west-1); an hourly series of your own (from your "
        "grid operator or Electricity Maps) is better. Without one the report says 'not supplied'. --job NAME sums "
        "every run of the job in the run history instead. Prints the statement (or, with --json, the report).",
    ),
    "carbon": Command(
        "list the grid carbon intensity codes --intensity takes (countries, cloud regions)",
        "The bundled table of yearly average grid carbon intensity that --intensity DE, --intensity gcp:europe-west1 "
        "and carbon.intensity read: each code with its place, figure (gCO2e/kWh), year and source. An hourly series "
        "of your own is better where you have one.",
    ),
    "jobs": Command(
        "list, show, reset or sync the recurring jobs in the store",
        "Recurring jobs remember their runs (batch size, power limit, energy, time, cost, whether the target was "
        "reached) in a store shared by every run of the job. The store is --store (a SQLite file path or a URL such "
        "as postgresql://user@host/db), else $WATTWISE_STORE, else jobs.sqlite in wattwise's state directory "
        "($WATTWISE_HOME or ~/.local/state/wattwise).",
    ),
    "runs": Command(
        "list, show, compare or forget the runs wattwise measured (the run history)",
        "Every run wattwise measures is kept: its own folder (OUTPUT/runs/ID, with OUTPUT/latest pointing at the "
        "last) and a row in the store that holds recurring jobs: --store (a SQLite file path or a URL such as "
        "postgresql://user@host/db), else $WATTWISE_STORE, else jobs.sqlite in wattwise's state directory. An ID may "
        "be shortened to a prefix no other run has.",
    ),
    "simulate": Command(
        "simulate the recurring-job optimizer on real GPU traces (Zeus's format)",
        "Each recurrence samples a traced training run (seeded) of the batch size the optimizer chose; time and "
        "power per epoch come from the power trace at the chosen power limit; the first run of a batch size also "
        "pays for profiling the power limits; a failed run (target not reached, early stop, maximum epochs) is paid "
        "for and followed by another run until one reaches the target.",
    ),
    "frontier": Command(
        "time-energy frontier of a pipeline's frequency plans, from a per-stage profile (Perseus)",
        "For every iteration time from the fastest plan to the slowest sensible one, UNIT-TIME apart, the "
        "least-energy frequency plan found, counting the power blocked GPUs draw: E = sum(e_i) + P_blocking * "
        "(stages * T - sum(t_i)). The fast solver is exact for the convex relaxation and rounds to real plans; the "
        "exact solver (CP-SAT) is for small pipelines.",
    ),
    "plan": Command(
        "choose a frequency plan from a frontier (no slowdown, or for a straggler)",
        "Picks, among every point of the frontier (in files older than plan_matrix, among the points that spell out "
        "their plan), the least energy with no slowdown against the maximum frequency, or with --straggler-time T "
        "the least energy when the iteration lasts T seconds anyway (blocked GPUs draw the blocking power until T).",
    ),
    "acceptance": Command(
        "check the NVML or amdsmi path on a real GPU (skips without one), or the three levers (--levers)",
    ),
    "agent": Command(
        "the node agent: GPU settings for users who are not root",
        "A privileged agent (one per node) owns every GPU setting change; a client process holds a lease and the "
        "agent restores the GPU when it ends.",
    ),
    "cap": Command(
        "run a command under a GPU power cap",
        "Cap the GPUs' power limit at W watts, run CMD, restore the limits, and exit with CMD's exit code. Through "
        "the node agent with --backend agent.",
    ),
    "example-data": Command(
        "write the example inputs the documentation uses into a folder",
        "Write the example inputs the documentation uses into DIR: a Perseus stage profile, power models measured on "
        "real A40s, Zeus recurring-job traces (with their licence notice), the installed configuration files, and "
        "example PUE, intensity and price series with a simulated run directory.",
    ),
    "dashboard": Command(
        "serve a local, read-only web page of past runs, recurring jobs and a pipeline frontier",
        "Serve the run history as web pages on this machine (http://127.0.0.1:8050/ by default): the runs table, "
        "each run's power and limit over time and its tuning profile, runs compared, the recurring jobs, and a "
        "pipeline frontier with its plan. Read-only: it never changes the store or a GPU. The store is --store, else "
        "$WATTWISE_STORE, else jobs.sqlite in wattwise's state directory. Needs the dashboard extra.",
    ),
}


def add_command(sub: argparse._SubParsersAction, name: str, **options: Any) -> argparse.ArgumentParser:
    """The parser of the command `name` under `sub`, with the help and description `COMMANDS` gives it.

    Each command module's `register` makes its parser with it, so that a command's words are spelled once:
    the same in `wattwise --help` whether the module was imported or not. `options` go to argparse (a
    `description` given here replaces the table's).
    """
    command = COMMANDS[name]
    options.setdefault("description", command.description)
    return sub.add_parser(name, help=command.help, **options)


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
