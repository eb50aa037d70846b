"""A simulated GPU: a first-class device for machines without one (CI, laptops, the demo).

It follows a power model instead of hardware:

- a **power-limit table** `power_limit,time,power`: at each power limit (W), the step time relative to
  the step time at the maximum limit, and the average power (W) while busy; linear in between;
- an **idle power** (W) drawn when no emulated work runs;
- a **clock model**: the supported SM clocks, and time and power against SM frequency. A step's
  compute-bound share scales with `f_max / f`; busy power scales with `(f / f_max) ** 2` above idle.
  With both a power limit and a locked clock, the slower time and the lower power win (the hardware
  throttles to whichever binds first).

Its energy counter integrates the modelled power over real wall time: busy power while emulated work
runs (`busy()` / `run_step()`), idle power otherwise. Changing the power limit or the clock changes what
the emulated work costs, so every decision wattwise makes can be exercised end to end. Every output
derived from it carries `simulated: true` or says "simulated".

Settings can persist in a small JSON state file, so that a process killed with SIGKILL leaves the
changed power limit behind exactly as a real GPU would, and the guard's recovery can be tested. The file
is the GPU's state: reading a setting re-reads it when another process changed it, it is never read or
written through a symbolic link, and a setting that cannot be saved is not changed (a `DeviceError`).
It is read only when it can be trusted (the user's own or root's, the node agent's: `wattwise.safe_files.
read_trusted`) and holds valid settings (`parse_state`); one that fails leaves the GPU at its defaults,
with one warning, and is set aside as `gpuN.json.rejected` when it is the user's own.

The load is shared too, when a node agent serves the simulated GPU: a process driving emulated work adds
the energy it draws above idle to a counter file beside the state file (`publish_load`, after a step, at
most every `PUBLISH_LOAD_S`), and the agent counts that file in its own energy (`count_load`), so its
Prometheus energy counter follows the clients' load, not idle power only.
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import dataclasses
import errno
import fcntl
import hashlib
import json
import math
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from wattwise.bounds import POWER_LIMIT_W, check_integer
from wattwise.devices.base import Device, DeviceError, PowerLimitRange
from wattwise.errors import UsageError, plugin_warning
from wattwise.safe_files import (
    UntrustedFile,
    private_dir,
    read_text,
    read_trusted_json,
    set_aside_if_mine,
    write_text,
)


@dataclass(frozen=True)
class ClockModel:
    """SM clocks a simulated GPU supports, and how time and power follow them."""

    max_mhz: int = 1740
    min_mhz: int = 210
    step_mhz: int = 15
    #: Share of a step that does not speed up with the SM clock (memory-bound work).
    memory_bound_fraction: float = 0.3
    #: Exponent of busy power above idle against relative frequency.
    power_exponent: float = 2.0

    def supported_mhz(self) -> list[int]:
        """Supported clocks, highest first."""
        return list(range(self.max_mhz, self.min_mhz - 1, -self.step_mhz))

    def time_factor(self, freq_mhz: float) -> float:
        """Step time at `freq_mhz` relative to the maximum clock (>= 1)."""
        frac = self.memory_bound_fraction
        return frac + (1.0 - frac) * self.max_mhz / freq_mhz

    def power_factor(self, freq_mhz: float) -> float:
        """Busy power above idle at `freq_mhz` relative to the maximum clock (<= 1)."""
        return float((freq_mhz / self.max_mhz) ** self.power_exponent)


#: Plausible ranges of a GPU's power model, per column: (lowest, highest, unit). A value outside is a typo or
#: a unit mix-up (mW for W), and would make every figure derived from the model absurd.
MODEL_RANGES: dict[str, tuple[float, float, str]] = {
    "power_limit": (1.0, 5000.0, "W"),
    "time": (0.1, 100.0, "(step time relative to the maximum limit)"),
    "power": (0.0, 5000.0, "W"),
}
MAX_POWER_W = MODEL_RANGES["power"][1]


def check_model_value(column: str, value: float, where: str) -> None:
    """Raise a `UsageError` naming `where` and `column` unless `value` is in the column's plausible range."""
    low, high, unit = MODEL_RANGES[column]
    if not (math.isfinite(value) and low <= value <= high and value > 0):
        bounds = f"between {low:g} and {high:g}" if low > 0 else f"above 0 and at most {high:g}"
        raise UsageError(f"{where}: {column} must be {bounds} {unit} (got {value:g})")


