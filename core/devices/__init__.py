"""Devices: the only layer that touches hardware. See `base.Device` for the interface.

`discover()` finds what this machine has: NVIDIA GPUs through NVML, CPU packages through RAPL, and,
when no GPU is present, a simulated GPU (with a one-line notice) so that everything still runs.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wattwise.devices.base import (
    Device,
    DeviceError,
    DeviceLostError,
    NoPermissionError,
    NotSupportedError,
    PowerLimitRange,
)
from wattwise.devices.simulated import ClockModel, PowerModel, SimulatedGPU
from wattwise.errors import UsageError
from wattwise.paths import state_dir

__all__ = [
    "BACKENDS",
    "ClockModel",
    "Device",
    "DeviceError",
    "DeviceLostError",
    "Discovery",
    "NoPermissionError",
    "NotSupportedError",
    "PowerLimitRange",
    "PowerModel",
    "SimulatedGPU",
    "discover",
    "open_spec",
    "simulated_gpus",
]

BACKENDS: tuple[str, ...] = ("auto", "nvml", "simulated")
SIMULATED_NOTICE = "no NVIDIA GPU found: using the simulated GPU (energy figures are modelled, not measured)"


@dataclass
class Discovery:
    """What `discover()` found, and why anything is missing."""

    gpus: list[Device] = field(default_factory=list)
    cpus: list[Device] = field(default_factory=list)
    #: One line per missing backend or fallback, for `wattwise devices` and the one-line notice.
    notes: list[str] = field(default_factory=list)

    @property
    def simulated(self) -> bool:
        return any(d.simulated for d in self.gpus)

    @property
    def all(self) -> list[Device]:
        return [*self.gpus, *self.cpus]


def simulated_gpus(
    count: int = 1,
    *,
    power_model: str | os.PathLike[str] | PowerModel | None = None,
    base_step_time_s: float = 0.02,
    persist_dir: str | os.PathLike[str] | None = None,
    indices: list[int] | None = None,
) -> list[SimulatedGPU]:
    """`count` simulated GPUs sharing one power model.

    Their settings persist under `persist_dir` (default `<state dir>/simulated`), like a real GPU's
    outlive the process that changed them, so the guard's crash recovery works on them too.
    """
    if count < 1:
        raise UsageError(f"devices.simulated.num_gpus must be at least 1 (got {count})")
    if isinstance(power_model, PowerModel):
        model = power_model
    elif power_model is not None:
        model = PowerModel.from_csv(power_model)
    else:
        model = PowerModel.default()
    folder = (Path(persist_dir) if persist_dir is not None else state_dir() / "simulated").resolve()
    wanted = indices if indices is not None else list(range(count))
    gpus = []
    for i in wanted:
        key = (folder, i)
        gpu = _SIMULATED.get(key)
        if gpu is None or gpu.model != model or gpu.base_step_time_s != base_step_time_s:
            gpu = SimulatedGPU(i, model, state_file=folder / f"gpu{i}.json",
                               base_step_time_s=base_step_time_s)
            _SIMULATED[key] = gpu
        gpus.append(gpu)
    return gpus


#: One object per simulated GPU and process, as a real GPU is one device however often it is found: the
#: emulated workload and the energy plugin then share the same counter and settings.
_SIMULATED: dict[tuple[Path, int], SimulatedGPU] = {}


def discover(
    backend: str = "auto",
    *,
    gpu_indices: list[int] | None = None,
    include_cpu: bool = False,
    num_simulated: int = 1,
    power_model: str | os.PathLike[str] | PowerModel | None = None,
    base_step_time_s: float = 0.02,
    persist_dir: str | os.PathLike[str] | None = None,
) -> Discovery:
    """Find the devices to measure.

    `backend`: "nvml" (fail if NVML is unavailable), "simulated", or "auto" (NVML when a GPU is present,
    else the simulated GPU, with a notice). `gpu_indices` selects among visible GPUs (as numbered after
    `CUDA_VISIBLE_DEVICES`). `include_cpu` adds the RAPL domains (with a reason when unavailable).
    """
    if backend not in BACKENDS:
        raise UsageError(f"devices.backend must be one of {', '.join(BACKENDS)} (got {backend!r})")
    found = Discovery()
    if backend in ("auto", "nvml"):
        try:
            from wattwise.devices.nvml import nvml_gpus

            gpus: list[Device] = list(nvml_gpus())
            if not gpus:
                raise NotSupportedError("NVML found no GPU visible to this process")
            found.gpus = _select(gpus, gpu_indices)
        except (DeviceError, ImportError) as err:
            if backend == "nvml":
                raise NotSupportedError(f"NVML unavailable: {err}") from err
            found.notes.append(f"nvml: unavailable ({err})")
    if not found.gpus:
        # A simulated GPU exists at any index asked for: under distributed training each process
        # takes the one at its local rank, as on a real multi-GPU node.
        found.gpus = list(simulated_gpus(num_simulated, power_model=power_model,
                                         base_step_time_s=base_step_time_s, persist_dir=persist_dir,
                                         indices=gpu_indices))
        if backend == "auto":
            found.notes.append(SIMULATED_NOTICE)
    if include_cpu:
        try:
            from wattwise.devices.rapl import rapl_domains

            found.cpus = list(rapl_domains())
        except (DeviceError, ImportError) as err:
            found.notes.append(f"rapl: unavailable ({err})")
    return found


def _select(gpus: list[Device], indices: list[int] | None) -> list[Device]:
    if indices is None:
        return gpus
    by_index = {g.index: g for g in gpus}
    missing = [i for i in indices if i not in by_index]
    if missing:
        raise UsageError(f"devices.gpus asks for GPU(s) {missing}, but the visible ones are "
                         f"{sorted(by_index)}")
    return [by_index[i] for i in indices]


def open_spec(spec: dict[str, Any]) -> Device:
    """Reopen a device from `Device.spec()` (used by the guard to restore settings after a crash)."""
    backend = spec.get("backend")
    if backend == "simulated":
        lo, hi = spec.get("limit_range_w") or PowerModel.default().limit_range_w
        model = dataclasses.replace(PowerModel.default(), min_limit_w=float(lo), max_limit_w=float(hi))
        return SimulatedGPU(int(spec.get("index", 0)), model, state_file=spec.get("state_file"))
    if backend == "nvml":
        from wattwise.devices.nvml import open_nvml_spec

        return open_nvml_spec(spec)
    if backend == "rapl":
        from wattwise.devices.rapl import open_rapl_spec

        return open_rapl_spec(spec)
    raise DeviceError(f"cannot reopen a device of unknown backend {backend!r}")
