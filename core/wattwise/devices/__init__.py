"""Devices: the only layer that touches hardware. See `base.Device` for the interface.

`discover()` finds what this machine has: NVIDIA GPUs through NVML and CPU packages through RAPL. With
no GPU it measures what is really there (the CPU through RAPL, or nothing) and says so in a note; the
simulated GPU is used only when asked for by name (backend "simulated"), because no emulated work drives
it in a user's own training code: it would idle, and its figures would mean nothing.

Environment: `WATTWISE_BACKEND` (auto, nvml or simulated) replaces the backend "auto" for every entry
point at once (the Lightning callback, the Accelerate plugin, the CLI); an explicit other backend wins.
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
from wattwise.errors import ConfigError, UsageError
from wattwise.paths import state_dir

__all__ = [
    "BACKENDS",
    "BACKEND_ENV",
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
    "backend_from_env",
    "discover",
    "open_spec",
    "simulated_gpus",
]

BACKENDS: tuple[str, ...] = ("auto", "nvml", "simulated", "agent")
#: The environment variable that replaces the backend "auto" (see the module docstring).
BACKEND_ENV = "WATTWISE_BACKEND"
_GPU_ONLY = ("power-limit tuning and capping need a GPU (backend 'simulated', or "
             f"{BACKEND_ENV}=simulated, tries them on the simulated GPU)")
#: The last note of an "auto" discovery that found no GPU, by whether RAPL could be read.
NO_GPU_CPU_NOTE = f"no NVIDIA GPU found: measuring the CPU (RAPL) only; {_GPU_ONLY}"
NO_GPU_NOTHING_NOTE = f"no NVIDIA GPU found and RAPL unreadable: nothing to measure on this machine; {_GPU_ONLY}"
#: The last note when `WATTWISE_BACKEND=simulated` turned "auto" into the simulated GPU.
SIMULATED_BY_ENV_NOTE = (f"{BACKEND_ENV}=simulated: using the simulated GPU (energy figures are modelled, not "
                         "measured)")


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

    `backend`: "nvml" (fail if NVML is unavailable), "simulated", "agent" (reads local, changes through the
    node agent), or "auto": `$WATTWISE_BACKEND` when set, else the agent when its socket exists and this
    process may not change GPU settings itself (not root), else NVML when a GPU is present, else no GPU
    and the CPU through RAPL when readable (`include_cpu` or not), with a note that says what is measured
    and that tuning needs a GPU. `gpu_indices` selects among
    visible GPUs (as numbered after `CUDA_VISIBLE_DEVICES`). `include_cpu` adds the RAPL domains (with a
    reason when unavailable).
    """
    if backend not in BACKENDS:
        raise UsageError(f"devices.backend must be one of {', '.join(BACKENDS)} (got {backend!r})")
    found = Discovery()
    chosen = backend_from_env() if backend == "auto" else backend
    if chosen == "auto":
        from wattwise.agent.client import agent_preferred, socket_path

        if agent_preferred():
            chosen = "agent"
            found.notes.append(f"using the node agent at {socket_path()}: this process may not change GPU "
                               "settings itself (backend agent)")
    if chosen == "simulated":
        # A simulated GPU exists at any index asked for: under distributed training each process
        # takes the one at its local rank, as on a real multi-GPU node.
        found.gpus = list(simulated_gpus(num_simulated, power_model=power_model,
                                         base_step_time_s=base_step_time_s, persist_dir=persist_dir,
                                         indices=gpu_indices))
        if backend == "auto":
            found.notes.append(SIMULATED_BY_ENV_NOTE)
    elif chosen == "agent":
        # Reads stay local, setting changes go to the node agent (`wattwise agent serve`).
        from wattwise.agent.client import agent_gpus

        found.gpus = list(agent_gpus(gpu_indices, base_step_time_s=base_step_time_s))
    else:
        try:
            found.gpus = _nvml_gpus(gpu_indices, found.notes, required=chosen == "nvml")
        except NotSupportedError as err:
            asked = "devices.backend" if backend == "nvml" else BACKEND_ENV
            raise NotSupportedError(f"{err}; {asked} is nvml, which needs an NVIDIA GPU and its driver "
                                    "(use auto, or simulated to try wattwise without one)") from err
    no_gpu = chosen == "auto" and not found.gpus
    if include_cpu or no_gpu:
        found.cpus = _rapl_domains(found.notes)
    if no_gpu:
        found.notes.append(NO_GPU_CPU_NOTE if found.cpus else NO_GPU_NOTHING_NOTE)
    return found


def backend_from_env() -> str:
    """`$WATTWISE_BACKEND` (one of `BACKENDS`), or "auto" when it is unset or empty."""
    value = os.environ.get(BACKEND_ENV, "").strip()
    if not value:
        return "auto"
    if value not in BACKENDS:
        raise ConfigError(f"{BACKEND_ENV} must be one of {', '.join(BACKENDS)} (got {value!r}); "
                          f"unset it to find the devices automatically")
    return value


def _nvml_gpus(indices: list[int] | None, notes: list[str], *, required: bool) -> list[Device]:
    """The NVML GPUs at `indices`; none, with a note, when NVML is unavailable and not `required`."""
    try:
        from wattwise.devices.nvml import nvml_gpus

        gpus: list[Device] = list(nvml_gpus())
        if not gpus:
            raise NotSupportedError("NVML found no GPU visible to this process")
    except (DeviceError, ImportError) as err:
        if required:
            raise NotSupportedError(f"NVML unavailable: {err}") from err
        notes.append(f"nvml: unavailable ({err})")
        return []
    return _select(gpus, indices)


def _rapl_domains(notes: list[str]) -> list[Device]:
    """The RAPL domains; none, with a note, when they cannot be read."""
    try:
        from wattwise.devices.rapl import rapl_domains

        return list(rapl_domains())
    except (DeviceError, ImportError) as err:
        notes.append(f"rapl: unavailable ({err})")
        return []


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
    if backend == "agent":
        from wattwise.agent.client import open_agent_spec

        return open_agent_spec(spec)
    if backend == "nvml":
        from wattwise.devices.nvml import open_nvml_spec

        return open_nvml_spec(spec)
    if backend == "rapl":
        from wattwise.devices.rapl import open_rapl_spec

        return open_rapl_spec(spec)
    raise DeviceError(f"cannot reopen a device of unknown backend {backend!r}")
