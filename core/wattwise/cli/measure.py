"""`wattwise measure -- CMD ARGS...`: wall time and energy of a command, per device."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

from wattwise.cli.main import add_command
from wattwise.config import SETTING, default_of
from wattwise.devices import PhysicsName, discover
from wattwise.errors import UsageError
from wattwise.monitor import EnergyMonitor
from wattwise.readable import with_uncertainty
from wattwise.safe_files import json_text

EXIT_NOT_FOUND = 127


class MeasureDict(TypedDict):
    """What `wattwise measure --json` prints: the command, how it ended, and its time and energy (s, J)."""

    command: list[str]
    exit_code: int
    time_s: float
    #: Energy by device key; empty where nothing could be measured.
    energy_j: dict[str, float]
    #: null where nothing could be measured.
    total_energy_j: float | None
    #: The device keys whose energy is power x time (their counter did not tick).
    approximate: list[str]
    simulated: bool
    energy_uncertainty_j: dict[str, float]
    total_energy_uncertainty_j: float | None


#: The energy setting `--backend` gives (`devices.backend`).
BACKEND = SETTING["backend"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `wattwise measure` command to the `wattwise` parser."""
    p = add_command(sub, "measure")
    p.add_argument("--backend", default=default_of(BACKEND.key), help=f"{BACKEND.help} (default %(default)s)")
    p.add_argument("--cpu", action="store_true", help="also measure CPU packages and DRAM (RAPL)")
    p.add_argument("--json", action="store_true", help="print JSON on stdout (the command's own output is kept)")
    add_wrapped_command(p)
    p.set_defaults(func=run, setting_flags={BACKEND.key: "--backend"})


def run(args: argparse.Namespace) -> int:
    """Run `wattwise measure` with its parsed arguments.

    Returns:
        The exit status.
    """
    cmd = wrapped_command(args.command, usage="wattwise measure -- CMD ARGS...")
    if missing_command(cmd, "wattwise measure"):
        return EXIT_NOT_FOUND
    found = discover(args.backend, include_cpu=args.cpu)
    for note in found.notes:
        print(f"wattwise: {note}", file=sys.stderr)
    if found.all:
        with EnergyMonitor(found.all) as monitor:
            monitor.begin_window("command")
            code = _run_command(cmd)
            m = monitor.end_window("command")
        time_s, energy_j, total_j, approximate = m.time_s, m.energy_j, m.total_energy_j, list(m.approximate)
        uncertainty_j: dict[str, float] = dict(m.energy_uncertainty_j)
        total_u_j: float | None = m.total_energy_uncertainty_j if uncertainty_j else None
    else:
        # Nothing to measure here (the notes say why): the command still runs, and only its time is told.
        start_s = time.monotonic()
        code = _run_command(cmd)
        time_s, energy_j, total_j, approximate = time.monotonic() - start_s, {}, None, []
        uncertainty_j, total_u_j = {}, None
    result = MeasureDict(
        command=cmd,
        exit_code=code,
        time_s=time_s,
        energy_j=energy_j,
        total_energy_j=total_j,
        approximate=approximate,
        simulated=found.simulated,
        energy_uncertainty_j=uncertainty_j,
        total_energy_uncertainty_j=total_u_j,
    )
    if args.json:
        print(json_text(result))
    elif total_j is None:
        print(f"wattwise measure: {time_s:.3f} s; no energy measured (no device to measure here)", file=sys.stderr)
    else:
        tag = ""
        if found.simulated:
            ideal = any(d.describe().get("physics") == PhysicsName.IDEAL for d in found.all)
            tag = " [SIMULATED GPU" + (", ideal physics (exact figures)" if ideal else "")
            tag += ": modelled idle power, not a measurement]"
        total = with_uncertainty(total_j, total_u_j, "J", places=2, grouped=True)
        print(f"wattwise measure{tag}: {time_s:.3f} s, {total} in total", file=sys.stderr)
        for key, joules in energy_j.items():
            approx = " (approximate: power x time)" if key in approximate else ""
            figure = with_uncertainty(joules, uncertainty_j.get(key), "J", places=2, grouped=True)
            print(f"  {key}: {figure}{approx}", file=sys.stderr)
    return code if code >= 0 else 128 - code


def add_wrapped_command(parser: argparse.ArgumentParser) -> None:
    """Add `-- CMD ARGS...`, the command a wrapping command (`measure`, `cap`, `run`) runs (`wrapped_command`)."""
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


def wrapped_command(command: Sequence[str], *, usage: str) -> list[str]:
    """The command a wrapping command (`measure`, `cap`, `run`) runs: its `-- CMD ARGS...`, the `--` dropped.

    Raises:
        UsageError: no command given, saying how to give one (`usage`).
    """
    cmd = list(command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError(f"no command given; use `{usage}`")
    return cmd


def missing_command(cmd: Sequence[str], program: str) -> bool:
    """Whether `cmd`'s program is not on PATH; then one line on stderr says so, for `program`'s exit 127."""
    if shutil.which(cmd[0]) is not None:
        return False
    print(f"{program}: error: command not found: {cmd[0]}", file=sys.stderr)
    return True


def _run_command(cmd: list[str], started: Callable[[int], None] | None = None, *, own_group: bool = False) -> int:
    """Run `cmd` to its end, passing SIGINT and SIGTERM on to it; its return code.

    `started`, if given, is called with the command's pid as soon as it runs (`wattwise cap` hands its
    GPUs' leases over to it). With `own_group`, the command leads a process group of its own, which
    holds whatever it starts (the node agent's lease follows that group) and gets the signals passed on;
    not when this process runs in a terminal's foreground, where the shell gave it a group of its own
    already and the command must keep the terminal (its input, Ctrl-C).
    """
    new_group = own_group and not _in_terminal_foreground()
    group: dict[str, Any] = {}
    if new_group:
        group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    running: list[subprocess.Popen[bytes]] = []
    #: Signals that came before the command ran: passed on as soon as it does.
    early: list[int] = []

    def pass_on(sig: int, frame: object) -> None:
        if not running:
            early.append(sig)
            return
        proc = running[0]
        if not new_group:
            proc.send_signal(sig)
            return
        with contextlib.suppress(ProcessLookupError):  # the whole group has ended already
            os.killpg(proc.pid, sig)

    # Taken before the command starts: a SIGINT while it starts, or while `started` hands it the GPUs'
    # leases, reaches the command instead of ending this process and leaving the command running.
    previous = {sig: signal.signal(sig, pass_on) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        running.append(subprocess.Popen(cmd, **group))
        for sig in early:
            pass_on(sig, None)
        if started is not None:
            started(running[0].pid)
        return running[0].wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _in_terminal_foreground() -> bool:
    """This process's group is its terminal's foreground group (an interactive shell's job)."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False
