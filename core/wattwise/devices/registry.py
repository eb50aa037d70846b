"""The device backends by name: how each finds its devices and how it reopens one from its spec.

Each backend (nvml, simulated, agent, rapl, and any added later) registers one `Backend`: its name, a
`discover` function (the devices it finds for a `Wanted`), an `open` function (a device rebuilt from its
`Device.spec()` in another process, for the guard's crash recovery) and how backend "auto" treats it.
`wattwise.devices.discover`, `wattwise.devices.open_spec`, the values `devices.backend` and
`WATTWISE_BACKEND` accept and the CLI's `--backend` choices all read this table, so adding a backend is a
module in `wattwise.devices` and one `register` call in its `__init__`. A backend's module (and its vendor
binding, such as `pynvml`) is imported when the backend is first used (`lazy`), not when it registers.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from wattwise.devices.base import Device, DeviceError, DeviceSpec, NotSupportedError
from wattwise.errors import UsageError

if TYPE_CHECKING:
    from wattwise.devices.simulated import PowerModel

#: The backend value that picks the devices this machine has (see `wattwise.devices.discover`).
AUTO = "auto"


@dataclass(frozen=True)
class Wanted:
    """What `discover()` was asked for, as every backend's discover function receives it.

    Attributes:
        gpu_indices: The GPUs to use, as numbered after `CUDA_VISIBLE_DEVICES`; None: every visible one.
        num_simulated: How many simulated GPUs (backend "simulated" only).
        power_model: The simulated GPUs' power model: a CSV path or a model; None: the built-in one.
        base_step_time_s: A simulated GPU's step time at full power, for the emulated workload.
        persist_dir: Where simulated GPUs keep their settings; None: `<state dir>/simulated`.
        simulated_physics: The simulated GPUs' physics, "realistic" or "ideal"; None:
            `$WATTWISE_SIMULATED_PHYSICS`, else realistic (`wattwise.devices.simulated.Physics.named`).
        simulated_gpu: The GPU generation the realistic physics stands for ("h100", "a100", "v100",
            "mi300x"); None: `$WATTWISE_SIMULATED_GPU`, else h100.
    """

    gpu_indices: list[int] | None = None
    num_simulated: int = 1
    power_model: str | os.PathLike[str] | PowerModel | None = None
    base_step_time_s: float = 0.02
    persist_dir: str | os.PathLike[str] | None = None
    simulated_physics: str | None = None
    simulated_gpu: str | None = None


@dataclass(frozen=True)
class Backend:
    """One device backend: its name, how it finds its devices, how it reopens one, how "auto" treats it.

    Attributes:
        name: The value of `devices.backend`, `WATTWISE_BACKEND` and `--backend`, and `Device.backend`.
        discover: The devices it finds for a `Wanted`. Raises `DeviceError` (or `ImportError`, its binding
            not installed) when it cannot find any; `UsageError` when `gpu_indices` names one it lacks.
        open: A device rebuilt from its `Device.spec()`, in any process. Raises `DeviceError`.
        kind: "gpu": one of the values of `devices.backend`; "cpu": measured beside the GPUs when asked
            (`include_cpu`), or instead of them when "auto" finds no GPU.
        probe: "auto" tries it, in the order of registration, when no backend claims "auto"; when it is
            unavailable, a note says why and the next one is tried.
        claim: "auto" picks this backend before probing any when this returns a note (the line saying
            why), e.g. the node agent for a process that may not change GPU settings itself.
        title: How messages name it ("NVML unavailable: ..."); default: the name.
        needs: What it needs, for the error when it is asked for by name and unavailable ("an NVIDIA GPU
            and its driver"); empty: its errors are raised as they are.
        identity: What names the hardware a spec describes for every process on this host (NVML's UUID, a
            simulated GPU's state file), for the settings guard's lock of one GPU; the function returns
            None for a device that lives in one process only. None (no function): the settings guard
            never changes this backend's settings itself (none to change, or the node agent restores
            them), and a journal that names the backend is refused.
    """

    name: str
    discover: Callable[[Wanted], list[Device]]
    open: Callable[[DeviceSpec], Device]
    kind: Literal["gpu", "cpu"] = "gpu"
    probe: bool = False
    claim: Callable[[], str | None] | None = None
    title: str = ""
    needs: str = ""
    identity: Callable[[DeviceSpec], str | None] | None = None

    @property
    def label(self) -> str:
        """How messages name this backend."""
        return self.title or self.name


#: The registered backends by name, in the order of registration ("auto" probes them in this order).
_BACKENDS: dict[str, Backend] = {}


def register(backend: Backend) -> None:
    """Add a backend to the table.

    Args:
        backend: The backend; its name must be new, and not "auto".

    Raises:
        ValueError: The name is "auto", empty, or already registered.
    """
    if not backend.name or backend.name == AUTO:
        raise ValueError(f"a device backend needs a name other than {AUTO!r} (got {backend.name!r})")
    if backend.name in _BACKENDS:
        raise ValueError(f"device backend {backend.name!r} is already registered")
    _BACKENDS[backend.name] = backend


def unregister(name: str) -> None:
    """Remove the backend called `name` (a test's own backend, once the test is done); unknown: nothing."""
    _BACKENDS.pop(name, None)


def lookup(name: str) -> Backend | None:
    """The backend called `name`, or None when none is registered under it."""
    return _BACKENDS.get(name)


def backends(kind: Literal["gpu", "cpu"] | None = None) -> list[Backend]:
    """The registered backends (those of `kind` only, when given), in the order of registration."""
    return [b for b in _BACKENDS.values() if kind is None or b.kind == kind]


def names() -> tuple[str, ...]:
    """Every registered backend's name, GPU and CPU alike: what a device spec's `backend` may be."""
    return tuple(_BACKENDS)


def choices() -> tuple[str, ...]:
    """The values `devices.backend`, `WATTWISE_BACKEND` and `--backend` accept: "auto" and every GPU backend."""
    return (AUTO, *(b.name for b in backends("gpu")))


def lazy(module: str, function: str) -> Callable[..., Any]:
    """`module.function`, imported at the first call and looked up at every call.

    A backend registers its functions through this so that its module and vendor binding load only when
    the backend is used; looking the function up at each call lets a test replace it in its module.
    """

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), function)(*args, **kwargs)

    call.__qualname__ = call.__name__ = f"{module}.{function}"
    return call


