"""A fake `pynvml` (nvidia-ml-py) for tests on machines without an NVIDIA GPU.

It mirrors the installed binding where our code can tell the difference: the same function names and
argument order, the same units (mW for power and limits, mJ for energy, MHz for clocks), the same
error codes, and an `NVMLError` whose constructor turns a code into the matching generated subclass
(`NVMLError_NoPermission`, `NVMLError_NotSupported`, `NVMLError_GpuIsLost`, ...) exactly as the binding
does. `tests/unit/devices/test_devices_nvml.py` checks the codes, class names and function names against the
installed binding, so the fake cannot drift from it unnoticed.

What it models, per GPU (`FakeGpu`):

- an architecture: Volta and newer have the energy counter and lockable clocks; older GPUs answer
  `NVML_ERROR_NOT_SUPPORTED` to both, as real ones do;
- a power draw that follows a settable demand, capped by the power limit, and an energy counter that
  integrates it over a `FakeClock` the test advances;
- power-limit constraints, supported memory and graphics clocks, locked clocks;
- failure modes: a lost GPU (every call raises `NVMLError_GpuIsLost`) and a driver that ignores
  power-limit changes while reporting success.

Process-wide (`FakeNvml`): privileges (without them, setters raise `NVMLError_NoPermission`, except the
binding's `nvmlDeviceSetPowerManagementLimit_v2`, which discards the driver's return code), an
`nvmlInit` failure (no driver), and library entry points missing from the driver
(`NVMLError_FunctionNotFound`).

Usage::

    clock = FakeClock()
    fake = FakeNvml([FakeGpu(), FakeGpu(architecture=NVML_DEVICE_ARCH_PASCAL)], clock=clock)
    fake.install(monkeypatch)   # wattwise.devices.nvml now talks to the fake
"""

from __future__ import annotations

import itertools
import string
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

NVML_SUCCESS = 0
# Error codes, as in nvml.h and the binding.
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_DEVICE_ARCH_KEPLER = 2
NVML_DEVICE_ARCH_MAXWELL = 3
NVML_DEVICE_ARCH_PASCAL = 4
NVML_DEVICE_ARCH_VOLTA = 5
NVML_DEVICE_ARCH_TURING = 6
NVML_DEVICE_ARCH_AMPERE = 7
NVML_DEVICE_ARCH_ADA = 8
NVML_DEVICE_ARCH_HOPPER = 9

NVML_POWER_SCOPE_GPU = 0
NVML_POWER_SCOPE_MODULE = 1
NVML_POWER_SCOPE_MEMORY = 2
nvmlPowerValue_v2 = 0x0200000C


class c_nvmlMask255_t:
    """A 255-bit mask of workload power profiles: 8 words of 32 bits, as the binding's ctypes structure."""

    def __init__(self) -> None:
        self.mask = [0] * 8


class c_nvmlWorkloadPowerProfileProfilesInfo_v1_t:
    """The profiles a GPU offers (`perfProfilesMask`), as the binding's structure (its per-profile array left out)."""

    def __init__(self) -> None:
        self.perfProfilesMask = c_nvmlMask255_t()


class c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t:
    """The profiles offered, requested and enforced now, as the binding's structure."""

    def __init__(self) -> None:
        self.perfProfilesMask = c_nvmlMask255_t()
        self.requestedProfilesMask = c_nvmlMask255_t()
        self.enforcedProfilesMask = c_nvmlMask255_t()


class c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t:
    """The profiles to request (or clear), as the binding's structure."""

    def __init__(self) -> None:
        self.requestedProfilesMask = c_nvmlMask255_t()


def _ids(mask: c_nvmlMask255_t) -> set[int]:
    return {w * 32 + b for w in range(8) for b in range(32) if mask.mask[w] >> b & 1}


