"""Applying a frequency plan: one stage follows its plan instruction by instruction.

A plan gives, for one pipeline stage, the SM frequency of every instruction of an iteration in execution
order: `[Step(instruction, microbatch, frequency_mhz), ...]` (see `wattwise.pipeline.plan`).
`FrequencyController` locks the stage's GPU clock before each instruction, through the settings guard and
only when the frequency changes, and keeps the sequence it applied for inspection. `attach()` hooks it
onto a `torch.distributed.pipelining` stage (its `forward_one_chunk` and `backward_one_chunk`), so any
schedule (1F1B, GPipe) drives it. The guard resets the clocks on every exit path.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from wattwise.devices.base import Device, DeviceError, NotSupportedError
from wattwise.errors import UsageError
from wattwise.pipeline.files import check_plan_document
from wattwise.pipeline.schedule import INSTRUCTIONS, Instruction, Step
from wattwise.settings.guard import SettingsGuard

if TYPE_CHECKING:
    from wattwise.run import Run


def stage_plan(entries: Sequence[Sequence[Any]]) -> list[Step]:
    """Validate one stage's plan (`[instruction, microbatch, frequency_mhz]` rows, execution order)."""
    plan: list[Step] = []
    seen: set[tuple[str, int]] = set()
    for i, row in enumerate(entries):
        try:
            instruction, microbatch, freq = str(row[0]), int(row[1]), int(row[2])
        except (IndexError, TypeError, ValueError):
            raise UsageError(
                f"plan entry {i}: expected [instruction, microbatch, frequency_mhz], got {row!r}"
            ) from None
        if instruction not in INSTRUCTIONS:
            raise UsageError(f"plan entry {i}: instruction must be forward or backward (got {instruction!r})")
        if microbatch < 0 or freq <= 0:
            raise UsageError(f"plan entry {i}: microbatch must be >= 0 and frequency_mhz > 0 (got {row!r})")
        if (instruction, microbatch) in seen:
            raise UsageError(f"plan entry {i}: {instruction} of microbatch {microbatch} appears twice")
        seen.add((instruction, microbatch))
        plan.append(Step(cast(Instruction, instruction), microbatch, freq))
    if not plan:
        raise UsageError("the stage's plan is empty")
    return plan


