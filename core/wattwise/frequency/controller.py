"""Applying a frequency plan: one stage follows its plan instruction by instruction.

A plan gives, for one pipeline stage, the SM frequency of every instruction of an iteration in execution
order: `[Step(instruction, microbatch, frequency_mhz), ...]` (see `wattwise.pipeline.plan`).
`FrequencyController` locks the stage's GPU clock for each instruction, through the settings guard and
only when the frequency changes, and keeps the sequence it applied for inspection. A GPU's clock takes
time to act (`clock_change_s`, from the plan, which has it from the profile): the controller changes it to
a higher frequency that long ahead of the instruction that needs it (by the instructions' times it saw in
the previous iteration; one instruction ahead in the first), and to a lower one at the start of the
instruction that asks for it, so that no instruction runs slower than planned. With `background` the
calls run on a thread of their own, off the training thread (a clock call costs milliseconds). `attach()` hooks it
onto a `torch.distributed.pipelining` stage (its `forward_one_chunk` and `backward_one_chunk`), so any
schedule (1F1B, GPipe) drives it. The guard resets the clocks on every exit path.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from wattwise.devices.base import Device, DeviceError, NotSupportedError
from wattwise.errors import UsageError
from wattwise.pipeline.files import check_plan_document
from wattwise.pipeline.schedule import INSTRUCTIONS, Instruction, Step
from wattwise.pipeline.segments import AHEAD_CHANGES
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
    #: How long a clock change takes to act on this GPU (s): a higher clock is asked for this long ahead.
    clock_change_s: float = 0.0
    #: Change the clock on a thread of its own instead of the training thread.
    background: bool = False
    #: Without `background`: runs a function that many seconds later on the GPU's clock (a simulated GPU's
    #: virtual clock), so that a change asked for ahead happens at its moment; None: at once.
    timer: Callable[[float, Callable[[], None]], None] | None = None
    #: (instruction, microbatch, frequency_mhz) of every instruction run, in order (all iterations).
    applied: list[tuple[str, int, int]] = field(default_factory=list)
    #: How many times the clock was actually changed.
    clock_changes: int = 0
    _by_key: dict[tuple[str, int], int] = field(default_factory=dict, init=False)
    _current_mhz: int | None = field(default=None, init=False)
    _position: int = field(default=0, init=False)
    _enabled: bool = field(default=True, init=False)
    _warned_order: bool = field(default=False, init=False)
    #: Seconds from one instruction's start to the next one's, by position in the plan (last iteration).
    _took_s: dict[int, float] = field(default_factory=dict, init=False)
    _last_start_s: float | None = field(default=None, init=False)
    _setter: _ClockSetter | None = field(default=None, init=False)
    _clock: Callable[[], float] = field(default=time.perf_counter, init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_key = {(p.instruction, p.microbatch): p.planned_mhz() for p in self.plan}
        sim = self.gpu.simulation
        #: Times instructions: the simulated GPU's own clock (it may be virtual), else the wall clock.
        self._clock = sim.clock if sim is not None else time.perf_counter
        if self.background:
            self._setter = _ClockSetter(self)
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
        position = self._position % len(self.plan)
        now = self._clock()
        if self._last_start_s is not None:
            self._took_s[(position - 1) % len(self.plan)] = now - self._last_start_s
        self._last_start_s = now
        if self._setter is not None:
            self._setter.raise_failure()
        if self._enabled and freq != self._current_mhz:
            self._change(freq)
        ahead = self._ahead(position)
        if self._enabled and ahead is not None and ahead[0] != self._current_mhz:
            self._change(*ahead)
        self.applied.append((instruction, microbatch, freq))
        self._position += 1

    def _ahead(self, position: int) -> tuple[int, float] | None:
        """(the next segment's higher frequency, seconds from now to ask for it), when it is time to plan it.

        Asked for `AHEAD_CHANGES` times `clock_change_s` before the segment starts, by the instruction times
        of the last iteration (the current one's unknown: at once); None when the next segment is slower or
        further away.
        """
        if self.clock_change_s <= 0:
            return None
        lead_s = AHEAD_CHANGES * self.clock_change_s
        count = len(self.plan)
        here = self.plan[position].planned_mhz()
        until_s = 0.0
        for step in range(1, count):
            took = self._took_s.get((position + step - 1) % count)
            if took is None and step > 1:
                return None
            until_s += took or 0.0
            following = self.plan[(position + step) % count].planned_mhz()
            if following != here:
                if following < here:
                    return None
                if step == 1:
                    return following, max(0.0, until_s - lead_s)
                return (following, 0.0) if until_s <= lead_s else None
            if until_s > lead_s:
                return None
        return None

    def _change(self, freq: int, in_s: float = 0.0) -> None:
        """Lock the clock at `freq`, `in_s` from now on the setter's thread (`background`), else at once.

        `_current_mhz` is what was asked for last.
        """
        self._current_mhz = freq
        self.clock_changes += 1
        if self._setter is not None:
            self._setter.ask(freq, time.perf_counter() + in_s)
        elif self.timer is not None and in_s > 0:
            self.timer(in_s, lambda: self._lock(freq))
        else:
            self._lock(freq)

    def _lock(self, freq: int) -> None:
        """Lock the clock at `freq` now, on this thread."""
        try:
            self.guard.lock_sm_clocks(self.gpu, freq, freq)
        except DeviceError as err:
            self.failed(err)

    def failed(self, err: DeviceError) -> None:
        """A clock could not be locked: raise when strict, else follow no plan, with one warning."""
        if self.strict:
            raise err
        self._enabled = False
        warnings.warn(
            f"wattwise: cannot lock the SM clock ({err}); the pipeline runs at default "
            "clocks (set strict to make this an error)",
            stacklevel=3,
        )

    def stop(self) -> None:
        """Make the last clock change asked for and end the setter's thread; the clock stays as it is."""
        if self._setter is not None:
            self._setter.stop()
            self._setter = None

    def close(self) -> None:
        """Stop the setter's thread, then reset the clocks (and any other setting this guard changed)."""
        self.stop()
        self.guard.restore_all()
        self._current_mhz = None

    def settle(self) -> None:
        """Wait until every clock change asked for has been made (`background` only; at once otherwise)."""
        if self._setter is not None:
            self._setter.wait()

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


class _ClockSetter:
    """A thread that locks a controller's GPU clock to the last frequency asked for, off the training thread."""

    def __init__(self, controller: FrequencyController) -> None:
        self._controller = controller
        self._wanted: int | None = None
        self._at_s = 0.0
        self._busy = False
        self._stopping = False
        self._failure: DeviceError | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="wattwise-clock-setter", daemon=True)
        self._thread.start()

    def ask(self, freq: int, at_s: float) -> None:
        """Lock `freq` next, at `at_s` (`time.perf_counter`); a frequency asked for before it is set replaces it."""
        with self._cond:
            self._wanted, self._at_s = freq, at_s
            self._cond.notify_all()

    def wait(self) -> None:
        """Until nothing is asked for and no call is under way."""
        with self._cond:
            self._cond.wait_for(lambda: (self._wanted is None and not self._busy) or self._stopping)

    def raise_failure(self) -> None:
        """Hand a failed call to the controller, on the training thread."""
        with self._cond:
            failure, self._failure = self._failure, None
        if failure is not None:
            self._controller.failed(failure)

    def stop(self) -> None:
        """Make the call asked for last, then end the thread."""
        self.wait()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        controller = self._controller
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._wanted is not None or self._stopping)
                if self._wanted is None:
                    return
                early_s = self._at_s - time.perf_counter()
                if early_s > 0 and not self._stopping:
                    self._cond.wait(timeout=early_s)  # woken early by a newer request: look again
                    continue
                freq, self._wanted, self._busy = self._wanted, None, True
            try:
                controller.guard.lock_sm_clocks(controller.gpu, freq, freq)
            except DeviceError as err:
                with self._cond:
                    self._failure = err
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


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


def plan_clock_change_s(path: str, stage: int) -> float:
    """Stage `stage`'s clock-change latency in PLAN.json (`clock_change_s`), in seconds; 0 when it has none."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return 0.0
    latencies = data.get("clock_change_s") if isinstance(data, dict) else None
    if not isinstance(latencies, list) or not 0 <= stage < len(latencies):
        return 0.0
    value = latencies[stage]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 10:
        raise UsageError(f"plan file {path}: clock_change_s[{stage}] must be between 0 and 10 seconds (got {value!r})")
    return float(value)


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
    latency_s = plan_clock_change_s(plan_path, int(stage.stage_index))
    gpu = device
    if gpu is None:
        found = discover(backend, gpu_indices=[local_rank])
        if not found.gpus:
            raise NotSupportedError(f"a frequency plan locks GPU clocks; {found.notes[-1]}")
        gpu = found.gpus[0]
    guard = SettingsGuard()
    guard.install_signal_handlers()
    controller = FrequencyController(plan, gpu, guard, strict=strict, clock_change_s=latency_s, background=True)
    if run is not None:
        run.frequency_plan = str(plan_path)
    return controller, controller.attach(stage)