@dataclass(frozen=True)
class PowerModel:
    """Power limit -> (relative step time, busy power) for a simulated GPU. Watts and seconds."""

    power_limits_w: tuple[float, ...]
    time_factors: tuple[float, ...]
    busy_power_w: tuple[float, ...]
    idle_power_w: float = 60.0
    min_limit_w: float | None = None
    max_limit_w: float | None = None
    clock: ClockModel = field(default_factory=ClockModel)
    name: str = "Simulated GPU"

    def __post_init__(self) -> None:
        n = len(self.power_limits_w)
        if n == 0 or n != len(self.time_factors) or n != len(self.busy_power_w):
            raise UsageError("power model: the power_limit, time and power columns need one value per row")
        if list(self.power_limits_w) != sorted(set(self.power_limits_w)):
            raise UsageError("power model: power_limit values must be distinct (they are sorted on load)")
        for col, values in (
            ("power_limit", self.power_limits_w),
            ("time", self.time_factors),
            ("power", self.busy_power_w),
        ):
            for row, v in enumerate(values, start=1):
                check_model_value(col, v, f"power model, row {row} (power_limit {self.power_limits_w[row - 1]:g} W)")
        if not (math.isfinite(self.idle_power_w) and 0 <= self.idle_power_w <= MAX_POWER_W):
            raise UsageError(
                f"power model: idle_power_w must be between 0 and {MAX_POWER_W:g} W (got {self.idle_power_w})"
            )
        for name, limit in (("min_limit_w", self.min_limit_w), ("max_limit_w", self.max_limit_w)):
            if limit is not None:
                check_model_value("power_limit", limit, f"power model: {name}")
        lo, hi = self.limit_range_w
        if lo >= hi:
            raise UsageError(f"power model: minimum limit {lo} W must be below the maximum {hi} W")

    @property
    def limit_range_w(self) -> tuple[float, float]:
        """The (min, max) power limits the model allows, in watts: its table's ends unless narrowed."""
        lo = self.min_limit_w if self.min_limit_w is not None else self.power_limits_w[0]
        hi = self.max_limit_w if self.max_limit_w is not None else self.power_limits_w[-1]
        return lo, hi

    def at_limit(self, limit_w: float) -> tuple[float, float]:
        """(relative step time, busy power in W) at a power limit, interpolated linearly."""
        xs = self.power_limits_w
        if limit_w <= xs[0]:
            return self.time_factors[0], self.busy_power_w[0]
        if limit_w >= xs[-1]:
            return self.time_factors[-1], self.busy_power_w[-1]
        i = bisect.bisect_right(xs, limit_w)
        w = (limit_w - xs[i - 1]) / (xs[i] - xs[i - 1])
        t = self.time_factors[i - 1] + w * (self.time_factors[i] - self.time_factors[i - 1])
        p = self.busy_power_w[i - 1] + w * (self.busy_power_w[i] - self.busy_power_w[i - 1])
        return t, p

    def operating_point(self, limit_w: float, clock_mhz: float | None) -> tuple[float, float]:
        """(relative step time, busy power W) under a power limit and an optional locked SM clock."""
        t_pl, p_pl = self.at_limit(limit_w)
        if clock_mhz is None:
            return t_pl, p_pl
        top_p = self.busy_power_w[-1]
        p_clk = self.idle_power_w + (top_p - self.idle_power_w) * self.clock.power_factor(clock_mhz)
        t_clk = self.time_factors[-1] * self.clock.time_factor(clock_mhz)
        return max(t_pl, t_clk), min(p_pl, p_clk)

    @classmethod
    def from_csv(cls, path: str | os.PathLike[str], **kwargs: Any) -> PowerModel:
        """Read a `power_limit,time,power` table (watts, relative step time, average watts)."""
        p = Path(path)
        text = read_text(
            p, what=f"power model {p}", expected="a CSV power_limit,time,power table", fix="save it as a UTF-8 CSV"
        )
        try:
            return cls._from_rows(p, csv.DictReader(text.splitlines()), **kwargs)
        except csv.Error as err:
            raise UsageError(f"power model {p}: not a valid CSV file ({err})") from None

    @classmethod
    def _from_rows(cls, p: Path, reader: csv.DictReader[str], **kwargs: Any) -> PowerModel:
        if not reader.fieldnames or not {"power_limit", "time", "power"} <= set(reader.fieldnames):
            raise UsageError(f"power model {p}: needs a header with columns power_limit,time,power")
        parsed: list[tuple[float, float, float]] = []
        seen: dict[float, int] = {}
        for row in reader:
            where = f"power model {p}, line {reader.line_num}"
            try:
                values = (float(row["power_limit"]), float(row["time"]), float(row["power"]))
            except (TypeError, ValueError):
                shown = repr(row) if len(repr(row)) <= 80 else repr(row)[:77] + "..."
                raise UsageError(f"{where}: power_limit, time and power must be numbers (got {shown})") from None
            for col, v in zip(("power_limit", "time", "power"), values, strict=True):
                check_model_value(col, v, where)
            if values[0] in seen:
                raise UsageError(f"{where}: power_limit {values[0]:g} W repeats line {seen[values[0]]}")
            seen[values[0]] = reader.line_num
            parsed.append(values)
        if not parsed:
            raise UsageError(f"power model {p}: no rows after the header")
        parsed.sort()
        kwargs.setdefault("name", f"Simulated GPU ({p.name})")
        return cls(tuple(r[0] for r in parsed), tuple(r[1] for r in parsed), tuple(r[2] for r in parsed), **kwargs)

    @classmethod
    def of(cls, source: PowerModel | str | os.PathLike[str] | None) -> PowerModel:
        """`source` itself when a model, the model of that CSV file when a path, else the built-in model.

        Raises:
            UsageError: the file cannot be read or does not hold a power model (it names the file and the fix).
        """
        if isinstance(source, PowerModel):
            return source
        return cls.from_csv(source) if source is not None else cls.default()

    @classmethod
    def default(cls) -> PowerModel:
        """A made-up model shaped like a 300 W data-centre GPU training a compute-bound model.

        Not measured on any GPU. Its shape follows published power-limit profiles: little slowdown down
        to about 2/3 of the maximum limit, steep slowdown below half. At eta 0.5 the Zeus cost is lowest
        at 200 W, energy per step at 175 W, time at 275-300 W.
        """
        return cls(
            power_limits_w=(100.0, 125.0, 150.0, 175.0, 200.0, 225.0, 250.0, 275.0, 300.0),
            time_factors=(2.6, 1.75, 1.35, 1.15, 1.06, 1.03, 1.01, 1.0, 1.0),
            busy_power_w=(100.0, 124.0, 148.0, 171.0, 193.0, 212.0, 228.0, 240.0, 245.0),
            idle_power_w=60.0,
            name="Simulated GPU (built-in 300 W model)",
        )


