"""One training run, as both adapters drive it: a small object composed of framework-neutral parts.

An adapter translates its framework's life cycle into calls on `Run`:

    start() -> [epoch_begin() -> (step_begin() -> step_end())* -> epoch_end()]* -> finish()
    pause(kind) ... resume() around what is not training (evaluation, checkpoints);
    abort(exc) on an exception; state_dict()/load_state_dict() for checkpoints.

A step is an optimizer step: `step_end(steps=n)` counts the n optimizer steps the framework made since
`step_begin` (several optimizers, or none on a gradient-accumulation micro-batch, where the adapter calls
neither). A step that neither logs nor closes a profiling window only counts: no counter read, no CUDA
synchronize, no collective. Every `log_every_n_steps` steps the run combines the interval's figures over
processes (one tensor all-reduce) and `step_end` returns them (per-step averages); otherwise it returns
None. Power-limit changes happen only in `step_begin`, at an optimizer-step boundary.

The parts, each beside its decision code and each owning its state:
- `measurement` (`wattwise.run.measurement.RunMeasurement`): devices, the energy monitor, the run's windows;
- `power` (`wattwise.run.power.PowerLimitControl`): cap, tune or reuse a limit through the guard;
- the carbon part (`wattwise.run.carbon.CarbonControl`), which the power part consults after tuning;
- `recurring` (`wattwise.run.recurring.RecurringJobRun`), when the run is one run of a recurring job;
- `frequency_plan`: the PLAN.json a pipeline stage follows in this run (`wattwise.frequency`).
The record of the run (summary.json, windows.csv, power.csv) is written by `wattwise.record.summary`.

This object is the boundary between a framework and wattwise: the parts raise, and the public hooks here
never break training. Only a user's mistake (`UsageError`: a setting, an argument) may stop it, and only
at `start`, before training. Otherwise (`wattwise.errors`): something unavailable (a device, the store,
the node agent) while changing a setting restores every setting and degrades to measurement only; any
other error, an `InternalError` or a `UsageError` after the start included, turns measurement off; each
with one warning, unless `strict`.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from wattwise.config import EnergyConfig
from wattwise.devices import Device
from wattwise.distributed import Collective, default_collective
from wattwise.errors import EnergyPluginWarning, Unavailable, UsageError, plugin_warning
from wattwise.flags import UNDER_WATTWISE_RUN
from wattwise.monitor import Measurement
from wattwise.project import project_of
from wattwise.record.files import WindowsLog, power_rows, write_run_dir
from wattwise.record.kept import leave_late_note, summary_written_without
from wattwise.record.summary import (
    EpochEnergy,
    NonTrainingTime,
    RankNote,
    RunSettings,
    RunSummary,
    SettingEvent,
    iso_utc,
    never_applied,
    never_applied_why,
    rank_notes_text,
    with_saving_uncertainty,
)
from wattwise.run.agreement import (
    FIGURES_LEFT,
    Ended,
    RankEnd,
    agree,
    agree_tuning,
    collect_rank_ends,
    leave_rank_end,
)
from wattwise.run.carbon import CarbonControl
from wattwise.run.history import keep_run
from wattwise.run.measurement import EndedEpoch, Figures, MeasurementState, RunFigures, RunMeasurement, Window
from wattwise.run.power import PowerLimitControl
from wattwise.settings.guard import SettingsGuard
from wattwise.store.limits_memory import LimitsMemory, memory_key
from wattwise.vocabulary import EndedHow, Framework, RankNoteKind, RunMode, RunStatus

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["DEFAULT_LOG_EVERY_N_STEPS", "EnergyPluginWarning", "Figures", "Run", "process_guard"]

#: Step figures are combined over processes and logged every this many optimizer steps, unless the
#: configuration (or the framework's own cadence, in the adapter) says otherwise.
DEFAULT_LOG_EVERY_N_STEPS = 50
#: How long a process that ends apart, its figures left, waits to see whether the main process read them
#: or wrote the summary without them (`Run._tell_if_late`), in seconds.
LATE_WAIT_S = 1.0
#: What a note adds when a failure in some processes makes every process only measure from then on.
DEGRADED = "; every process continues with measurement only, so that the processes stay in step"


Hook = Callable[Concatenate["Run", P], R | None]


#: How a user of each framework turns the simulated GPU on: the keyword or variable they would use.
_SIMULATED_HINTS: dict[str, str] = {
    Framework.LIGHTNING: "EnergyCallback(backend='simulated') (or LIGHTNING_ENERGY_BACKEND=simulated)",
    Framework.ACCELERATE: "ACCELERATE_ENERGY_BACKEND=simulated",
    Framework.TRANSFORMERS: "ACCELERATE_ENERGY_BACKEND=simulated",
}


def simulated_hint(framework: str) -> str:
    """How a user of `framework` turns the simulated GPU on: the keyword or variable they would use."""
    return _SIMULATED_HINTS.get(framework, "devices.backend=simulated (or WATTWISE_BACKEND=simulated)")


def process_guard() -> SettingsGuard:
    """The guard of a training process, opened when the run first changes a setting.

    Opening it recovers the settings an earlier run that was killed left changed (its journal), and its
    signal handlers restore this run's settings on SIGTERM and SIGINT too.
    """
    guard = SettingsGuard()
    guard.install_signal_handlers()
    return guard


def _boundary(refused: tuple[type[Exception], ...]) -> Callable[[Hook[P, R]], Hook[P, R]]:
    """A hook that never breaks training, except by the errors `refused`.

    An error of a part turns measurement off with one warning (raised instead when `strict`); the errors
    `refused` are raised as they are.

    Args:
        refused: The exception types the hook raises (a user's mistake, at the start).

    Returns:
        The decorator of a `Run` method.
    """

    def decorate(method: Hook[P, R]) -> Hook[P, R]:
        @functools.wraps(method)
        def guarded(self: Run, *args: P.args, **kwargs: P.kwargs) -> R | None:
            try:
                return method(self, *args, **kwargs)
            except refused:
                raise
            except Exception as err:
                self._stop_measuring(err)
                return None

        return guarded

    return decorate


#: During training nothing is refused: every error degrades.
_never_breaks_training = _boundary(())
#: At the start, before training, a user's mistake (a setting, an argument) is refused: it is raised.
_refuses_mistakes = _boundary((UsageError,))


class Run:
    """Measurement and power-limit decisions for one training run. See the module docstring."""

    def __init__(
        self,
        cfg: EnergyConfig,
        *,
        framework: str = Framework.CLI,
        collective: Collective | None = None,
        devices: Sequence[Device] | None = None,
        local_rank: int | None = None,
        batch_size: int | None = None,
        sync: Callable[[], None] | None = None,
        limits_memory: LimitsMemory | None = None,
        wall_clock: Callable[[], float] = time.time,
        settings_guard: Callable[[], SettingsGuard] = process_guard,
    ) -> None:
        """Make the run; nothing is measured nor changed before `start`.

        Args:
            cfg: The run's configuration.
            framework: Who drives the run, for the summary ("lightning", "accelerate", "cli").
            collective: The run's processes (None: the default process group, else this process alone).
            devices: The devices to measure (None: discover them as `cfg.devices` says).
            local_rank: This process's GPU among the node's, under distributed training.
            batch_size: The run's batch size, for the summary and the remembered limit's key.
            sync: Waits for the GPU's queued work before counters are read (None: as the configuration says).
            limits_memory: Where tuned limits are remembered and recalled (None: the default).
            wall_clock: Time of day, in seconds since the epoch.
            settings_guard: Opens the guard every setting change goes through (by default `process_guard`),
                called only when the run changes a setting.
        """
        self.cfg = cfg
        self.framework = framework
        self._collective = collective
        self._devices = devices
        self._local_rank = local_rank
        self._sync = sync
        self._wall = wall_clock
        self._open_guard = settings_guard
        #: The run's batch size, for the summary and the remembered limit's key.
        self.batch_size = batch_size
        self.measurement: RunMeasurement | None = None
        self.power = PowerLimitControl(cfg.power_limit, memory=limits_memory, wall_clock=wall_clock)
        #: The store the run's row goes to (`wattwise.run.history`): the limits memory's (None: the default).
        self._store: str | None = getattr(limits_memory, "url", None)
        #: The PLAN.json a pipeline stage of this run follows, for the summary.
        self.frequency_plan: str | None = None
        self.started = False
        self.finished = False
        #: The run's summary once it finished (every process), else None.
        self.final_summary: RunSummary | None = None
        self._warned = False
        self._start_wall = 0.0
        self._resumed: dict[str, Any] | None = None
        #: Step figures are combined and returned by `step_end` every this many optimizer steps.
        self.log_every_n_steps = cfg.log_every_n_steps or DEFAULT_LOG_EVERY_N_STEPS
        #: Notices given (each once), also listed in the summary's notes.
        self._noticed: list[str] = []
        #: The ranks whose lost measurement the processes were told of (its note is in the summary).
        self._told_lost: set[int] = set()
        #: The recurring job this run belongs to, when it runs as one (`steer_recurring`; names it to the agent).
        self.recurring_job: str | None = None
        #: Each profiled limit's window: its energy's uncertainty relative to its energy (for the saving's).
        self._profile_uncertainty: dict[float, float] = {}

    # -- what adapters and users read ------------------------------------------------------------------
    @property
    def collective(self) -> Collective:
        """The run's processes: the one given, else the default process group (this process alone if none)."""
        if self._collective is None:
            self._collective = default_collective()
        return self._collective

    @property
    def is_main(self) -> bool:
        """Whether this is the main process (rank 0), which warns, prints and writes the record."""
        return self.collective.rank == 0

    @property
    def measuring(self) -> bool:
        """Whether the run measures now (started, and measurement neither off nor failed)."""
        return self.measurement is not None and self.measurement.active

    @property
    def gpus(self) -> list[Device]:
        """This process's GPUs (none before `start`)."""
        return self.measurement.gpus if self.measurement is not None else []

    @property
    def last_step(self) -> Figures | None:
        """The last logging interval's per-step figures over all processes; None before the first."""
        return self.measurement.last_step if self.measurement is not None else None

    @property
    def step_count(self) -> int:
        """Optimizer steps counted so far (resumed segments included)."""
        return self.measurement.step_count if self.measurement is not None else 0

    @property
    def summary(self) -> dict[str, Any] | None:
        """`summary.json`'s object once the run finished (every process), else None."""
        return self.final_summary.to_dict() if self.final_summary is not None else None

    @property
    def run_id(self) -> str:
        """This run, as a reused limit names the run that chose it: its output folder, host and start."""
        return f"{self.cfg.output_dir} on {socket.gethostname()} at {iso_utc(self._start_wall)}"

    @property
    def job_name(self) -> str:
        """The run as the node agent names the holder of its GPUs.

        The job, else the recurring job, else the script's name.
        """
        script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c", "-") else ""
        return self.cfg.job or self.recurring_job or script or "python"

    @property
    def elapsed_s(self) -> float:
        """Wall-clock seconds since the run started (0 before), measured or not."""
        return max(0.0, self._wall() - self._start_wall) if self.started else 0.0

    @property
    def applied_limit_w(self) -> float | None:
        """The power limit wattwise applied and holds now; None when it holds none."""
        return self.power.applied_limit_w

    @property
    def power_limit_w(self) -> float | None:
        """The GPUs' power limit as the loggers report it (`power/limit_w`).

        The one wattwise applied, else (measuring only) the one they had when the run started; None when
        this process's GPUs differ.
        """
        return self.power.limit_in_force_w

    # -- degrading -------------------------------------------------------------------------------------
    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            plugin_warning(f"wattwise: {message}", stacklevel=4)

    def _notice(self, message: str) -> None:
        """A feature that cannot do its job says so once (main process), beside the one degrade warning."""
        if message in self._noticed:
            return
        self._noticed.append(message)
        if self.is_main:
            plugin_warning(f"wattwise: {message}", stacklevel=4)

    def _take_notices(self) -> None:
        for message in self.power.take_notices():
            self._notice(message)

    def _degrade(self, err: BaseException, what: str) -> None:
        """A setting could not be changed: restore and go on measuring. Raised instead in strict mode."""
        if self.cfg.strict:
            raise err
        if self.collective.world_size > 1 and self.power.mode != RunMode.MEASURE:
            # Not alone: degrading here alone would change this process's collectives (see `_agree`).
            self.power.suspend(f"{what} failed ({err})")
            return
        message = f"{what} failed ({err}); continuing with measurement only"
        self._warn(f"{message} (set strict=True to make this an error)")
        if message not in self._noticed:  # the summary says why no setting was changed
            self._noticed.append(message)
        self.power.degrade(f"{what} failed ({err})")

    def _agree(self, *, at_start: bool = False) -> None:
        """A decision point of a run of several processes: a change that failed in one degrades them all.

        A process that stopped changing settings alone would stop tuning alone, and the processes would no
        longer issue the same collectives (a mismatch, or a hang). So a failed change only suspends the
        process's changes (`PowerLimitControl.suspend`), and here, where the processes already exchange
        figures and tuning decides (the start, a profile window's end, the end), one all-reduce asks
        whether any process failed; if one did, every process degrades to measurement only, together, with
        one warning (main process) and a note in the summary naming each rank and what failed there. Called
        by every process at the same points; nothing to do (no collective) once they only measure. Between
        window ends a suspended process issues the same collectives as the others (its tuner counts, and
        logging steps do not depend on the power part), so logging steps do not ask: after tuning, the
        run's collectives are what they were without this.

        Args:
            at_start: After `PowerLimitControl.setup`: a process that found no GPU to change (and so only
                measures) counts as one that failed.
        """
        coll, power = self.collective, self.power
        if coll.world_size == 1 or (power.mode == RunMode.MEASURE and not at_start):
            return
        failed = power.suspended
        if failed is None and self.measurement is not None:  # tuning needs every process's figures
            failed = self.measurement.lost
        if failed is None and at_start and power.mode == RunMode.MEASURE and not power.gpus:
            failed = "no GPU whose power limit it could change was found"
        if at_start:  # the same collective tells every process the slowest energy counter, to tune by
            agreement = agree_tuning(coll, failed, counter_period_s=power.counter_period_s())
        else:
            agreement = agree(coll, failed)
        if not agreement.failed:
            if at_start:
                power.agree_counter_period(agreement.counter_period_s)
            return
        # A rank whose lost measurement every process was told of has its note already (saying this too).
        untold = agreement.note(leaving_out=sorted(self._told_lost))
        if untold:
            message = untold + DEGRADED
            if message not in self._noticed:  # the summary says which rank failed, and why
                self._noticed.append(message)
            if self.is_main:
                self._warn(f"{message} (set strict=True to make this an error)")
        power.degrade(agreement.note() + DEGRADED)

    def _measurement_lost(self, ranks: list[int], message: str) -> str:
        """Every process learnt that some of them (`ranks`) lost their measurement; `message` names each and why.

        The main process warns, once. While tuning, the note says too that every process will only measure
        (`_agree` degrades them at the next decision point, without a second note).

        Returns:
            The note for the summary.
        """
        self._told_lost.update(ranks)
        if self.power.mode != RunMode.MEASURE:
            message += DEGRADED
        if self.is_main:
            self._warn(f"{message} (set strict=True to make this an error)")
        return message

    def _stop_measuring(self, err: BaseException) -> None:
        if self.cfg.strict:
            raise err
        self._warn(f"energy measurement failed ({err}); training goes on without it")
        if self.measurement is not None:
            self.measurement.stop()
        self.power.restore()

    # -- life cycle ------------------------------------------------------------------------------------
    def steer_recurring(self, job: str, *, power_limit_w: float | None, batch_size: int, eta: float) -> None:
        """Before a recurring job's run starts: the job, its batch size, and its remembered limit or tuning."""
        self.power.steer(power_limit_w=power_limit_w, eta=eta)
        self.batch_size = batch_size
        self.recurring_job = job

    def tuned_limit_w(self, *, settle: bool = True) -> float | None:
        """The limit tuning chose (or reused) in this run; None when it did not tune or chose none.

        Args:
            settle: Tuning that is still profiling settles first on the best limit measured (the run ends).
        """
        if settle:
            self.power.finish_tuning(self.step_count)
        return self.power.tuned_limit_w

    def _memory_key(self, job: str | None = None) -> str | None:
        """Where the job's tuned limit is remembered (`job`: another job's name than the configuration's)."""
        job = job or self.cfg.job
        if not job or not self.gpus:
            return None
        return memory_key(job, self.gpus[0].name, len(self.gpus) * self.collective.world_size, self.batch_size)

    def _progress_key(self) -> str | None:
        """Where an unfinished tuning is kept for the next run: the job's key, a recurring job's included."""
        return self._memory_key(self.cfg.job or self.recurring_job)

    @_refuses_mistakes
    def start(self) -> None:
        """Find devices, open the fit window and apply the starting power limit (cap or reuse)."""
        if self.started:
            return
        self.started = True
        self.measurement = RunMeasurement(
            self.cfg,
            self.collective,
            devices=self._devices,
            local_rank=self._local_rank,
            sync=self._sync,
            on_lost=self._measurement_lost,
            window_log=WindowsLog,
        )
        if self._resumed is not None:
            self.measurement.load_state_dict(self._resumed)
        self._start_wall = self._wall()
        if not self.measurement.open():
            if os.environ.get(UNDER_WATTWISE_RUN) != "1":  # else `wattwise run` says it, once, at its end
                self._notice(
                    "nothing to measure on this machine (no GPU, and the CPU package's energy counter "
                    f"is not readable): training goes on unmeasured; {simulated_hint(self.framework)} tries "
                    "wattwise on the simulated GPU"
                )
            return
        changes = self.power.mode != RunMode.MEASURE
        try:
            self.power.setup(
                self.gpus,
                self.collective,
                memory_key=self._memory_key(),
                label=self.measurement.device_label,
                guard=self._open_guard,
                carbon=self._carbon_part,
                job=self.job_name,
            )
        except (Unavailable, UsageError) as err:
            self._degrade(err, "setting up the power limit")
        guard = self.power.guard
        if guard is not None:  # a process of several makes no collective in a signal handler
            guard.at_default_exit(
                functools.partial(self.finish, RunStatus.INTERRUPTED)
                if self.collective.world_size == 1
                else self._last_words
            )
        if changes:  # every process asks, tunes only when all can, then shares the remembered limit
            self._agree(at_start=True)
            try:
                self.power.reuse_remembered(self.collective, self._memory_key(), self._progress_key())
            except (Unavailable, UsageError) as err:
                self._degrade(err, "recalling the remembered power limit")
        self._take_notices()

    def _carbon_part(self) -> CarbonControl | None:
        """The carbon part the power part consults after tuning, when the run is carbon-aware."""
        return CarbonControl(self.cfg.carbon, wall_clock=self._wall) if self.cfg.carbon.aware else None

    def expect_steps(self, total: int | None) -> None:
        """The optimizer steps this run will make, when the framework knows (None: unknown).

        Tuning that cannot finish in them says so as soon as that is certain, and settles on the best limit
        it could measure.
        """
        self.power.expect_steps(total)

    @_never_breaks_training
    def step_begin(self, epoch: int | None = None) -> None:
        """An optimizer step starts: training resumes after a pause; the tuner may change the limit.

        Args:
            epoch: The framework's epoch index, for an epoch whose start was not seen (a resume).
        """
        if not self.measuring:
            return
        m = self.measurement
        assert m is not None
        own = self.power.own_time_mark()
        if m.paused_kind is not None:
            m.resume()
        if not m.is_open(Window.EPOCH):  # e.g. a resume in the middle of an epoch: no epoch start was seen
            m.epoch_begin(epoch)
        try:
            begin_profile = self.power.step_begin(self.collective, m.step_count)
        except (Unavailable, UsageError) as err:
            self._degrade(err, f"setting the power limit to {self.power.target_w:g} W")
            begin_profile = False
        self._take_notices()
        if begin_profile:
            self.power.window_opened(m.begin(Window.PROFILE))
        else:
            self.power.own_time_from(own)
        m.step_started()
        self.power.hook_ended(own)

    @_never_breaks_training
    def step_end(self, steps: int = 1) -> Figures | None:
        """`steps` optimizer steps ended.

        Returns:
            At a logging point the interval's figures over all processes (per-step averages); otherwise
            None, having only counted (see the module docstring).
        """
        if not self.measuring or steps <= 0:
            return None
        m = self.measurement
        assert m is not None
        m.count_steps(steps)  # a step driving the simulated GPU is stretched here: training's time, not wattwise's
        own = self.power.own_time_mark()
        try:
            return self._step_end_measured(m, steps, own)
        finally:
            self.power.hook_ended(own)

    def _step_end_measured(self, m: RunMeasurement, steps: int, own: float | None) -> Figures | None:
        """`step_end` once the steps are counted: the tuner's step, the logging point, the profile window's end."""
        self.power.note_step(own, steps)
        profile_done = self.power.step_end(steps)
        log_due = m.log_due(self.log_every_n_steps)
        if not profile_done:
            rec = m.close_interval()[0] if log_due else None
            self.power.own_time_from(own)  # within an open window: wattwise's own time, not training's
            return rec
        self.power.own_time_from(own)  # up to the window's end
        rec = None
        if log_due:
            rec, ended = m.close_interval(also=(Window.PROFILE,) if profile_done else ())
        else:
            ended = m.end(Window.PROFILE)
        if profile_done:  # a decision point: a change that failed in one process degrades all of them here
            self._agree()
        if profile_done and self.power.tuner is not None:
            profiled = len(self.power.tuner.profile)
            try:
                self.power.end_profile_window(
                    ended[0].time_s,
                    ended[0].energy_j,
                    memory_key=self._memory_key(),
                    is_main=self.is_main,
                    run_id=self.run_id,
                )
            except (Unavailable, UsageError) as err:  # e.g. a window that measured no energy
                self._degrade(err, "choosing the power limit")
            tuner = self.power.tuner
            if tuner is not None and len(tuner.profile) > profiled and ended[0].energy_j > 0:
                relative = ended[0].energy_uncertainty_j / ended[0].energy_j
                self._profile_uncertainty[tuner.profile[-1].power_limit_w] = relative
        return rec

    @_never_breaks_training
    def pause(self, kind: str = "validation") -> None:
        """What follows is not training: step and profile figures stop counting until it ends.

        It ends at `resume` or at the next `step_begin`. Local to the process: no collective.

        Args:
            kind: What it is ("validation", "checkpoint", ...), as the summary's `non_training` reports it.
        """
        if self.measuring and self.measurement is not None:
            self.measurement.pause(kind)

    @_never_breaks_training
    def resume(self) -> None:
        """Training goes on after a pause."""
        if self.measuring and self.measurement is not None:
            self.measurement.resume()

    @property
    def paused(self) -> bool:
        """Whether the run is in a pause (`pause` without its `resume` yet)."""
        return self.measurement is not None and self.measurement.paused_kind is not None

    @_never_breaks_training
    def epoch_begin(self, number: int | None = None) -> None:
        """An epoch starts (`number`: the framework's own epoch index, if it has one)."""
        if self.measuring:
            assert self.measurement is not None
            self.measurement.epoch_begin(number)

    @_never_breaks_training
    def epoch_end(self, *, defer: bool = False) -> Figures | None:
        """Close the epoch; returns its time and energy over all processes (None when off).

        `defer`: return None at once; the figures come at the next exchange of figures, from
        `take_ended_epochs` (`RunMeasurement.epoch_end`). Every process passes the same.
        """
        if not self.measuring:
            return None
        assert self.measurement is not None
        return self.measurement.epoch_end(defer=defer)

    def take_ended_epochs(self) -> list[EndedEpoch]:
        """The epochs ended with `epoch_end(defer=True)` whose figures were combined since the last call."""
        return self.measurement.take_ended_epochs() if self.measurement is not None else []

    def abort(self, exc: BaseException | None = None) -> None:
        """Training raised: restore every setting now (the summary is still written by `finish`)."""
        self.power.restore()
        if self.measurement is not None:
            self.measurement.cancel(Window.PROFILE)

    def totals(self) -> Figures | None:
        """Energy and time of the run so far (resumed segments included), combined over processes.

        A collective under distributed training: every process must call it at the same point.
        """
        return self.measurement.totals() if self.measuring and self.measurement is not None else None

    @_never_breaks_training
    def finish(self, status: RunStatus = RunStatus.COMPLETED) -> RunSummary | None:
        """End the run: restore settings, combine figures over processes, write the record (main process).

        Returns the summary on every process (None when measurement was off).
        """
        return self._wind_down(status, apart=False)

    def _last_words(self) -> None:
        """SIGTERM ends this process of several by its default action: `finish_alone`, from the guard's handler.

        The script has no handler of its own; the guard restored the settings, and ends the process after.
        """
        self.finish_alone(RunStatus.INTERRUPTED, at_signal=True)

    def finish_alone(
        self, status: RunStatus = RunStatus.INTERRUPTED, exc: BaseException | None = None, *, at_signal: bool = False
    ) -> RunSummary | None:
        """End a run of several processes without a collective: the others may be gone, or in the middle of one.

        For a run that ends apart: a signal (SIGTERM, a preemption), or an exception in some processes. Each
        process restores its settings and leaves its figures in the output folder
        (`interrupted-rank<N>.json`); the main one waits up to `agreement.SIGNALLED_WAIT_S` for the others',
        writes summary.json with a note naming how each rank ended and the ranks that left nothing, and removes
        the files. A single process finishes as `finish` does.

        Args:
            status: The summary's status (`interrupted` whenever a signal reached this process).
            exc: What ended the run in this process, if it raised.
            at_signal: Called from the guard's signal handler: a second SIGTERM (a launcher that saw another
                process end sends one) is ignored until the guard ends the process.

        Returns:
            The run's summary on the main process; None elsewhere, or when nothing was measured.
        """
        apart = self.collective.world_size > 1
        return self._wind_down(status, apart=apart, exc=exc, at_signal=at_signal and apart)

    def _wind_down(
        self, status: RunStatus, *, apart: bool, exc: BaseException | None = None, at_signal: bool = False
    ) -> RunSummary | None:
        """The one way a run ends: restore, close the measurement, gather every process's figures, write the record.

        `apart`: the processes end without meeting (`finish_alone`): each leaves its figures in a file and the
        main one collects them; otherwise they are exchanged in one collective (`finish`).
        """
        if self.finished or not self.started:
            return None
        self.finished = True
        if self.power.interrupted:  # SIGTERM/SIGINT: the framework or the script wound down after it
            status = RunStatus.INTERRUPTED
        if self.measuring and not apart:  # where the figures are gathered below: no new collective otherwise
            self._agree()  # a change that failed in one process since the last decision point
        self.power.finish_tuning(self.step_count)
        self._take_notices()
        self.power.close()  # restores, and puts back the signal handlers the guard found
        if at_signal:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        m = self.measurement
        if not self.measuring or m is None:  # nothing to gather; the settings are restored all the same
            if m is not None:
                m.close(exchange=False)
            return None
        fit = m.close(exchange=not apart)
        if fit is None:  # start() itself failed
            return None
        if apart:
            gathered = self._gather_apart(fit, self._ending(exc))
            if gathered is None:  # not the main process: its figures are left for the main one
                return None
            per_rank, rank_notes = gathered
            figures = m.figures(per_rank)
        else:
            # One exchange at the end: each process's figures, settings timeline and the limits someone lifted
            # on its GPUs (only that process can tell).
            per_rank, rank_notes = self.collective.all_gather(self._rank_end(fit)), []
            figures = m.end_figures(per_rank)
        summary = self._summarize(figures, status, self._timeline_and_lifted(per_rank), rank_notes)
        if self.is_main:
            write_run_dir(self.cfg.output_dir, summary, power_rows(figures.samples))
            keep_run(self.cfg.output_dir, summary, store=self._store)
        self.final_summary = summary
        return summary

    def _ending(self, exc: BaseException | None) -> Ended:
        """How this process ended, apart from the others: a signal, an exception, or of itself."""
        guard = self.power.guard
        if guard is not None and guard.signalled:
            return Ended(how=EndedHow.SIGNALLED, detail=signal.Signals(guard.signalled).name)
        if exc is not None:
            return Ended(how=EndedHow.RAISED, detail=type(exc).__name__)
        return Ended(how=EndedHow.ENDED, detail=None)

    def _gather_apart(self, fit: Measurement, ended: Ended) -> tuple[list[RankEnd], list[RankNote]] | None:
        """Every process's figures when they end apart, and what the summary says of each; None off the main one.

        A process other than the main one leaves its figures in the output folder (and says so, should they
        come after the summary); the main one collects those left within `agreement.SIGNALLED_WAIT_S`.
        """
        out, mine = Path(self.cfg.output_dir), self._rank_end(fit, ended=ended)
        if not self.is_main:
            leave_rank_end(out, mine)
            self._tell_if_late(out, mine)
            return None
        size = self.collective.world_size
        left = collect_rank_ends(out, size)
        per_rank: dict[int, RankEnd] = {0: mine, **left.found}
        ended_as = {r: per_rank[r]["ended"] or Ended(how=EndedHow.ENDED, detail=None) for r in sorted(per_rank)}
        notes = [
            RankNote(RankNoteKind.ENDED_APART, r, how=EndedHow(e["how"]), detail=e["detail"])
            for r, e in ended_as.items()
        ]
        notes.extend(RankNote(RankNoteKind.UNREADABLE, r, detail=why) for r, why in sorted(left.refused.items()))
        notes.extend(
            RankNote(RankNoteKind.NO_FIGURES, r, waited_s=left.waited_s)
            for r in range(size)
            if r not in per_rank and r not in left.refused
        )
        return [per_rank[r] for r in sorted(per_rank)], notes

    def _tell_if_late(self, out: Path, mine: RankEnd) -> None:
        """After leaving this process's figures: when the main process wrote the summary without them, say so.

        A process waiting in a collective for the main one (as when a signal reaches every process of the
        job at once) runs its handlers only once that collective fails, which is when the main process has
        ended: its figures come after the summary. They stay beside it, with a note of this process's own that
        says whose and where (the summary's reader merges it).
        """
        rank, name = mine["rank"], FIGURES_LEFT.format(rank=mine["rank"])
        deadline = time.monotonic() + LATE_WAIT_S
        while time.monotonic() < deadline:
            if not (out / name).exists():
                return  # the main process read them
            if summary_written_without(out, rank, since_s=self._start_wall):
                try:
                    leave_late_note(out, rank, sum(mine["energy"].values()), figures_file=name)
                except OSError as err:
                    plugin_warning(f"wattwise: rank {rank}'s figures are in {out / name}, not in the summary ({err})")
                return
            time.sleep(0.05)

    def _rank_end(self, fit: Measurement, *, ended: Ended | None = None) -> RankEnd:
        """What this process hands over at the end (`wattwise.run.agreement.RankEnd`).

        Its figures (`rank_figures`), its settings timeline, and the limits someone else lifted on its GPUs;
        exchanged by `finish`, or left in a file by `finish_alone` (with how it `ended`).
        """
        assert self.measurement is not None
        share = self.measurement.rank_figures(fit)
        return RankEnd(
            energy=share["energy"],
            cpu=share["cpu"],
            time_s=share["time_s"],
            uncertainty=share["uncertainty"],
            cpu_uncertainty=share["cpu_uncertainty"],
            devices=share["devices"],
            paused=share["paused"],
            samples=share["samples"],
            lost=share["lost"],
            rank=self.collective.rank,
            timeline=[[e.timestamp_s, e.device, e.setting, e.value] for e in self.power.timeline],
            lifted=list(self.power.lifted_notes),
            ended=ended,
        )

    def _timeline_and_lifted(self, per_rank: Sequence[RankEnd]) -> list[SettingEvent]:
        """Every process's settings timeline, from their `_rank_end`.

        The limits lifted on other processes' GPUs become notices of this one (its own are among its notices
        already).
        """
        for r in per_rank:
            if r["rank"] != self.collective.rank:
                for message in r["lifted"]:
                    self._notice(f"rank {r['rank']}: {message}")
        return [SettingEvent(*e) for r in per_rank for e in r["timeline"]]

    def _summarize(
        self,
        figures: RunFigures,
        status: RunStatus,
        timeline: Sequence[SettingEvent],
        rank_notes: Sequence[RankNote] = (),
    ) -> RunSummary:
        m = self.measurement
        assert m is not None
        limit = with_saving_uncertainty(
            self.power.summary(figures.energy_j), self._profile_uncertainty, figures.energy_uncertainty_j
        )
        unapplied = (
            (f"power limit {limit.chosen_power_limit_w:g} W was chosen but never applied: {never_applied_why(status)}",)
            if limit is not None and never_applied(limit)
            else ()
        )
        return RunSummary(
            status=status,
            simulated=figures.simulated,
            backend=figures.backend,
            framework=self.framework,
            job=self.cfg.job,
            project=project_of(self.cfg.project),
            hostname=socket.gethostname(),
            world_size=self.collective.world_size,
            start_time=iso_utc(self._start_wall),
            end_time=iso_utc(self._wall()),
            time_s=figures.time_s,
            energy_j=figures.energy_j,
            energy_per_device_j=figures.energy_per_device_j,
            cpu_energy_j=figures.cpu_energy_j,
            steps=figures.steps,
            epochs=tuple(EpochEnergy(e.epoch, e.time_s, e.energy_j, e.energy_uncertainty_j) for e in figures.epochs),
            resumed_energy_j=figures.resumed_energy_j,
            devices=figures.devices,
            notes=(*m.notes, *self._noticed, *rank_notes_text(rank_notes), *self._idle_simulation_note(), *unapplied),
            rank_notes=tuple(rank_notes),
            power_limit=limit,
            settings=RunSettings(
                power_limit_w=self.power.applied_limit_w, batch_size=self.batch_size, frequency_plan=self.frequency_plan
            ),
            settings_timeline=tuple(timeline),
            carbon_aware=self.power.carbon_summary(),
            non_training={
                kind: NonTrainingTime(p.time_s, p.energy_j, p.count, p.energy_uncertainty_j)
                for kind, p in figures.non_training.items()
            },
            energy_uncertainty_j=figures.energy_uncertainty_j,
            simulated_driven_by=m.driven_by,
        )

    def _idle_simulation_note(self) -> tuple[str, ...]:
        if self.power.gave_up_undriven:  # its note says it already
            return ()
        if any(g.simulated and not g.driven for g in self.gpus):
            return (
                "no emulated work drove the simulated GPU: its figures are its idle power only, and no "
                "saving is reported (devices.simulated_drive=steps drives it from your training steps; "
                "wattwise.tools.workload.emulate_step drives it too, as the demo does)",
            )
        return ()

    # -- checkpoints -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Resumable state. Called on every process at the same point (it combines figures over them)."""
        measured: MeasurementState = (
            self.measurement.state_dict()
            if self.measurement is not None
            else {"energy_j": 0.0, "time_s": 0.0, "steps": 0, "epochs": []}
        )
        if (
            self.final_summary is not None
        ):  # saved after the run ended (`trainer.save_checkpoint` after fit): its totals
            measured.update({"energy_j": self.final_summary.energy_j, "time_s": self.final_summary.time_s})
        return {"version": 1, **measured, **self.power.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: keep the cumulative energy, and the chosen limit without profiling again."""
        self._resumed = state
        if self.measurement is not None:
            self.measurement.load_state_dict(state)
        self.power.load_state_dict(state)