@dataclass
class FrequencyController:
    """Locks `gpu`'s SM clock to the plan's frequency before each instruction of its stage."""

    plan: list[Step]
    gpu: Device
    guard: SettingsGuard
    strict: bool = False
    #: (instruction, microbatch, frequency_mhz) of every instruction run, in order (all iterations).
    applied: list[tuple[str, int, int]] = field(default_factory=list)
    #: How many times the clock was actually changed.
    clock_changes: int = 0
    _by_key: dict[tuple[str, int], int] = field(default_factory=dict, init=False)
    _current_mhz: int | None = field(default=None, init=False)
    _position: int = field(default=0, init=False)
    _enabled: bool = field(default=True, init=False)
    _warned_order: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._by_key = {(p.instruction, p.microbatch): p.planned_mhz() for p in self.plan}
        supported = set(self.gpu.supported_sm_clocks_mhz())
        missing = sorted({p.planned_mhz() for p in self.plan} - supported, reverse=True)
        if missing:
            raise UsageError(
                f"plan frequencies {missing} MHz are not supported SM clocks of {self.gpu.name} "
                f"(it supports {max(supported)}..{min(supported)} MHz); plan with this GPU's profile"
            )

    def before(self, instruction: str, microbatch: int) -> None:
        """Called just before an instruction runs: lock the clock it is planned at."""
        expected = self.plan[self._position % len(self.plan)]
        if (expected.instruction, expected.microbatch) != (instruction, microbatch) and not self._warned_order:
            self._warned_order = True
            warnings.warn(
                f"wattwise: the pipeline ran {instruction} of microbatch {microbatch} where the plan "
                f"has {expected.instruction} of microbatch {expected.microbatch}; following the plan's "
                "frequency for each instruction anyway (was the plan made for this schedule?)",
                stacklevel=2,
            )
        freq = self._by_key.get((instruction, microbatch))
        if freq is None:
            raise UsageError(
                f"the plan has no {instruction} for microbatch {microbatch}; it was made for fewer "
                "microbatches than the schedule runs"
            )
        if self._enabled and freq != self._current_mhz:
            try:
                self.guard.lock_sm_clocks(self.gpu, freq, freq)
                self._current_mhz = freq
                self.clock_changes += 1
            except DeviceError as err:
                if self.strict:
                    raise
                self._enabled = False
                warnings.warn(
                    f"wattwise: cannot lock the SM clock ({err}); the pipeline runs at default "
                    "clocks (set strict to make this an error)",
                    stacklevel=2,
                )
        self.applied.append((instruction, microbatch, freq))
        self._position += 1

    def close(self) -> None:
        """Reset the clocks (and any other setting this guard changed)."""
        self.guard.restore_all()
        self._current_mhz = None

    def attach(self, stage: Any) -> Callable[[], None]:
        """Hook onto a `torch.distributed.pipelining` stage; returns a function that unhooks."""
        original_fwd = stage.forward_one_chunk
        original_bwd = stage.backward_one_chunk

        @functools.wraps(original_fwd)
        def forward_one_chunk(fwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
            self.before("forward", fwd_chunk_id)
            return original_fwd(fwd_chunk_id, *args, **kwargs)

        @functools.wraps(original_bwd)
        def backward_one_chunk(bwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
            self.before("backward", bwd_chunk_id)
            return original_bwd(bwd_chunk_id, *args, **kwargs)

        stage.forward_one_chunk = forward_one_chunk
        stage.backward_one_chunk = backward_one_chunk

        def detach() -> None:
            stage.forward_one_chunk = original_fwd
            stage.backward_one_chunk = original_bwd

        return detach


def load_stage_plan(path: str, stage: int) -> list[Step]:
    """Stage `stage`'s plan from a PLAN.json written by `wattwise plan` (its `plan` holds one list per stage)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as err:
        raise UsageError(f"plan file {path}: cannot read it ({err.strerror})") from None
    except ValueError as err:
        raise UsageError(f"plan file {path}: not JSON ({err})") from None
    plans = data.get("plan") if isinstance(data, dict) else None
    if not isinstance(plans, list) or not plans:
        raise UsageError(f"plan file {path}: needs a `plan` list with one entry per stage (see `wattwise plan`)")
    check_plan_document(data, f"plan file {path}")
    if not 0 <= stage < len(plans):
        raise UsageError(f"plan file {path} has {len(plans)} stages; there is no stage {stage}")
    return stage_plan(plans[stage])


def follow_plan(
    stage: Any,
    plan_path: str,
    *,
    local_rank: int,
    backend: str = "auto",
    strict: bool = False,
    device: Device | None = None,
    run: Run | None = None,
) -> tuple[FrequencyController, Callable[[], None]]:
    """Hook a controller onto `stage` for its row of PLAN.json; returns it and the function that unhooks.

    The GPU is the process's own (`local_rank`) unless `device` is given. The controller's guard restores
    the clocks on SIGTERM/SIGINT and at exit; call `controller.close()` after unhooking at the end. When
    the same training run is measured (`run`), its record names the plan it followed.
    """
    from wattwise.devices import discover

    plan = load_stage_plan(plan_path, int(stage.stage_index))
    gpu = device
    if gpu is None:
        found = discover(backend, gpu_indices=[local_rank])
        if not found.gpus:
            raise NotSupportedError(f"a frequency plan locks GPU clocks; {found.notes[-1]}")
        gpu = found.gpus[0]
    guard = SettingsGuard()
    guard.install_signal_handlers()
    controller = FrequencyController(plan, gpu, guard, strict=strict)
    if run is not None:
        run.frequency_plan = str(plan_path)
    return controller, controller.attach(stage)
