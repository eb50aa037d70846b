"""The measurement part of a run: its devices, its energy monitor and the run's windows.

A run measures four kinds of window: the whole fit, each epoch, each step, and the power-limit tuner's
profiling windows. Each process measures its own devices; figures a decision or a log needs are combined
over processes through the run's `Collective` (energy summed, time maxed), so every process sees the same.
This part keeps what a resumed run needs (energy, time, steps and epochs of the earlier segments) in its
`state_dict`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wattwise.config import EnergyConfig
from wattwise.devices import Device, discover
from wattwise.distributed import Collective
from wattwise.monitor import EnergyMonitor, Measurement, cuda_sync

log = logging.getLogger(__name__)

FIT, EPOCH, STEP, PROFILE = "fit", "epoch", "step", "power_limit_profile"


@dataclass
class StepRecord:
    """Time and energy of a step, an epoch or the run so far, combined over processes."""

    time_s: float
    energy_j: float

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0


class RunMeasurement:
    """Devices, monitor and windows of one run. Raises on device errors: the run decides what to do."""

    def __init__(self, cfg: EnergyConfig, collective: Collective, *, devices: Sequence[Device] | None = None,
                 local_rank: int | None = None, sync: Callable[[], None] | None = None) -> None:
        self.cfg = cfg
        self.collective = collective
        self._given_devices = list(devices) if devices is not None else None
        self._local_rank = local_rank
        self._sync = sync
        self.gpus: list[Device] = []
        self.cpus: list[Device] = []
        self.notes: list[str] = []
        self.monitor: EnergyMonitor | None = None
        #: False until the devices are open, and again once measurement failed.
        self.active = False
        self.step_count = 0
        self.epochs: list[dict[str, Any]] = []
        self.last_step: StepRecord | None = None
        #: Energy and time of the segments before a resume.
        self.prior_energy_j = 0.0
        self.prior_time_s = 0.0

    @property
    def simulated(self) -> bool:
        return any(d.simulated for d in self.gpus)

    def device_label(self, dev: Device) -> str:
        return f"rank{self.collective.rank}/{dev.key}"

    # -- life cycle ------------------------------------------------------------------------------------
    def open(self) -> None:
        """Find the devices, open the monitor and the fit window."""
        cfg, coll = self.cfg, self.collective
        if self._given_devices is not None:
            self.gpus = self._given_devices
        else:
            indices = cfg.devices.gpus
            if indices is None and coll.world_size > 1:
                local = self._local_rank
                if local is None:
                    local = int(os.environ.get("LOCAL_RANK", coll.rank))
                indices = [local]
            sim = cfg.devices.simulated
            found = discover(cfg.devices.backend, gpu_indices=indices, include_cpu=cfg.devices.cpu,
                             num_simulated=sim.num_gpus, power_model=sim.power_model,
                             base_step_time_s=sim.base_step_time_s, persist_dir=sim.state_dir)
            self.gpus, self.cpus, self.notes = found.gpus, found.cpus, found.notes
            if found.simulated and coll.rank == 0:
                log.warning("wattwise: %s", found.notes[-1] if found.notes else "using the simulated GPU")
        out = Path(cfg.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        log_file = out / ("windows.csv" if coll.rank == 0 else f"windows-rank{coll.rank}.csv")
        sync = self._sync if self._sync is not None else (cuda_sync if cfg.monitor.sync_cuda else None)
        self.monitor = EnergyMonitor([*self.gpus, *self.cpus], sync=sync, log_file=log_file,
                                     sample_power=cfg.monitor.sample_power,
                                     sample_interval_s=cfg.monitor.sample_interval_s)
        self.active = True
        self.monitor.begin_window(FIT)

    def is_open(self, name: str) -> bool:
        return self.monitor is not None and self.monitor.is_open(name)

    def begin(self, name: str) -> None:
        assert self.monitor is not None
        self.monitor.begin_window(name)

    def cancel(self, *names: str) -> None:
        """Drop open windows without measuring them (an abort, a wait that belongs to no step)."""
        for name in names:
            if self.monitor is not None and self.monitor.is_open(name):
                self.monitor.cancel_window(name)

    def end(self, name: str) -> StepRecord:
        """Close a window; its figures combined over processes."""
        assert self.monitor is not None
        return self.combine(self.monitor.end_window(name))

    def combine(self, m: Measurement) -> StepRecord:
        return StepRecord(self.collective.max(m.time_s), self.collective.sum(m.total_energy_j))

    def step_end(self) -> StepRecord:
        rec = self.end(STEP)
        self.step_count += 1
        self.last_step = rec
        return rec

    def epoch_begin(self) -> None:
        self.cancel(EPOCH)
        self.begin(EPOCH)

    def epoch_end(self) -> StepRecord | None:
        if not self.is_open(EPOCH):
            return None
        rec = self.end(EPOCH)
        self.epochs.append({"epoch": len(self.epochs), "time_s": rec.time_s, "energy_j": rec.energy_j})
        return rec

    def totals(self) -> StepRecord | None:
        """The run so far, earlier segments included. A collective: every process calls it at one point."""
        if not self.active or not self.is_open(FIT):
            return None
        assert self.monitor is not None
        m = self.monitor.peek_window(FIT)
        return StepRecord(self.prior_time_s + self.collective.max(m.time_s),
                          self.prior_energy_j + self.collective.sum(m.total_energy_j))

    def close(self) -> Measurement | None:
        """Close every window and the monitor; the fit's own measurement (this process), if it was open."""
        if self.monitor is None:
            return None
        self.cancel(STEP, PROFILE, EPOCH)
        fit = self.monitor.end_window(FIT) if self.monitor.is_open(FIT) else None
        self.monitor.close()
        return fit

    # -- the run's figures -----------------------------------------------------------------------------
    def gather(self, fit: Measurement) -> dict[str, Any]:
        """Per-device energy, devices and power samples of every process (a collective)."""
        rank = self.collective.rank
        sampler = self.monitor.sampler if self.monitor is not None else None
        per_rank = self.collective.all_gather({
            "energy": {self.device_label(d): fit.energy_j[d.key] for d in self.gpus},
            "cpu": sum(fit.energy_j[d.key] for d in self.cpus) if self.cpus else None,
            "time_s": fit.time_s,
            "devices": [dict(d.describe(), rank=rank) for d in self.gpus],
            "samples": ([(s.timestamp, {f"rank{rank}/{k}": w for k, w in s.power_w.items()})
                         for s in sampler.samples()] if sampler is not None else []),
        })
        per_device: dict[str, float] = {}
        for r in per_rank:
            per_device.update(r["energy"])
        cpu_parts = [r["cpu"] for r in per_rank if r["cpu"] is not None]
        return {
            "time_s": max(r["time_s"] for r in per_rank) + self.prior_time_s,
            "energy_j": sum(per_device.values()) + self.prior_energy_j,
            "energy_per_device_j": per_device,
            "cpu_energy_j": sum(cpu_parts) if cpu_parts else None,
            "devices": [d for r in per_rank for d in r["devices"]],
            "samples": [s for r in per_rank for s in r["samples"]],
        }

    # -- checkpoints -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A collective under distributed training: every process calls it at the same point."""
        totals = self.totals()
        return {
            "energy_j": totals.energy_j if totals is not None else self.prior_energy_j,
            "time_s": totals.time_s if totals is not None else self.prior_time_s,
            "steps": self.step_count,
            "epochs": list(self.epochs),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.prior_energy_j = float(state.get("energy_j", 0.0))
        self.prior_time_s = float(state.get("time_s", 0.0))
        self.step_count = int(state.get("steps", 0))
        self.epochs = list(state.get("epochs", []))
