"""`wattwise cap --watts W -- CMD ARGS...`: run any command under a GPU power cap, then restore.

Caps the GPUs through the settings guard (which goes through the node agent with `--backend agent`,
the holder named `--job`, by default the command's name), runs the command, restores the limits (an
agent-backed GPU is released: the agent shows no holder), and exits with the command's code (127 if it
is not found). Through the agent, the lease is handed over to the command as soon as it starts, and the
command leads a process group of its own: the cap lasts as long as the command, or a process it started,
runs, even if this wrapper is killed. At the end it says what happened to each GPU's limit (`restore_outcome`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Iterator
from typing import TypedDict

from wattwise.cli.main import add_command
from wattwise.cli.measure import EXIT_NOT_FOUND, _run_command, add_wrapped_command, missing_command, wrapped_command
from wattwise.devices import Device, DeviceError, backend_choices, discover, name_job
from wattwise.errors import UsageError
from wattwise.monitor import EnergyMonitor
from wattwise.settings.guard import SettingsGuard
from wattwise.vocabulary import ReleaseOutcome

#: Exit code when the cap cannot be set (refused, out of range, no GPU): the command does not run.
EXIT_NOT_CAPPED = 1
#: The largest GPU index `--gpus` accepts (NVML numbers GPUs far below it).
MAX_GPU_INDEX = 65535
#: The GPUs of the simulated node `--backend simulated` caps (discovery's default).
SIMULATED_GPUS = 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `wattwise cap` command to the `wattwise` parser."""
    p = add_command(sub, "cap")
    p.add_argument("--watts", type=float, required=True, help="the power limit, in watts")
    p.add_argument("--gpus", help="comma-separated GPU indices (default: every GPU)")
    p.add_argument("--backend", choices=backend_choices(), default="auto", help="devices (default %(default)s)")
    p.add_argument("--job", help="the job name the node agent shows for the holder (default: CMD's name)")
    p.add_argument("--json", action="store_true", help="print time and energy per GPU as JSON on stdout")
    add_wrapped_command(p)
    p.set_defaults(func=run)


def _indices(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        indices = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"--gpus must be comma-separated GPU indices, e.g. 0,1 (got {text!r})") from None
    if any(i < 0 for i in indices) or len(set(indices)) != len(indices):
        raise UsageError(f"--gpus must list distinct non-negative indices (got {text!r})")
    if max(indices) > MAX_GPU_INDEX:
        raise UsageError(f"--gpus must list GPU indices from 0 to {MAX_GPU_INDEX} (got {text!r})")
    return indices


def _check_simulated(backend: str, indices: list[int] | None) -> None:
    """`--backend simulated`: the node has `SIMULATED_GPUS` GPUs; an index past them is refused, naming them."""
    if backend == "simulated" and indices is not None:
        missing = [i for i in indices if i >= SIMULATED_GPUS]
        if missing:
            raise UsageError(
                f"--gpus: no GPU {', '.join(map(str, missing))} on this node (its simulated GPU(s): "
                f"{', '.join(map(str, range(SIMULATED_GPUS)))})"
            )


@contextlib.contextmanager
def capped(gpus: list[Device], watts: float, job: str) -> Iterator[None]:
    """Every GPU at `watts` for the body of the `with`, restored after (agent GPUs: released)."""
    name_job(gpus, job)
    with SettingsGuard() as guard:
        guard.install_signal_handlers()
        for gpu in gpus:
            guard.set_power_limit(gpu, watts)
        yield


def hand_over_to(gpus: list[Device], pid: int) -> None:
    """Make the command (`pid`) the holder of the agent's leases of `gpus`, so that they outlive this wrapper.

    The node agent then keeps the cap for as long as the command lives, even when this `wattwise cap` is
    killed (SIGKILL included), and restores the GPUs when the command ends. GPUs not behind the agent are
    skipped. An agent that refuses (an older one) leaves the cap held by this wrapper, with one warning;
    a command that has ended already needs none (this wrapper restores the GPUs now).
    """
    for gpu in gpus:
        hand_over = getattr(gpu, "hand_over", None)
        if hand_over is None:
            continue
        try:
            hand_over(pid)
        except DeviceError as err:
            if _ended(pid):
                return
            print(
                f"wattwise cap: warning: GPU {gpu.index} stays capped only while this wrapper runs, not for as "
                f"long as the command does: {err}",
                file=sys.stderr,
            )


