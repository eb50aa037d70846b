"""Devices: the only layer that touches hardware. See `base.Device` for the interface.

Each backend is one module (`nvml`, `amdsmi`, `simulated`, `agent`, `rapl`) registered by name below in
the one table of `registry`: `discover()`, `open_spec()` and the values `devices.backend` accepts all come
from it, and what differs between backends is a capability of the `Device` (`settings_lease`,
`simulation`, ...), never a check of its class elsewhere. Adding a backend touches this package only.

`discover()` finds what this machine has: NVIDIA GPUs through NVML (else AMD ones through amdsmi) and CPU
packages through RAPL. With no GPU it measures what is really there (the CPU through RAPL, or nothing) and
says so in a note; the simulated GPU is used only when asked for by name (backend "simulated"), because no
emulated work drives it in a user's own training code: it would idle, and its figures would mean nothing.

Environment: `WATTWISE_BACKEND` (auto, or a GPU backend's name) replaces the backend "auto" for every entry
point at once (the Lightning callback, the Accelerate plugin, the CLI); an explicit other backend wins.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from wattwise.devices import registry
from wattwise.devices.base import (
    Device,
    DeviceError,
    DeviceLostError,
    DeviceSpec,
    NoPermissionError,
    NotSupportedError,
    PowerLimitRange,
)
from wattwise.devices.registry import AUTO, Backend, Wanted, lazy, register
from wattwise.devices.registry import choices as backend_choices
from wattwise.devices.simulated import ClockModel, Physics, PhysicsName, PowerModel, SimulatedGPU
from wattwise.errors import ConfigError, Key, Part, UsageError
from wattwise.safe_files import state_dir

__all__ = [
    "BACKEND_ENV",
    "Backend",
    "ClockModel",
    "Device",
    "DeviceError",
    "DeviceLostError",
    "DeviceSpec",
    "Discovery",
    "NoPermissionError",
    "NotSupportedError",
    "Physics",
    "PhysicsName",
    "PowerLimitRange",
    "PowerModel",
    "SimulatedGPU",
    "Wanted",
    "backend_choices",
    "backend_from_env",
    "discover",
    "journalled_backends",
    "name_job",
    "open_spec",
    "probe_gpus",
    "register",
    "settings_identity",
    "simulated_gpus",
]

#: The environment variable that replaces the backend "auto" (see the module docstring).
BACKEND_ENV = "WATTWISE_BACKEND"
_GPU_ONLY = (
    "power-limit tuning and capping need a GPU (backend 'simulated', or "
    f"{BACKEND_ENV}=simulated, tries them on the simulated GPU)"
)
#: The last note of an "auto" discovery that found no GPU, by whether RAPL could be read.
NO_GPU_CPU_NOTE = f"no NVIDIA GPU found: measuring the CPU (RAPL) only; {_GPU_ONLY}"
NO_GPU_NOTHING_NOTE = f"no NVIDIA GPU found and RAPL unreadable: nothing to measure on this machine; {_GPU_ONLY}"
#: The last note when `WATTWISE_BACKEND=simulated` turned "auto" into the simulated GPU.
SIMULATED_BY_ENV_NOTE = f"{BACKEND_ENV}=simulated: using the simulated GPU (energy figures are modelled, not measured)"


@dataclass
class Discovery:
    """What `discover()` found, and why anything is missing."""

    gpus: list[Device] = field(default_factory=list)
    cpus: list[Device] = field(default_factory=list)
    #: One line per missing backend or fallback, for `wattwise devices` and the one-line notice.
    notes: list[str] = field(default_factory=list)

    @property
    def simulated(self) -> bool:
        """True when a GPU found is simulated (its figures are modelled)."""
        return any(d.simulated for d in self.gpus)

    @property
    def all(self) -> list[Device]:
        """The GPUs, then the CPU domains."""
        return [*self.gpus, *self.cpus]


def simulated_gpus(
    count: int = 1,
    *,
    power_model: str | os.PathLike[str] | PowerModel | None = None,
    base_step_time_s: float = 0.02,
    persist_dir: str | os.PathLike[str] | None = None,
    indices: list[int] | None = None,
    physics: str | Physics | None = None,
    gpu: str | None = None,
) -> list[SimulatedGPU]:
    """`count` simulated GPUs sharing one power model and one physics.

    Their settings persist under `persist_dir` (default `<state dir>/simulated`), like a real GPU's
    outlive the process that changed them, so the guard's crash recovery works on them too. `physics`:
    "realistic", "ideal" or a `Physics`; None: `$WATTWISE_SIMULATED_PHYSICS`, else realistic. `gpu`: the
    GPU generation the realistic physics stands for ("h100", "a100", "v100", "mi300x"); None:
    `$WATTWISE_SIMULATED_GPU`, else h100.
    """
    if count < 1:
        raise UsageError(f"devices.simulated.num_gpus must be at least 1 (got {count})")
    chosen = physics if isinstance(physics, Physics) else Physics.named(physics, gpu=gpu)
    model = PowerModel.of(power_model)
    folder = (Path(persist_dir) if persist_dir is not None else state_dir() / "simulated").resolve()
    wanted = indices if indices is not None else list(range(count))
    gpus = []
    for i in wanted:
        key = (folder, i)
        found = _SIMULATED.get(key)
        if (
            found is None
            or found.given_model != model
            or found.base_step_time_s != base_step_time_s
            or found.physics != chosen
        ):
            found = SimulatedGPU(
                i, model, state_file=folder / f"gpu{i}.json", base_step_time_s=base_step_time_s, physics=chosen
            )
            _SIMULATED[key] = found
        gpus.append(found)
    return gpus


#: One object per simulated GPU and process, as a real GPU is one device however often it is found: the
#: emulated workload and the energy plugin then share the same counter and settings.
_SIMULATED: dict[tuple[Path, int], SimulatedGPU] = {}


def _discover_simulated(wanted: Wanted) -> list[Device]:
    """The simulated backend's discover function.

    A simulated GPU exists at any index asked for: under distributed training each process takes the one
    at its local rank, as on a real multi-GPU node.
    """
    return list(
        simulated_gpus(
            wanted.num_simulated,
            power_model=wanted.power_model,
            base_step_time_s=wanted.base_step_time_s,
            persist_dir=wanted.persist_dir,
            indices=wanted.gpu_indices,
            physics=wanted.simulated_physics,
            gpu=wanted.simulated_gpu,
        )
    )


def _uuid_identity(spec: DeviceSpec) -> str:
    """A GPU's identity for every process: the UUID its driver gives (its index when the spec has none)."""
    return str(spec.get("uuid") or spec.get("index"))


