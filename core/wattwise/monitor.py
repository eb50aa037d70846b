"""Energy measurement in named windows, over any set of devices.

    monitor = EnergyMonitor(devices)
    monitor.begin_window("step")
    ...
    m = monitor.end_window("step")      # Measurement(time_s, energy_j per device, total_energy_j)

Several windows may be open at once and may nest or overlap; a window can be cancelled. Devices with an
energy counter (NVML on Volta and newer, RAPL, the simulated GPU) are read at both ends of the window.
Devices without one (older GPUs) are covered by a background `PowerSampler` whose samples are integrated
(trapezoids) into a counter. A window too short for a counter to tick (its delta is 0 while time passed)
is approximated by the device's current power times the window's time and listed in
`Measurement.approximate`, never silently reported as zero.

Every window says how precisely it was measured (`Measurement.energy_uncertainty_j`, per device): a counter
that changes value only every `Device.energy_update_period_s` (NVML's about every 0.1 s) leaves each end of
a window off by up to one update's energy, about the device's mean power times that period; the two ends
are added in quadrature, as are the segments of a paused window. A device without a counter is off by up
to one sampling interval's energy at each end, plus the trapezoids' error bound between its samples (half
the interval times the power's change over each). The mean power is the larger of the window's own and
the device's since the monitor opened, so a window shorter than a counter update (whose delta says nothing
of its power) is never reported as more precise than the counter allows.

A window can be paused and resumed (`pause_windows`, `resume_windows`): what runs in between (an
evaluation, a checkpoint) is neither timed nor counted in it. Beginning, ending, pausing or resuming reads
every counter once, whatever the number of windows involved. A window that begins or ends at a point of the
run where nothing ran since the last reading (the first epoch, right after the fit began) may take that
reading (`recent=True`) when it is younger than a tenth of every counter's update period: a new read would
cost milliseconds on a real GPU (about 3 ms on an H100) and could differ from it by far less than the
uncertainty of the window's end (one update's energy).

Bad arguments (no device, two devices with one key, a sampling interval that is not positive) are a
`UsageError`; a window used out of turn (begun twice, ended or cancelled while not open) is an
`InternalError`: it is the driving code's bookkeeping, which a training run degrades on, never stops for.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ParamSpec, Protocol, TypeVar

from wattwise.devices.base import Device, DeviceError
from wattwise.errors import InternalError, UsageError
from wattwise.readable import with_uncertainty

P = ParamSpec("P")
R = TypeVar("R")
#: One reading of every counter: (monotonic time, unix time, energy by device key).
Reading = tuple[float, float, dict[str, float]]


@dataclass(frozen=True)
class Measurement:
    """Time and energy of one window. Seconds and joules; `start_time` is a unix timestamp."""

    name: str
    start_time: float
    time_s: float
    energy_j: dict[str, float]
    #: Device keys whose energy is power x time because their counter did not tick in the window.
    approximate: tuple[str, ...] = ()
    #: True when any device is simulated: the figures are modelled, not measured.
    simulated: bool = False
    #: How precisely each device's energy is known (J, by device key; see the module docstring).
    energy_uncertainty_j: dict[str, float] = field(default_factory=dict)

    @property
    def total_energy_j(self) -> float:
        """The energy of every device together (J)."""
        return sum(self.energy_j.values())

    @property
    def total_energy_uncertainty_j(self) -> float:
        """How precisely `total_energy_j` is known (J): the devices' uncertainties added in quadrature."""
        return quadrature(self.energy_uncertainty_j.values())

    @property
    def avg_power_w(self) -> float:
        """The average power of every device together (W); 0 for a window that took no time."""
        return self.total_energy_j / self.time_s if self.time_s > 0 else 0.0

    def __str__(self) -> str:
        """`step: 1.23 s, 250.4 ± 0.6 J (gpu0: 125.2 ± 0.4 J, gpu1: ...)`: each figure to what it resolves."""
        total_u = self.total_energy_uncertainty_j if self.energy_uncertainty_j else None
        devices = ", ".join(
            f"{key}: {with_uncertainty(j, self.energy_uncertainty_j.get(key), 'J', places=2, grouped=True)}"
            + (" approximate" if key in self.approximate else "")
            for key, j in self.energy_j.items()
        )
        total = with_uncertainty(self.total_energy_j, total_u, "J", places=2, grouped=True)
        mark = " [SIMULATED]" if self.simulated else ""
        return f"{self.name}: {self.time_s:.3f} s, {total}" + (f" ({devices})" if devices else "") + mark


