"""A fake `amdsmi` (ROCm's AMD SMI Python binding) for tests on machines without an AMD GPU.

It answers like the binding where our code can tell the difference: the same function names and
parameter names (checked against a table taken from the real package's source, `tests/data/
amdsmi_signatures.json`, by `tests/unit/test_devices_amdsmi.py` or wherever that test now lives), the same
status codes, an `AmdSmiLibraryException` carrying the code (`get_error_code()`) and printing it as the
binding does, and the binding's units:

- power readings (`amdsmi_get_power_info`) in whole watts, "N/A" where the card has no such sensor
  (MI300 reports `current_socket_power`, MI200 and older `average_socket_power`);
- power caps (`amdsmi_get_power_cap_info`, `amdsmi_set_power_cap`) in microwatts;
- the energy counter (`amdsmi_get_energy_count`) as an accumulator of ticks and a resolution in
  microjoules per tick, wrapping at 2**`counter_bits`;
- clock levels (`amdsmi_get_clk_freq`) in hertz, clock ranges (`amdsmi_get_clock_info`,
  `amdsmi_set_gpu_clk_range`) in megahertz.

What it models, per GPU (`FakeAmdGpu`): a draw that follows a settable demand, capped by the power cap; an
energy counter integrating that draw over a clock the test controls, which can be made wrong
(`counter_scale`) or absent; power-cap limits; graphics clock levels and a settable clock range (with the
performance level it implies); failure modes: a lost GPU (every call fails with AMDSMI_STATUS_NOT_FOUND)
and a driver that ignores cap changes while reporting success. Process-wide (`FakeAmdSmi`): privileges
(without them setters fail with AMDSMI_STATUS_NO_PERM) and an `amdsmi_init` failure.

What it does not model, because nothing here knows it from hardware: how an amdgpu driver orders GPUs
against HIP, how long a real counter takes to update, and whether a real clock range survives a change of
performance level.

Usage::

    clock = VirtualClock()
    fake = FakeAmdSmi([FakeAmdGpu(), FakeAmdGpu(counter_bits=32)], clock=clock)
    fake.install(monkeypatch)   # wattwise.devices.amdsmi now talks to the fake and sleeps on `clock`
"""

from __future__ import annotations

import enum
import itertools
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.clock import VirtualClock

#: The binding version whose names and codes this fake follows (the table in tests/data says the same).
AMDSMI_VERSION = "7.0.2"

# Status codes, as in amdsmi_wrapper.py.
AMDSMI_STATUS_SUCCESS = 0
AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_YET_IMPLEMENTED = 3
AMDSMI_STATUS_FAIL_LOAD_MODULE = 4
AMDSMI_STATUS_FAIL_LOAD_SYMBOL = 5
AMDSMI_STATUS_DRM_ERROR = 6
AMDSMI_STATUS_API_FAILED = 7
AMDSMI_STATUS_TIMEOUT = 8
AMDSMI_STATUS_RETRY = 9
AMDSMI_STATUS_NO_PERM = 10
AMDSMI_STATUS_INTERRUPT = 11
AMDSMI_STATUS_IO = 12
AMDSMI_STATUS_ADDRESS_FAULT = 13
AMDSMI_STATUS_FILE_ERROR = 14
AMDSMI_STATUS_OUT_OF_RESOURCES = 15
AMDSMI_STATUS_INTERNAL_EXCEPTION = 16
AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS = 17
AMDSMI_STATUS_INIT_ERROR = 18
AMDSMI_STATUS_REFCOUNT_OVERFLOW = 19
AMDSMI_STATUS_DIRECTORY_NOT_FOUND = 20
AMDSMI_STATUS_BUSY = 30
AMDSMI_STATUS_NOT_FOUND = 31
AMDSMI_STATUS_NOT_INIT = 32
AMDSMI_STATUS_NO_SLOT = 33
AMDSMI_STATUS_DRIVER_NOT_LOADED = 34
AMDSMI_STATUS_NO_DATA = 40
AMDSMI_STATUS_INSUFFICIENT_SIZE = 41
AMDSMI_STATUS_UNEXPECTED_SIZE = 42
AMDSMI_STATUS_UNEXPECTED_DATA = 43
AMDSMI_STATUS_SETTING_UNAVAILABLE = 55
AMDSMI_STATUS_UNKNOWN_ERROR = 4294967295