class PhysicsName(StrEnum):
    """Which physics a simulated GPU follows (`devices.simulated_physics`, `WATTWISE_SIMULATED_PHYSICS`)."""

    #: Like a real GPU: a counter that advances in steps, reads that take time, settings that settle, noise.
    REALISTIC = "realistic"
    #: Exact: the counter integrates the model at every read, settings act at once, no noise (unit tests).
    IDEAL = "ideal"


#: Chooses the simulated GPU's physics for every entry point at once (`realistic` or `ideal`).
PHYSICS_ENV = "WATTWISE_SIMULATED_PHYSICS"
#: Fixes the realistic physics' noise (an integer); unset, each run differs, as hardware does.
SEED_ENV = "WATTWISE_SIMULATED_SEED"


@dataclass(frozen=True)
class Physics:
    """How a simulated GPU departs from its power model, as a real one does. Seconds and fractions.

    `ideal()` departs in nothing. `realistic()` takes its parameters from measured devices where there are
    measurements, and says so where a parameter is assumed (see each field and docs/concepts.md).
    """

    name: PhysicsName = PhysicsName.IDEAL
    #: Mean time between two changes of the energy counter (0: it changes at every read).
    energy_update_period_s: float = 0.0
    #: Each period is drawn uniformly within +- this of the mean.
    energy_update_jitter_s: float = 0.0
    #: Median time one energy-counter read takes (0: free).
    energy_read_median_s: float = 0.0
    #: 90th percentile of that time (log-normal between the two).
    energy_read_p90_s: float = 0.0
    #: Time constant with which a new power limit or locked clock reaches its effect (0: at once).
    settle_s: float = 0.0
    #: Relative standard deviation of one step's time, drawn per step.
    step_time_noise: float = 0.0
    #: Relative standard deviation of one step's busy power above idle, drawn per step.
    power_noise: float = 0.0
    #: Relative standard deviation of busy power above idle between GPUs (fixed per GPU).
    gpu_spread: float = 0.0
    #: `power_w` averages the power over this window, in seconds (0: the power at that moment).
    power_window_s: float = 0.0
    #: Fixes the noise; None: it differs in every process.
    seed: int | None = None

    @classmethod
    def ideal(cls) -> Physics:
        """Exact figures: the model, integrated at every read; for tests that need them."""
        return cls()

    @classmethod
    def realistic(cls, seed: int | None = None) -> Physics:
        """A physics like an NVIDIA H100's, as measured on 2026-11-25 (docs/acceptance/h100-2026-11-25.md).

        Sources, per parameter:

        - energy counter period: measured, 10.5 changes per second under load (1 / 10.5 = 95 ms);
        - its jitter (+- 10 ms): assumed; the report gives the rate only;
        - energy read: measured, `nvmlDeviceGetTotalEnergyConsumption` 2.81 ms median, 5.74 ms at the 90th
          percentile (500 calls, `benchmarks/nvml_calls.py`);
        - settling of a new limit or clock (time constant 0.1 s): assumed; the report waited 1 s at a new
          limit before measuring 199.1 W under 200 W, which bounds it from above only;
        - step-to-step noise (2% of time, 2% of power) and spread between GPUs (3% of power): assumed, "a few
          per cent"; the report's repeats agree within 0.5 ms per 46-125 ms step over 44-step windows;
        - power reading averaged over 1 s: NVIDIA's NVML reference for `nvmlDeviceGetPowerUsage` (Ampere,
          except GA100, and newer average over a 1 s window).
        """
        return cls(
            name=PhysicsName.REALISTIC,
            energy_update_period_s=1.0 / 10.5,
            energy_update_jitter_s=0.010,
            energy_read_median_s=0.00281,
            energy_read_p90_s=0.00574,
            settle_s=0.1,
            step_time_noise=0.02,
            power_noise=0.02,
            gpu_spread=0.03,
            power_window_s=1.0,
            seed=seed,
        )

    @classmethod
    def named(cls, name: str | PhysicsName | None = None, seed: int | None = None) -> Physics:
        """The physics called `name`; None: `$WATTWISE_SIMULATED_PHYSICS`, else realistic.

        The realistic physics' seed is `seed`, else `$WATTWISE_SIMULATED_SEED`, else none (noise differs).

        Raises:
            UsageError: `name` or a variable is not a value they may take (the message names it).
        """
        where = "devices.simulated_physics"
        if name is None:
            name, where = os.environ.get(PHYSICS_ENV, "").strip() or PhysicsName.REALISTIC, PHYSICS_ENV
        choices = ", ".join(p.value for p in PhysicsName)
        try:
            chosen = PhysicsName(name)
        except ValueError:
            raise UsageError(f"{where} must be one of {choices} (got {name!r})") from None
        if chosen == PhysicsName.IDEAL:
            return cls.ideal()
        return cls.realistic(seed if seed is not None else seed_from_env())

    @property
    def read_sigma(self) -> float:
        """The log-normal spread of a read's time that puts its 90th percentile where measured."""
        if self.energy_read_median_s <= 0 or self.energy_read_p90_s <= self.energy_read_median_s:
            return 0.0
        return math.log(self.energy_read_p90_s / self.energy_read_median_s) / 1.2815515655446004

    def parameters(self) -> dict[str, float | int | None]:
        """The parameters, for `wattwise devices --json`."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "name"}


def seed_from_env() -> int | None:
    """`$WATTWISE_SIMULATED_SEED` as an integer; None when unset or empty.

    Raises:
        UsageError: It is set to something other than an integer.
    """
    value = os.environ.get(SEED_ENV, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(
            f"{SEED_ENV} must be an integer (got {value!r}); unset it for noise that differs per run"
        ) from None


#: How often a process publishes the load it drives to a shared load file, at most (seconds).
PUBLISH_LOAD_S = 0.5
#: A load file holds one small JSON object: `{"load_j": joules}`.
MAX_LOAD_BYTES = 4096


def load_file_of(state_file: str | os.PathLike[str]) -> Path:
    """The shared load counter beside a simulated GPU's state file: `gpu<index>.load.json`."""
    path = Path(state_file)
    return path.with_name(f"{path.stem}.load.json")