def _state_file_identity(spec: DeviceSpec) -> str | None:
    """A simulated GPU's identity for every process: its state file (None: it lives in this process only)."""
    return os.path.realpath(str(spec["state_file"])) if spec.get("state_file") else None


def _hardware_gpus(name: str, needs: str, title: str = "") -> Backend:
    """A probed backend of `HardwareGPU`s: module `wattwise.devices.<name>` finds them and reopens them by UUID."""
    module = f"wattwise.devices.{name}"
    return Backend(
        name,
        lazy(module, "discover_gpus"),
        lazy(module, f"open_{name}_spec"),
        probe=True,
        title=title,
        needs=needs,
        identity=_uuid_identity,
    )


# The backends wattwise ships, in the order "auto" probes them and `backend_choices()` lists them.
register(_hardware_gpus("nvml", "an NVIDIA GPU and its driver", title="NVML"))
register(
    Backend(
        "simulated",
        _discover_simulated,
        lazy("wattwise.devices.simulated", "open_simulated_spec"),
        identity=_state_file_identity,
    )
)
# Reads stay local, setting changes go to the node agent (`wattwise agent serve`).
register(
    Backend(
        "agent",
        lazy("wattwise.devices.agent", "discover_gpus"),
        lazy("wattwise.devices.agent", "open_agent_spec"),
        claim=lazy("wattwise.devices.agent", "claim_auto"),
    )
)
# After NVML among the probed backends: "auto" takes NVIDIA GPUs first, then AMD ones, then the CPU.
register(_hardware_gpus("amdsmi", "an AMD GPU, its amdgpu driver and the amdsmi package"))
register(
    Backend(
        "rapl",
        lazy("wattwise.devices.rapl", "discover_domains"),
        lazy("wattwise.devices.rapl", "open_rapl_spec"),
        kind="cpu",
        title="RAPL",
    )
)


