"""The power-limit part of a run: cap, tune or reuse a limit, through the settings guard.

It binds the pure tuner of `wattwise.power_limit` to the run's GPUs: the guard records each GPU's
original limit before the first change and restores it on every exit path; the limit a tuning run
chooses is remembered under the job's key (`wattwise.store.limits_memory`) and reused by the next run of the
same job, which reports it with the selector, eta and run that chose it. A carbon part, when configured,
moves the limit after tuning. Limits change only at optimizer-step boundaries (`step_begin`).

A run too short to profile every limit (its length known from the framework, `expected_steps`) keeps
profiling what it can, then settles on the best limit measured so far before a limit it could not finish;
a run whose end comes unannounced settles at `finish_tuning`. Either way the summary says
`tuning: {"finished": false, "profiled": [...], "reason": ...}` and one warning says it once.
Its resumable state is the tuner's, the steps run at the chosen limit and the reused limit's origin.

On GPUs whose energy counter changes in steps (about every 0.1 s on NVML and the realistic simulated H100),
a limit is measured for up to 20 of them and at least 2 s (`min_profile_s`), in consecutive windows of at
least 5 updates, only as long as its cost needs (`PowerLimitTuner`); each window begins and ends on a step
in which the main process's first GPU's counter changed: the energy of a window is then off by at most
about one training step's at each end, not one counter period's (`PowerLimitTuner.align_to_counter`; a
read of the counter at each step near a window's ends). Each window's energy carries that uncertainty, and
a choice the windows cannot tell from the highest limit is not made (one notice says so).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from wattwise.config import PowerLimitConfig
from wattwise.devices import Device, name_job
from wattwise.distributed import Collective
from wattwise.errors import Unavailable, UsageError
from wattwise.monitor import counter_window_uncertainty_j
from wattwise.power_limit import (
    MIN_SAVING,
    RUN_TO_RUN,
    WINDOW_PARTS,
    PowerLimitTuner,
    cap_limit_w,
    profile_limits_w,
)
from wattwise.profile import Payback, ProfileEntry
from wattwise.record.summary import CarbonAwareSummary, PowerLimitSummary, SettingEvent, TuningSummary
from wattwise.run.carbon import CarbonControl
from wattwise.settings.guard import SettingsGuard
from wattwise.store.limits_memory import LimitsMemory, RememberedLimit, TuningProgress
from wattwise.vocabulary import RunMode, Selector, TunerPhase

#: A profile window lasts at least this many updates of the energy counter: quantisation stays under
#: about 5% of the window's energy (one update at each end).
MIN_PROFILE_UPDATES = 20
#: ... and for at least this long, however fine the counter (AMD's, a V100's 20 ms): a training step's time
#: and power vary by about 2% from one step to the next, which a window averages out only over many steps.
MIN_PROFILE_S = 2.0
#: A limit is measured in consecutive windows of at least this many updates each (`PowerLimitTuner`'s parts).
MIN_PART_UPDATES = 5
#: The "cannot finish" warning says how to make tuning take at most 1/TUNING_SHARE of a run of known length.
TUNING_SHARE = 5


#: Why tuning chooses nothing on a simulated GPU that nothing drives (a user's own model): the warning's words.
UNDRIVEN_REASON = (
    "nothing drove the simulated GPU, so it measured its idle power at every limit "
    "(devices.simulated_drive=steps drives it from your training steps; "
    "wattwise.tools.workload.emulate_step drives it too, as the demo does)"
)
#: The same, as the tuning's reason the summary gives at the end, after the warning said it in full.
UNDRIVEN_SHORT = "nothing drove the simulated GPU (devices.simulated_drive=steps drives it; see the warning above)"


@dataclasses.dataclass(frozen=True)
class WindowEnd:
    """What each process tells the others at a profile window's end (`PowerLimitControl.end_profile_window`)."""

    #: No emulated work drove one of its simulated GPUs.
    undriven: bool
    #: wattwise's own time in the window, in seconds (`PowerLimitControl.own_time_from`).
    own_s: float
    #: The spread of the window's steps (`PowerLimitControl.step_spread`).
    step_spread: float = 0.0


