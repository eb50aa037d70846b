"""The measurement part of a run: its devices, its energy monitor and the run's windows.

The hot path is free: a training step that neither logs nor closes a profiling window reads no counter,
makes no CUDA synchronize and no collective; it only counts. Figures are measured in windows that span
many steps and are combined over processes (energy summed, time maxed, one tensor all-reduce for all the
windows that end at one point) only where something is logged or decided:

- `fit`: the whole run; `epoch`: each epoch (an epoch ended with `epoch_end(defer=True)` is read by a reader
  thread where the counters allow, and combined at the next exchange of figures);
- `steps`: the steps since the last logging point (one row per logging interval in windows.csv);
- `power_limit_profile`: the power-limit tuner's profiling window;
- `validation`, `checkpoint`, ...: time that is not training (a pause). While paused, the `steps` and
  profile windows count nothing; the fit and the epoch keep counting, and the paused time and energy are
  reported apart in the summary (`non_training`).

Processes of one run issue the same collectives whatever their devices do. A process of several that has
nothing to measure at the start, or whose device fails while a window opens or closes, does not stop
measuring alone (it would stop exchanging figures while the others wait for it): it goes on with no device
(`lost` says why), its windows measure time only, and it tells the others at the next exchange of figures,
where every process learns which rank lost what (one note, `notes`; `on_lost` warns). The figures are then
the other processes'. A single process whose device fails raises, and the run stops measuring.

Every figure carries how precisely it was measured (`energy_uncertainty_j`: the energy counters' resolution
at the window's ends, `wattwise.monitor`), combined over processes in quadrature in the same all-reduce as
the figures. With `devices.simulated_drive: steps` the training steps drive the simulated GPUs
(`wattwise.run.drive`).

This part keeps what a resumed run needs (energy, time, steps, epochs, the epoch in progress, the paused
figures of the earlier segments) in its `state_dict`.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict, TypeVar

from wattwise.config import EnergyConfig
from wattwise.devices import Device, DeviceSpec, discover
from wattwise.distributed import Collective
from wattwise.errors import UsageError, plugin_warning
from wattwise.monitor import EnergyMonitor, Measurement, Reading, WindowSink, cuda_sync, quadrature
from wattwise.run.agreement import (
    FIGURES_LEFT,
    Agreement,
    RankedDevice,
    RankEnd,
    RankFigures,
    agree_opening,
    combine_telling,
)
from wattwise.run.drive import DrivenBy, StepDrive

log = logging.getLogger(__name__)
T = TypeVar("T")


class Window(StrEnum):
    """The windows a run opens (their names in windows.csv)."""

    #: The whole run.
    FIT = "fit"
    #: Each epoch.
    EPOCH = "epoch"
    #: The steps since the last logging point.
    STEPS = "steps"
    #: The power-limit tuner's profiling window.
    PROFILE = "power_limit_profile"
    #: Time that is not training (validation, a checkpoint).
    PAUSE = "paused"


#: Windows that count training only: paused while the run does something else.
TRAINING_WINDOWS = (Window.STEPS, Window.PROFILE)
#: Every window a run opens.
WINDOWS = (Window.FIT, Window.EPOCH, Window.STEPS, Window.PROFILE, Window.PAUSE)


def pause_window(kind: str) -> str:
    """The window of a pause of `kind`: `paused:validation`, logged as `paused` with its kind (`WindowsLog`)."""
    return f"{Window.PAUSE}:{kind}"


#: What becomes of a process's figures once it lost its measurement (after the rank and why).
LOST = "; its energy is left out of the run's figures, and the other processes go on measuring"
#: Why a process has nothing to measure (no device found).
NOTHING_TO_MEASURE = "nothing to measure (no GPU, and the CPU package's energy counter is not readable)"


@dataclass(frozen=True)
class EpochFigures:
    """Time and energy of one epoch, combined over processes."""

    epoch: int
    time_s: float
    energy_j: float
    #: How precisely `energy_j` is known (J; `wattwise.monitor`).
    energy_uncertainty_j: float = 0.0


@dataclass
class _Ending:
    """An epoch that ended and waits for the next exchange of figures: its end's reading, then its measurement."""

    epoch: int
    steps: int
    #: The monitor that measured it (a process that lost its measurement since reads another).
    monitor: EnergyMonitor
    #: The counter reading at its end, made by the reader thread (None: read on the training thread).
    reading: Future[Reading] | None
    measured: Measurement | None = None


class RankShare(RankFigures):
    """This process's figures as `RunMeasurement.rank_figures` gives them: with how precisely each is known."""

    #: J, by device label.
    uncertainty: dict[str, float]
    #: J; None without a CPU package.
    cpu_uncertainty: float | None


class EpochState(TypedDict, total=False):
    """An epoch's figures in a checkpoint: an ended one (`EpochFigures`), or the one in progress, with its steps.

    A checkpoint of an older release may lack some.
    """

    epoch: int
    time_s: float
    energy_j: float
    steps: int
    energy_uncertainty_j: float


