"""The one device interface every layer above `wattwise.devices` sees.

Everything is in SI units: joules, watts, seconds, megahertz. Vendor errors are mapped to the
`DeviceError` family so callers handle "not supported", "no permission" and "device lost" alike on
every backend.
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Required, TypedDict

from wattwise.errors import Unavailable

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterator, Sequence


class Simulation(Protocol):
    """What emulated work and the monitor use of a simulated GPU (`wattwise.devices.simulated.SimulatedGPU`).

    A protocol, so that this interface does not import the simulator that implements it.
    """

    clock: Callable[[], float]
    sleep: Callable[[float], None]

    def step_time_s(self, base_time_s: float | None = None) -> float:
        """How long a training step lasts at the GPU's current settings."""
        ...

    def busy(self) -> contextlib.AbstractContextManager[None]:
        """The GPU is busy (draws its busy power) while the context is open."""
        ...

    def count_load(self, path: str | os.PathLike[str]) -> None:
        """Count the load other processes publish in `path` (the node agent's view of a shared GPU)."""
        ...

    def on_clock(self, clock: Callable[[], float], sleep: Callable[[float], None]) -> Device:
        """The same simulated GPU (model, physics, index) timed by another clock, with no state file."""
        ...


class DeviceError(Unavailable):
    """A device call failed: the device (or the feature asked of it) is unavailable."""


class NotSupportedError(DeviceError):
    """The device or its driver does not support this call."""


class NoPermissionError(DeviceError):
    """The call needs more privileges (root or CAP_SYS_ADMIN for power limits and clocks)."""


class DeviceLostError(DeviceError):
    """The device fell off the bus or stopped answering."""


class DeviceSpec(TypedDict, total=False):
    """What names a device for another process: `Device.spec()`, reopened by `wattwise.devices.open_spec`.

    The settings journal and the node agent's `GET /v1/devices` carry it, so it is JSON. Each backend
    writes the keys it needs to find the device again; a key is never renamed or dropped.
    """

    #: The backend's registered name ("nvml", "amdsmi", "rapl", "simulated", "agent").
    backend: Required[str]
    index: Required[int]
    #: The GPU's UUID (nvml, amdsmi; agent: the one the agent shows, "" when not known).
    uuid: str
    #: The powercap zone (rapl), e.g. "intel-rapl:0".
    zone: str
    #: simulated: the state file its settings live in (None: this process only), its power-limit range
    #: `[min, max]` W, its physics and the GPU generation it stands for.
    state_file: str | None
    limit_range_w: list[float]
    physics: str
    simulated_gpu: str | None
    #: agent: the agent's socket, and the spec of the GPU this process reads itself.
    socket: str
    local: DeviceSpec


class PresetDescription(TypedDict):
    """A simulated GPU's preset as `wattwise devices --json` shows it: what it stands for, its cited parameters."""

    name: str
    label: str
    sm_clock_range_mhz: list[int]
    energy_update_period_s: float
    energy_read_median_s: float
    power_reading: str
    power_window_s: float
    power_limit_settle_s: float
    clock_settle_s: float
    clock_set_s: float
    gpu_spread: float
    #: Where each parameter comes from (parameter -> source).
    sources: dict[str, str]


class DeviceDescription(TypedDict, total=False):
    """What `wattwise devices` prints for a device (`Device.describe()`); each backend adds its own keys."""

    key: Required[str]
    backend: Required[str]
    index: Required[int]
    name: Required[str]
    simulated: Required[bool]
    energy_counter: Required[bool]
    #: Where the device has a power limit: the limit now, and `[min, max]` W.
    power_limit_w: float
    power_limit_range_w: list[float]
    #: nvml, amdsmi: the GPU's UUID; amdsmi: its serial, PCI address and why its energy counter is not used.
    uuid: str
    serial: str
    bdf: str
    energy_counter_note: str
    #: rapl: the powercap zone.
    zone: str
    #: simulated: its model, physics and preset.
    idle_power_w: float
    sm_clock_range_mhz: list[int]
    physics: str
    energy_update_period_s: float
    physics_parameters: dict[str, float | int | str | None]
    simulated_gpu: str | None
    preset: PresetDescription | None
    #: agent: the agent's socket.
    agent_socket: str