def select(devices: list[Device], indices: list[int] | None) -> list[Device]:
    """The devices at `indices` (their `Device.index`), in that order; all of them when `indices` is None.

    Raises:
        UsageError: An index names no device; the message lists the ones there are.
    """
    if indices is None:
        return devices
    by_index = {d.index: d for d in devices}
    missing = [i for i in indices if i not in by_index]
    if missing:
        raise UsageError(f"devices.gpus asks for GPU(s) {missing}, but the visible ones are {sorted(by_index)}")
    return [by_index[i] for i in indices]


def select_found(devices: list[Device], wanted: Wanted, found_none: str) -> list[Device]:
    """A GPU backend's discover answer: `select`'s choice of `devices` at `wanted.gpu_indices`.

    Raises:
        NotSupportedError: `devices` is empty; `found_none` is the reason ("NVML found no GPU visible ...").
        UsageError: `wanted.gpu_indices` names a GPU that is not visible.
    """
    if not devices:
        raise NotSupportedError(found_none)
    return select(devices, wanted.gpu_indices)


def spec_uuid(spec: DeviceSpec, backend: str, title: str) -> str:
    """The UUID of a spec of `backend` (`HardwareGPU.spec()`), which the backend reopens its GPU by.

    Raises:
        DeviceError: The spec is of another backend or has no UUID (`title` names the backend).
    """
    uuid = spec.get("uuid")
    if spec.get("backend") != backend or not isinstance(uuid, str):
        raise DeviceError(f"not an {title} device spec (needs backend {backend!r} and a uuid): {spec!r}")
    return uuid