#: The binding's wording for the codes this fake raises (amdsmi_exception.py); others print as unknown.
_ERROR_INFO = {
    AMDSMI_STATUS_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
    AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    AMDSMI_STATUS_NO_PERM: "AMDSMI_STATUS_NO_PERM - Permission Denied",
    AMDSMI_STATUS_IO: "AMDSMI_STATUS_IO - I/O Error",
    AMDSMI_STATUS_INIT_ERROR: "AMDSMI_STATUS_INIT_ERROR - Initialization error",
    AMDSMI_STATUS_NOT_FOUND: "AMDSMI_STATUS_NOT_FOUND - Device Not found",
    AMDSMI_STATUS_NOT_INIT: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
    AMDSMI_STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
    AMDSMI_STATUS_BUSY: "AMDSMI_STATUS_BUSY - Device busy",
}


class AmdSmiException(Exception):
    """Base of the binding's exceptions."""


class AmdSmiLibraryException(AmdSmiException):
    """A library call returned a status other than success; `err_code` holds it (always positive)."""

    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _ERROR_INFO.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred")

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_code(self) -> int:
        return self.err_code

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info if detailed else self.err_info.split(" - ")[0]


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_RETRY)


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_TIMEOUT)


class AmdSmiParameterException(AmdSmiException):
    """A Python argument of the wrong type (the binding checks them before calling the library)."""

    def __init__(self, receivedValue: Any, expectedType: Any, msg: str | None = None) -> None:
        super().__init__(msg)
        self.err_code = None
        self.err_msg = msg or f"Invalid parameter:\nActual type: {type(receivedValue)}\nExpected type: {expectedType}"

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiInitFlags(enum.IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8
    INIT_AMD_APUS = 3


class AmdSmiClkType(enum.IntEnum):
    SYS = 0
    GFX = 0  # an alias of SYS, as in the binding
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5


class AmdSmiDevPerfLevel(enum.IntEnum):
    AUTO = 0
    LOW = 1
    HIGH = 2
    MANUAL = 3
    STABLE_STD = 4
    STABLE_PEAK = 5
    STABLE_MIN_MCLK = 6
    STABLE_MIN_SCLK = 7
    DETERMINISM = 8
    UNKNOWN = 256


_serial = itertools.count(1)


def _next_serial() -> int:
    return next(_serial)


@dataclass(eq=False)
class FakeAmdGpu:
    """One fake AMD GPU. Change `demand_w`, `lost`, `counter_scale` or `ignores_set` at any time in a test."""

    name: str = "AMD Instinct MI300X"
    number: int = field(default_factory=_next_serial)
    uuid: str = ""
    #: The ASIC serial as the binding prints it; rocminfo and ROCR_VISIBLE_DEVICES write it GPU-<16 hex>.
    serial: str = ""
    bdf: str = ""
    #: HIP's number for the GPU (amdsmi_get_gpu_enumeration_info); None: the call is not supported.
    hip_id: int | None = None
    #: What the workload would draw; the reported draw is capped by the power cap.
    demand_w: float = 300.0
    min_cap_w: float = 100.0
    max_cap_w: float = 750.0
    default_cap_w: float = 750.0
    cap_uw: int = 0
    #: "current_socket_power" (MI300) or "average_socket_power" (MI200 and older): the sensor it has.
    power_sensor: str = "current_socket_power"
    #: Microjoules per accumulator tick (about 15.3 on MI200/MI300).
    counter_resolution_uj: float = 15.259
    #: The accumulator wraps at 2**counter_bits ticks.
    counter_bits: int = 64
    #: Ticks already counted when the test starts (a counter is not zero after the machine booted).
    counter_start_ticks: int = 0
    #: The counter's energy over the true energy: 1.0 for a sound counter.
    counter_scale: float = 1.0
    has_energy_counter: bool = True
    #: Graphics (GFX) clock levels in MHz, lowest first as the driver lists them.
    gfx_levels_mhz: list[int] = field(default_factory=lambda: [500, 1300, 2100])
    #: The clock range can be set (amdsmi_set_gpu_clk_range); False answers AMDSMI_STATUS_NOT_SUPPORTED.
    clock_range_settable: bool = True
    gfx_range_mhz: tuple[int, int] | None = None
    perf_level: AmdSmiDevPerfLevel = AmdSmiDevPerfLevel.AUTO
    #: The driver reports success on cap changes but keeps the old cap.
    ignores_set: bool = False
    #: The GPU fell off the bus: every call fails with AMDSMI_STATUS_NOT_FOUND.
    lost: bool = False
    energy_uj: float = 0.0
    _clock: VirtualClock | None = field(default=None, repr=False)
    _last_s: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        n = self.number
        self.uuid = self.uuid or f"{n:02x}ff74a1-0000-1000-80ed-{n:012x}"
        self.serial = self.serial or f"0x{0x5E1F3A0000000000 + n:016X}"
        self.bdf = self.bdf or f"0000:{0x10 * n:02x}:00.0"
        self.cap_uw = self.cap_uw or round(self.default_cap_w * 1e6)
        self.gfx_range_mhz = self.gfx_range_mhz or (min(self.gfx_levels_mhz), max(self.gfx_levels_mhz))
        self.energy_uj = self.counter_start_ticks * self.counter_resolution_uj

    def __setattr__(self, attr: str, value: Any) -> None:
        # Energy accrues at the old draw (and the old counter error) until the draw's inputs change.
        if attr in ("demand_w", "cap_uw", "counter_scale") and "_clock" in self.__dict__:
            self.accrue()
        super().__setattr__(attr, value)

    @property
    def draw_w(self) -> float:
        return min(self.demand_w, self.cap_uw / 1e6)

    @property
    def hardware_gfx_range_mhz(self) -> tuple[int, int]:
        return min(self.gfx_levels_mhz), max(self.gfx_levels_mhz)

    def attach(self, clock: VirtualClock) -> None:
        self._clock = clock
        self._last_s = clock()

    def accrue(self) -> None:
        """Add what the counter counts since the last change: the draw times the time, times its error."""
        if self._clock is None:
            return
        now = self._clock()
        self.energy_uj += self.draw_w * 1e6 * (now - self._last_s) * self.counter_scale
        self._last_s = now

    @property
    def ticks(self) -> int:
        self.accrue()
        return int(self.energy_uj / self.counter_resolution_uj) % (1 << self.counter_bits)


class _Handle:
    """An opaque processor handle (the binding's is a ctypes pointer)."""

    def __init__(self, gpu: FakeAmdGpu) -> None:
        self.gpu = gpu


class FakeAmdSmi:
    """The fake binding: an object that answers like the `amdsmi` module.

    Attributes not defined here (status codes, enums, exception classes) come from this module, so
    `fake.AMDSMI_STATUS_NO_PERM` and `fake.AmdSmiLibraryException` work as on the binding.
    """

    def __init__(
        self,
        gpus: list[FakeAmdGpu] | None = None,
        *,
        clock: VirtualClock | None = None,
        privileged: bool = True,
        init_error: int | None = None,
    ) -> None:
        """`init_error`: the status `amdsmi_init` fails with (AMDSMI_STATUS_DRIVER_NOT_LOADED: no amdgpu)."""
        self.gpus = gpus if gpus is not None else [FakeAmdGpu()]
        self.clock = clock if clock is not None else VirtualClock()
        self.privileged = privileged
        self.init_error = init_error
        self.init_calls = 0
        self.initialised = False
        for gpu in self.gpus:
            gpu.attach(self.clock)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeAmdSmi:
        """Make `wattwise.devices.amdsmi` use this fake (and sleep on its clock) for one test."""
        import wattwise.devices.amdsmi as backend

        monkeypatch.setattr(backend, "amdsmi", self)
        monkeypatch.setattr(backend, "_clock", self.clock)
        monkeypatch.setattr(backend, "_sleep", self.clock.sleep)
        monkeypatch.setitem(sys.modules, "amdsmi", self)
        return self

    def __getattr__(self, attr: str) -> Any:
        try:
            return globals()[attr]
        except KeyError:
            raise AttributeError(f"module 'amdsmi' has no attribute {attr!r}") from None

    # -- helpers ---------------------------------------------------------------------------------

    def _gpu(self, handle: _Handle) -> FakeAmdGpu:
        if not isinstance(handle, _Handle):
            raise AmdSmiParameterException(handle, _Handle)
        if not self.initialised:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)
        if handle.gpu.lost:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_FOUND)
        return handle.gpu

    def _check_privileged(self) -> None:
        if not self.privileged:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NO_PERM)

    # -- library ---------------------------------------------------------------------------------

    def amdsmi_init(self, flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        if not isinstance(flag, AmdSmiInitFlags):
            raise AmdSmiParameterException(flag, AmdSmiInitFlags)
        if self.init_error is not None:
            raise AmdSmiLibraryException(self.init_error)
        self.init_calls += 1
        self.initialised = True

    def amdsmi_shut_down(self) -> None:
        self.initialised = False

    def amdsmi_get_processor_handles(self) -> list[_Handle]:
        if not self.initialised:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)
        return [_Handle(gpu) for gpu in self.gpus]

    # -- identity --------------------------------------------------------------------------------

    def amdsmi_get_gpu_device_uuid(self, processor_handle: _Handle) -> str:
        return self._gpu(processor_handle).uuid

    def amdsmi_get_gpu_device_bdf(self, processor_handle: _Handle) -> str:
        return self._gpu(processor_handle).bdf

    def amdsmi_get_gpu_asic_info(self, processor_handle: _Handle) -> dict[str, Any]:
        gpu = self._gpu(processor_handle)
        return {
            "market_name": gpu.name,
            "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "device_id": "0x74a1",
            "asic_serial": gpu.serial,
            "target_graphics_version": "gfx942",
        }

    def amdsmi_get_gpu_enumeration_info(self, processor_handle: _Handle) -> dict[str, Any]:
        gpu = self._gpu(processor_handle)
        if gpu.hip_id is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return {
            "drm_render": 128 + gpu.number,
            "drm_card": gpu.number,
            "hsa_id": gpu.hip_id + 1,
            "hip_id": gpu.hip_id,
            "hip_uuid": "GPU-" + gpu.serial.removeprefix("0x").lower(),
        }

    # -- energy and power ------------------------------------------------------------------------

    def amdsmi_get_energy_count(self, processor_handle: _Handle) -> dict[str, Any]:
        gpu = self._gpu(processor_handle)
        if not gpu.has_energy_counter:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        ticks = gpu.ticks
        return {
            "energy_accumulator": ticks,
            "counter_resolution": gpu.counter_resolution_uj,
            "timestamp": int(self.clock() * 1e9),
        }

    def amdsmi_get_power_info(self, processor_handle: _Handle) -> dict[str, Any]:
        gpu = self._gpu(processor_handle)
        watts = round(gpu.draw_w)
        info: dict[str, Any] = {
            "socket_power": watts,
            "current_socket_power": "N/A",
            "average_socket_power": "N/A",
            "gfx_voltage": "N/A",
            "soc_voltage": "N/A",
            "mem_voltage": "N/A",
            "power_limit": round(gpu.cap_uw / 1e6),
        }
        info[gpu.power_sensor] = watts
        return info

    # -- power cap -------------------------------------------------------------------------------

    def amdsmi_get_power_cap_info(self, processor_handle: _Handle) -> dict[str, Any]:
        gpu = self._gpu(processor_handle)
        return {
            "power_cap": gpu.cap_uw,
            "default_power_cap": round(gpu.default_cap_w * 1e6),
            "dpm_cap": 2100,
            "min_power_cap": round(gpu.min_cap_w * 1e6),
            "max_power_cap": round(gpu.max_cap_w * 1e6),
        }

    def amdsmi_set_power_cap(self, processor_handle: _Handle, sensor_ind: int, cap: int) -> None:
        gpu = self._gpu(processor_handle)
        if not isinstance(sensor_ind, int) or not isinstance(cap, int):
            raise AmdSmiParameterException(cap, int)
        self._check_privileged()
        if sensor_ind != 0 or not gpu.min_cap_w * 1e6 <= cap <= gpu.max_cap_w * 1e6:
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        if not gpu.ignores_set:
            gpu.cap_uw = cap

    # -- clocks ----------------------------------------------------------------------------------

    def amdsmi_get_clk_freq(self, processor_handle: _Handle, clk_type: AmdSmiClkType) -> dict[str, Any]:
        gpu = self._gpu(processor_handle)
        if not isinstance(clk_type, AmdSmiClkType):
            raise AmdSmiParameterException(clk_type, AmdSmiClkType)
        if clk_type != AmdSmiClkType.GFX:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        levels_hz = [mhz * 1_000_000 for mhz in gpu.gfx_levels_mhz]
        return {"num_supported": len(levels_hz), "current": len(levels_hz) - 1, "frequency": levels_hz}

    def amdsmi_get_clock_info(self, processor_handle: _Handle, clock_type: AmdSmiClkType) -> dict[str, Any]:
        gpu = self._gpu(processor_handle)
        if not isinstance(clock_type, AmdSmiClkType):
            raise AmdSmiParameterException(clock_type, AmdSmiClkType)
        lo, hi = gpu.hardware_gfx_range_mhz
        return {
            "clk": hi,
            "min_clk": lo,
            "max_clk": hi,
            "clk_locked": gpu.gfx_range_mhz != (lo, hi),
            "clk_deep_sleep": 0,
        }

    def amdsmi_set_gpu_clk_range(
        self, processor_handle: _Handle, min_clk_value: int, max_clk_value: int, clk_type: AmdSmiClkType
    ) -> None:
        gpu = self._gpu(processor_handle)
        if not isinstance(clk_type, AmdSmiClkType):
            raise AmdSmiParameterException(clk_type, AmdSmiClkType)
        if not gpu.clock_range_settable:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        self._check_privileged()
        lo, hi = gpu.hardware_gfx_range_mhz
        if not lo <= min_clk_value <= max_clk_value <= hi:
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        gpu.gfx_range_mhz = (min_clk_value, max_clk_value)
        gpu.perf_level = AmdSmiDevPerfLevel.MANUAL

    def amdsmi_set_gpu_perf_level(self, processor_handle: _Handle, perf_level: AmdSmiDevPerfLevel) -> None:
        gpu = self._gpu(processor_handle)
        if not isinstance(perf_level, AmdSmiDevPerfLevel):
            raise AmdSmiParameterException(perf_level, AmdSmiDevPerfLevel)
        self._check_privileged()
        gpu.perf_level = perf_level

    def amdsmi_get_gpu_perf_level(self, processor_handle: _Handle) -> str:
        return f"AMDSMI_DEV_PERF_LEVEL_{self._gpu(processor_handle).perf_level.name}"


def mi300(**fields: Any) -> FakeAmdGpu:
    """An MI300X-like GPU with a 300-500 W cap range, drawing 450 W, whose 64-bit counter needs no sampler."""
    settings: dict[str, Any] = {
        "demand_w": 450.0,
        "min_cap_w": 300.0,
        "max_cap_w": 500.0,
        "default_cap_w": 500.0,
        "counter_start_ticks": 2**40,
    }
    return FakeAmdGpu(**{**settings, **fields})


def forget_process_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the test a process of its own for the amdsmi backend: no visibility variables, and no counter
    verdicts or clock ranges remembered from an earlier test."""
    import wattwise.devices.amdsmi as backend

    for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(backend, "_counter_verdicts", {})
    monkeypatch.setattr(backend, "_locked_sm_clocks_mhz", {})
