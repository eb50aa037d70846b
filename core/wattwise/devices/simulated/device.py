"""The simulated GPU itself: a `Device` that follows a power model under a physics.

Its energy counter integrates the modelled power over real wall time: busy power while emulated work
runs (`busy()` / `run_step()`), idle power otherwise. Changing the power limit or the clock changes what
the emulated work costs, so every decision wattwise makes can be exercised end to end. Its settings are
its state file's (`wattwise.devices.simulated.state`): reading a setting re-reads the file when another
process changed it; one that cannot be trusted or holds no valid settings leaves the GPU at its
defaults, with one warning, and is set aside as `gpuN.json.rejected` when it is the user's own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from wattwise.devices.base import Device, DeviceDescription, DeviceError, DeviceSpec, PowerLimitRange
from wattwise.devices.simulated.load import PUBLISH_LOAD_S, add_load_j, read_load_j
from wattwise.devices.simulated.models import PowerModel
from wattwise.devices.simulated.physics import Physics
from wattwise.devices.simulated.state import MAX_STATE_BYTES, parse_state, signature, write_state
from wattwise.errors import UsageError, plugin_warning
from wattwise.safe_files import UntrustedFile, read_trusted_json, set_aside_if_mine

#: A GPU's departure from the mean is drawn within this many standard deviations (Sinha et al., SC'22: up
#: to 22% between the fastest and the slowest of one SKU, about 7 of the 3% deviations).
SPREAD_CLIP = 3.5


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
        #: The power model it was given; `model` is that model with the preset's clocks, if any.
        self.given_model = model or PowerModel.default()
        self.base_step_time_s = base_step_time_s
        #: How it departs from its model (`Physics`); None: `Physics.named()` (the environment, else realistic).
        self.physics = physics if physics is not None else Physics.named()
        preset_clock = self.physics.clock
        self.model = (
            dataclasses.replace(self.given_model, clock=preset_clock) if preset_clock is not None else self.given_model
        )
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
            saved = read_trusted_json(self._state_file, max_bytes=MAX_STATE_BYTES, root_ok=True)
            self._limit_w, self._locked = parse_state(saved, self.model.clock)
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
        return signature(self._state_file) if self._state_file is not None else None

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
            try:
                write_state(self._state_file, limit_w, locked)
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
        #: The power this GPU needs for the model's work, relative to the model's (GPUs of one node differ;
        #: Sinha et al., SC'22): a property of the GPU at this index, the same in every process and every run
        #: (as a real GPU's is), whatever the seed. It shows in busy power while no cap binds, and in time under
        #: a binding cap: the power never exceeds the limit.
        digest = hashlib.sha256(f"simulated GPU {self._index}".encode()).digest()
        draw = random.Random(int.from_bytes(digest[:8], "big")).gauss(0.0, 1.0)
        self.efficiency = 1.0 + phys.gpu_spread * max(-SPREAD_CLIP, min(SPREAD_CLIP, draw))
        #: How far above ambient the GPU has warmed (K; stays 0 without `Physics.temperature_rise_k`).
        self.temperature_rise_k = 0.0
        #: The busy power's noise factor of the step running now (drawn when the GPU becomes busy).
        self._power_factor = 1.0
        #: The counter's value (J, this process's) at its last update, and when it updates next.
        self._counter_j = 0.0
        self._next_update_s = self._last_s + self._update_interval_s()
        #: A setting changed at `_settle_at_s` from the operating point `_settle_from` (time factor, busy W).
        self._settle_from: tuple[float, float] | None = None
        self._settle_at_s = self._last_s
        #: The time constant of the settling in progress: the power limit's or the clock's.
        self._settle_tau_s = phys.settle_s
        #: (time, energy J) points of the last `power_window_s`, for the averaged `power_w`.
        self._history: deque[tuple[float, float]] = deque([(self._last_s, 0.0)])

    def _update_interval_s(self) -> float:
        phys = self.physics
        jitter = phys.energy_update_jitter_s
        return phys.energy_update_period_s + (self._rng.uniform(-jitter, jitter) if jitter else 0.0)

    def _clock_mhz(self) -> float | None:
        return float(self._locked[1]) if self._locked else None

    def _target_point(self) -> tuple[float, float]:
        """(relative step time, busy power W) the current settings lead to, for this GPU.

        This GPU needs `efficiency` (and, warm, more) times the model's power above idle for the model's
        work. Where that stays within the power limit it draws it; where it would not, the limit binds: it
        draws the limit and runs slower by as much (work in proportion to the power above idle).
        """
        t, p = self.model.operating_point(self._limit_w, self._clock_mhz())
        need = self.efficiency * (1.0 + self.physics.power_per_k * self.temperature_rise_k)
        if need == 1.0:
            return t, p
        idle = self.model.idle_power_w
        wanted_w = idle + (p - idle) * need
        if wanted_w <= self._limit_w or self._limit_w <= idle:
            return t, wanted_w
        return t * (wanted_w - idle) / (self._limit_w - idle), self._limit_w

    def _noisy_w(self, power_w: float) -> float:
        """A busy power with this step's noise, never above the limit where the power itself is not."""
        return min(power_w * self._power_factor, max(power_w, self._limit_w))

    def _point_at(self, now: float) -> tuple[float, float]:
        """(relative step time, busy power W) in force at `now`, settling towards the target after a change."""
        target = self._target_point()
        if self._settle_from is None:
            return target
        weight = math.exp(-max(0.0, now - self._settle_at_s) / self._settle_tau_s)
        if weight < 1e-6:
            self._settle_from = None
            return target
        (t0, p0), (t1, p1) = self._settle_from, target
        return t1 + (t0 - t1) * weight, p1 + (p0 - p1) * weight

    def _settings_changing(self, tau_s: float | None = None) -> None:
        """Called before the settings change: the old operating point starts settling towards the new one.

        `tau_s` is the changed setting's time constant: the power limit's (the default) or the clock's.
        """
        tau_s = self.physics.settle_s if tau_s is None else tau_s
        now = self.clock()
        if tau_s > 0:
            self._settle_from = self._point_at(now)
            self._settle_at_s = now
            self._settle_tau_s = tau_s
        elif self._settle_from is not None:
            self._settle_from = None  # a setting that acts at once ends the settling in progress

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
            return self._noisy_w(self._target_point()[1]) * (end_s - start_s)
        tau = self._settle_tau_s
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
        self._warm(now - start)  # after the interval's energy: it was drawn at the temperature it began with
        if period <= 0:
            self._counter_j = self._energy_j
        window = self.physics.power_window_s
        if window > 0:
            self._history.append((now, self._energy_j))
            while len(self._history) > 2 and self._history[1][0] <= now - window:
                self._history.popleft()

    def _warm(self, seconds: float) -> None:
        """Move the temperature towards its steady state for `seconds`: busy power warms the GPU, idle cools it."""
        phys = self.physics
        if phys.temperature_rise_k <= 0 or phys.temperature_tau_s <= 0:
            return
        steady_k = 0.0
        if self._busy:
            idle, top_w = self.model.idle_power_w, self.model.busy_power_w[-1]
            load = (self._target_point()[1] - idle) / (top_w - idle) if top_w > idle else 1.0
            steady_k = phys.temperature_rise_k * max(0.0, min(1.5, load))
        weight = math.exp(-seconds / phys.temperature_tau_s)
        self.temperature_rise_k = steady_k + (self.temperature_rise_k - steady_k) * weight

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
        return self._noisy_w(self._point_at(self.clock())[1]) if self._busy else self.model.idle_power_w

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
            added = add_load_j(self._publish_to, delta)
        except BlockingIOError:
            return  # another process is adding its load: this one is added next time
        except OSError:
            self._publish_to = None  # not shared after all (no agent, or no permission): never break a run
            return
        if not added:
            return
        self._published_load_j += delta

    def _counted(self) -> float:
        """The load published by other processes, never going down (a torn read keeps the last value)."""
        if self._count_from is None:
            return 0.0
        value = read_load_j(self._count_from)
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

    def on_clock(self, clock: Callable[[], float], sleep: Callable[[float], None]) -> SimulatedGPU:
        """This GPU (its model, physics and index) timed by `clock` and `sleep`, with no state file.

        A virtual clock makes what emulated work measures on it independent of how busy the machine's CPUs
        are: each step lasts exactly its modelled time.
        """
        return SimulatedGPU(
            self._index,
            self.given_model,
            base_step_time_s=self.base_step_time_s,
            clock=clock,
            sleep=sleep,
            physics=self.physics,
        )

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
        self._set_clocks((int(min_mhz), int(max_mhz)))

    def reset_sm_clocks(self) -> None:
        self._set_clocks(None)

    def _set_clocks(self, locked: tuple[int, int] | None) -> None:
        """Lock (or reset) the SM clock: the call takes `Physics.clock_set_s`, then the clock settles open loop."""
        if self.physics.clock_set_s > 0:
            self.sleep(self.physics.clock_set_s)
        with self._lock:
            self._refresh()
            self._advance()
            self._settings_changing(self.physics.clock_settle_s)
            self._save_state(self._limit_w, locked)

    def spec(self) -> DeviceSpec:
        return {
            "backend": "simulated",
            "index": self._index,
            "state_file": str(self._state_file) if self._state_file else None,
            "limit_range_w": list(self.model.limit_range_w),
            "physics": self.physics.name.value,
            "simulated_gpu": self.physics.gpu.value if self.physics.gpu is not None else None,
        }

    def describe(self) -> DeviceDescription:
        info = super().describe()
        info["idle_power_w"] = self.model.idle_power_w
        info["sm_clock_range_mhz"] = [self.model.clock.min_mhz, self.model.clock.max_mhz]
        info["physics"] = self.physics.name.value
        info["energy_update_period_s"] = self.energy_update_period_s
        info["physics_parameters"] = {**self.physics.parameters(), "efficiency": self.efficiency}
        preset = self.physics.preset
        info["simulated_gpu"] = preset.name.value if preset is not None else None
        info["preset"] = preset.describe() if preset is not None else None
        return info


def open_simulated_spec(spec: DeviceSpec) -> SimulatedGPU:
    """Reopen a simulated GPU from `SimulatedGPU.spec()`, in any process.

    The built-in model narrowed to the spec's power-limit range, with the spec's state file (so its
    settings are the ones the GPU left).
    """
    lo, hi = spec.get("limit_range_w") or PowerModel.default().limit_range_w
    model = dataclasses.replace(PowerModel.default(), min_limit_w=float(lo), max_limit_w=float(hi))
    physics = spec.get("physics")
    try:
        gpu = spec.get("simulated_gpu")
        chosen = Physics.named(str(physics) if physics is not None else None, gpu=str(gpu) if gpu is not None else None)
    except UsageError as err:
        raise DeviceError(f"cannot reopen simulated GPU {spec.get('index', 0)}: {err}") from None
    return SimulatedGPU(int(spec.get("index", 0)), model, state_file=spec.get("state_file"), physics=chosen)