def _parse_load_j(raw: bytes) -> float | None:
    """The joules a load file holds, or None when it holds no finite non-negative number."""
    try:
        value = json.loads(raw).get("load_j")
    except (ValueError, AttributeError):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


#: A state file holds two settings; anything far larger is not one.
MAX_STATE_BYTES = 1 << 16


def parse_state(state: dict[str, Any], clock: ClockModel) -> tuple[float, tuple[int, int] | None]:
    """The settings in a state file's object: (power limit in W, locked SM clock range in MHz or None).

    Args:
        state: the file's JSON object (`{"power_limit_w": W, "locked_sm_clocks_mhz": [lo, hi] or null}`).
        clock: the GPU's clock model: a locked range must lie within its clocks, as `lock_sm_clocks_mhz`
            asks.

    Raises:
        UsageError: naming the setting that is missing, of the wrong type or outside its bound.
    """
    limit_w = POWER_LIMIT_W.check_number(state.get("power_limit_w"), "power_limit_w")
    locked = state.get("locked_sm_clocks_mhz")
    if locked is None:
        return limit_w, None
    if not isinstance(locked, list) or len(locked) != 2:
        raise UsageError(f"locked_sm_clocks_mhz must be null or [lowest, highest] MHz (got {locked!r})")
    low, high = (check_integer(mhz, "locked_sm_clocks_mhz", low=clock.min_mhz, high=clock.max_mhz) for mhz in locked)
    if low > high:
        raise UsageError(f"locked_sm_clocks_mhz [{low}, {high}] must name the lowest clock first")
    return limit_w, (low, high)