def quadrature(values: Iterable[float]) -> float:
    """Independent uncertainties combined: the square root of the sum of their squares."""
    return math.sqrt(sum(v * v for v in values))


def counter_window_uncertainty_j(
    energy_j: float, time_s: float, period_s: float, *, aligned_steps: int | None = None
) -> float:
    """How far a window's energy may be off, from where the counter's changes fall about its ends.

    A window that opens and ends on steps in which the counter changed (`aligned_steps`: its steps) has each
    end within one training step of a change (within one period, when a step is longer); any other window,
    anywhere within one period (`period_s`). The difference of two such offsets, uniform over that span, has
    a standard deviation of span / sqrt(6): this is two of those (about a 95% bound), at the window's mean
    power. 0 for a counter that changes at every read (`period_s` 0) or an empty window.
    """
    if period_s <= 0 or time_s <= 0:
        return 0.0
    span_s = period_s if aligned_steps is None else min(period_s, time_s / max(1, aligned_steps))
    return 2.0 * energy_j / time_s * span_s / math.sqrt(6.0)


@dataclass
class PowerSample:
    """The power of each device at one moment: `timestamp` in unix s, `power_w` by device key.

    A device whose reading failed is absent from that sample.
    """

    timestamp: float
    power_w: dict[str, float]


