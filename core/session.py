"""The framework-neutral energy session that both adapters drive.

An adapter translates its framework's life cycle into calls on `EnergySession`:

    start() -> [epoch_begin() -> (step_begin() -> step_end())* -> epoch_end()]* -> finish()
    abort(exc) on an exception; state_dict()/load_state_dict() for checkpoints.

The session owns the devices, the energy monitor, the settings guard and the power-limit decision
(measure, tune or cap). It never breaks training: an error while changing a setting degrades to
measurement only, an error while measuring turns measurement off, each with one warning (unless
`strict`). Under distributed training each process measures its own GPUs; figures are combined with
`torch.distributed` (energy summed, time maxed) so every process makes the same decision.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from wattwise import __version__
from wattwise.carbon.policy import CarbonAwarePowerLimit
from wattwise.carbon.series import INTENSITY, Constant, Series, load_series_csv
from wattwise.config import EnergyConfig
from wattwise.devices import Device, DeviceError, discover
from wattwise.distributed import Collective, default_collective
from wattwise.errors import UsageError
from wattwise.guard import SettingsGuard
from wattwise.limits_memory import LimitsMemory, memory_key
from wattwise.monitor import EnergyMonitor, Measurement, cuda_sync
from wattwise.power_limit import PowerLimitTuner, ProfileEntry, cap_limit_w, profile_limits_w, zeus_cost

log = logging.getLogger(__name__)

FIT, EPOCH, STEP, PROFILE = "fit", "epoch", "step", "power_limit_profile"


class EnergyPluginWarning(UserWarning):
    """wattwise degraded (e.g. to measurement only) instead of breaking training."""


@dataclasses.dataclass
class StepRecord:
    """The last step's measurement, combined over processes (energy summed, time maxed)."""

    time_s: float
    energy_j: float

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc).isoformat()