class _MeasurementStateRequired(TypedDict):
    energy_j: float
    time_s: float
    steps: int
    epochs: list[EpochState]


class MeasurementState(_MeasurementStateRequired, total=False):
    """The measurement's part of a checkpoint (`RunMeasurement.state_dict`): the figures so far.

    Without a measurement, only the required keys are written.
    """

    epoch_in_progress: EpochState | None
    #: This process's paused figures by kind (`time_s`, `energy_j`, `count`, `energy_uncertainty_j`).
    non_training: dict[str, dict[str, float]]
    energy_uncertainty_j: float


@dataclass(frozen=True)
class PausedFigures:
    """Time that was not training, of one kind (validation, checkpoint, ...): time maxed, energy summed."""

    time_s: float
    energy_j: float
    count: int
    energy_uncertainty_j: float = 0.0


@dataclass
class Figures:
    """Time and energy combined over processes: per step (a logging interval's average), an epoch or a run.

    `steps` is the number of optimizer steps the figures cover (0 when unknown). `energy_uncertainty_j` says
    how precisely `energy_j` is known (the processes' uncertainties added in quadrature; per step, for a
    logging interval's average, the interval's divided by its steps).
    """

    time_s: float
    energy_j: float
    steps: int = 1
    energy_uncertainty_j: float = 0.0

    @property
    def avg_power_w(self) -> float:
        """Average power over the figures (energy / time; 0 for no time)."""
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0


@dataclass(frozen=True)
class EndedEpoch:
    """An epoch whose figures were combined over processes after it ended (`RunMeasurement.epoch_end(defer=True)`)."""

    epoch: int
    figures: Figures


@dataclass(frozen=True)
class RunFigures:
    """What the measurement part hands the run's record at the end: the whole run, combined over processes.

    Energy is summed and time maxed over processes; the segments before a resume are included.
    """

    time_s: float
    #: The GPUs' energy; with no GPU, what the CPU package used.
    energy_j: float
    #: Joules by device label (`rank0/gpu0`).
    energy_per_device_j: dict[str, float]
    #: How precisely `energy_j` is known (J): every device's, earlier segments' included, in quadrature.
    energy_uncertainty_j: float
    cpu_energy_j: float | None
    steps: int
    epochs: tuple[EpochFigures, ...]
    #: Energy of the segments before a resume from a checkpoint (included in `energy_j`).
    resumed_energy_j: float
    #: Each GPU as `Device.describe()` reports it, plus its `rank`.
    devices: tuple[Mapping[str, Any], ...]
    #: Time that was not training, by kind: time maxed and energy summed over processes.
    non_training: dict[str, PausedFigures]
    #: Power samples `(unix time, {device label: watts})` of every process.
    samples: list[tuple[float, dict[str, float]]]
    #: Whether any part of the figures comes from a simulated GPU (of any process): then they all are simulated.
    simulated: bool = False
    #: The backend of this process's first GPU, else of any process's first (None: no GPU anywhere).
    backend: str | None = None


class _Unmeasured(Device):
    """What the monitor of a process that lost its measurement reads: no energy. Its windows time only."""

    backend = "none"

    @property
    def index(self) -> int:
        return 0

    @property
    def name(self) -> str:
        return "nothing measured"

    @property
    def key(self) -> str:
        return "unmeasured"

    def has_energy_counter(self) -> bool:
        return True

    def energy_j(self) -> float:
        return 0.0

    def power_w(self) -> float:
        return 0.0

    def spec(self) -> DeviceSpec:
        return {"backend": self.backend, "index": self.index}


