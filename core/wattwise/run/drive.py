"""Simulated GPUs driven by the training steps themselves (`devices.simulated_drive: steps`).

A user's own training script on the simulated GPU runs its real work on the CPU, which no power model
sees: undriven, the simulated GPU draws its idle power at every limit, and tuning can only say so. With
this option on, each optimizer step drives it: the GPUs are busy from the step's start to its end, the
step's measured wall time is taken as its work at the maximum power limit, and the step then sleeps for
the difference to the time the power model gives at the current limit and clock. Time and energy then
follow the settings as they would on the modelled GPU, so tuning and capping do something visible, and
every output says "simulated, driven by your steps".

A step's work is what the step itself did, never the time it spent waiting for other processes (in the
gradient all-reduce, say): a process waiting for a slower one would otherwise stretch that wait, the
other would wait for that stretch in the next step, and each step would grow by the model's slowdown
(1.6 times the last at 100 W). So the processes of a run agree on one stretch at each step's end (one
all-reduce of one number, only with this option on), the longest any of them needs, and all sleep it from
that same point: they start the next step together, and each step lasts the slowest one's work, stretched.

Off by default: it makes training sleep (by the model's slowdown at lower limits), which a user must
have asked for. It does nothing on hardware (no `Device.simulation`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from enum import StrEnum

from wattwise.devices.base import Device, Simulation
from wattwise.distributed import Collective


class DrivenBy(StrEnum):
    """What drove a simulated GPU's modelled load in a run (`summary.json`'s `simulated_driven_by`)."""

    #: The training steps themselves (`devices.simulated_drive: steps`): each step's wall time stretched.
    STEPS = "steps"
    #: Emulated work (`wattwise.tools.workload.emulate_step`, the demo and the examples).
    EMULATED = "emulated"
    #: Nothing: the GPU drew its idle power only.
    NOTHING = "nothing"


class StepDrive:
    """Busy from a step's start to its end, each step stretched to the modelled time (see the module docstring).

    What is not training (a pause inside a step: an evaluation, a checkpoint) ends the busy stretch, which
    is stretched at that point; training resumed inside the step is busy again until the step ends.
    """

    def __init__(self, gpus: Sequence[Device], collective: Collective | None = None) -> None:
        """Drive the simulated GPUs among `gpus` (none: nothing to drive here).

        `collective`: the run's processes, when they are several; each of them makes a `StepDrive` (one
        with nothing to drive too), since they agree on each step's stretch (see the module docstring).
        """
        self._sims: list[Simulation] = [s for s in (g.simulation for g in gpus) if s is not None]
        self._together = collective if collective is not None and collective.world_size > 1 else None
        self._busy: contextlib.ExitStack | None = None
        self._started_s = 0.0
        self._in_step = False

    @property
    def active(self) -> bool:
        """Whether it drives a simulated GPU."""
        return bool(self._sims)

    def step_started(self) -> None:
        """An optimizer step starts: the GPUs are busy."""
        self._in_step = True
        self._begin()

    def step_ended(self) -> None:
        """The step's work ended: it is stretched to the modelled time, then the GPUs are idle.

        A collective when the processes are several: every process calls it at each step's end.
        """
        self._in_step = False
        if self._together is None:
            self._end(stretch=True)
            return
        [(stretch_s, _)] = self._together.combine([(self._stretch_s(), 0.0)])  # the longest, over processes
        busy, self._busy = self._busy, None
        if busy is None:  # nothing driven here (no simulated GPU, or a pause): nothing to stretch
            return
        with busy:
            if stretch_s > 0:
                self._sims[0].sleep(stretch_s)

    def pause(self) -> None:
        """What follows is not training: the work so far is stretched, then the GPUs are idle."""
        self._end(stretch=True)

    def resume(self) -> None:
        """Training goes on: busy again when inside a step."""
        if self._in_step:
            self._begin()

    def close(self) -> None:
        """The run ends: the GPUs are idle (a step left open is not stretched)."""
        self._in_step = False
        self._end(stretch=False)

    def _begin(self) -> None:
        if not self._sims or self._busy is not None:
            return
        stack = contextlib.ExitStack()
        for sim in self._sims:
            stack.enter_context(sim.busy())
        self._busy = stack
        self._started_s = self._sims[0].clock()

    def _stretch_s(self) -> float:
        """How long the work since the busy stretch began must still last to take its modelled time (s)."""
        if self._busy is None:
            return 0.0
        work_s = max(0.0, self._sims[0].clock() - self._started_s)
        return max(0.0, max(sim.step_time_s(work_s) for sim in self._sims) - work_s)

    def _end(self, *, stretch: bool) -> None:
        stretch_s = self._stretch_s() if stretch else 0.0
        busy, self._busy = self._busy, None
        if busy is None:
            return
        with busy:
            if stretch_s > 0:
                self._sims[0].sleep(stretch_s)
