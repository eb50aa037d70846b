"""`wattwise demo`: power-limit tuning on the emulated workload and the simulated GPU.

The flags are `DemoOptions`' fields (`--<field>`, or the flag its metadata names), so the two cannot drift;
`--set KEY=VALUE` reaches every other key of the energy configuration.

SIGTERM and SIGINT stop the demo wherever it is (tuned or baseline run): the guard restores the simulated
GPU's settings, the demo's own state folder is removed, one line says so on stderr, and the exit status is
128 + the signal (143, 130), as a shell reports a process stopped by it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import MISSING, Field, fields
from typing import Any

from wattwise.cli.main import add_command
from wattwise.safe_files import json_text
from wattwise.tools.demo import DemoOptions, format_demo, run_demo


def flag_of(f: Field[Any]) -> str:
    """The flag of a `DemoOptions` field."""
    return str(f.metadata.get("flag") or "--" + f.name.replace("_", "-"))


#: Field names (as errors name them) -> flags.
FLAGS: dict[str, str] = {f.name: flag_of(f) for f in fields(DemoOptions)}


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `wattwise demo` command to the `wattwise` parser."""
    p = add_command(sub, "demo")
    hints = typing.get_type_hints(DemoOptions)
    for f in fields(DemoOptions):
        help_text = str(f.metadata.get("help", "")).replace("%", "%%")
        if f.default_factory is not MISSING:  # the dotlist `overrides`
            p.add_argument(
                flag_of(f), dest=f.name, action="append", default=[], metavar=f.metadata.get("metavar"), help=help_text
            )
            continue
        kind = next((t for t in typing.get_args(hints[f.name]) if t is not type(None)), hints[f.name])
        shown = f" (default {f.default})" if f.default is not None else ""
        p.add_argument(
            flag_of(f),
            dest=f.name,
            type=kind,
            default=f.default,
            metavar=f.metadata.get("metavar"),
            help=f"{help_text}{shown}",
        )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run, setting_flags=FLAGS)


def options_of(args: argparse.Namespace) -> DemoOptions:
    """The demo's options from the parsed arguments."""
    return DemoOptions(**{f.name: getattr(args, f.name) for f in fields(DemoOptions)})


class DemoInterrupted(BaseException):
    """SIGTERM or SIGINT stopped the demo. A BaseException of its own.

    Lightning turns KeyboardInterrupt into exit 1 and its SIGTERM into a silent exit 0; this one unwinds through
    both frameworks' clean-up.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def interrupts_unwind(fired: list[int]) -> Iterator[None]:
    """SIGTERM and SIGINT raise `DemoInterrupted` (once: a second signal during the clean-up is ignored).

    The signal received is appended to `fired`, so a caller can tell an interrupted demo from a finished
    one whatever a framework made of the exception on its way out.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: object) -> None:
        if not fired:
            fired.append(signum)
            raise DemoInterrupted(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _lightnings_sigterm_exit(exc: BaseException) -> bool:
    """Lightning's own SIGTERM exit (a `SystemExit` with no code) from a fit, if Lightning is loaded."""
    module = sys.modules.get("lightning.pytorch.utilities.exceptions")
    kind = getattr(module, "SIGTERMException", None)
    return isinstance(kind, type) and isinstance(exc, kind)


def run(args: argparse.Namespace) -> int:
    """Run `wattwise demo` with its parsed arguments.

    Returns:
        The exit status.
    """
    fired: list[int] = []
    try:
        with interrupts_unwind(fired):
            result = run_demo(options_of(args))
    except DemoInterrupted:
        pass
    except SystemExit as exc:
        # Lightning notes a SIGTERM in its own handler and, at its next check, leaves the fit with a silent
        # SystemExit, which can overtake ours while the fit unwinds: still a SIGTERM, still exit 143.
        if not (fired or _lightnings_sigterm_exit(exc)):
            raise
        fired = fired or [signal.SIGTERM]
    except Exception:
        # A framework's own clean-up can fail on the way out of a fit the signal stopped, and its error then
        # replaces ours: Lightning's teardown, reached before the fit iterated its loader, raises a RuntimeError
        # (which the demo reports as a run that measured nothing). The signal still stopped the demo.
        if not fired:
            raise
    if fired:
        stop = signal.Signals(fired[0])
        print(
            f"wattwise demo: interrupted by {stop.name}; the simulated GPU's settings were restored and the "
            "demo's state folder removed",
            file=sys.stderr,
        )
        return 128 + stop.value
    print(json_text(result) if args.json else format_demo(result))
    return 0