class EnergySession:
    """Measurement and power-limit decisions for one training run. See the module docstring."""

    def __init__(
        self,
        cfg: EnergyConfig,
        *,
        framework: str = "cli",
        collective: Collective | None = None,
        devices: Sequence[Device] | None = None,
        local_rank: int | None = None,
        batch_size: int | None = None,
        sync: Callable[[], None] | None = None,
        limits_memory: LimitsMemory | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.framework = framework
        self.collective = collective
        self._given_devices = list(devices) if devices is not None else None
        self._local_rank = local_rank
        self.batch_size = batch_size
        self._sync = sync
        self.memory = limits_memory
        self.gpus: list[Device] = []
        self.cpus: list[Device] = []
        self.notes: list[str] = []
        self.monitor: EnergyMonitor | None = None
        self.guard: SettingsGuard | None = None
        self.tuner: PowerLimitTuner | None = None
        self.mode = cfg.power_limit.mode
        self.measuring = False
        self.started = False
        self.finished = False
        self.applied_limit_w: float | None = None
        self.step_count = 0
        self.steps_at_chosen = 0
        self.epochs: list[dict[str, Any]] = []
        self.last_step: StepRecord | None = None
        self.settings_timeline: list[dict[str, Any]] = []
        self.prior_energy_j = 0.0
        self.prior_time_s = 0.0
        self.reused = False
        self._warned = False
        self._start_wall = 0.0
        self._epoch_index = 0
        self._resumed_state: dict[str, Any] | None = None
        self._samples: list[tuple[float, dict[str, float]]] = []
        self._wall = wall_clock
        self.carbon_policy: CarbonAwarePowerLimit | None = None
        self._intensity: Series | None = None

    # -- helpers ---------------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.collective.rank if self.collective else 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def simulated(self) -> bool:
        return any(d.simulated for d in self.gpus)

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"wattwise: {message}", EnergyPluginWarning, stacklevel=3)

    def _degrade(self, err: BaseException, what: str) -> None:
        """Setting errors: restore and go on measuring. Raised instead in strict mode."""
        if self.cfg.strict:
            raise err
        self._warn(f"{what} failed ({err}); continuing with measurement only "
                   "(set strict=True to make this an error)")
        self.mode = "measure"
        self.tuner = None
        if self.guard is not None:
            self.guard.restore_all()
        self.applied_limit_w = None

    def _stop_measuring(self, err: BaseException) -> None:
        if self.cfg.strict:
            raise err
        self._warn(f"energy measurement failed ({err}); training goes on without it")
        self.measuring = False
        if self.guard is not None:
            self.guard.restore_all()

    # -- life cycle ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Find devices, open the fit window and apply the starting power limit (cap or reuse)."""
        if self.started:
            return
        self.started = True
        if self.collective is None:
            self.collective = default_collective()
        try:
            self._open_devices()
        except UsageError:
            raise
        except Exception as err:
            self._stop_measuring(err)
            return
        try:
            self._setup_power_limit()
        except (DeviceError, UsageError) as err:
            self._degrade(err, "setting up the power limit")
        self._start_wall = self._wall()
        if self.measuring and self.monitor is not None:
            self.monitor.begin_window(FIT)

    def _open_devices(self) -> None:
        cfg = self.cfg
        if self._given_devices is not None:
            self.gpus = self._given_devices
        else:
            indices = cfg.devices.gpus
            if indices is None and self.collective is not None and self.collective.world_size > 1:
                local = self._local_rank
                if local is None:
                    local = int(os.environ.get("LOCAL_RANK", self.collective.rank))
                indices = [local]
            sim = cfg.devices.simulated
            found = discover(cfg.devices.backend, gpu_indices=indices, include_cpu=cfg.devices.cpu,
                             num_simulated=sim.num_gpus, power_model=sim.power_model,
                             base_step_time_s=sim.base_step_time_s, persist_dir=sim.state_dir)
            self.gpus, self.cpus, self.notes = found.gpus, found.cpus, found.notes
            if found.simulated and self.is_main:
                log.warning("wattwise: %s", found.notes[-1] if found.notes else "using the simulated GPU")
        out = Path(cfg.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        log_file = out / ("windows.csv" if self.is_main else f"windows-rank{self.rank}.csv")
        sync = self._sync if self._sync is not None else (cuda_sync if cfg.monitor.sync_cuda else None)
        self.monitor = EnergyMonitor([*self.gpus, *self.cpus], sync=sync, log_file=log_file,
                                     sample_power=cfg.monitor.sample_power,
                                     sample_interval_s=cfg.monitor.sample_interval_s)
        self.measuring = True

    def _memory_key(self) -> str | None:
        if not self.cfg.job or not self.gpus:
            return None
        world = self.collective.world_size if self.collective else 1
        return memory_key(self.cfg.job, self.gpus[0].name, len(self.gpus) * world, self.batch_size)

    def _setup_power_limit(self) -> None:
        pl = self.cfg.power_limit
        if self.mode == "measure" or not self.gpus:
            return
        self.guard = SettingsGuard()
        self.guard.install_signal_handlers()
        rng = self.gpus[0].power_limit_range()
        if self.mode == "cap":
            self._apply_limit(cap_limit_w(rng.max_w, rng.min_w, cap_w=pl.cap_w, cap_fraction=pl.cap_fraction))
            return
        if self.cfg.carbon.aware:
            c = self.cfg.carbon
            self._intensity = (Constant(float(c.intensity_g_per_kwh), "carbon.intensity_g_per_kwh")
                               if c.intensity_g_per_kwh is not None
                               else load_series_csv(Path(str(c.intensity_csv)), INTENSITY))
        world = self.collective.world_size if self.collective else 1
        self.tuner = PowerLimitTuner(
            profile_limits_w(rng.min_w, rng.max_w, pl.step_w), selector=pl.selector, eta=pl.eta,
            max_slowdown=pl.max_slowdown, max_power_w=rng.max_w * len(self.gpus) * world,
            wait_steps=pl.wait_steps, warmup_steps=pl.warmup_steps, profile_steps=pl.profile_steps)
        if self._resumed_state is not None:
            self.tuner.load_state_dict(self._resumed_state)
            return
        key = self._memory_key()
        if pl.reuse and key is not None:
            saved = (self.memory or LimitsMemory()).load(key) if self.is_main else None
            saved = self.collective.broadcast(saved) if self.collective else saved
            if saved is not None:
                chosen, profile = saved
                self.tuner.profile = profile
                self.tuner.finish_with(chosen)
                self.reused = True

    def _apply_limit(self, watts: float) -> None:
        assert self.guard is not None
        for gpu in self.gpus:
            self.guard.set_power_limit(gpu, watts)
        self.applied_limit_w = watts
        now = self._wall()
        for gpu in self.gpus:
            self.settings_timeline.append({"timestamp": now, "device": self._device_label(gpu),
                                           "setting": "power_limit_w", "value": watts})

    def _carbon_target(self) -> float | None:
        """Carbon-aware mode: the time- or energy-optimal limit of the profile, by grid intensity now."""
        assert self.tuner is not None and self._intensity is not None
        if self.carbon_policy is None:
            c = self.cfg.carbon
            self.carbon_policy = CarbonAwarePowerLimit(self.tuner.profile, threshold_g_per_kwh=c.threshold_g_per_kwh,
                                                       interval_s=c.interval_s)
        # Every process decides from rank 0's clock, so all apply the same limit at the same step.
        now = self.collective.broadcast(self._wall()) if self.collective else self._wall()
        change = self.carbon_policy.check(now, self._intensity)
        return change.power_limit_w if change is not None else None

    def _device_label(self, dev: Device) -> str:
        return f"rank{self.rank}/{dev.key}"

    def step_begin(self) -> None:
        if not self.measuring:
            return
        assert self.monitor is not None
        try:
            if self.tuner is not None:
                action = self.tuner.on_step_begin()
                target = action.set_limit_w
                if self.tuner.done and self._intensity is not None:
                    target = self._carbon_target()
                if target is not None and target != self.applied_limit_w:
                    try:
                        self._apply_limit(target)
                    except (DeviceError, UsageError) as err:
                        self._degrade(err, f"setting the power limit to {target:g} W")
                if action.begin_window and self.tuner is not None:
                    self.monitor.begin_window(PROFILE)
            self.monitor.begin_window(STEP)
        except Exception as err:  # never break training: degrade, warn once
            self._stop_measuring(err)

    def step_end(self) -> StepRecord | None:
        """Close the step; returns the step's time and energy over all processes (None when off)."""
        if not self.measuring:
            return None
        assert self.monitor is not None
        try:
            m = self.monitor.end_window(STEP)
            self.step_count += 1
            if self.tuner is not None:
                if self.tuner.done:
                    self.steps_at_chosen += 1
                elif self.tuner.on_step_end():
                    p = self.monitor.end_window(PROFILE)
                    self.tuner.record(self._max(p.time_s), self._sum(p.total_energy_j))
                    if self.tuner.done:
                        self._save_choice()
            self.last_step = StepRecord(self._max(m.time_s), self._sum(m.total_energy_j))
            return self.last_step
        except Exception as err:  # never break training: degrade, warn once
            self._stop_measuring(err)
            return None

    def _sum(self, value: float) -> float:
        return self.collective.sum(value) if self.collective else value

    def _max(self, value: float) -> float:
        return self.collective.max(value) if self.collective else value

    def _save_choice(self) -> None:
        assert self.tuner is not None and self.tuner.chosen is not None
        key = self._memory_key()
        if key is not None and self.is_main:
            (self.memory or LimitsMemory()).save(key, self.tuner.chosen, self.tuner.profile,
                                                 selector=self.tuner.selector, eta=self.tuner.eta)

    def epoch_begin(self) -> None:
        if not self.measuring:
            return
        assert self.monitor is not None
        if self.monitor.is_open(EPOCH):
            self.monitor.cancel_window(EPOCH)
        self.monitor.begin_window(EPOCH)

    def epoch_end(self) -> StepRecord | None:
        """Close the epoch; returns its time and energy over all processes (None when off)."""
        if not self.measuring:
            return None
        assert self.monitor is not None
        try:
            if self.tuner is not None and self.tuner.on_epoch_end() and self.monitor.is_open(PROFILE):
                self.monitor.cancel_window(PROFILE)
            if not self.monitor.is_open(EPOCH):
                return None
            m = self.monitor.end_window(EPOCH)
            rec = StepRecord(self._max(m.time_s), self._sum(m.total_energy_j))
            self.epochs.append({"epoch": self._epoch_index, "time_s": rec.time_s, "energy_j": rec.energy_j})
            self._epoch_index += 1
            return rec
        except Exception as err:  # never break training: degrade, warn once
            self._stop_measuring(err)
            return None

    def abort(self, exc: BaseException | None = None) -> None:
        """Training raised: restore every setting now (the summary is still written by `finish`)."""
        if self.guard is not None:
            self.guard.restore_all()
        if self.monitor is not None:
            for name in (STEP, PROFILE):
                if self.monitor.is_open(name):
                    self.monitor.cancel_window(name)

    def finish(self, status: str = "completed") -> dict[str, Any] | None:
        """End the run: restore settings, combine figures over processes, write the summary (main rank).

        Returns the summary on every process (None when measurement was off).
        """
        if self.finished or not self.started:
            return None
        self.finished = True
        try:
            if self.guard is not None:
                self.guard.close()
            if not self.measuring or self.monitor is None:
                return None
            for name in (STEP, PROFILE, EPOCH):
                if self.monitor.is_open(name):
                    self.monitor.cancel_window(name)
            if not self.monitor.is_open(FIT):  # start() itself failed
                self.monitor.close()
                return None
            fit = self.monitor.end_window(FIT)
            self.monitor.close()
            summary = self._summary(fit, status)
            if self.is_main:
                self._write(summary)
            return summary
        except Exception as err:  # never break training: degrade, warn once
            self._stop_measuring(err)
            return None

    # -- summary ---------------------------------------------------------------------------------------
    def _summary(self, fit: Measurement, status: str) -> dict[str, Any]:
        coll = self.collective or Collective()
        per_rank = coll.all_gather({
            "energy": {self._device_label(d): fit.energy_j[d.key] for d in self.gpus},
            "cpu": sum(fit.energy_j[d.key] for d in self.cpus) if self.cpus else None,
            "time_s": fit.time_s,
            "devices": [dict(d.describe(), rank=self.rank) for d in self.gpus],
            "samples": ([(s.timestamp, {f"rank{self.rank}/{k}": w for k, w in s.power_w.items()})
                         for s in self.monitor.sampler.samples()]
                        if self.monitor is not None and self.monitor.sampler is not None else []),
        })
        per_device: dict[str, float] = {}
        for r in per_rank:
            per_device.update(r["energy"])
        cpu_parts = [r["cpu"] for r in per_rank if r["cpu"] is not None]
        time_s = max(r["time_s"] for r in per_rank) + self.prior_time_s
        energy_j = sum(per_device.values()) + self.prior_energy_j
        self._samples = [s for r in per_rank for s in r["samples"]]
        end_wall = self._wall()
        return {
            "schema": "wattwise.run/1",
            "wattwise_version": __version__,
            "status": status,
            "simulated": self.simulated,
            "backend": self.gpus[0].backend if self.gpus else None,
            "framework": self.framework,
            "job": self.cfg.job,
            "hostname": socket.gethostname(),
            "world_size": coll.world_size,
            "start_time": _iso(self._start_wall),
            "end_time": _iso(end_wall),
            "time_s": time_s,
            "energy_j": energy_j,
            "energy_per_device_j": per_device,
            "cpu_energy_j": sum(cpu_parts) if cpu_parts else None,
            "avg_power_w": energy_j / time_s if time_s > 0 else 0.0,
            "steps": self.step_count,
            "epochs": self.epochs,
            "resumed_energy_j": self.prior_energy_j,
            "devices": [d for r in per_rank for d in r["devices"]],
            "notes": self.notes,
            "power_limit": self._power_limit_summary(energy_j),
            "settings": {"power_limit_w": self.applied_limit_w, "batch_size": self.batch_size,
                         "frequency_plan": None},
            "settings_timeline": [e for r in coll.all_gather(self.settings_timeline) for e in r],
            "carbon_aware": ({"threshold_g_per_kwh": self.cfg.carbon.threshold_g_per_kwh,
                              "interval_s": self.cfg.carbon.interval_s,
                              "intensity_source": getattr(self._intensity, "source", None)}
                             if self._intensity is not None else None),
        }

    def _power_limit_summary(self, energy_j: float) -> dict[str, Any] | None:
        pl = self.cfg.power_limit
        if self.mode == "cap":
            return {"mode": "cap", "chosen_power_limit_w": self.applied_limit_w}
        if self.tuner is None:
            return None
        t = self.tuner
        info: dict[str, Any] = {
            "mode": "tune", "selector": t.selector, "eta": t.eta, "max_slowdown": pl.max_slowdown,
            "reused": self.reused,
            "chosen_power_limit_w": t.chosen.power_limit_w if t.chosen else None,
            "profile": [vars(e).copy() for e in t.profile],
            "baseline_energy_j": None, "energy_saved_j": None,
        }
        top = max(t.profile, key=lambda e: e.power_limit_w) if t.profile else None
        if t.chosen is not None and top is not None:
            saved = self.steps_at_chosen * (top.energy_j - t.chosen.energy_j)
            info["baseline_energy_j"] = energy_j + saved
            info["energy_saved_j"] = saved
            info["baseline_estimated"] = True
        return info

    def _write(self, summary: dict[str, Any]) -> None:
        out = Path(self.cfg.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / "summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, out / "summary.json")
        with open(out / "power.csv", "w") as fh:
            fh.write("timestamp,device,power_w\n")
            for ts, watts in sorted(self._samples, key=lambda s: s[0]):
                for key, w in watts.items():
                    fh.write(f"{ts:.3f},{key},{w:.3f}\n")

    def totals(self) -> StepRecord | None:
        """Energy and time of the run so far (resumed segments included), combined over processes.

        A collective under distributed training: every process must call it at the same point.
        """
        if not self.measuring or self.monitor is None or not self.monitor.is_open(FIT):
            return None
        m = self.monitor.peek_window(FIT)
        return StepRecord(self.prior_time_s + self._max(m.time_s), self.prior_energy_j + self._sum(m.total_energy_j))

    # -- checkpoints -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Resumable state. Called on every process at the same point (it combines figures over them)."""
        energy, time_s = 0.0, 0.0
        if self.measuring and self.monitor is not None and self.monitor.is_open(FIT):
            m = self.monitor.peek_window(FIT)
            energy, time_s = self._sum(m.total_energy_j), self._max(m.time_s)
        return {
            "version": 1,
            "energy_j": self.prior_energy_j + energy,
            "time_s": self.prior_time_s + time_s,
            "steps": self.step_count,
            "epochs": list(self.epochs),
            "tuner": self.tuner.state_dict() if self.tuner is not None else None,
            "applied_limit_w": self.applied_limit_w,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: keep the cumulative energy, and the chosen limit without profiling again."""
        self.prior_energy_j = float(state.get("energy_j", 0.0))
        self.prior_time_s = float(state.get("time_s", 0.0))
        self.step_count = int(state.get("steps", 0))
        self.epochs = list(state.get("epochs", []))
        self._epoch_index = len(self.epochs)
        self._resumed_state = state.get("tuner")
        if self.tuner is not None and self._resumed_state is not None:
            self.tuner.load_state_dict(self._resumed_state)


def steer_for_recurring_run(cfg: EnergyConfig, session: EnergySession | None, *, power_limit_w: float | None,
                            batch_size: int, eta: float) -> None:
    """Before a recurring job's run starts: cap at the limit remembered for its batch size, or tune one.

    Tuning then uses the job's own trade-off (the Zeus cost with the job's eta), and profiles afresh: the
    job store, not the per-job limits memory, knows which batch sizes were profiled. `session` may
    already exist (an adapter creates it early); it copied the mode when created and reads the rest of
    `cfg` when it starts.
    """
    power_limit = cfg.power_limit
    if power_limit_w is not None:
        power_limit.mode, power_limit.cap_w, power_limit.cap_fraction = "cap", power_limit_w, None
    else:
        power_limit.mode, power_limit.reuse = "tune", False
        power_limit.selector, power_limit.eta = "cost", eta
    if session is not None:
        session.mode = power_limit.mode
        session.batch_size = batch_size


def profile_table(profile: Sequence[ProfileEntry], *, eta: float,
                  max_power_w: float) -> list[dict[str, float]]:
    """Rows of the profile with the Zeus cost of each limit, for reports."""
    return [{"power_limit_w": e.power_limit_w, "time_s": e.time_s, "energy_j": e.energy_j,
             "avg_power_w": e.avg_power_w,
             "cost": zeus_cost(e.energy_j, e.time_s, eta=eta, max_power_w=max_power_w)} for e in profile]