def discover(
    backend: str = AUTO,
    *,
    gpu_indices: list[int] | None = None,
    include_cpu: bool = False,
    num_simulated: int = 1,
    power_model: str | os.PathLike[str] | PowerModel | None = None,
    base_step_time_s: float = 0.02,
    persist_dir: str | os.PathLike[str] | None = None,
    simulated_physics: str | None = None,
    simulated_gpu: str | None = None,
) -> Discovery:
    """Find the devices to measure.

    `backend`: a registered GPU backend ("nvml": fail if NVML is unavailable; "simulated"; "agent": reads
    local, changes through the node agent), or "auto": `$WATTWISE_BACKEND` when set, else a backend that
    claims "auto" (the agent, when its socket exists and this process may not change GPU settings itself,
    not being root), else the first probed backend that finds a GPU (NVML, then amdsmi), else no GPU and the
    CPU through RAPL when readable (`include_cpu` or not), with a note that says what is measured and that tuning needs
    a GPU. `gpu_indices` selects among visible GPUs (as numbered after `CUDA_VISIBLE_DEVICES`).
    `include_cpu` adds the RAPL domains (with a reason when unavailable). `simulated_physics`: the simulated
    GPUs' physics ("realistic" or "ideal"; None: `$WATTWISE_SIMULATED_PHYSICS`, else realistic);
    `simulated_gpu` the GPU generation it stands for ("h100", "a100", "v100", "mi300x"; None:
    `$WATTWISE_SIMULATED_GPU`, else h100).

    Raises:
        UsageError: `backend` is not one of `backend_choices()`, or `gpu_indices` names a GPU not visible.
        ConfigError: `$WATTWISE_BACKEND` is not one of `backend_choices()`.
        NotSupportedError: A backend asked for by name (or by `$WATTWISE_BACKEND`) is unavailable.
    """
    choices = backend_choices()
    if backend not in choices:
        raise UsageError(BACKEND_KEY, f" must be one of {', '.join(choices)} (got {backend!r})")
    wanted = Wanted(
        gpu_indices, num_simulated, power_model, base_step_time_s, persist_dir, simulated_physics, simulated_gpu
    )
    found = Discovery()
    chosen = backend_from_env() if backend == AUTO else backend
    if chosen != AUTO:
        found.gpus = _named(chosen, wanted, asked=BACKEND_KEY if backend == chosen else BACKEND_ENV)
        if chosen == "simulated" and backend == AUTO:
            found.notes.append(SIMULATED_BY_ENV_NOTE)
    elif (claimant := _claimant(found.notes)) is not None:
        chosen = claimant.name
        found.gpus = claimant.discover(wanted)
    else:
        found.gpus = probe_gpus(found.notes, wanted)
    no_gpu = chosen == AUTO and not found.gpus
    if include_cpu or no_gpu:
        found.cpus = _cpu_devices(wanted, found.notes)
    if no_gpu:
        found.notes.append(NO_GPU_CPU_NOTE if found.cpus else NO_GPU_NOTHING_NOTE)
    return found


#: The setting that names the backend, as errors name it (the command line's `--backend`).
BACKEND_KEY = Key("devices.backend")