class PowerLimitControl:
    """The power limit of one run's GPUs. Device errors propagate: the run degrades to measurement."""

    def __init__(
        self,
        cfg: PowerLimitConfig,
        *,
        memory: LimitsMemory | None = None,
        wall_clock: Callable[[], float],
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.cfg = cfg
        #: What this part does; `RunMode.MEASURE` again once a change failed.
        self.mode = RunMode(cfg.mode)
        self._memory = memory
        self._wall = wall_clock
        self.gpus: list[Device] = []
        self.guard: SettingsGuard | None = None
        self.tuner: PowerLimitTuner | None = None
        self.carbon: CarbonControl | None = None
        self.applied_limit_w: float | None = None
        #: The limit every GPU had when the run started (None: they differ, or a GPU does not say).
        self.found_limit_w: float | None = None
        #: The limit being applied, for the warning when applying it fails.
        self.target_w: float | None = None
        #: Every change: when, which device, which setting, what value.
        self.timeline: list[SettingEvent] = []
        #: The limit was chosen by an earlier run of the job and reused without profiling.
        self.reused = False
        #: Where a reused limit came from (selector, eta, run and time of the run that chose it).
        self.reused_from: RememberedLimit | None = None
        self.steps_at_chosen = 0
        #: Why tuning was abandoned (every process degraded to measuring), with what it had profiled; else None.
        self.abandoned: tuple[str, tuple[ProfileEntry, ...]] | None = None
        #: Whether tuning gave up because no emulated work drove a simulated GPU (its note says why).
        self.gave_up_undriven = False
        #: Why a change failed in this process of several, until every process degrades together (the run's
        #: next decision point): meanwhile the settings stay restored and tuning only counts, so that every
        #: process still issues the same collectives.
        self.suspended: str | None = None
        #: Optimizer steps the run will make, when the framework knows (None: unknown).
        self.expected_steps: int | None = None
        #: Messages the run must warn about once (tuning that cannot finish), until it takes them.
        self._notices: list[str] = []
        #: What `Device.settings_lifted` said of this process's GPUs at the run's end (also among the notices).
        self.lifted_notes: list[str] = []
        self._warned_short = False
        #: Monotonic clock timing the profile windows (no device sync: the steps' wall time is enough); None:
        #: the simulated GPUs' own clock when they share one (a virtual one in tests), else `time.perf_counter`.
        self._clock: Callable[[], float] = clock or time.perf_counter
        self._clock_given = clock is not None
        self._window_start = 0.0
        #: What wattwise itself spent on the training thread (its hooks: counter reads, collectives) while the
        #: open profile window ran, in seconds: left out of the window's time (`own_time_from`).
        self._own_s = 0.0
        #: The open window's steps as training timed them (own time left out): the clock at the last step's end
        #: and `_own_s` then, and the count, mean and sum of squared deviations of the steps' times (Welford).
        self._step_mark: tuple[float, float] | None = None
        self._step_times: tuple[int, float, float] = (0, 0.0, 0.0)
        #: The main GPU's energy counter at the last step end (or begin) read near a window's ends, else None.
        self._edge_j: float | None = None
        #: The tuner asked, at the last step end, whether the counter changes in the next step (`wants_counter`).
        self._watching_counter = False
        self._collective: Collective | None = None
        self._resumed_tuner: dict[str, Any] | None = None
        #: The tuner whose choice is in force with nothing left to move it (no carbon steering, no hold): a
        #: step then asks nothing of it.
        self._settled: PowerLimitTuner | None = None
        #: The slowest energy counter's period among every process's GPUs, once they agreed at the start.
        self._agreed_period_s: float | None = None
        #: The limits tuning profiles (min, max W of a GPU) and the job's maximum power (W), from `setup`.
        self._tuner_range: tuple[float, float, float] = (0.0, 0.0, 0.0)
        #: The job's key in the limits memory, whether this is the main process, and the run's id, as the
        #: last profile window gave them: a choice made later (a round cut short) is remembered with them.
        self._remember_as: tuple[str | None, bool, str | None] = (None, False, None)
        #: Where an unfinished tuning is kept for the job's next run: its key, and whether this is the main process.
        self._progress_as: tuple[str | None, bool] = (None, False)
        #: The earlier run's unfinished tuning this run went on from, if any.
        self.continued_from: TuningProgress | None = None
        self._label: Callable[[Device], str] = lambda dev: dev.key

    @property
    def memory(self) -> LimitsMemory:
        """Where tuned limits are remembered under the job's key (the default memory unless one was given)."""
        if self._memory is None:
            self._memory = LimitsMemory()
        return self._memory

    def steer(self, *, power_limit_w: float | None, eta: float) -> None:
        """Before a recurring job's run starts: cap at the limit remembered for its batch size, or tune.

        Tuning then uses the job's own trade-off (the Zeus cost with the job's eta) and profiles afresh:
        the job store, not the per-job limits memory, knows which batch sizes were profiled.
        """
        if power_limit_w is not None:
            self.cfg = dataclasses.replace(self.cfg, mode=RunMode.CAP, cap_w=power_limit_w, cap_fraction=None)
        else:
            self.cfg = dataclasses.replace(self.cfg, mode=RunMode.TUNE, reuse=False, selector=Selector.COST, eta=eta)
        self.mode = RunMode(self.cfg.mode)

    def expect_steps(self, total: int | None) -> None:
        """The optimizer steps the run will make (None or 0: unknown), for tuning that cannot finish in them."""
        self.expected_steps = total if total is not None and total > 0 else None

    def take_notices(self) -> tuple[str, ...]:
        """The messages the run must warn about once, each handed over once (a step's call makes no list)."""
        if not self._notices:
            return ()
        notices = tuple(self._notices)
        self._notices.clear()
        return notices

    @property
    def tuned_limit_w(self) -> float | None:
        """The limit tuning chose (or reused) in this run; None when it did not tune or chose none yet."""
        return self.tuner.chosen.power_limit_w if self.tuner is not None and self.tuner.chosen is not None else None

    def setup(
        self,
        gpus: Sequence[Device],
        collective: Collective,
        *,
        memory_key: str | None,
        label: Callable[[Device], str],
        guard: Callable[[], SettingsGuard],
        carbon: Callable[[], CarbonControl | None] = lambda: None,
        job: str = "",
    ) -> None:
        """Open the guard and apply the starting limit: the cap, or the start of tuning or a reused limit.

        Args:
            gpus: The run's GPUs in this process; with none, a cap or tuning turns into measuring only
                (with a notice).
            collective: The run's processes (the reused limit is recalled on the main one and shared).
            memory_key: The job's key in the limits memory (None: nothing remembered nor reused).
            label: A GPU's name in the settings timeline (`rank0/gpu0`).
            guard: Opens the guard every change goes through; called only when a setting will change.
            carbon: Makes the carbon part that moves the limit after tuning (None: not carbon-aware);
                called only when tuning.
            job: Names the run to the node agent (the holder of agent-backed GPUs).
        """
        self.gpus, self._label = list(gpus), label
        self.found_limit_w = self._common_limit_w()
        if self.mode != RunMode.MEASURE and not self.gpus:
            what = "tuning" if self.mode == RunMode.TUNE else "capping"
            self._notices.append(
                f"power-limit {what} needs an NVIDIA "
                "or AMD GPU and none was found: measuring only (backend='simulated' tries it on the "
                "simulated GPU)"
            )
            self.mode = RunMode.MEASURE
        if self.mode == RunMode.MEASURE:
            return
        name_job(self.gpus, job)
        cfg = self.cfg
        self.guard = guard()
        rng = self.gpus[0].power_limit_range()
        if self.mode == RunMode.CAP:
            self.apply(cap_limit_w(rng.max_w, rng.min_w, cap_w=cfg.cap_w, cap_fraction=cfg.cap_fraction))
            return
        self.carbon = carbon()
        sims = [sim for sim in (gpu.simulation for gpu in self.gpus) if sim is not None]
        clocks = {id(sim.clock): sim.clock for sim in sims}
        if not self._clock_given and len(clocks) == 1 and len(sims) == len(self.gpus):
            self._clock = next(iter(clocks.values()))
        self._tuner_range = (rng.min_w, rng.max_w, rng.max_w * len(self.gpus) * collective.world_size)
        self.tuner = self._make_tuner()
        self._collective = collective
        if self._resumed_tuner is not None:
            self.tuner.load_state_dict(self._resumed_tuner)
            return

    def reuse_remembered(self, collective: Collective, memory_key: str | None, progress_key: str | None = None) -> None:
        """Finish tuning with the limit an earlier run of the job chose, when one is remembered.

        Called by every process after `setup`, once they agree that they tune: the main process recalls the
        limit and broadcasts it, even when recalling failed (then it raises after the broadcast), so that
        every process takes part in the same collective.

        Raises:
            Unavailable: the limits memory cannot be read (on the main process).
        """
        progress_key = progress_key or memory_key
        if self.tuner is None or self._resumed_tuner is not None or progress_key is None:
            return
        self._progress_as = (progress_key, collective.rank == 0)
        saved: RememberedLimit | None = None
        progress: TuningProgress | None = None
        failure: Exception | None = None
        if collective.rank == 0:
            try:
                saved = self.memory.recall(memory_key) if self.cfg.reuse and memory_key is not None else None
            except (Unavailable, UsageError) as err:
                failure = err
            if saved is None and failure is None:
                progress = self._recall_progress(progress_key)
        saved, progress = collective.broadcast((saved, progress))
        if saved is not None:
            self.tuner.finish_with(saved.chosen, saved.profile)
            self.reused, self.reused_from = True, saved
        elif progress is not None:
            self._go_on_from(progress)
        if failure is not None:
            raise failure

    def _recall_progress(self, memory_key: str) -> TuningProgress | None:
        """An earlier run's unfinished tuning of this job, when it profiled these limits by this objective."""
        assert self.tuner is not None
        try:
            progress = self.memory.recall_progress(memory_key)
        except (Unavailable, UsageError):  # nothing to go on from; an outage is said where the choice is kept
            return None
        if progress is None:
            return None
        kept = progress.state
        same = (
            kept.get("limits_w") == self.tuner.limits_w
            and kept.get("selector") == str(self.tuner.selector)
            and kept.get("eta") == self.tuner.eta
            and isinstance(kept.get("tuner"), dict)
        )
        return progress if same else None

    def _go_on_from(self, progress: TuningProgress) -> None:
        """Tune on from where an earlier run of the job stopped: its profiled limits count, the next ones follow."""
        assert self.tuner is not None
        try:
            self.tuner.load_state_dict(progress.state["tuner"])
        except (KeyError, TypeError, ValueError):  # a state this release cannot read: start afresh
            self.tuner = self._make_tuner()
            return
        self.tuner.steps_at = {}  # this run's tuning cost is its own steps' and its own time's
        self.tuner.own_time_s = 0.0
        self.continued_from = progress
        by = f" {progress.run_id}" if progress.run_id else ""
        self._notices.append(
            f"power-limit tuning goes on from an earlier run{by} of this job: {progress.profiled} of "
            f"{progress.limits} limits were profiled there"
        )

    def _forget_progress(self, key: str) -> None:
        """A finished tuning: the unfinished profile it went on from is done with (never stops training)."""
        try:
            self.memory.forget_progress(key)
        except (Unavailable, UsageError) as err:
            self._notices.append(f"power-limit tuning's finished profile is still kept as unfinished ({err})")

    def _keep_progress(self) -> None:
        """Keep an unfinished tuning's profile for the job's next run (main process; never stops training)."""
        t = self.tuner
        memory_key, is_main = self._progress_as
        if t is None or t.finished or not t.profile or memory_key is None or not is_main:
            return
        state = {"tuner": t.state_dict(), "limits_w": t.limits_w, "selector": str(t.selector), "eta": t.eta}
        try:
            self.memory.save_progress(
                memory_key, state, profiled=len(t.profile), limits=t.sweep_size, run_id=self._remember_as[2]
            )
        except (Unavailable, UsageError) as err:
            self._notices.append(f"power-limit tuning's unfinished profile could not be kept for the next run ({err})")
            return
        self._notices.append(
            f"power-limit tuning keeps its profile of {len(t.profile)} of {t.sweep_size} limits for the job's "
            "next run, which goes on from there; no limit is remembered as chosen until the profile is finished"
        )

    @property
    def limit_in_force_w(self) -> float | None:
        """The power limit the loggers report: the one applied, else the one the GPUs had at the start."""
        return self.applied_limit_w if self.applied_limit_w is not None else self.found_limit_w

    def _common_limit_w(self) -> float | None:
        """The power limit every GPU of this process has now; None when they differ or one cannot say."""
        try:
            limits = {gpu.power_limit_w() for gpu in self.gpus}
        except Unavailable:  # a device that does not report its limit (a CPU domain, a refused call)
            return None
        return limits.pop() if len(limits) == 1 else None

    def apply(self, watts: float) -> None:
        """Set every GPU of the run to `watts` through the guard, and add the change to the timeline.

        Raises:
            Unavailable: a GPU refused the change or could not be reached.
        """
        assert self.guard is not None
        for gpu in self.gpus:
            self.guard.set_power_limit(gpu, watts)
        self.applied_limit_w = watts
        now = self._wall()
        for gpu in self.gpus:
            self.timeline.append(SettingEvent(now, self._label(gpu), "power_limit_w", watts))

    @property
    def interrupted(self) -> bool:
        """SIGTERM or SIGINT reached the process: the guard restored every setting and changes none again."""
        return self.guard is not None and self.guard.signalled is not None

    def step_begin(self, collective: Collective, steps_done: int) -> bool:
        """Apply the limit the tuner (or the carbon part) wants now; True when a profile window opens.

        After a signal (`interrupted`), and while `suspended`, nothing changes (the process is winding down,
        or waits for the others to degrade with it), but tuning goes on counting: windows open and close on
        the same steps in every process.
        """
        if self.tuner is None or self._settled is self.tuner:
            return False
        if self.expected_steps is not None and not self.tuner.done:
            self._check_time_left(steps_done)
        action = self.tuner.on_step_begin()
        target = action.set_limit_w
        if self.tuner.done and self.carbon is not None:
            target = self.carbon.target_w(self.tuner.profile, collective)
        holding = self.interrupted or self.suspended is not None  # counting only: see `suspended`
        if target is not None and target != self.applied_limit_w and not holding:
            self.target_w = target
            self.apply(target)
        if self.tuner.done and self.carbon is None and not holding and action.set_limit_w is None:
            self._settled = self.tuner  # its choice is in force and nothing else moves it: steps cost nothing
        if action.begin_window:
            self._window_start = self._clock()
            self._own_s = 0.0
            self._step_mark, self._step_times = (self._window_start, 0.0), (0, 0.0, 0.0)
        return action.begin_window

    def window_opened(self, read_s: float = 0.0) -> None:
        """The profile window opened (its first reading taken): its first step is timed from here (`note_step`).

        Args:
            read_s: How long that reading took after the window's timestamp (`RunMeasurement.begin`): the
                window's time holds it, and it is wattwise's own (`own_time_from`), not training's.
        """
        if self.tuner is not None and self.tuner.window_open:
            self._own_s += max(0.0, read_s)
            self._step_mark = (self._clock(), self._own_s)

    def note_step(self, mark: float | None, steps: int = 1) -> None:
        """A step of the open window ended at `mark` (`own_time_mark`, at the start of the run's step-end hook).

        Its time since the last one's end, what wattwise's own hooks took meanwhile left out, gives the spread
        of the window's steps (`step_spread`), which says how well the window's mean step is known.
        """
        if mark is None or self.tuner is None or not self.tuner.window_open or self._step_mark is None:
            return
        last_s, own_then_s = self._step_mark
        if steps > 0:
            per_step_s = max(0.0, mark - last_s - (self._own_s - own_then_s)) / steps
            n, mean, m2 = self._step_times
            n += 1
            delta = per_step_s - mean
            mean += delta / n
            self._step_times = (n, mean, m2 + delta * (per_step_s - mean))
        self._step_mark = (mark, self._own_s)

    def step_spread(self) -> float:
        """The standard deviation of one step's time in the open (or last) window, relative to its mean (0: unknown)."""
        n, mean, m2 = self._step_times
        return math.sqrt(m2 / (n - 1)) / mean if n >= 2 and mean > 0 else 0.0

    def own_time_mark(self) -> float | None:
        """The clock at the start of one of the run's hooks while tuning profiles (None: nothing to time).

        See `own_time_from`. Costs nothing once tuning has settled.
        """
        if self.tuner is None or self._settled is self.tuner or self.tuner.done:
            return None
        return self._clock()

    def own_time_from(self, mark: float | None) -> None:
        """A hook that began at `mark` (`own_time_mark`) ends: its time, within an open window, is wattwise's own.

        A profile window measures what training costs at a limit; the reads of the energy counter that find
        the window's ends (2.8 ms each on an H100) and the logging points' reads and all-reduces happen only
        while tuning, a varying number of them in each window, and would weigh a window by how many of them
        fell into it. The window's time leaves them out (`end_profile_window`); its energy keeps what the GPU
        drew meanwhile, as the counter says.
        """
        if mark is not None and self.tuner is not None and self.tuner.window_open:
            self._own_s += max(0.0, self._clock() - mark)

    def hook_ended(self, mark: float | None) -> None:
        """One of the run's hooks, begun at `mark` (`own_time_mark`) while tuning, ends: part of tuning's cost.

        Every hook's time while tuning, in or out of a window (its counter reads, the windows' readings, the
        window's end), is what the run spent because it tuned (`PowerLimitTuner.own_time_s`, in `payback`).
        """
        if mark is not None and self.tuner is not None:
            self.tuner.own_time_s += max(0.0, self._clock() - mark)

    def step_end(self, steps: int = 1) -> bool:
        """Count `steps` optimizer steps; True when the open profile window is complete and must be measured."""
        if self.tuner is None:
            return False
        if self.tuner.done:
            self.steps_at_chosen += steps
            return False
        changed: bool | None = None
        # Whether to ask follows the tuner, which counts alike in every process, never whether this process
        # could read its counter (a lost GPU reads None): every process issues the same broadcast.
        if self._watching_counter:
            value = self._read_edge()
            changed = value is None or self._edge_j is None or value != self._edge_j
            if self._collective is not None and self._collective.world_size > 1:
                changed = bool(self._collective.broadcast(changed))  # the main process's counter decides
            self._edge_j = value
        ends = self.tuner.on_step_end(steps, changed)
        self._watching_counter = self.tuner.wants_counter
        if not self._watching_counter:
            self._edge_j = None
        elif self._edge_j is None:
            self._edge_j = self._read_edge()
        if ends and self.tuner.sizing_due:
            # Once per run, on a step that decides: rank 0's window time sizes every process's windows.
            assert self._collective is not None
            window_s = self._collective.broadcast(self._clock() - self._window_start - self._own_s)
            return not self.tuner.size_windows(window_s)
        return ends

    def _read_edge(self) -> float | None:
        """The main GPU's energy counter, to see the step in which it changes; None when it cannot be read."""
        try:
            return self.gpus[0].energy_j() if self.gpus else None
        except Unavailable:
            return None

    def counter_period_s(self) -> float:
        """How often the slowest energy counter among the run's GPUs changes, in seconds (0: at every read).

        Once the processes agreed at the start (`agree_counter_period`), the slowest among all theirs.
        """
        if self._agreed_period_s is not None:
            return self._agreed_period_s
        return max((gpu.energy_update_period_s for gpu in self.gpus), default=0.0)

    def _make_tuner(self) -> PowerLimitTuner:
        """A tuner of this run's limits, for the energy counter `counter_period_s` says (its windows' rules)."""
        cfg = self.cfg
        min_w, max_w, job_max_w = self._tuner_range
        coarse = self.counter_period_s() > 0  # else an exact counter (the ideal physics): any saving is one
        return PowerLimitTuner(
            profile_limits_w(min_w, max_w, cfg.step_w),
            selector=cfg.selector,
            eta=cfg.eta,
            max_slowdown=cfg.max_slowdown,
            max_power_w=job_max_w,
            wait_steps=cfg.wait_steps,
            warmup_steps=cfg.warmup_steps,
            profile_steps=cfg.profile_steps,
            min_window_s=self.min_profile_s(),
            align_to_counter=coarse,
            run_to_run=RUN_TO_RUN if coarse else 0.0,
            min_saving=MIN_SAVING if coarse else 0.0,
            confirm_rounds=cfg.confirm_rounds,
            window_parts=self._window_parts(),
            stop_after_worse=cfg.stop_after_worse,
        )

    def _window_parts(self) -> int:
        """How many windows a limit may be measured in: parts of `min_profile_s` no shorter than 5 counter updates.

        A shorter part would be quantised by the counter beyond what its uncertainty says (settling after a
        change weighs more in it too); an exact counter needs one window of `profile_steps`.
        """
        period_s = self.counter_period_s()
        if period_s <= 0:
            return 1
        return max(1, min(WINDOW_PARTS, math.floor(self.min_profile_s() / (MIN_PART_UPDATES * period_s) + 1e-9)))

    def agree_counter_period(self, period_s: float) -> None:
        """Tune as every other process does: for the slowest energy counter among all the job's GPUs.

        The windows' length, their alignment on the counter and the rules that choose (which decide when a
        window ends and whether limits are measured again) follow the counter; processes whose GPUs differ
        (a node mixing models, a simulated GPU of another physics) would otherwise end windows on different
        steps. Called by every process, with the same `period_s`, right after the start's agreement
        (`Run._agree`), before any step.
        """
        if self.tuner is None or self.tuner.done or period_s == self.counter_period_s():
            return
        self._agreed_period_s = period_s
        self.tuner = self._make_tuner()
        if self._resumed_tuner is not None:
            self.tuner.load_state_dict(self._resumed_tuner)

    def window_uncertainty_j(self, time_s: float, energy_j: float) -> float:
        """How far a profile window's energy may be off: its power times where the counter's steps may fall.

        Aligned windows (`align_to_counter`) have their ends within one training step of a change of the
        counter, others anywhere within one period; the difference of two such offsets, uniform over that
        span, has a standard deviation of span / sqrt(6): this is two of those (about a 95% bound).
        """
        if self.tuner is None:
            return 0.0
        aligned = self.tuner.window_steps if self.tuner.align_to_counter else None
        return counter_window_uncertainty_j(energy_j, time_s, self.counter_period_s(), aligned_steps=aligned)

    def min_profile_s(self) -> float:
        """The shortest profile window, in seconds.

        `power_limit.min_profile_s`, or 20 updates of the slowest energy counter among the run's GPUs and at
        least `MIN_PROFILE_S` (0 for counters that change at every read, as the ideal simulated GPU's).
        """
        if self.cfg.min_profile_s is not None:
            return float(self.cfg.min_profile_s)
        period_s = self.counter_period_s()
        return max(MIN_PROFILE_UPDATES * period_s, MIN_PROFILE_S) if period_s > 0 else 0.0

    def _check_time_left(self, steps_done: int) -> None:
        """A run of known length: warn once when tuning may not finish; settle before a limit it cannot start.

        On a coarse energy counter the steps a limit needs follow from the time its windows last, known once
        the first window has sized them: the forecast waits for that. It counts every part of every limit
        left (a limit told early needs fewer, and the sweep may stop early), so it says "may".
        """
        assert self.tuner is not None and self.expected_steps is not None
        t = self.tuner
        if not t.windows_sized:
            return
        left = self.expected_steps - steps_done
        needed = t.steps_to_finish()
        if needed <= left:
            return
        if t.confirming:  # every limit is profiled: measuring again is what the run has room for, no more
            if t.at_limit_boundary() and left < t.warmup_steps + t.profile_steps:
                t.settle()
                self._tuning_ended()
            return
        most = t.warmup_steps + t.profile_steps * t.window_parts  # steps one limit may need
        if t.phase == TunerPhase.WAIT:  # the first limit starts after the wait
            can = len(t.profile) + max(0, left - (t.wait_steps - t.steps_in_phase)) // most
        else:  # the current limit completes first
            current = needed - (t.sweep_size - t.limit_index - 1) * most
            can = len(t.profile) + (1 + (left - current) // most if current <= left else 0)
        reason = (
            f"the run makes {self.expected_steps} optimizer steps; profiling every limit may need up to "
            f"{steps_done + needed}{self._in_time(needed)}"
        )
        if not self._warned_short:
            self._warned_short = True
            self._notices.append(
                f"power-limit tuning may not finish: {reason}. It profiles at least {min(can, t.sweep_size)} of "
                f"{t.sweep_size} limits and keeps the best of them unless it finishes (the summary says "
                f"tuning.finished); {self._how_to_fit(steps_done + needed)}"
            )
        if t.at_limit_boundary() and left < t.warmup_steps + t.profile_steps:
            t.finish_early(reason)
            self._keep_progress()

    def _in_time(self, steps: int) -> str:
        """`steps` as training time on a coarse counter: each limit up to `min_profile_s`, as counter updates."""
        t = self.tuner
        period_s = self.counter_period_s()
        if t is None or period_s <= 0 or t.profile_steps <= 0:
            return ""
        step_s = self.min_profile_s() / t.window_parts / t.profile_steps
        updates = round(self.min_profile_s() / period_s)
        return (
            f" (about {steps * step_s:.0f} s of training at {1000 * step_s:.0f} ms a step: a limit is measured "
            f"for up to {updates} updates of the energy counter, {self.min_profile_s():g} s)"
        )

    def _how_to_fit(self, needed_steps: int) -> str:
        """What would let tuning finish: the steps for tuning to take at most a fifth of the run, or fewer limits.

        On a coarse counter a limit's windows last a time, not a number of steps: fewer profile or warm-up
        steps would not shorten them, so the advice is the run's length, `step_w`, or a job whose next run
        goes on from where this one stops.
        """
        assert self.tuner is not None and self.expected_steps is not None
        t = self.tuner
        how = f"to tune in at most a fifth of the run, give it at least {TUNING_SHARE * needed_steps} optimizer steps"
        per_limit = t.warmup_steps + t.profile_steps * t.window_parts
        fits = (self.expected_steps // TUNING_SHARE - t.wait_steps) // per_limit if per_limit > 0 else 0
        low_w, high_w = min(t.limits_w), max(t.limits_w)
        if fits >= 2 and high_w > low_w:
            step_w = math.ceil((high_w - low_w) / (fits - 1))
            count = len(profile_limits_w(low_w, high_w, step_w))
            how += f", or set power_limit.step_w={step_w} to profile {count} limits (now {self.cfg.step_w:g} W apart)"
        if self._progress_as[0] is None:
            how += ", or name the run's job (job=NAME) so that its next run goes on from where this one stops"
        if self.counter_period_s() <= 0:
            how += ", or lower power_limit.profile_steps / warmup_steps"
        return how

    def finish_tuning(self, steps_done: int) -> None:
        """The run ends: notices of lifted limits, and tuning that is still profiling settles.

        A limit someone else lifted (`Device.settings_lifted`) becomes a notice, and tuning that is still
        profiling settles on the best limit measured so far.
        """
        self.lifted_notes = [n for n in (gpu.settings_lifted() for gpu in self.gpus) if n]
        self._notices += [n for n in self.lifted_notes if n not in self._notices]
        t = self.tuner
        if t is None or t.done:
            return
        if t.confirming:
            t.settle()
            self._tuning_ended()
            return
        ended = "was interrupted by a signal" if self.interrupted else "ended"
        reason = (
            f"the run {ended} after {steps_done} optimizer steps, {t.steps_to_finish()} before every limit was profiled"
        )
        t.finish_early(reason)
        self._keep_progress()
        if not self._warned_short:
            self._warned_short = True
            self._notices.append(
                f"power-limit tuning did not finish: {reason}; "
                f"{len(t.profile)} of {len(t.limits_w)} limits profiled (the summary says "
                "tuning.finished = false)"
            )

    def end_profile_window(
        self, time_s: float, energy_j: float, *, memory_key: str | None, is_main: bool, run_id: str | None = None
    ) -> None:
        """The profile window's figures (combined over processes).

        The choice is remembered once tuning ends, with the run that made it (`run_id`), so a later run
        that reuses it can say where it came from.
        """
        assert self.tuner is not None
        undriven = any(not gpu.driven for gpu in self.gpus)
        # wattwise's own time in the window (`own_time_from`) and its steps' spread: the main process's, for all.
        # An exact counter (the ideal physics) ranks by exact figures, as it takes any saving for one.
        own_s, spread = self._own_s, self.step_spread() if self.counter_period_s() > 0 else 0.0
        if self._collective is not None and self._collective.world_size > 1:  # every process gives up alike
            gathered: list[WindowEnd] = self._collective.all_gather(WindowEnd(undriven, own_s, spread))
            undriven, own_s, spread = any(g.undriven for g in gathered), gathered[0].own_s, gathered[0].step_spread
        if undriven:
            # An idle simulated GPU draws its idle power whatever the limit: its figures cannot rank limits.
            top_w = max(self.tuner.limits_w)
            self.tuner.give_up(UNDRIVEN_SHORT)
            self.gave_up_undriven = True
            self._notices.append(
                f"power-limit tuning chose no limit: {UNDRIVEN_REASON}; the GPU stays at "
                f"{top_w:g} W and no saving is reported"
            )
            return
        self._remember_as = (memory_key, is_main, run_id)
        # Training's time at this limit: what wattwise's own hooks took meanwhile left out (`own_time_from`),
        # never more than half of the window.
        time_s = max(0.5 * time_s, time_s - own_s)
        self._own_s = 0.0
        self.tuner.end_window(time_s, energy_j, self.window_uncertainty_j(time_s, energy_j), step_spread=spread)
        if self.tuner.done:
            self._tuning_ended()

    def _tuning_ended(self) -> None:
        """Tuning has made its choice (or none, saying why): remember it for the job (on the main process)."""
        assert self.tuner is not None
        memory_key, is_main, run_id = self._remember_as
        if self.tuner.unresolved:
            self._notices.append(
                f"power-limit tuning chose no limit: {self.tuner.unfinished_reason}; the GPU stays at "
                f"{max(self.tuner.limits_w):g} W and no saving is reported"
            )
        progress_key, _ = self._progress_as
        if progress_key is not None and progress_key != memory_key and is_main and self.tuner.finished:
            self._forget_progress(progress_key)
        if self.tuner.chosen is not None and memory_key is not None and is_main:
            self.memory.save(
                memory_key,
                self.tuner.chosen,
                self.tuner.profile,
                selector=self.tuner.selector,
                eta=self.tuner.eta,
                run_id=run_id,
            )

    def suspend(self, reason: str) -> None:
        """A change failed in this process of several: restore every setting now.

        No setting changes until every process degrades together (`degrade`, at the run's next decision
        point). The first reason stays.
        """
        if self.suspended is None:
            self.suspended = reason
        self.restore()

    def degrade(self, reason: str | None = None) -> None:
        """A change failed: restore every setting and only measure from now on.

        Args:
            reason: Why, for the summary's `power_limit.tuning.reason` when tuning is abandoned.
        """
        if self.mode == RunMode.TUNE and self.tuner is not None and reason is not None:
            self.abandoned = (reason, tuple(self.tuner.profile))
        self.mode = RunMode.MEASURE
        self.suspended = None
        self.tuner = None
        self.restore()
        self.applied_limit_w = None

    def restore(self) -> None:
        """Put back every setting changed so far (the guard's originals); changes may follow."""
        if self.guard is not None:
            self.guard.restore_all()

    def close(self) -> None:
        """Restore every setting and close the guard: no restoring at signals or exit from now on."""
        if self.guard is not None:
            self.guard.close()

    def summary(self, energy_j: float) -> PowerLimitSummary | None:
        """What this part did, for the run's record; the saving is estimated against the highest limit."""
        if self.mode == RunMode.CAP:
            return PowerLimitSummary(mode=RunMode.CAP, chosen_power_limit_w=self.applied_limit_w)
        if self.tuner is None:
            if self.abandoned is None:
                return None
            reason, profile = self.abandoned  # the record says that tuning was abandoned, and why
            return PowerLimitSummary(
                mode=RunMode.TUNE,
                max_slowdown=self.cfg.max_slowdown,
                selector=self.cfg.selector,
                eta=self.cfg.eta,
                chosen_power_limit_w=None,
                profile=profile,
                tuning=TuningSummary(
                    finished=False,
                    profiled=tuple(e.power_limit_w for e in profile),
                    reason=f"abandoned: {reason}",
                    steps_at_chosen=None,  # nothing was chosen
                ),
            )
        t = self.tuner
        top = max(t.profile, key=lambda e: e.power_limit_w) if t.profile else None
        # An idle simulated GPU measures its idle power only: what it "saves" is timing noise, not a saving.
        honest = all(gpu.driven for gpu in self.gpus)
        # An unfinished profile's best limit is provisional: no saving is reported for it (`finished`).
        saved = (
            self.steps_at_chosen * (top.energy_j - t.chosen.energy_j)
            if t.chosen is not None and top is not None and honest and t.finished
            else None
        )
        origin = self.reused_from
        gained = self.payback()
        return PowerLimitSummary(
            mode=RunMode.TUNE,
            max_slowdown=self.cfg.max_slowdown,
            reused=self.reused,
            selector=origin.selector if origin is not None else t.selector,
            eta=origin.eta if origin is not None else t.eta,
            reused_run_id=origin.run_id if origin is not None else None,
            reused_chosen_at_s=origin.chosen_at_s if origin is not None else None,
            chosen_power_limit_w=t.chosen.power_limit_w if t.chosen else None,
            profile=tuple(t.profile),
            baseline_energy_j=energy_j + saved if saved is not None else None,
            energy_saved_j=saved,
            baseline_estimated=saved is not None,
            tuning=TuningSummary(
                finished=t.finished,
                profiled=tuple(e.power_limit_w for e in t.profile),
                reason=t.unfinished_reason if not t.finished else None,
                steps_at_chosen=self.steps_at_chosen if t.chosen is not None else None,
                confirm_rounds=t.rounds,
                measured_again=tuple(
                    e.power_limit_w for e, n in zip(t.profile, t.window_counts, strict=False) if n > 1
                ),
                not_profiled=tuple(w for w in t.limits_w[t.sweep_size :]) if t.stopped_early else (),
            ),
            payback=gained,
        )

    def payback(self) -> Payback | None:
        """What the chosen limit gained and tuning cost so far (`wattwise.power_limit.payback`); None before one."""
        t = self.tuner
        if t is None or t.chosen is None or not t.finished or not all(gpu.driven for gpu in self.gpus):
            return None
        return t.payback(self.steps_at_chosen)

    def carbon_summary(self) -> CarbonAwareSummary | None:
        """The carbon part's inputs, for the run's record; None when the run was not carbon-aware."""
        carbon = self.carbon
        if carbon is None:
            return None
        return CarbonAwareSummary(
            carbon.cfg.threshold_g_per_kwh, carbon.cfg.interval_s, getattr(carbon.intensity, "source", None)
        )

    # -- checkpoints -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The resumable state: the tuner's, the applied limit, the steps at the chosen one, the reused origin."""
        origin = self.reused_from
        return {
            "tuner": self.tuner.state_dict() if self.tuner is not None else None,
            "applied_limit_w": self.applied_limit_w,
            "steps_at_chosen": self.steps_at_chosen,
            "reused_from": (
                {
                    "selector": None if origin.selector is None else str(origin.selector),  # plain: weights_only
                    "eta": origin.eta,
                    "run_id": origin.run_id,
                    "chosen_at_s": origin.chosen_at_s,
                }
                if origin is not None
                else None
            ),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state_dict`: tuning goes on where it was, a chosen limit is not profiled again."""
        self._resumed_tuner = state.get("tuner")
        self.steps_at_chosen = int(state.get("steps_at_chosen", 0))
        origin = state.get("reused_from")
        if origin is not None and self._resumed_tuner is not None and self._resumed_tuner.get("chosen"):
            chosen = ProfileEntry(**self._resumed_tuner["chosen"])
            self.reused = True
            self.reused_from = RememberedLimit(
                chosen,
                [ProfileEntry(**e) for e in self._resumed_tuner["profile"]],
                origin.get("selector"),
                origin.get("eta"),
                origin.get("chosen_at_s"),
                origin.get("run_id"),
            )
        if self.tuner is not None and self._resumed_tuner is not None:
            self.tuner.load_state_dict(self._resumed_tuner)