def _fill(mask: c_nvmlMask255_t, ids: set[int]) -> None:
    for pid in ids:
        mask.mask[pid // 32] |= 1 << (pid % 32)


#: The binding's wording for the codes it knows; others print as "NVML Error with code N".
_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Base of the binding's errors. `NVMLError(code)` returns an instance of the code's subclass."""

    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012  (the binding's own name)
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = None  # type: ignore[assignment]  # like the binding: __eq__ without __hash__


def _error_class_name(constant: str) -> str:
    """NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost, the binding's naming rule."""
    words = string.capwords(constant.removeprefix("NVML_ERROR_"), "_")
    return "NVMLError_" + words.replace("_", "")


def _make_error_classes() -> None:
    """Generate one `NVMLError` subclass per error code, as the binding does at import time."""
    module = sys.modules[__name__]
    for constant in [n for n in dir(module) if n.startswith("NVML_ERROR_")]:
        code = getattr(module, constant)

        def new(cls: type[NVMLError], *_args: Any, _code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, _code)

        subclass = type(_error_class_name(constant), (NVMLError,), {"__new__": new})
        subclass.__module__ = __name__
        setattr(module, subclass.__name__, subclass)
        NVMLError._valClassMapping[code] = subclass


_make_error_classes()


def nvmlExceptionClass(nvmlErrorCode: int) -> type[NVMLError]:
    """The subclass raised for an error code (the binding's helper)."""
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
    return NVMLError._valClassMapping[nvmlErrorCode]


class FakeClock:
    """A clock the test moves by hand; pass it wherever code takes `clock: Callable[[], float]`."""

    def __init__(self, start_s: float = 1000.0) -> None:
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


_uuid_serial = itertools.count(1)


def _next_uuid() -> str:
    n = next(_uuid_serial)
    return f"GPU-{n:08x}-1111-2222-3333-{n:012x}"


@dataclass(eq=False)
class FakeGpu:
    """One fake GPU. Change `demand_w`, `lost` or `ignores_set` at any time during a test."""

    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str = field(default_factory=_next_uuid)
    architecture: int = NVML_DEVICE_ARCH_AMPERE
    #: What the workload would draw; the reported draw is capped by the power limit.
    demand_w: float = 100.0
    min_limit_w: float = 100.0
    max_limit_w: float = 400.0
    default_limit_w: float = 400.0
    memory_clocks_mhz: list[int] = field(default_factory=lambda: [1215])
    #: Supported graphics clocks, in the order the driver lists them.
    graphics_clocks_mhz: list[int] = field(default_factory=lambda: [1410, 1395, 1380, 1200, 1005, 210])
    #: The driver reports success on power-limit changes but keeps the old limit.
    ignores_set: bool = False
    #: The GPU fell off the bus: every call raises NVMLError_GpuIsLost.
    lost: bool = False
    limit_mw: int = 0
    locked_clocks_mhz: tuple[int, int] | None = None
    #: NVML's workload power profiles the GPU offers, by id (empty: a driver without them answers
    #: NVML_ERROR_NOT_SUPPORTED; `missing_functions` models a driver library that lacks the entry points).
    workload_profiles: tuple[int, ...] = ()
    #: The workload power profiles requested now, by id.
    requested_profiles: set[int] = field(default_factory=set)
    energy_mj: float = 0.0
    _clock: Callable[[], float] | None = field(default=None, repr=False)
    _last_s: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self.limit_mw = self.limit_mw or round(self.default_limit_w * 1000)

    def __setattr__(self, attr: str, value: Any) -> None:
        # Energy accrues at the old draw up to the moment the draw's inputs change.
        if attr in ("demand_w", "limit_mw") and "_clock" in self.__dict__:
            self.accrue()
        super().__setattr__(attr, value)

    @property
    def has_energy_counter(self) -> bool:
        return self.architecture >= NVML_DEVICE_ARCH_VOLTA

    @property
    def draw_mw(self) -> int:
        return round(min(self.demand_w * 1000, self.limit_mw))

    def attach(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._last_s = clock()

    def accrue(self) -> None:
        """Add the energy drawn since the last change, at the current draw (mW x s = mJ)."""
        if self._clock is None:
            return
        now = self._clock()
        self.energy_mj += self.draw_mw * (now - self._last_s)
        self._last_s = now


@dataclass(frozen=True)
class _Handle:
    """Opaque device handle (the binding's is a ctypes pointer)."""

    gpu: FakeGpu


class FakeNvml:
    """The fake binding: an object that answers like the `pynvml` module.

    Attributes not defined here (constants, generated error classes) come from this module, so
    `fake.NVML_ERROR_NO_PERMISSION` and `fake.NVMLError_NoPermission` work as on the binding.
    """

    NVMLError = NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        clock: Callable[[], float] | None = None,
        privileged: bool = True,
        init_error: int | None = None,
        missing_functions: set[str] | frozenset[str] = frozenset(),
        strings_as_bytes: bool = False,
    ) -> None:
        """`init_error`: code `nvmlInit` fails with (e.g. NVML_ERROR_LIBRARY_NOT_FOUND: no driver).

        `missing_functions`: entry points the driver library lacks; calling them raises
        NVMLError_FunctionNotFound, as the binding does. `strings_as_bytes`: return names and UUIDs
        as bytes, like bindings before 11.515.
        """
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.clock = clock if clock is not None else FakeClock()
        self.privileged = privileged
        self.init_error = init_error
        self.missing_functions = set(missing_functions)
        self.strings_as_bytes = strings_as_bytes
        #: Number of successful nvmlInit calls, and the current reference count.
        self.init_calls = 0
        self.refcount = 0
        for gpu in self.gpus:
            gpu.attach(self.clock)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        """Make `wattwise.devices.nvml` (and any later `import pynvml`) use this fake for one test."""
        import wattwise.devices.nvml

        monkeypatch.setattr(wattwise.devices.nvml, "pynvml", self)
        monkeypatch.setitem(sys.modules, "pynvml", self)
        return self

    def __getattribute__(self, attr: str) -> Any:
        if attr.startswith("nvml") and attr in object.__getattribute__(self, "missing_functions"):

            def missing(*_args: Any, **_kwargs: Any) -> Any:
                raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)

            return missing
        return object.__getattribute__(self, attr)

    def __getattr__(self, attr: str) -> Any:
        try:
            return globals()[attr]
        except KeyError:
            raise AttributeError(f"module 'pynvml' has no attribute {attr!r}") from None

    # -- helpers ---------------------------------------------------------------------------------

    def _check_init(self) -> None:
        if self.refcount == 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: _Handle) -> FakeGpu:
        self._check_init()
        if handle.gpu.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return handle.gpu

    def _check_privileged(self) -> None:
        if not self.privileged:
            raise NVMLError(NVML_ERROR_NO_PERMISSION)

    def _text(self, value: str) -> str | bytes:
        return value.encode() if self.strings_as_bytes else value

    # -- library ---------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.init_calls += 1
        self.refcount += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        self.refcount -= 1

    def nvmlErrorString(self, result: int) -> str:
        return _ERROR_STRINGS.get(result, "Unknown Error")

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check_init()
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(self.gpus[index])

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _Handle:
        self._check_init()
        wanted = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self.gpus:
            if gpu.uuid == wanted:
                return _Handle(gpu)
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    # -- identity --------------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str | bytes:
        return self._text(self._gpu(handle).uuid)

    def nvmlDeviceGetName(self, handle: _Handle) -> str | bytes:
        return self._text(self._gpu(handle).name)

    def nvmlDeviceGetArchitecture(self, device: _Handle) -> int:
        return self._gpu(device).architecture

    # -- energy and power ------------------------------------------------------------------------

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        gpu = self._gpu(handle)
        if not gpu.has_energy_counter:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        gpu.accrue()
        return int(gpu.energy_mj)

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._gpu(handle).draw_mw

    # -- power limit -----------------------------------------------------------------------------

    def nvmlDeviceGetPowerManagementLimit(self, handle: _Handle) -> int:
        return self._gpu(handle).limit_mw

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: _Handle) -> list[int]:
        gpu = self._gpu(handle)
        return [round(gpu.min_limit_w * 1000), round(gpu.max_limit_w * 1000)]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: _Handle) -> int:
        return round(self._gpu(handle).default_limit_w * 1000)

    def nvmlDeviceSetPowerManagementLimit(self, handle: _Handle, limit: int) -> None:
        gpu = self._gpu(handle)
        self._check_privileged()
        self._apply_limit(gpu, limit)

    def nvmlDeviceSetPowerManagementLimit_v2(
        self, device: _Handle, powerScope: int, powerLimit: int, version: int = nvmlPowerValue_v2
    ) -> int:
        # The binding calls the driver and returns NVML_SUCCESS whatever the driver answered.
        try:
            gpu = self._gpu(device)
            self._check_privileged()
            if powerScope == NVML_POWER_SCOPE_GPU:
                self._apply_limit(gpu, powerLimit)
        except NVMLError:
            pass
        return NVML_SUCCESS

    def _apply_limit(self, gpu: FakeGpu, limit_mw: int) -> None:
        if not gpu.min_limit_w * 1000 <= limit_mw <= gpu.max_limit_w * 1000:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if not gpu.ignores_set:
            gpu.limit_mw = limit_mw

    # -- clocks ----------------------------------------------------------------------------------

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: _Handle) -> list[int]:
        return list(self._gpu(handle).memory_clocks_mhz)

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: _Handle, memoryClockMHz: int) -> list[int]:
        gpu = self._gpu(handle)
        if memoryClockMHz not in gpu.memory_clocks_mhz:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return list(gpu.graphics_clocks_mhz)

    def nvmlDeviceSetGpuLockedClocks(self, handle: _Handle, minGpuClockMHz: int, maxGpuClockMHz: int) -> None:
        gpu = self._gpu(handle)
        if gpu.architecture < NVML_DEVICE_ARCH_VOLTA:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        self._check_privileged()
        if minGpuClockMHz > maxGpuClockMHz:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu.locked_clocks_mhz = (minGpuClockMHz, maxGpuClockMHz)

    def nvmlDeviceResetGpuLockedClocks(self, handle: _Handle) -> None:
        gpu = self._gpu(handle)
        if gpu.architecture < NVML_DEVICE_ARCH_VOLTA:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        self._check_privileged()
        gpu.locked_clocks_mhz = None

    # -- workload power profiles -----------------------------------------------------------------

    def _profiled_gpu(self, device: _Handle) -> FakeGpu:
        gpu = self._gpu(device)
        if not gpu.workload_profiles:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def nvmlDeviceWorkloadPowerProfileGetProfilesInfo(
        self, device: _Handle, profilesInfo: c_nvmlWorkloadPowerProfileProfilesInfo_v1_t
    ) -> int:
        _fill(profilesInfo.perfProfilesMask, set(self._profiled_gpu(device).workload_profiles))
        return NVML_SUCCESS

    def nvmlDeviceWorkloadPowerProfileGetCurrentProfiles(
        self, device: _Handle, currentProfiles: c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t
    ) -> int:
        gpu = self._profiled_gpu(device)
        _fill(currentProfiles.perfProfilesMask, set(gpu.workload_profiles))
        _fill(currentProfiles.requestedProfilesMask, set(gpu.requested_profiles))
        _fill(currentProfiles.enforcedProfilesMask, set(gpu.requested_profiles))
        return NVML_SUCCESS

    def nvmlDeviceWorkloadPowerProfileSetRequestedProfiles(
        self, device: _Handle, requestedProfiles: c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t
    ) -> int:
        gpu = self._profiled_gpu(device)
        self._check_privileged()
        wanted = _ids(requestedProfiles.requestedProfilesMask)
        if not wanted <= set(gpu.workload_profiles):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu.requested_profiles |= wanted
        return NVML_SUCCESS

    def nvmlDeviceWorkloadPowerProfileClearRequestedProfiles(
        self, device: _Handle, requestedProfiles: c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t
    ) -> int:
        gpu = self._profiled_gpu(device)
        self._check_privileged()
        gpu.requested_profiles -= _ids(requestedProfiles.requestedProfilesMask)
        return NVML_SUCCESS