def backend_from_env() -> str:
    """`$WATTWISE_BACKEND` (one of `backend_choices()`), or "auto" when it is unset or empty."""
    value = os.environ.get(BACKEND_ENV, "").strip()
    if not value:
        return AUTO
    choices = backend_choices()
    if value not in choices:
        raise ConfigError(
            f"{BACKEND_ENV} must be one of {', '.join(choices)} (got {value!r}); "
            f"unset it to find the devices automatically"
        )
    return value


def _claimant(notes: list[str]) -> Backend | None:
    """The first GPU backend that claims "auto" (its note added to `notes`), else None."""
    for backend in registry.backends("gpu"):
        note = backend.claim() if backend.claim is not None else None
        if note:
            notes.append(note)
            return backend
    return None


def probe_gpus(notes: list[str], wanted: Wanted | None = None) -> list[Device]:
    """The GPUs of the first hardware backend that finds any, in the order "auto" probes them.

    NVML first, then the others registered with `probe`: what this machine really has, without the node
    agent or the CPU.

    Args:
        notes: Gets one line for each backend unavailable, saying why.
        wanted: What to find; None: every visible GPU.

    Raises:
        UsageError: `wanted.gpu_indices` names a GPU the backend that found GPUs does not have.
    """
    wanted = wanted or Wanted()
    for backend in registry.backends("gpu"):
        if not backend.probe:
            continue
        try:
            gpus = backend.discover(wanted)
        except (DeviceError, ImportError) as err:
            notes.append(f"{backend.name}: unavailable ({err})")
            continue
        if gpus:
            return gpus
    return []


def _named(name: str, wanted: Wanted, *, asked: Part) -> list[Device]:
    """The GPUs of the backend asked for by name (in `asked`: the setting or the variable)."""
    backend = registry.lookup(name)
    assert backend is not None, name  # a value of backend_choices()
    try:
        return backend.discover(wanted)
    except (DeviceError, ImportError) as err:
        if not backend.needs:
            raise
        raise NotSupportedError(
            f"{backend.label} unavailable: {err}; ",
            asked,
            f" is {name}, which needs {backend.needs} (use auto, or simulated to try wattwise without one)",
        ) from err


def _cpu_devices(wanted: Wanted, notes: list[str]) -> list[Device]:
    """The devices of every CPU backend (RAPL domains); a note for each one unavailable."""
    cpus: list[Device] = []
    for backend in registry.backends("cpu"):
        try:
            cpus.extend(backend.discover(wanted))
        except (DeviceError, ImportError) as err:
            notes.append(f"{backend.name}: unavailable ({err})")
    return cpus


def open_spec(spec: DeviceSpec) -> Device:
    """Reopen a device from `Device.spec()`, through its backend.

    The settings guard restores settings with it after a crash, in another process.

    Raises:
        DeviceError: The spec names no registered backend (the message lists them), or its backend cannot
            reopen it.
    """
    name = spec.get("backend")
    backend = registry.lookup(name) if isinstance(name, str) else None
    if backend is None:
        raise DeviceError(
            f"cannot reopen a device of unknown backend {name!r} (known backends: {', '.join(registry.names())})"
        )
    return backend.open(spec)


def settings_identity(spec: DeviceSpec) -> str | None:
    """What names the hardware of a device spec for every process on this host (`Backend.identity`).

    The settings guard takes one lock per identity. None when the guard does not lock the device: it lives
    in this process only, or its backend's settings are never changed by the guard itself.
    """
    name = spec.get("backend")
    backend = registry.lookup(name) if isinstance(name, str) else None
    if backend is None or backend.identity is None:
        return None
    return backend.identity(spec)


def journalled_backends() -> tuple[str, ...]:
    """The backends whose settings the guard changes, journals and restores itself: those a journal names."""
    return tuple(b.name for b in registry.backends() if b.identity is not None)


def name_job(devices: Iterable[Device], job: str) -> None:
    """Name the job changing the settings of `devices`, where someone shows the holder.

    See `Device.name_job`: the node agent shows it for its GPUs; other devices ignore it.
    """
    for device in devices:
        device.name_job(job)