def _ended(pid: int) -> bool:
    """Whether this wrapper's child `pid` has ended, asked without reaping it (the wrapper waits for it later)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


#: What happened to a GPU's limit when the command ended (`--json`'s `restore[].outcome`).
RESTORED = "restored"  # this wrapper restored it (gave it back to the agent, which restored it)
RESTORED_BY_AGENT = "restored_by_agent"  # handed over: the agent restored it when the command ended
HELD = "held"  # handed over: a process of the command's group outlived it and still holds the GPU
FAILED = "failed"  # giving it back failed (said above)


class RestoreDict(TypedDict):
    """What happened to one GPU's limit when the command ended (`wattwise cap --json`'s `restore[]`)."""

    gpu: int
    #: One of RESTORED, RESTORED_BY_AGENT, HELD, FAILED.
    outcome: str
    #: One line saying so.
    message: str
    #: The process group still holding the GPU (HELD), else None.
    pgid: int | None


class CapDict(TypedDict):
    """What `wattwise cap --json` prints: the command, how it ended, the cap, its time and energy (s, J)."""

    command: list[str]
    exit_code: int
    watts: float
    gpus: list[int]
    time_s: float
    energy_j: dict[str, float]
    total_energy_j: float
    approximate: list[str]
    simulated: bool
    restore: list[RestoreDict]
    #: The GPUs a process of the command's group still holds (their outcome HELD).
    still_held: list[int]
    notes: list[str]


def restore_outcome(gpu: Device) -> RestoreDict:
    """What happened to `gpu`'s limit at the end of `wattwise cap`, from what the agent answered (`RestoreDict`)."""
    released = (
        getattr(gpu, "release_outcome", ReleaseOutcome.RESTORED) if gpu.settings_lease else ReleaseOutcome.RESTORED
    )
    holder = getattr(gpu, "holder_after_release", None) or {}
    pgid = holder.get("pgid") if released == ReleaseOutcome.KEPT else None
    if released == ReleaseOutcome.RESTORED:
        outcome, message = RESTORED, "limit restored"
    elif released == ReleaseOutcome.NOT_HELD:
        outcome, message = RESTORED_BY_AGENT, "limit restored by the node agent when the command ended"
    elif released == ReleaseOutcome.KEPT:
        outcome, message = (
            HELD,
            (
                f"still capped: process(es) of the command's process group {pgid} outlived it "
                "and hold the GPU; the node agent restores it when the last of them ends "
                f"(`kill -- -{pgid}` ends them now)"
            ),
        )
    else:
        outcome, message = FAILED, "not restored (see the error above; `wattwise agent status` shows the GPU)"
    return RestoreDict(gpu=gpu.index, outcome=outcome, message=message, pgid=pgid)


def run(args: argparse.Namespace) -> int:
    """Run `wattwise cap` with its parsed arguments.

    Returns:
        The exit status.
    """
    cmd = wrapped_command(args.command, usage="wattwise cap --watts W -- CMD ARGS...")
    if not (math.isfinite(args.watts) and args.watts > 0):
        raise UsageError(f"--watts must be a positive number of watts (got {args.watts:g})")
    if missing_command(cmd, "wattwise cap"):
        return EXIT_NOT_FOUND
    indices = _indices(args.gpus)
    _check_simulated(args.backend, indices)
    try:
        found = discover(args.backend, gpu_indices=indices, num_simulated=SIMULATED_GPUS)
        if not found.gpus:
            raise DeviceError("no GPU to cap here" + (f" ({'; '.join(found.notes)})" if found.notes else ""))
        gpus = found.gpus
        with capped(gpus, args.watts, args.job or os.path.basename(cmd[0])), EnergyMonitor(gpus) as monitor:
            monitor.begin_window("command")
            code = _run_command(cmd, started=lambda pid: hand_over_to(gpus, pid), own_group=True)
            m = monitor.end_window("command")
            lifted = [note for note in (g.settings_lifted() for g in gpus) if note]
    except DeviceError as err:
        print(f"wattwise cap: error: {err}", file=sys.stderr)
        return EXIT_NOT_CAPPED
    restore = [restore_outcome(g) for g in gpus]
    result = CapDict(
        command=cmd,
        exit_code=code,
        watts=args.watts,
        gpus=[g.index for g in gpus],
        time_s=m.time_s,
        energy_j=dict(m.energy_j),
        total_energy_j=m.total_energy_j,
        approximate=list(m.approximate),
        simulated=found.simulated,
        restore=restore,
        still_held=[r["gpu"] for r in restore if r["outcome"] == HELD],
        notes=lifted,
    )
    for note in lifted:
        print(f"wattwise cap: warning: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        tag = " [SIMULATED GPU]" if found.simulated else ""
        said = sorted({r["message"] for r in restore})
        ends = (
            "; " + said[0].replace("limit ", "limits ", 1)
            if len(said) == 1
            else "".join(f"; GPU {r['gpu']}: {r['message']}" for r in restore)
        )
        print(
            f"wattwise cap{tag}: {args.watts:g} W on GPU(s) {result['gpus']}: {m.time_s:.3f} s, "
            f"{m.total_energy_j:.2f} J in total{ends}",
            file=sys.stderr,
        )
    return code if code >= 0 else 128 - code