@contextlib.contextmanager
def mapped_errors(
    kind: type[Exception], mapped: Callable[[Exception, str], DeviceError], action: str
) -> Iterator[None]:
    """A vendor binding's exceptions (`kind`) raised as ours: `mapped(err, action)`, the binding's error chained.

    Args:
        kind: The binding's exception class (`pynvml.NVMLError`, `amdsmi.AmdSmiException`).
        mapped: The `DeviceError` of one of its exceptions, whose message starts with `action`.
        action: What was being done ("GPU 0 (GPU-...): set the power limit").
    """
    try:
        yield
    except kind as err:
        raise mapped(err, action) from err


@dataclass(frozen=True)
class PowerLimitRange:
    """Allowed power-limit range of a device, in watts."""

    min_w: float
    max_w: float
    default_w: float


class Device(abc.ABC):
    """A GPU (or CPU package) whose energy we measure and whose settings we may change.

    Subclasses must be safe to call from a sampler thread and the training thread at once.
    """

    #: Short backend name, as registered in `wattwise.devices.registry`: "nvml", "rapl", "simulated", ...
    backend: str = "abstract"
    #: True when figures come from a model, not from hardware. Every output must say so.
    simulated: bool = False

    @property
    @abc.abstractmethod
    def index(self) -> int:
        """Index as the user sees it (after `CUDA_VISIBLE_DEVICES` mapping for GPUs)."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Human-readable model name."""

    @property
    def driven(self) -> bool:
        """True when real work draws the power measured: always, for hardware (see `SimulatedGPU.driven`)."""
        return True

    @property
    def key(self) -> str:
        """Stable label in reports and logs, e.g. "gpu0"."""
        return f"gpu{self.index}"

    @abc.abstractmethod
    def has_energy_counter(self) -> bool:
        """True when `energy_j` is a hardware (or modelled) cumulative counter."""

    @abc.abstractmethod
    def energy_j(self) -> float:
        """Cumulative energy counter in joules (monotonic within a process)."""

    @property
    def energy_update_period_s(self) -> float:
        """How often `energy_j` changes value, in seconds (0: at every read).

        A window shorter than a few periods is quantised by up to one period's energy, so power-limit
        tuning holds its profile windows open for 20 periods (`power_limit.min_profile_s`).
        """
        return 0.0

    @property
    def max_read_interval_s(self) -> float | None:
        """Longest safe gap between two reads of a counter that wraps, in seconds; None: no such limit.

        A wrap between two reads cannot be seen, so the monitor's sampler reads every device at least this
        often while a measurement is open (RAPL's counters, a 32-bit AMD counter).
        """
        return None

    @abc.abstractmethod
    def power_w(self) -> float:
        """Current power draw in watts."""

    def power_limit_w(self) -> float:
        """Current power limit in watts."""
        raise NotSupportedError(f"{self.backend} device {self.index} has no power limit")

    def power_limit_range(self) -> PowerLimitRange:
        """Allowed power-limit range in watts."""
        raise NotSupportedError(f"{self.backend} device {self.index} has no power limit")

    def set_power_limit_w(self, watts: float) -> None:
        """Set the power limit. Callers go through `wattwise.settings.guard.SettingsGuard`, never directly."""
        raise NotSupportedError(f"{self.backend} device {self.index} cannot set a power limit")

    def supported_sm_clocks_mhz(self) -> list[int]:
        """Supported SM clocks, highest first."""
        raise NotSupportedError(f"{self.backend} device {self.index} has no SM clocks")

    def locked_sm_clocks_mhz(self) -> tuple[int, int] | None:
        """The locked (min, max) SM clock range, or None when clocks are not locked."""
        raise NotSupportedError(f"{self.backend} device {self.index} has no SM clocks")

    def lock_sm_clocks_mhz(self, min_mhz: int, max_mhz: int) -> None:
        """Lock SM clocks to a range. Callers go through the guard."""
        raise NotSupportedError(f"{self.backend} device {self.index} cannot lock SM clocks")

    def reset_sm_clocks(self) -> None:
        """Undo `lock_sm_clocks_mhz`."""
        raise NotSupportedError(f"{self.backend} device {self.index} cannot reset SM clocks")

    def workload_power_profiles(self) -> list[str]:
        """The workload power profiles the GPU offers (NVML's, by name: "max_q", "training", ...)."""
        raise NotSupportedError(f"{self.backend} device {self.index} has no workload power profiles")

    def requested_workload_power_profiles(self) -> list[str]:
        """The workload power profiles requested on the GPU now, by name (empty: none)."""
        raise NotSupportedError(f"{self.backend} device {self.index} has no workload power profiles")

    def request_workload_power_profiles(self, names: Sequence[str]) -> None:
        """Make `names` exactly the requested workload power profiles (empty: none). Callers go through the guard."""
        raise NotSupportedError(f"{self.backend} device {self.index} cannot request workload power profiles")

    # -- capabilities: what differs between backends, asked of the device instead of its class ----------
    @property
    def settings_lease(self) -> str | None:
        """The lease under which someone else restores this device's settings, or None.

        None (every backend but "agent"): this process restores what it changes, so the settings guard
        locks the device and journals the originals itself. Otherwise an identifier of the lease (one per
        GPU and process, shared by the guards of the process) under which the node agent recorded the
        originals and restores them on `release` or when this process ends: the guard neither locks nor
        journals such a device, and gives it back with `release` instead of setting the originals.
        """
        return None

    def release(self) -> None:
        """Give the device back to whoever restores its settings (see `settings_lease`).

        Raises:
            NotSupportedError: The device has no such lease (`settings_lease` is None).
        """
        raise NotSupportedError(f"{self.backend} device {self.index} has no settings lease to release")

    def settings_lifted(self) -> str | None:
        """Whether someone else lifted a setting this process made; a one-line note saying so, or None.

        A GPU changed through someone else (the node agent) can find its power limit changed behind this
        process's back (the agent gone, an admin's `nvidia-smi -pl`): the note names the GPU and both limits,
        and is returned again by every later call. The run says it once and lists it in its summary's notes.
        None (this base): nothing was lifted, or the device cannot tell.
        """
        return None

    def name_job(self, job: str) -> None:
        """Name the job changing this device's settings, where someone shows the holder.

        The node agent shows it in its status and metrics; a device whose settings this process changes
        itself ignores it.
        """
        return None

    @property
    def simulation(self) -> Simulation | None:
        """The simulated GPU behind this device, which emulated work drives (`wattwise.tools.workload`).

        None for hardware, where real work draws the power.
        """
        return None

    @abc.abstractmethod
    def spec(self) -> DeviceSpec:
        """A JSON-serialisable description that `wattwise.devices.open_spec` reopens in another process.

        The guard journals it so that settings can be restored after a crash.
        """

    def describe(self) -> DeviceDescription:
        """What `wattwise devices` prints for this device."""
        info: DeviceDescription = {
            "key": self.key,
            "backend": self.backend,
            "index": self.index,
            "name": self.name,
            "simulated": self.simulated,
            "energy_counter": self.has_energy_counter(),
        }
        try:
            rng = self.power_limit_range()
            info["power_limit_w"] = self.power_limit_w()
            info["power_limit_range_w"] = [rng.min_w, rng.max_w]
        except DeviceError:
            pass
        return info


class HardwareGPU(Device):
    """A GPU its vendor's driver names by a UUID (NVML's `GPU-...`, amdsmi's), reopened by it in any process.

    The backend sets `_index` (as the user sees it), `_name` and `_uuid` when it opens the GPU.
    """

    _index: int
    _name: str
    _uuid: str

    @property
    def index(self) -> int:
        """The index the user sees (after the visibility variables)."""
        return self._index

    @property
    def name(self) -> str:
        """The model's name, as the driver gives it."""
        return self._name

    @property
    def uuid(self) -> str:
        """The driver's UUID: stable across reboots and changes of the visibility variables (`CUDA_VISIBLE_DEVICES`)."""
        return self._uuid

    def spec(self) -> DeviceSpec:
        """The backend, the UUID (indices can change) and the index."""
        return {"backend": self.backend, "uuid": self._uuid, "index": self._index}

    def describe(self) -> DeviceDescription:
        """What every device says, and the UUID."""
        return {**super().describe(), "uuid": self._uuid}