class RunMeasurement:
    """Devices, monitor and windows of one run.

    A single process raises on device errors (the run decides what to do); a process of several goes on
    without its devices instead (see the module docstring).
    """

    def __init__(
        self,
        cfg: EnergyConfig,
        collective: Collective,
        *,
        devices: Sequence[Device] | None = None,
        local_rank: int | None = None,
        sync: Callable[[], None] | None = None,
        on_lost: Callable[[list[int], str], str] | None = None,
        window_log: Callable[[Path, Sequence[str]], WindowSink] | None = None,
    ) -> None:
        """See the class docstring.

        Args:
            cfg: The run's configuration (devices, monitor, output folder).
            collective: The run's processes.
            devices: The devices to measure (None: discover them as `cfg.devices` says).
            local_rank: This process's GPU among the node's, when several processes share a node.
            sync: Waits for the GPU's queued work before a window's counters are read (None: as
                `cfg.monitor.sync_cuda` says).
            on_lost: Told, on every process, when the processes learn that some lost their measurement:
                `on_lost(ranks, message)` (the ranks, and the note naming each and why) returns the note to
                keep, so that the run can warn once and add what else follows.
            window_log: Opens the log of ended windows (`windows.csv`) at a path for the devices' keys; the
                run gives the record's (`wattwise.record.files.WindowsLog`). None: no log.
        """
        self.cfg = cfg
        self.collective = collective
        self._on_lost = on_lost
        self._window_log = window_log
        #: Why this process, one of several, measures nothing (its devices gave no figures); None: it measures.
        self.lost: str | None = None
        #: `lost`, until the other processes have been told at an exchange of figures.
        self._untold: str | None = None
        self._given_devices = list(devices) if devices is not None else None
        self._local_rank = local_rank
        self._sync = sync
        self.gpus: list[Device] = []
        self.cpus: list[Device] = []
        self.notes: list[str] = []
        self.monitor: EnergyMonitor | None = None
        #: Drives the simulated GPUs from the training steps (`devices.simulated_drive: steps`); None: off.
        self.drive: StepDrive | None = None
        #: False until the devices are open, and again once measurement failed.
        self.active = False
        self.step_count = 0
        #: Steps at the last logging point, and the steps counted in the open `steps` window.
        self._logged_at = 0
        self._interval_steps = 0
        self.epochs: list[EpochFigures] = []
        self._epoch_number: int | None = None
        #: The step count where the last epoch ended and its window began again for the next (None: not so).
        self._next_epoch_from: int | None = None
        self._epoch_steps_at = 0
        #: Epochs that ended (`epoch_end(defer=True)`) and wait for the next exchange of figures, oldest first.
        self._ending: list[_Ending] = []
        #: Reads the counters where an epoch ends, off the training thread (made when first needed).
        self._reader: ThreadPoolExecutor | None = None
        #: Epochs combined since `take_ended_epochs` was last called, oldest first.
        self._ended: list[EndedEpoch] = []
        self.last_step: Figures | None = None
        #: Energy and time of the segments before a resume.
        self.prior_energy_j = 0.0
        self.prior_energy_uncertainty_j = 0.0
        self.prior_time_s = 0.0
        #: The epoch that was in progress when the resumed checkpoint was saved: its figures so far.
        self._resumed_epoch: EpochState | None = None
        #: What the open pause is, and this process's paused figures by kind:
        #: [time_s, energy_j, count, squared energy uncertainty].
        self.paused_kind: str | None = None
        self.paused: dict[str, list[float]] = {}
        #: Combined paused figures of the segments before a resume.
        self.prior_paused: dict[str, dict[str, float]] = {}
        #: Whether any process's GPU is simulated, as the processes agreed when the measurement opened (None:
        #: not agreed, one process: this process's GPUs say).
        self._figures_simulated: bool | None = None

    @property
    def simulated(self) -> bool:
        """Whether a GPU of this process is simulated (every output must say so)."""
        return any(d.simulated for d in self.gpus)

    @property
    def figures_simulated(self) -> bool:
        """Whether the combined figures come from a simulated GPU of any process (agreed where it opens)."""
        return self._figures_simulated if self._figures_simulated is not None else self.simulated

    @figures_simulated.setter
    def figures_simulated(self, value: bool) -> None:
        self._figures_simulated = value

    @property
    def driven_by(self) -> DrivenBy | None:
        """What drove this process's simulated GPUs (None: no simulated GPU).

        A process with none, of several whose own steps drive another's (a mixed job), says the steps too.
        """
        if not self.simulated:
            return DrivenBy.STEPS if self.drive is not None and self.figures_simulated else None
        if self.drive is not None and self.drive.active:
            return DrivenBy.STEPS
        return DrivenBy.EMULATED if all(g.driven for g in self.gpus if g.simulated) else DrivenBy.NOTHING

    @property
    def devices(self) -> list[Device]:
        """This process's GPUs, then its CPU packages."""
        return [*self.gpus, *self.cpus]

    def device_label(self, dev: Device) -> str:
        """A device's name in the run's figures and timeline: `rank0/gpu0`."""
        return f"rank{self.collective.rank}/{dev.key}"

    # -- life cycle ------------------------------------------------------------------------------------
    def open(self) -> bool:
        """Find the devices, open the monitor and the fit window. False: nothing to measure here.

        A process of several whose devices cannot be opened (a backend named in the configuration that is
        unavailable on its node, say) does not raise alone: the processes agree, and it goes on measuring
        nothing while the others measure (`lost` says why). When no process has anything to measure, each
        raises what it met (or returns False when it found nothing).
        """
        cfg, coll = self.cfg, self.collective
        failed: Exception | None = None
        if self._given_devices is not None:
            self.gpus = self._given_devices
        else:
            try:
                self._discover()
            except UsageError:
                raise
            except Exception as err:
                if coll.world_size == 1 or cfg.strict:
                    raise
                failed = err
        # Why this process has nothing to measure, when it has not.
        nothing = NOTHING_TO_MEASURE if failed is None else f"opening its devices failed ({failed})"
        if coll.world_size > 1:  # the processes decide together
            agreement = agree_opening(coll, None if self.devices else nothing, simulated=self.simulated)
            self.figures_simulated = agreement.simulated
            if agreement.everyone:
                if failed is not None:
                    raise failed
                return False
            self._tell_lost(agreement, "; the figures are the other processes'")
        elif not self.devices:
            return False
        if self.devices:
            out = Path(cfg.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            if coll.rank == 0:  # figures an earlier run's processes left after its main one stopped waiting
                for rank in range(1, coll.world_size):
                    (out / FIGURES_LEFT.format(rank=rank)).unlink(missing_ok=True)
            log_file = out / ("windows.csv" if coll.rank == 0 else f"windows-rank{coll.rank}.csv")
            sync = self._sync if self._sync is not None else (cuda_sync if cfg.monitor.sync_cuda else None)
            sink = self._window_log(log_file, [d.key for d in self.devices]) if self._window_log else None
            self.monitor = EnergyMonitor(
                self.devices,
                sync=sync,
                sink=sink,
                sample_power=cfg.monitor.sample_power,
                sample_interval_s=cfg.monitor.sample_interval_s,
            )
        else:  # one of several with nothing to measure: it keeps in step with the others (module docstring)
            self.lost = nothing
            self.monitor = self._unmeasured_monitor()
        # Processes of several agree on each step's stretch: each makes the drive when any has a simulated GPU.
        if cfg.devices.simulated_drive == "steps" and (self.figures_simulated if coll.world_size > 1 else self.gpus):
            self.drive = StepDrive(self.gpus, coll)
        self.active = True
        self._read(lambda mon: mon.begin_windows([Window.FIT, Window.STEPS]))
        return True

    def _discover(self) -> None:
        """This process's devices, as the configuration says (its own GPU when several share a node)."""
        cfg, coll = self.cfg, self.collective
        indices = cfg.devices.gpus
        if indices is None and coll.world_size > 1:
            local = self._local_rank
            if local is None:
                local = int(os.environ.get("LOCAL_RANK", coll.rank))
            indices = [local]
        sim = cfg.devices.simulated
        found = discover(
            cfg.devices.backend,
            gpu_indices=indices,
            include_cpu=cfg.devices.cpu,
            num_simulated=sim.num_gpus,
            power_model=sim.power_model,
            base_step_time_s=sim.base_step_time_s,
            persist_dir=sim.state_dir,
            simulated_physics=cfg.devices.simulated_physics,
            simulated_gpu=cfg.devices.simulated_gpu,
        )
        self.gpus, self.cpus, self.notes = found.gpus, found.cpus, list(found.notes)
        # Why the GPUs are simulated, or why only the CPU is measured; with nothing at all to measure, the run
        # says so itself (once).
        if (found.simulated or (not found.gpus and found.cpus)) and found.notes and coll.rank == 0:
            plugin_warning(f"wattwise: {found.notes[-1]}")

    def stop(self) -> None:
        """Measurement failed: measure nothing more. `close` still closes the monitor."""
        self.active = False
        if self.drive is not None:
            self.drive.close()

    # -- a process of several that lost its measurement --------------------------------------------------
    @staticmethod
    def _unmeasured_monitor() -> EnergyMonitor:
        return EnergyMonitor([_Unmeasured()])

    def _read(self, call: Callable[[EnergyMonitor], T]) -> T:
        """`call` on the monitor, and what it returns.

        When it fails in a process of several, this process goes on without its devices (`lost`) and `call`
        runs on the monitor that measures nothing, with the same windows open.
        """
        monitor = self.monitor
        assert monitor is not None
        if self.lost is not None or self.collective.world_size == 1 or self.cfg.strict:
            return call(monitor)
        pausing = (pause_window(self.paused_kind),) if self.paused_kind is not None else ()
        was_open = [n for n in (*WINDOWS, *pausing) if monitor.is_open(n)]
        try:
            return call(monitor)
        except Exception as err:
            self.lost = self._untold = f"energy measurement failed ({err})"
            self.monitor = self._unmeasured_monitor()
            for name in was_open:
                self.monitor.begin_window(name, sync=False)
            if self.paused_kind is not None:
                self.monitor.pause_windows(list(TRAINING_WINDOWS), sync=False)
            try:
                monitor.close()
            except Exception:  # its sampler or log: nothing more to lose
                log.debug("wattwise: closing the failed monitor", exc_info=True)
            return call(self.monitor)

    def _tell_lost(self, agreement: Agreement, consequence: str) -> None:
        """Every process learnt which ranks lost their measurement (`agreement`): one note."""
        if not agreement.failed:
            return
        message = agreement.note() + consequence
        if self._on_lost is not None:
            message = self._on_lost(agreement.ranks, message)
        self.notes.append(message)

    def is_open(self, name: str) -> bool:
        """Whether the window `name` is open."""
        return self.monitor is not None and self.monitor.is_open(name)

    def begin(self, name: str, *, recent: bool = False) -> float:
        """Open the window `name` (paused from the start when it counts training and the run is paused).

        `recent`: nothing ran since the monitor's last reading, which it may take (`EnergyMonitor`).

        Returns:
            How long the window's first reading took after its timestamp, in seconds: time the window holds
            that went to reading the counters (about 3 ms on an H100), not to what it measures.
        """
        assert self.monitor is not None
        self._read(lambda mon: mon.begin_window(name, recent=recent))
        read_s = self.monitor.last_read_s
        if self.paused_kind is not None and name in TRAINING_WINDOWS:
            self._read(lambda mon: mon.pause_windows([name], sync=False))
        return read_s

    def cancel(self, *names: str) -> None:
        """Drop open windows without measuring them (an abort)."""
        for name in names:
            if self.monitor is not None and self.monitor.is_open(name):
                self.monitor.cancel_window(name)

    def end(self, *names: str, reopen: Sequence[str] = ()) -> list[Figures]:
        """Close windows at one point; their figures combined over processes in one collective.

        The windows `reopen` (among `names`) begin again at once, from the same counter reading.
        """
        assert self.monitor is not None
        ended = self._read(lambda mon: mon.end_windows(list(names), reopen=reopen))
        return [Figures(t, e, 0, u) for t, e, u in self.combine(ended)]

    def combine(self, ms: Sequence[Measurement]) -> list[tuple[float, float, float]]:
        """(time maxed, energy summed, uncertainty) over processes of each of this process's measurements `ms`.

        One all-reduce, which sums the squared uncertainties too (independent counters add in quadrature);
        a process that lost its measurement since the last exchange is counted in it, and then every process
        learns which ranks lost what (`wattwise.run.agreement.combine_telling`).
        """
        ending = self._settle()
        ms = [*(e.measured for e in ending if e.measured is not None), *ms]
        figures = [(m.time_s, m.total_energy_j) for m in ms]
        figures += [(0.0, m.total_energy_uncertainty_j**2) for m in ms]
        untold = self._untold
        if self.collective.world_size > 1:
            self._untold = None
        combined, lost = combine_telling(self.collective, figures, untold)
        self._tell_lost(lost, LOST)
        n = len(ms)
        out = [(t, e, math.sqrt(max(0.0, u2))) for (t, e), (_, u2) in zip(combined[:n], combined[n:], strict=True)]
        for epoch, (t, e, u) in zip(ending, out, strict=False):
            self.epochs.append(EpochFigures(epoch.epoch, t, e, u))
            self._ended.append(EndedEpoch(epoch.epoch, Figures(t, e, epoch.steps, u)))
        return out[len(ending) :]

    def _settle(self) -> list[_Ending]:
        """End the windows of the epochs that wait for an exchange, at their readings; those epochs, taken.

        Local to this process. The reader thread made each reading a fraction of a millisecond after the
        epoch ended (long done by now); one it could not make is made here.
        """
        ending, self._ending = self._ending, []
        for epoch in ending:
            if epoch.measured is not None:
                continue
            reading: Reading | None = None
            if epoch.reading is not None and epoch.monitor is self.monitor:
                try:
                    reading = epoch.reading.result()
                except Exception:  # read again below, where a failing device is handled as anywhere else
                    log.debug("wattwise: the epoch end's reading in the background", exc_info=True)
            made = epoch.monitor

            def end(mon: EnergyMonitor, at: Reading | None = reading, made: EnergyMonitor = made) -> Measurement:
                return mon.end_windows(
                    [Window.EPOCH], sync=at is None, reopen=(Window.EPOCH,), reading=at if mon is made else None
                )[0]

            epoch.measured = self._read(end)
        return ending

    def take_ended_epochs(self) -> list[EndedEpoch]:
        """The epochs whose figures were combined since the last call (`epoch_end(defer=True)`), oldest first."""
        ended, self._ended = self._ended, []
        return ended

    # -- steps -----------------------------------------------------------------------------------------
    def step_started(self) -> None:
        """An optimizer step starts (what drives the simulated GPUs from the steps needs it)."""
        if self.drive is not None:
            self.drive.step_started()

    def count_steps(self, steps: int = 1) -> None:
        """The free part of a step: count it. Reads nothing, synchronises nothing."""
        if self.drive is not None:
            self.drive.step_ended()
        self.step_count += steps
        self._interval_steps += steps

    def log_due(self, every: int) -> bool:
        """True when the steps counted since the last logging point reach a multiple of `every`."""
        return every > 0 and self.step_count // every > self._logged_at // every

    def close_interval(self, also: Sequence[str] = ()) -> tuple[Figures, list[Figures]]:
        """The logging point: close the `steps` window and reopen it.

        Args:
            also: Windows that close at the same point, combined in the same collective.

        Returns:
            The interval's per-step average, and the figures of the windows `also`.
        """
        assert self.monitor is not None
        ended = self.end(Window.STEPS, *also, reopen=(Window.STEPS,))
        if self.paused_kind is not None:
            self._read(lambda mon: mon.pause_windows([Window.STEPS], sync=False))
        steps = max(1, self._interval_steps)
        interval = ended[0]
        rec = Figures(
            interval.time_s / steps,
            interval.energy_j / steps,
            self._interval_steps,
            interval.energy_uncertainty_j / steps,
        )
        self._interval_steps = 0
        self._logged_at = self.step_count
        self.last_step = rec
        return rec, ended[1:]

    # -- pauses ----------------------------------------------------------------------------------------
    def pause(self, kind: str) -> None:
        """Time that is not training starts (an evaluation, a checkpoint): training windows stop counting.

        Local to this process (no collective). A pause of another kind during a pause (a checkpoint saved
        at the end of validation) ends the first and is counted under its own kind from then on; a pause of
        the same kind belongs to the first.
        """
        if self.monitor is None or self.paused_kind == kind:
            return
        if self.drive is not None:
            self.drive.pause()
        if self.paused_kind is not None:
            self._end_pause()  # the training windows stay paused
        else:
            self._read(lambda mon: mon.pause_windows(list(TRAINING_WINDOWS)))
        self.paused_kind = kind
        self._read(lambda mon: mon.begin_window(pause_window(kind), sync=False))

    def resume(self) -> None:
        """Training goes on: the training windows count again; the pause's figures are kept apart."""
        if self.paused_kind is None or self.monitor is None:
            return
        self._end_pause()
        self._read(lambda mon: mon.resume_windows(list(TRAINING_WINDOWS), sync=False))
        if self.drive is not None:
            self.drive.resume()

    def _end_pause(self) -> None:
        """Close the pause window and add its time and energy to its kind's."""
        assert self.monitor is not None and self.paused_kind is not None
        kind = self.paused_kind
        m = self._read(lambda mon: mon.end_window(pause_window(kind)))
        self.paused_kind = None
        figures = self.paused.setdefault(kind, [0.0, 0.0, 0, 0.0])
        figures[0] += m.time_s
        figures[1] += m.total_energy_j
        figures[2] += 1
        figures[3] += m.total_energy_uncertainty_j**2

    # -- epochs ----------------------------------------------------------------------------------------
    def epoch_begin(self, number: int | None = None) -> None:
        """Open the epoch's window.

        Args:
            number: The framework's epoch index (None: the epoch after the last one, or the one a resumed
                checkpoint was in).
        """
        carried = self._resumed_epoch
        if number is None:
            number = int(carried["epoch"]) if carried is not None and "epoch" in carried else len(self.epochs)
        if carried is not None and int(carried.get("epoch", number)) != number:
            # The checkpoint was saved at the end of that epoch, before its end was seen: it ended there.
            self.epochs.append(
                EpochFigures(
                    int(carried["epoch"]),
                    float(carried["time_s"]),
                    float(carried["energy_j"]),
                    float(carried.get("energy_uncertainty_j", 0.0)),
                )
            )
            self._resumed_epoch = None
        if not (self.is_open(Window.EPOCH) and self._next_epoch_from == self.step_count):
            self._ending = self._settle()  # an ended epoch's window ends at its own reading first
            self.cancel(Window.EPOCH)
            # Between the fit's start and this epoch, the framework only set up: the last reading may serve
            # when it is recent (a read costs milliseconds on a real GPU).
            self.begin(Window.EPOCH, recent=True)
        # Else the window the last epoch's end reopened is this epoch's: nothing trained since but set-up.
        self._next_epoch_from = None
        self._epoch_number = number
        self._epoch_steps_at = self.step_count

    def epoch_end(self, *, defer: bool = False) -> Figures | None:
        """Close the epoch's window (a collective); its figures over all processes, None when none was open.

        The window begins again at once from the same reading, for the next epoch (`epoch_begin` takes it):
        a real GPU's counter read costs milliseconds, and short epochs would pay two at each boundary.

        With `defer`, no collective and no wait: the epoch's figures are combined at the next exchange of
        figures (a logging point, the end of a profile window, `totals`, `state_dict`, the fit's end), in
        its all-reduce, and `take_ended_epochs` gives them then. Where every counter changes only every so
        often, a reader thread reads them at once (`EnergyMonitor.reads_in_background`), so the training
        thread does not wait the milliseconds a read costs on a real GPU; the reading is as exact as the
        counter allows. Every process must pass the same `defer`.
        """
        if not self.is_open(Window.EPOCH) or self._epoch_number is None:
            return None
        if defer and self._resumed_epoch is None:
            self._end_later(self._epoch_number, self.step_count - self._epoch_steps_at)
            self._next_epoch_from = self.step_count
            self._epoch_number = None
            return None
        rec = self.end(Window.EPOCH, reopen=(Window.EPOCH,))[0]
        self._next_epoch_from = self.step_count
        number = self._epoch_number if self._epoch_number is not None else len(self.epochs)
        rec.steps = self.step_count - self._epoch_steps_at
        carried = self._resumed_epoch
        if carried is not None and int(carried.get("epoch", number)) == number:
            rec = Figures(
                rec.time_s + float(carried["time_s"]),
                rec.energy_j + float(carried["energy_j"]),
                rec.steps + int(carried.get("steps", 0)),
                quadrature((rec.energy_uncertainty_j, float(carried.get("energy_uncertainty_j", 0.0)))),
            )
        self._resumed_epoch = None
        self.epochs.append(EpochFigures(number, rec.time_s, rec.energy_j, rec.energy_uncertainty_j))
        self._epoch_number = None
        return rec

    def _end_later(self, number: int, steps: int) -> None:
        """The epoch `number` ended: its reading in the background where the counters allow, else here."""
        self._ending = self._settle()  # an earlier epoch's reading, made by now
        monitor = self.monitor
        assert monitor is not None
        if monitor.reads_in_background and self.lost is None:
            if self._reader is None:
                self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wattwise-epoch-reader")
            sync = monitor.sync

            def read() -> Reading:
                if sync is not None:
                    sync()
                return monitor.take_reading()

            self._ending.append(_Ending(number, steps, monitor, self._reader.submit(read)))
        else:
            self._ending.append(_Ending(number, steps, monitor, None))
            self._ending = self._settle()

    def totals(self) -> Figures | None:
        """The run so far, earlier segments included. A collective: every process calls it at one point."""
        if not self.active or not self.is_open(Window.FIT):
            return None
        assert self.monitor is not None
        [(time_s, energy_j, uncertainty_j)] = self.combine([self._read(lambda mon: mon.peek_window(Window.FIT))])
        return Figures(
            self.prior_time_s + time_s,
            self.prior_energy_j + energy_j,
            self.step_count,
            quadrature((self.prior_energy_uncertainty_j, uncertainty_j)),
        )

    def close(self, *, exchange: bool = True) -> Measurement | None:
        """Close every window and the monitor; the fit's own measurement (this process), if it was open.

        `exchange`: every process closes here (a collective), and the epochs that wait for an exchange of
        figures are combined first; False where the processes end apart, and those epochs are left out
        (as an epoch in progress is).
        """
        if self.monitor is None:
            return None
        if self._ending and (exchange or self.collective.world_size == 1):
            self.combine([])
        self._ending = []
        if self._reader is not None:
            self._reader.shutdown(wait=True)
            self._reader = None
        self.resume()
        if self.drive is not None:
            self.drive.close()
        self.cancel(Window.STEPS, Window.PROFILE, Window.EPOCH)
        # Right after the last epoch's end, its reading may serve when it is recent.
        fit = (
            self._read(lambda mon: mon.end_window(Window.FIT, recent=True))
            if self.monitor.is_open(Window.FIT)
            else None
        )
        self.monitor.close()
        return fit

    # -- the run's figures -----------------------------------------------------------------------------
    def end_figures(self, per_rank: Sequence[RankEnd]) -> RunFigures:
        """The run's figures from every process's `rank_figures`, exchanged at the end.

        `Run.finish` gathers them with what else the end exchanges; a loss of measurement on another process
        is said here.
        """
        self._untold = None
        self._tell_lost(Agreement.of([r["lost"] for r in per_rank]), LOST)  # in rank order, as gathered
        return self.figures(per_rank)

    def rank_figures(self, fit: Measurement) -> RankShare:
        """This process's share of the run's figures, from its `fit` window, JSON-serialisable.

        What `gather` exchanges, and what a process ended by a signal leaves in a file.
        """
        rank = self.collective.rank
        sampler = self.monitor.sampler if self.monitor is not None else None
        measured = self.lost is None
        uncertainty = fit.energy_uncertainty_j
        return {
            "energy": {self.device_label(d): fit.energy_j[d.key] for d in self.gpus} if measured else {},
            "cpu": sum(fit.energy_j[d.key] for d in self.cpus) if self.cpus and measured else None,
            "uncertainty": ({self.device_label(d): uncertainty.get(d.key, 0.0) for d in self.gpus} if measured else {}),
            "cpu_uncertainty": (
                quadrature(uncertainty.get(d.key, 0.0) for d in self.cpus) if self.cpus and measured else None
            ),
            "time_s": fit.time_s,
            "devices": [_ranked(d, rank) for d in self.gpus] if measured else [],
            "paused": {k: list(v) for k, v in self.paused.items()},
            "samples": (
                [(s.timestamp, {f"rank{rank}/{k}": w for k, w in s.power_w.items()}) for s in sampler.samples()]
                if sampler is not None
                else []
            ),
            "lost": self._untold,  # lost since the last exchange (at the end itself, say)
        }

    def figures(self, per_rank: Sequence[Mapping[str, Any]]) -> RunFigures:
        """The run's figures from the processes' `rank_figures` (those at hand)."""
        per_device: dict[str, float] = {}
        per_device_u: dict[str, float] = {}
        for r in per_rank:
            per_device.update(r["energy"])
            per_device_u.update(r.get("uncertainty") or {})
        cpu_parts = [r["cpu"] for r in per_rank if r["cpu"] is not None]
        cpu_u = [r.get("cpu_uncertainty") or 0.0 for r in per_rank if r["cpu"] is not None]
        gpu_energy_j = sum(per_device.values())
        # With no GPU, what the CPU package used is the run's energy.
        measured_u = quadrature(per_device_u.values()) if per_device else quadrature(cpu_u)
        devices = tuple(d for r in per_rank for d in r["devices"])
        return RunFigures(
            time_s=max(r["time_s"] for r in per_rank) + self.prior_time_s,
            energy_j=(gpu_energy_j if per_device else sum(cpu_parts)) + self.prior_energy_j,
            energy_per_device_j=per_device,
            energy_uncertainty_j=quadrature((measured_u, self.prior_energy_uncertainty_j)),
            cpu_energy_j=sum(cpu_parts) if cpu_parts else None,
            steps=self.step_count,
            epochs=tuple(self.epochs),
            resumed_energy_j=self.prior_energy_j,
            devices=devices,
            non_training={
                kind: PausedFigures(v["time_s"], v["energy_j"], int(v["count"]), v.get("energy_uncertainty_j", 0.0))
                for kind, v in self._non_training([r["paused"] for r in per_rank]).items()
            },
            samples=[(s[0], s[1]) for r in per_rank for s in r["samples"]],
            simulated=self.figures_simulated or any(bool(d.get("simulated")) for d in devices),
            backend=self.gpus[0].backend
            if self.gpus
            else next((str(d["backend"]) for d in devices if d.get("backend")), None),
        )

    def _non_training(self, per_rank: list[dict[str, list[float]]]) -> dict[str, dict[str, float]]:
        """Paused figures by kind: time maxed, energy summed and uncertainty in quadrature over processes.

        Earlier segments added.
        """
        out: dict[str, dict[str, float]] = {k: dict(v) for k, v in self.prior_paused.items()}
        for kind in sorted({k for r in per_rank for k in r}):
            parts = [r[kind] for r in per_rank if kind in r]
            prior = out.get(kind, {"time_s": 0.0, "energy_j": 0.0, "count": 0})
            squares = [prior.get("energy_uncertainty_j", 0.0) ** 2, *(p[3] for p in parts if len(p) > 3)]
            out[kind] = {
                "time_s": prior["time_s"] + max(p[0] for p in parts),
                "energy_j": prior["energy_j"] + sum(p[1] for p in parts),
                "count": int(prior["count"] + max(p[2] for p in parts)),
                "energy_uncertainty_j": math.sqrt(sum(squares)),
            }
        return out

    # -- checkpoints -----------------------------------------------------------------------------------
    def state_dict(self) -> MeasurementState:
        """A collective under distributed training: every process calls it at the same point."""
        fit = None
        epoch: EpochState | None = None
        if self.active and self.monitor is not None and self.is_open(Window.FIT):
            self._ending = self._settle()  # the epoch in progress begins where an ended one's reading is
            windows = [self._read(lambda mon: mon.peek_window(Window.FIT))]
            if self.is_open(Window.EPOCH) and self._epoch_number is not None:  # an epoch in progress
                windows.append(self._read(lambda mon: mon.peek_window(Window.EPOCH)))
            combined = self.combine(windows)
            fit = combined[0]
            if len(combined) > 1:
                t, e, u = combined[1]
                carried: EpochState = self._resumed_epoch or {}
                epoch = {
                    "epoch": self._epoch_number if self._epoch_number is not None else len(self.epochs),
                    "time_s": t + float(carried.get("time_s", 0.0)),
                    "energy_j": e + float(carried.get("energy_j", 0.0)),
                    "steps": self.step_count - self._epoch_steps_at + int(carried.get("steps", 0)),
                    "energy_uncertainty_j": quadrature((u, float(carried.get("energy_uncertainty_j", 0.0)))),
                }
        return {
            "energy_j": self.prior_energy_j + (fit[1] if fit is not None else 0.0),
            "time_s": self.prior_time_s + (fit[0] if fit is not None else 0.0),
            "steps": self.step_count,
            "epochs": [
                EpochState(
                    epoch=e.epoch, time_s=e.time_s, energy_j=e.energy_j, energy_uncertainty_j=e.energy_uncertainty_j
                )
                for e in self.epochs
            ],
            "epoch_in_progress": epoch,
            # This process's pauses so far (the combined figures are made at the end of the run).
            "non_training": self._non_training([{k: list(v) for k, v in self.paused.items()}]),
            "energy_uncertainty_j": quadrature((self.prior_energy_uncertainty_j, fit[2] if fit is not None else 0.0)),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a checkpoint's `state_dict`: its figures count as earlier segments."""
        self.prior_energy_j = float(state.get("energy_j", 0.0))
        self.prior_energy_uncertainty_j = float(state.get("energy_uncertainty_j", 0.0))
        self.prior_time_s = float(state.get("time_s", 0.0))
        self.step_count = int(state.get("steps", 0))
        self._logged_at = self.step_count
        self.epochs = [
            EpochFigures(
                int(e["epoch"]), float(e["time_s"]), float(e["energy_j"]), float(e.get("energy_uncertainty_j", 0.0))
            )
            for e in state.get("epochs", [])
        ]
        self._resumed_epoch = state.get("epoch_in_progress")
        self.prior_paused = {k: dict(v) for k, v in (state.get("non_training") or {}).items()}


def _ranked(device: Device, rank: int) -> RankedDevice:
    """`device` as `Device.describe()` reports it, with the `rank` of the process that measured it."""
    return {**device.describe(), "rank": rank}