class PowerSampler:
    """Polls every device's power in a background thread.

    Keeps the samples (for plots and reports) and integrates them into an energy counter for the devices
    that have none. It reads the energy counter of a device whose counter wraps (RAPL, a 32-bit AMD counter:
    `Device.max_read_interval_s`) at every sample, so that no wrap goes unseen, and no other counter: a read
    costs the training process time (about 3 ms on an H100), and the thread that makes it competes with
    training for the interpreter.
    """

    #: Samples kept at most; beyond it every other one is dropped and later ones kept at half the rate, so
    #: a week-long run keeps an evenly thinned trace in bounded memory (the energy integral is unaffected).
    MAX_SAMPLES = 100_000

    def __init__(
        self,
        devices: Sequence[Device],
        interval_s: float = 0.1,
        *,
        keep_samples: bool = True,
        clock: Callable[[], float] = time.time,
        max_samples: int | None = None,
    ) -> None:
        if interval_s <= 0:
            raise UsageError(f"monitor.sample_interval_s must be > 0 (got {interval_s})")
        self.devices = list(devices)
        #: Each device, its key, and whether its counter must be read at every sample (it wraps).
        self._polled = [(d, d.key, d.has_energy_counter() and d.max_read_interval_s is not None) for d in self.devices]
        self.interval_s = interval_s
        self.keep_samples = keep_samples
        self.max_samples = max(2, max_samples if max_samples is not None else self.MAX_SAMPLES)
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: list[PowerSample] = []
        #: Keep one sample in this many (doubles each time the kept trace is thinned).
        self._keep_every = 1
        self._taken = 0
        self._integrated_j: dict[str, float] = {d.key: 0.0 for d in self.devices}
        #: The trapezoids' error bound so far (J): half of each interval times the power's change over it.
        self._error_bound_j: dict[str, float] = {d.key: 0.0 for d in self.devices}
        self._last: tuple[float, dict[str, float]] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_once(self) -> PowerSample:
        """Take one sample now (the thread calls this; tests may call it directly)."""
        now = self._clock()
        watts: dict[str, float] = {}
        for dev, key, wraps in self._polled:
            try:
                watts[key] = dev.power_w()
                if wraps:
                    dev.energy_j()
            except DeviceError:
                continue
        sample = PowerSample(now, watts)
        with self._lock:
            if self._last is not None:
                t0, w0 = self._last
                dt = max(0.0, now - t0)
                for key, w in watts.items():
                    if key in w0:
                        self._integrated_j[key] += 0.5 * (w + w0[key]) * dt
                        self._error_bound_j[key] += 0.5 * abs(w - w0[key]) * dt
            self._last = (now, watts)
            if self.keep_samples:
                if self._taken % self._keep_every == 0:
                    self._samples.append(sample)
                    if len(self._samples) > self.max_samples:
                        del self._samples[1::2]
                        self._keep_every *= 2
                self._taken += 1
        return sample

    @property
    def kept_every(self) -> int:
        """One sample in this many is kept (1 until the trace was first thinned)."""
        return self._keep_every

    def integrated_energy_j(self, key: str) -> float:
        """Energy integrated from samples so far for one device, brought up to now."""
        with self._lock:
            total = self._integrated_j.get(key, 0.0)
            if self._last is not None and key in self._last[1]:
                total += self._last[1][key] * max(0.0, self._clock() - self._last[0])
            return total

    def error_bound_j(self, key: str) -> float:
        """The trapezoid integration's error bound so far for one device (J), between its samples."""
        with self._lock:
            return self._error_bound_j.get(key, 0.0)

    def samples(self) -> list[PowerSample]:
        """A copy of the samples kept so far, oldest first (thinned evenly past `max_samples`)."""
        with self._lock:
            return list(self._samples)

    def start(self) -> None:
        """Take a sample now, then one every `interval_s` in a daemon thread (once: a second call does nothing)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self.sample_once()
        self._thread = threading.Thread(target=self._run, name="wattwise-power-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and take a last sample, so the integral reaches now; does nothing when stopped."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.sample_once()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_once()


class WindowSink(Protocol):
    """Where a monitor's ended windows go as they end (a run's `windows.csv`)."""

    def window_ended(self, m: Measurement) -> None:
        """One window ended (called under the monitor's lock: one at a time)."""
        ...

    def close(self) -> None:
        """The monitor closed: no window follows."""
        ...


@dataclass
class _Open:
    start_mono: float
    start_time: float
    energy_j: dict[str, float]
    #: Time and energy of the segments before a pause.
    carried_time_s: float = 0.0
    carried_energy_j: dict[str, float] = field(default_factory=dict)
    approximate: set[str] = field(default_factory=set)
    paused: bool = False
    #: Squared uncertainty (J^2) of the segments before a pause, by device key.
    carried_uncertainty_sq: dict[str, float] = field(default_factory=dict)
    #: The polled devices' integration error bound at the segment's start (J).
    error_bound_j: dict[str, float] = field(default_factory=dict)


@dataclass
class WindowHandle:
    """Returned by `EnergyMonitor.window`: a context manager and decorator; `measurement` after exit."""

    monitor: EnergyMonitor
    name: str
    measurement: Measurement | None = field(default=None)

    def __enter__(self) -> WindowHandle:
        self.monitor.begin_window(self.name)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.monitor.cancel_window(self.name)
        else:
            self.measurement = self.monitor.end_window(self.name)

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        """`func` measured in this window at every call (`@monitor.window("eval")`)."""

        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with self:
                return func(*args, **kwargs)

        return wrapper


class EnergyMonitor:
    """Named measurement windows over a set of devices (see the module docstring).

    Args:
        devices: What to measure, each under its own `key`.
        sync: Called before a window begins, ends, pauses or resumes (`cuda_sync`), so that the window
            covers the work launched in it; a call may skip it (`sync=False`) where nothing was launched.
        sink: Told of each window that ended, as it ends, and closed with the monitor (the run gives its
            `windows.csv`, `wattwise.record.files.WindowsLog`; the monitor knows no file format).
        sample_power: Sample every device's power in the background even when each has an energy
            counter (for `power.csv`); devices without a counter, or with one that wraps, are sampled anyway.
        sample_interval_s: The sampling period (s), shortened to half a counter's wrap period.
        clock: Times windows; by default the simulated devices' clock if they share one (so a virtual
            clock drives the whole measurement in tests), else `time.monotonic`.
        wall_clock: Dates windows (unix s) and power samples.

    Raises:
        UsageError: No device, two devices with one key, or a sampling period that is not positive.
    """

    def __init__(
        self,
        devices: Sequence[Device],
        *,
        sync: Callable[[], None] | None = None,
        sink: WindowSink | None = None,
        sample_power: bool = False,
        sample_interval_s: float = 0.1,
        clock: Callable[[], float] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not devices:
            raise UsageError("EnergyMonitor needs at least one device (see `wattwise devices`)")
        keys = [d.key for d in devices]
        if len(set(keys)) != len(keys):
            raise UsageError(f"EnergyMonitor got two devices with the same key: {keys}")
        self.devices = list(devices)
        # Keys and counter support do not change: read them once, not at every window.
        self._readers = [(d, d.key, d.has_energy_counter()) for d in self.devices]
        self.sync = sync
        if clock is None:
            clocks = {id(s.clock): s.clock for s in (d.simulation for d in self.devices) if s is not None}
            clock = next(iter(clocks.values())) if len(clocks) == 1 else time.monotonic
        self._clock = clock
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._open: dict[str, _Open] = {}
        self.simulated = any(d.simulated for d in self.devices)
        # Devices without a counter are integrated from samples; wrapping counters (RAPL) must be read
        # at least once per wrap period, which the sampler's reads guarantee.
        wrap_periods = [w for w in (d.max_read_interval_s for d in self.devices) if w]
        needs_sampler = bool(wrap_periods) or any(not d.has_energy_counter() for d in self.devices)
        self.sampler: PowerSampler | None = None
        if sample_power or needs_sampler:
            interval = min([sample_interval_s, *(w / 2 for w in wrap_periods)])
            self.sampler = PowerSampler(self.devices, interval, clock=wall_clock)
            self.sampler.start()
        #: How long each device's energy figure may go without changing (s): its counter's update period, or
        #: the sampling interval of a device integrated from samples.
        self.update_periods_s = {
            key: (dev.energy_update_period_s if counter else self.sampler.interval_s if self.sampler else 0.0)
            for dev, key, counter in self._readers
        }
        self._polled = [key for _, key, counter in self._readers if not counter]
        #: When and at what energy the first window began: the devices' mean power since then.
        self._origin: tuple[float, dict[str, float]] | None = None
        #: The last reading of every counter: (monotonic time, unix time, energy by device key).
        self._last_reading: tuple[float, float, dict[str, float]] | None = None
        #: How long the last reading's counter reads took after its timestamp, in seconds (0: it was reused).
        #: A window begun on it holds that time, which is the reads', not what ran meanwhile.
        self.last_read_s = 0.0
        #: How old a reading may be and still be taken again by `recent=True` (s): a tenth of the shortest
        #: counter update period; 0 (never) when a counter updates continuously or a device is polled.
        periods = list(self.update_periods_s.values())
        counters_only = all(counter for _, _, counter in self._readers)
        self.reuse_within_s = min(periods) / 10.0 if counters_only and min(periods) > 0.0 else 0.0
        self._log_lock = threading.Lock()
        self._log = sink

    def _read_energy(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for dev, key, counter in self._readers:
            if counter:
                out[key] = dev.energy_j()
            else:
                assert self.sampler is not None
                out[key] = self.sampler.integrated_energy_j(key)
        return out

    def _error_bounds(self) -> dict[str, float]:
        """The polled devices' integration error bound so far (none when every device has a counter)."""
        sampler = self.sampler
        return {key: sampler.error_bound_j(key) for key in self._polled} if sampler is not None else {}

    def _reading(self, recent: bool = False) -> tuple[float, float, dict[str, float]]:
        """(monotonic time, unix time, energy by device key) now: every counter read once.

        With `recent`, the last reading instead when it is younger than `reuse_within_s` (see the module
        docstring). Called under the lock.
        """
        now = self._clock()
        last = self._last_reading
        if recent and last is not None and 0.0 <= now - last[0] < self.reuse_within_s:
            self.last_read_s = 0.0
            return last[0], last[1], dict(last[2])
        wall, energy = self._wall(), self._read_energy()
        self.last_read_s = max(0.0, self._clock() - now)
        self._keep_reading(now, wall, energy)
        return now, wall, energy

    def _keep_reading(self, now: float, wall: float, energy: dict[str, float]) -> None:
        """Keep a reading as the last one (unless a later one is kept) and, the first, as the mean's origin.

        Called under the lock.
        """
        last = self._last_reading
        if last is None or last[0] <= now:
            self._last_reading = (now, wall, dict(energy))
        if self._origin is None:  # the first reading is the origin of the mean power
            self._origin = (now, dict(energy))

    @property
    def reads_in_background(self) -> bool:
        """Whether a counter reading may be taken off the training thread (`take_reading`) at a boundary.

        So when every counter changes only every so often (`reuse_within_s` > 0: a read a fraction of a
        millisecond after the boundary gives what a read at it would) and the monitor keeps real time (a
        virtual clock moves only with the thread that drives it).
        """
        return self.reuse_within_s > 0.0 and self._clock is time.monotonic

    def take_reading(self) -> Reading:
        """Read every counter once, from any thread, without holding up the windows' bookkeeping.

        For `end_windows(reading=...)`: a boundary whose read another thread makes (`reads_in_background`).
        """
        now, wall = self._clock(), self._wall()
        energy = self._read_energy()
        with self._lock:
            self._keep_reading(now, wall, energy)
        return now, wall, energy

    def _segment_uncertainty_sq(
        self, window: _Open, key: str, delta_j: float, time_s: float, now: float, end_j: float
    ) -> float:
        """The squared uncertainty (J^2) of one device's energy over the segment since `window` (re)started.

        Each end is off by up to one update's energy (mean power x the update period); a device integrated
        from samples adds the trapezoids' error bound between them (see the module docstring).
        """
        period_s = self.update_periods_s[key]
        bound_j = 0.0
        if key in window.error_bound_j and self.sampler is not None:
            bound_j = max(0.0, self.sampler.error_bound_j(key) - window.error_bound_j[key])
        if period_s <= 0.0:
            return bound_j * bound_j
        power_w = delta_j / time_s if time_s > 0 else 0.0
        if self._origin is not None and now > self._origin[0]:
            power_w = max(power_w, (end_j - self._origin[1][key]) / (now - self._origin[0]))
        per_end_j = power_w * period_s
        return 2.0 * per_end_j * per_end_j + bound_j * bound_j

    def begin_window(self, name: str, *, sync: bool = True, recent: bool = False) -> None:
        """Open window `name`. Raises if a window of that name is already open."""
        self.begin_windows([name], sync=sync, recent=recent)

    def begin_windows(self, names: Sequence[str], *, sync: bool = True, recent: bool = False) -> None:
        """Open several windows at one point, reading every counter once.

        Args:
            names: The windows to open; none of them may be open already.
            sync: Wait for the GPU's queued work first (`sync`).
            recent: Begin from the last reading when it is recent enough (see the module docstring): for a
                point where nothing ran since that reading.
        """
        if sync and self.sync is not None:
            self.sync()
        with self._lock:
            already = [n for n in names if n in self._open]
            if already:
                raise InternalError(f"measurement window {str(already[0])!r} is already open; end or cancel it first")
            now, wall, energy = self._reading(recent)
            bounds = self._error_bounds()
            for name in names:
                self._open[name] = _Open(now, wall, dict(energy), error_bound_j=dict(bounds))

    def end_window(self, name: str, *, sync: bool = True, recent: bool = False) -> Measurement:
        """Close window `name` and return its measurement (paused time and energy left out)."""
        return self.end_windows([name], sync=sync, recent=recent)[0]

    def end_windows(
        self,
        names: Sequence[str],
        *,
        sync: bool = True,
        reopen: Sequence[str] = (),
        recent: bool = False,
        reading: Reading | None = None,
    ) -> list[Measurement]:
        """Close several windows at one point, reading every counter once.

        Args:
            names: The windows to close.
            sync: Wait for the GPU's queued work first (`sync`).
            reopen: Among `names`, the windows that begin again at once, from the same reading (a logging
                interval follows the last: one read of each counter instead of two, which on a real GPU
                costs milliseconds).
            recent: End at the last reading when it is recent enough (see the module docstring): for a
                point where nothing ran since that reading.
            reading: End at this reading (`take_reading`, made when the windows ended) instead of a new one.

        Returns:
            Each window's measurement, in the order of `names`.
        """
        if sync and self.sync is not None:
            self.sync()
        with self._lock:
            missing = [n for n in names if n not in self._open]
            if missing:
                raise InternalError(f"measurement window {str(missing[0])!r} is not open; call begin_window first")
            started = [self._open.pop(n) for n in names]
            now, wall, end = reading if reading is not None else self._reading(recent)
            if reopen:
                bounds = self._error_bounds()
                for name in reopen:
                    self._open[name] = _Open(now, wall, dict(end), error_bound_j=dict(bounds))
        out = []
        for name, window in zip(names, started, strict=True):
            if not window.paused:
                self._carry(window, now, end)
            m = Measurement(
                name,
                window.start_time,
                window.carried_time_s,
                dict(window.carried_energy_j),
                tuple(k for _, k, _ in self._readers if k in window.approximate),
                self.simulated,
                {k: math.sqrt(u2) for k, u2 in window.carried_uncertainty_sq.items()},
            )
            self._write_log(m)
            out.append(m)
        return out

    def _carry(self, window: _Open, now: float, end: dict[str, float]) -> None:
        """Add the segment since the window (re)started to what it carries.

        A counter that did not tick while time passed is approximated by power x time and the device
        marked approximate.
        """
        time_s = max(0.0, now - window.start_mono)
        for dev, key, _ in self._readers:
            delta = end[key] - window.energy_j[key]
            if delta <= 0.0 and time_s > 0.0:
                try:
                    delta = dev.power_w() * time_s
                except DeviceError:
                    delta = 0.0
                window.approximate.add(key)
            window.carried_energy_j[key] = window.carried_energy_j.get(key, 0.0) + delta
            u2 = self._segment_uncertainty_sq(window, key, delta, time_s, now, end[key])
            window.carried_uncertainty_sq[key] = window.carried_uncertainty_sq.get(key, 0.0) + u2
        window.carried_time_s += time_s

    def pause_windows(self, names: Sequence[str], *, sync: bool = True) -> list[str]:
        """Stop counting time and energy in the open, running windows among `names`; returns those paused."""
        if sync and self.sync is not None:
            self.sync()
        with self._lock:
            windows = [(n, self._open[n]) for n in names if n in self._open and not self._open[n].paused]
            if not windows:
                return []
            now, _, end = self._reading()
            for _, window in windows:
                self._carry(window, now, end)
                window.paused = True
        return [n for n, _ in windows]

    def resume_windows(self, names: Sequence[str], *, sync: bool = True) -> None:
        """Count again in the paused windows among `names` (from now)."""
        if sync and self.sync is not None:
            self.sync()
        with self._lock:
            windows = [self._open[n] for n in names if n in self._open and self._open[n].paused]
            if not windows:
                return
            now, _, end = self._reading()
            bounds = self._error_bounds()
            for window in windows:
                window.start_mono, window.energy_j, window.paused = now, dict(end), False
                window.error_bound_j = dict(bounds)

    def peek_window(self, name: str) -> Measurement:
        """Time and energy of window `name` so far, leaving it open."""
        with self._lock:
            started = self._open.get(name)
            if started is None:
                raise InternalError(f"measurement window {str(name)!r} is not open; call begin_window first")
            time_s, energy = started.carried_time_s, dict(started.carried_energy_j)
            uncertainty_sq = dict(started.carried_uncertainty_sq)
            if not started.paused:
                now, _, end = self._reading()
                segment_s = max(0.0, now - started.start_mono)
                time_s += segment_s
                for k in end:
                    delta = max(0.0, end[k] - started.energy_j[k])
                    energy[k] = energy.get(k, 0.0) + delta
                    u2 = self._segment_uncertainty_sq(started, k, delta, segment_s, now, end[k])
                    uncertainty_sq[k] = uncertainty_sq.get(k, 0.0) + u2
        uncertainty = {k: math.sqrt(u2) for k, u2 in uncertainty_sq.items()}
        return Measurement(name, started.start_time, time_s, energy, (), self.simulated, uncertainty)

    def cancel_window(self, name: str) -> None:
        """Forget window `name` without measuring it (e.g. the step raised)."""
        with self._lock:
            if self._open.pop(name, None) is None:
                raise InternalError(f"measurement window {str(name)!r} is not open; nothing to cancel")

    def is_open(self, name: str) -> bool:
        """Whether window `name` is open (begun, not yet ended or cancelled); a paused one is open."""
        with self._lock:
            return name in self._open

    def window(self, name: str) -> WindowHandle:
        """`with monitor.window("eval") as w: ...` then `w.measurement`; or `@monitor.window("f")`."""
        return WindowHandle(self, name)

    def _write_log(self, m: Measurement) -> None:
        if self._log is None:
            return
        with self._log_lock:
            self._log.window_ended(m)

    def close(self) -> None:
        """Stop the background sampler, if any, and close the window log."""
        if self.sampler is not None:
            self.sampler.stop()
        if self._log is not None:
            with self._log_lock:
                self._log.close()

    def __enter__(self) -> EnergyMonitor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def cuda_sync() -> None:
    """Wait for queued CUDA work; does nothing when CUDA is not in use.

    Pass as `EnergyMonitor(sync=cuda_sync)`: without it a window would end while the GPU still runs the
    work the window launched.
    """
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
