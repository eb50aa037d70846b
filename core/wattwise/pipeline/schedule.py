"""Pipeline schedules: the order in which each stage runs its forward and backward instructions.

A schedule is, per stage, the list of `Step`s (instruction, microbatch) in execution order; a plan
(`wattwise.pipeline.plan`) is the same lists with a frequency on every step. Two schedules are
supported, both for S stages and M microbatches:

- **1F1B** (PipeDream-flush, DeepSpeed `TrainSchedule`, Megatron): stage s first runs
  `min(S - s - 1, M)` warm-up forwards, then alternates one forward and one backward, then drains the
  remaining backwards. It keeps at most S activations alive per stage.
- **GPipe** (fill-drain): every forward, then every backward, both in microbatch order (as PyTorch's
  `ScheduleGPipe` does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from wattwise.errors import UsageError

Instruction = Literal["forward", "backward"]
FORWARD: Instruction = "forward"
BACKWARD: Instruction = "backward"
INSTRUCTIONS: tuple[Instruction, ...] = (FORWARD, BACKWARD)


@dataclass(frozen=True)
class Step:
    """One instruction of one microbatch on a stage, in execution order: run `instruction` on `microbatch`.

    In a schedule `frequency_mhz` is None (the order only); in a plan it is the SM frequency to run the
    instruction at.
    """

    instruction: Instruction
    microbatch: int
    frequency_mhz: int | None = None

    def at(self, frequency_mhz: int) -> Step:
        """This step, planned at `frequency_mhz`."""
        return Step(self.instruction, self.microbatch, frequency_mhz)

    def planned_mhz(self) -> int:
        """The frequency this step is planned at; a schedule's step (no frequency) is refused."""
        if self.frequency_mhz is None:
            raise UsageError(
                f"{self.instruction} of microbatch {self.microbatch} has no frequency_mhz; "
                "a plan needs one on every step"
            )
        return self.frequency_mhz

    def label(self) -> str:
        """Short label such as `F3` or `B0`, as the paper's timelines show them."""
        return f"{self.instruction[0].upper()}{self.microbatch}"


#: One list of steps per stage, in execution order (no frequencies).
Schedule = list[list[Step]]


def _check_shape(num_stages: int, num_microbatches: int) -> None:
    if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1:
        raise UsageError(f"stages must be a positive integer (got {num_stages!r})")
    if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) or num_microbatches < 1:
        raise UsageError(f"microbatches must be a positive integer (got {num_microbatches!r})")


def one_f_one_b(num_stages: int, num_microbatches: int) -> Schedule:
    """The 1F1B schedule: warm-up forwards, then one forward one backward, then the last backwards."""
    _check_shape(num_stages, num_microbatches)
    schedule: Schedule = []
    for stage in range(num_stages):
        warmup = min(num_stages - stage - 1, num_microbatches)
        steps = [Step(FORWARD, m) for m in range(warmup)]
        for i in range(num_microbatches - warmup):
            steps.append(Step(FORWARD, warmup + i))
            steps.append(Step(BACKWARD, i))
        steps.extend(Step(BACKWARD, m) for m in range(num_microbatches - warmup, num_microbatches))
        schedule.append(steps)
    return schedule


def gpipe(num_stages: int, num_microbatches: int) -> Schedule:
    """The GPipe (fill-drain) schedule: all forwards, then all backwards, in microbatch order."""
    _check_shape(num_stages, num_microbatches)
    steps = [Step(FORWARD, m) for m in range(num_microbatches)]
    steps += [Step(BACKWARD, m) for m in range(num_microbatches)]
    return [list(steps) for _ in range(num_stages)]


SCHEDULES: dict[str, Callable[[int, int], Schedule]] = {"1f1b": one_f_one_b, "gpipe": gpipe}


def build_schedule(name: str, num_stages: int, num_microbatches: int) -> Schedule:
    """The schedule called `name` ("1f1b" or "gpipe") for this many stages and microbatches."""
    try:
        make = SCHEDULES[name.lower()]
    except KeyError:
        raise UsageError(f"schedule must be one of {', '.join(SCHEDULES)} (got {name!r})") from None
    return make(num_stages, num_microbatches)