class SimulatedGPU(Device):
    """A GPU that follows a `PowerModel`. See the module docstring."""

    backend = "simulated"
    simulated = True

    def __init__(
        self,
        index: int = 0,
        model: PowerModel | None = None,
        *,
        state_file: str | os.PathLike[str] | None = None,
        base_step_time_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        physics: Physics | None = None,
    ) -> None:
        self._index = index
        self.model = model or PowerModel.default()
        self.base_step_time_s = base_step_time_s
        #: How it departs from its model (`Physics`); None: `Physics.named()` (the environment, else realistic).
        self.physics = physics if physics is not None else Physics.named()
        #: The clock its energy counter integrates over; the monitor times windows with it too, so a test
        #: can drive a simulated GPU, its workload and the monitor with one virtual clock.
        self.clock = clock
        self.sleep = sleep
        self._lock = threading.RLock()
        self._state_file = Path(state_file) if state_file is not None else None
        hi = self.model.limit_range_w[1]
        self._default_limit_w = hi
        self._limit_w = hi
        self._locked: tuple[int, int] | None = None
        self._state_sig: tuple[int, int, int] | None = None
        self._load_state()
        self._busy = 0
        self._driven = False
        self._energy_j = 0.0
        #: Energy drawn above idle by the work this process drove (J), and how much of it is published.
        self._load_j = 0.0
        self._published_load_j = 0.0
        self._published_s = 0.0
        self._publish_to: Path | None = None
        #: The load file this GPU counts in its energy (the agent's view), and the highest value read.
        self._count_from: Path | None = None
        self._counted_load_j = 0.0
        self._last_s = self.clock()
        self._init_physics()

    # -- settings persistence -------------------------------------------------------------------------
    def _load_state(self) -> None:
        """Read the settings from the state file (see the module docstring); missing or rejected: the defaults."""
        self._state_sig = self._signature()
        self._limit_w, self._locked = self._default_limit_w, None
        if self._state_sig is None:
            return
        assert self._state_file is not None
        try:
            state = read_trusted_json(self._state_file, max_bytes=MAX_STATE_BYTES, root_ok=True)
            self._limit_w, self._locked = parse_state(state, self.model.clock)
        except FileNotFoundError:
            return
        except UntrustedFile as err:
            self._reject_state(str(err))
        except ValueError as err:
            self._reject_state(f"holds no settings of a simulated GPU: {err}")

    def _reject_state(self, why: str) -> None:
        """One warning for a state file that cannot be used; set aside when it is this user's own."""
        assert self._state_file is not None
        where = set_aside_if_mine(self._state_file)
        self._state_sig = self._signature()
        plugin_warning(
            f"wattwise: simulated GPU {self._index}: its state file {self._state_file} {why}; the GPU "
            f"starts from its defaults ({self._default_limit_w:g} W, clocks unlocked) and the file is "
            f"{where}",
            stacklevel=2,
        )

    def _signature(self) -> tuple[int, int, int] | None:
        """What identifies the state file's current content (None: no file, or no state file at all)."""
        if self._state_file is None:
            return None
        try:
            st = os.lstat(self._state_file)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _refresh(self) -> None:
        """Re-read the settings when the state file changed since this object last looked.

        Settings are the state file's, as a real GPU's are the hardware's: another process (a restore after
        a crash) may have changed them.
        """
        if self._state_file is None:
            return
        with self._lock:
            if self._signature() != self._state_sig:
                self._advance()
                self._settings_changing()
                self._load_state()

    def _save_state(self, limit_w: float, locked: tuple[int, int] | None) -> None:
        """Persist new settings, then adopt them; a state file that cannot be written changes nothing."""
        if self._state_file is not None:
            payload = {"power_limit_w": limit_w, "locked_sm_clocks_mhz": list(locked) if locked else None}
            try:
                private_dir(self._state_file.parent)
                # Readable by the node agent's users (their processes read its GPUs' state), writable by its owner.
                try:
                    write_text(self._state_file, json.dumps(payload), mode=0o644)
                except OSError as err:
                    if err.errno not in (errno.ENOSPC, errno.EDQUOT) or not self._state_file.is_file():
                        raise
                    _overwrite_in_place(self._state_file, json.dumps(payload))  # a restore on a full disk
            except OSError as err:
                raise DeviceError(
                    f"simulated GPU {self._index}: cannot save its settings to {self._state_file} "
                    f"({err.strerror or err})"
                ) from None
            self._state_sig = self._signature()
        self._limit_w, self._locked = limit_w, locked

    # -- physics --------------------------------------------------------------------------------------
    def _init_physics(self) -> None:
        """The state of `physics`: noise, this GPU's efficiency, the counter's steps, settling, power history."""
        phys = self.physics
        seed = phys.seed
        self._rng = random.Random(f"{seed}/{self._index}") if seed is not None else random.Random()
        #: This GPU's busy power above idle relative to the model's (GPUs of one node differ): a property of
        #: the GPU at this index, the same in every process and every run (as a real GPU's is), whatever the seed.
        digest = hashlib.sha256(f"simulated GPU {self._index}".encode()).digest()
        draw = random.Random(int.from_bytes(digest[:8], "big")).gauss(0.0, 1.0)
        self.efficiency = 1.0 + phys.gpu_spread * max(-3.0, min(3.0, draw))
        #: The busy power's noise factor of the step running now (drawn when the GPU becomes busy).
        self._power_factor = 1.0
        #: The counter's value (J, this process's) at its last update, and when it updates next.
        self._counter_j = 0.0
        self._next_update_s = self._last_s + self._update_interval_s()
        #: A setting changed at `_settle_at_s` from the operating point `_settle_from` (time factor, busy W).
        self._settle_from: tuple[float, float] | None = None
        self._settle_at_s = self._last_s
        #: (time, energy J) points of the last `power_window_s`, for the averaged `power_w`.
        self._history: deque[tuple[float, float]] = deque([(self._last_s, 0.0)])

    def _update_interval_s(self) -> float:
        phys = self.physics
        jitter = phys.energy_update_jitter_s
        return phys.energy_update_period_s + (self._rng.uniform(-jitter, jitter) if jitter else 0.0)

    def _clock_mhz(self) -> float | None:
        return float(self._locked[1]) if self._locked else None

    def _target_point(self) -> tuple[float, float]:
        """(relative step time, busy power W) the current settings lead to, with this GPU's efficiency."""
        t, p = self.model.operating_point(self._limit_w, self._clock_mhz())
        if self.efficiency != 1.0:
            idle = self.model.idle_power_w
            p = idle + (p - idle) * self.efficiency
        return t, p

    def _point_at(self, now: float) -> tuple[float, float]:
        """(relative step time, busy power W) in force at `now`, settling towards the target after a change."""
        target = self._target_point()
        if self._settle_from is None:
            return target
        weight = math.exp(-max(0.0, now - self._settle_at_s) / self.physics.settle_s)
        if weight < 1e-6:
            self._settle_from = None
            return target
        (t0, p0), (t1, p1) = self._settle_from, target
        return t1 + (t0 - t1) * weight, p1 + (p0 - p1) * weight

    def _settings_changing(self) -> None:
        """Called before the settings change: the old operating point starts settling towards the new one."""
        if self.physics.settle_s > 0:
            now = self.clock()
            self._settle_from = self._point_at(now)
            self._settle_at_s = now

    def busy_power_w(self) -> float:
        """Modelled power while emulated work runs at the current settings (settled as far as it has)."""
        return self._point_at(self.clock())[1]

    def step_time_s(self, base_time_s: float | None = None) -> float:
        """Modelled time of one step at the current settings; `base_time_s` is its time at full power.

        Under the realistic physics each call draws the step's own noise.
        """
        self._refresh()
        base = self.base_step_time_s if base_time_s is None else base_time_s
        with self._lock:
            factor = self._point_at(self.clock())[0]
            noise = self.physics.step_time_noise
            if noise:
                factor *= max(0.5, 1.0 + self._rng.gauss(0.0, noise))
        return base * factor

    def _energy_between_j(self, start_s: float, end_s: float) -> float:
        """Energy drawn in [start_s, end_s] at the present state (busy or idle, settling), in joules."""
        if end_s <= start_s:
            return 0.0
        idle = self.model.idle_power_w
        if not self._busy:
            return idle * (end_s - start_s)
        if self._settle_from is None:
            return self._target_point()[1] * self._power_factor * (end_s - start_s)
        tau = self.physics.settle_s
        target_w = self._target_point()[1]
        from_w = self._settle_from[1]
        decay = math.exp(-(start_s - self._settle_at_s) / tau) - math.exp(-(end_s - self._settle_at_s) / tau)
        return (target_w * (end_s - start_s) + (from_w - target_w) * tau * decay) * self._power_factor

    def _advance(self) -> None:
        now = self.clock()
        start = self._last_s
        if now <= start:
            return
        energy = self._energy_between_j(start, now)
        period = self.physics.energy_update_period_s
        if period > 0:
            if now - self._next_update_s > 1000 * period:  # long unread (idle): skip to the last few updates
                skipped = math.floor((now - self._next_update_s) / period) - 1
                self._next_update_s += skipped * period
            while self._next_update_s <= now:
                self._counter_j = self._energy_j + self._energy_between_j(start, max(start, self._next_update_s))
                self._next_update_s += self._update_interval_s()
        self._energy_j += energy
        self._load_j += energy - self.model.idle_power_w * (now - start)
        self._last_s = now
        if period <= 0:
            self._counter_j = self._energy_j
        window = self.physics.power_window_s
        if window > 0:
            self._history.append((now, self._energy_j))
            while len(self._history) > 2 and self._history[1][0] <= now - window:
                self._history.popleft()

    def _average_power_w(self) -> float:
        """The power averaged over the last `power_window_s` (as NVML reports it on recent GPUs)."""
        now, energy = self._last_s, self._energy_j
        (t0, e0), (t1, e1) = self._history[0], self._history[1] if len(self._history) > 1 else self._history[0]
        since = now - self.physics.power_window_s
        if since > t0 and t1 > t0:
            e0 += (e1 - e0) * (min(since, t1) - t0) / (t1 - t0)
            t0 = min(since, t1)
        if now - t0 <= 0:
            return self._instant_power_w()
        return (energy - e0) / (now - t0)

    def _instant_power_w(self) -> float:
        return self._point_at(self.clock())[1] * self._power_factor if self._busy else self.model.idle_power_w

    # -- load shared with a node agent ----------------------------------------------------------------
    def publish_load(self, path: str | os.PathLike[str]) -> None:
        """Add the load this process drives (energy above idle) to the counter file at `path`.

        The node agent serving this GPU counts that file in its energy. Best effort: a file it cannot write
        stops it.
        """
        self._publish_to = Path(path)

    def count_load(self, path: str | os.PathLike[str]) -> None:
        """Count the load other processes publish at `path` in `energy_j` (the node agent's own GPU)."""
        self._count_from = Path(path)

    def _publish(self) -> None:
        """Add the load not yet published to the shared counter (under its flock); at most every PUBLISH_LOAD_S."""
        if self._publish_to is None:
            return
        now = self.clock()
        delta = self._load_j - self._published_load_j
        if delta <= 0 or now - self._published_s < PUBLISH_LOAD_S:
            return
        self._published_s = now
        try:
            fd = os.open(self._publish_to, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                total = _parse_load_j(os.read(fd, MAX_LOAD_BYTES)) or 0.0
                data = json.dumps({"load_j": total + delta}).encode()
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
        except BlockingIOError:
            return  # another process is adding its load: this one is added next time
        except OSError:
            self._publish_to = None  # not shared after all (no agent, or no permission): never break a run
            return
        self._published_load_j += delta

    def _counted(self) -> float:
        """The load published by other processes, never going down (a torn read keeps the last value)."""
        if self._count_from is None:
            return 0.0
        try:
            fd = os.open(self._count_from, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            try:
                value = _parse_load_j(os.read(fd, MAX_LOAD_BYTES))
            finally:
                os.close(fd)
        except OSError:
            value = None
        if value is not None and value > self._counted_load_j:
            self._counted_load_j = value
        return self._counted_load_j

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Mark emulated work as running on this GPU (busy power) for the body of the `with`."""
        with self._lock:
            self._advance()
            if not self._busy and self.physics.power_noise:
                self._power_factor = max(0.5, 1.0 + self._rng.gauss(0.0, self.physics.power_noise))
            self._busy += 1
            self._driven = True
        try:
            yield
        finally:
            with self._lock:
                self._advance()
                self._busy -= 1
                if not self._busy:
                    self._publish()

    def run_step(self, work: Callable[[], Any] | None = None, base_time_s: float | None = None) -> float:
        """Run `work` as one busy step lasting the modelled step time; returns the seconds it took.

        The real work (a tiny model on the CPU) runs first; the step then sleeps for the difference to
        the modelled time, so wall time and energy follow the current power limit and clock.
        """
        target_s = self.step_time_s(base_time_s)
        with self.busy():
            start = self.clock()
            if work is not None:
                work()
            remaining = target_s - (self.clock() - start)
            if remaining > 0:
                self.sleep(remaining)
            return self.clock() - start

    # -- Device interface -----------------------------------------------------------------------------
    @property
    def driven(self) -> bool:
        """True once emulated work ran in this process; undriven, its figures are idle power only, never a saving."""
        return self._driven

    @property
    def simulation(self) -> SimulatedGPU:
        """This GPU: emulated work drives it."""
        return self

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        return self.model.name

    def has_energy_counter(self) -> bool:
        return True

    @property
    def energy_update_period_s(self) -> float:
        """The mean time between two changes of the energy counter (`Physics.energy_update_period_s`)."""
        return self.physics.energy_update_period_s

    def energy_j(self) -> float:
        """The counter at its last update (the realistic physics' read takes its time first, through `sleep`)."""
        phys = self.physics
        if phys.energy_read_median_s > 0:
            with self._lock:
                read_s = phys.energy_read_median_s * math.exp(self._rng.gauss(0.0, phys.read_sigma))
            self.sleep(read_s)
        with self._lock:
            self._advance()
            return self._counter_j + self._counted()

    def power_w(self) -> float:
        """The power now, or averaged over the last `Physics.power_window_s` (the realistic physics)."""
        with self._lock:
            if self.physics.power_window_s <= 0:
                return self._instant_power_w()
            self._advance()
            return self._average_power_w()

    def power_limit_w(self) -> float:
        self._refresh()
        return self._limit_w

    def power_limit_range(self) -> PowerLimitRange:
        lo, hi = self.model.limit_range_w
        return PowerLimitRange(min_w=lo, max_w=hi, default_w=self._default_limit_w)

    def set_power_limit_w(self, watts: float) -> None:
        lo, hi = self.model.limit_range_w
        if not (lo <= watts <= hi):
            raise UsageError(
                f"power limit {watts} W is outside the allowed range [{lo}, {hi}] W of simulated GPU {self._index}"
            )
        with self._lock:
            self._refresh()
            self._advance()
            self._settings_changing()
            self._save_state(float(watts), self._locked)

    def supported_sm_clocks_mhz(self) -> list[int]:
        return self.model.clock.supported_mhz()

    def locked_sm_clocks_mhz(self) -> tuple[int, int] | None:
        self._refresh()
        return self._locked

    def lock_sm_clocks_mhz(self, min_mhz: int, max_mhz: int) -> None:
        clocks = self.model.clock
        if not (clocks.min_mhz <= min_mhz <= max_mhz <= clocks.max_mhz):
            raise UsageError(
                f"SM clock range [{min_mhz}, {max_mhz}] MHz is outside "
                f"[{clocks.min_mhz}, {clocks.max_mhz}] MHz of simulated GPU {self._index}"
            )
        with self._lock:
            self._refresh()
            self._advance()
            self._settings_changing()
            self._save_state(self._limit_w, (int(min_mhz), int(max_mhz)))

    def reset_sm_clocks(self) -> None:
        with self._lock:
            self._refresh()
            self._advance()
            self._settings_changing()
            self._save_state(self._limit_w, None)

    def spec(self) -> dict[str, Any]:
        return {
            "backend": "simulated",
            "index": self._index,
            "state_file": str(self._state_file) if self._state_file else None,
            "limit_range_w": list(self.model.limit_range_w),
            "physics": self.physics.name.value,
        }

    def describe(self) -> dict[str, Any]:
        info = super().describe()
        info["idle_power_w"] = self.model.idle_power_w
        info["sm_clock_range_mhz"] = [self.model.clock.min_mhz, self.model.clock.max_mhz]
        info["physics"] = self.physics.name.value
        info["energy_update_period_s"] = self.energy_update_period_s
        info["physics_parameters"] = {**self.physics.parameters(), "efficiency": self.efficiency}
        return info


def open_simulated_spec(spec: dict[str, Any]) -> SimulatedGPU:
    """Reopen a simulated GPU from `SimulatedGPU.spec()`, in any process.

    The built-in model narrowed to the spec's power-limit range, with the spec's state file (so its
    settings are the ones the GPU left).
    """
    lo, hi = spec.get("limit_range_w") or PowerModel.default().limit_range_w
    model = dataclasses.replace(PowerModel.default(), min_limit_w=float(lo), max_limit_w=float(hi))
    physics = spec.get("physics")
    try:
        chosen = Physics.named(str(physics)) if physics is not None else Physics.named()
    except UsageError as err:
        raise DeviceError(f"cannot reopen simulated GPU {spec.get('index', 0)}: {err}") from None
    return SimulatedGPU(int(spec.get("index", 0)), model, state_file=spec.get("state_file"), physics=chosen)


def _overwrite_in_place(path: Path, text: str) -> None:
    """Write `text` over the existing file `path`, without making a new file.

    Settings still change (and are restored) on a full disk, where the atomic write needs a block it cannot
    get. Text no longer than the file is padded with spaces (JSON allows them) and takes no new block; longer
    text is written after truncating the file, which frees its blocks first. Not atomic: only when the
    atomic write failed for lack of space.

    Raises:
        OSError: the file is missing, a symbolic link, or cannot be written even so.
    """
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        if len(data) <= size:
            data += b" " * (size - len(data))
        else:
            os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
