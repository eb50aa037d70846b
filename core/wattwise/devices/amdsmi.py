"""AMD Instinct GPUs through ROCm's AMD SMI library (the `amdsmi` Python binding, extra `wattwise[amd]`).

This is the only module that imports `amdsmi`. The binding is imported on first use, not at import time:
it loads ROCm's `libamd_smi.so` as it is imported and, without it, prints to stdout and fails with a
KeyError. Every call looks the binding up through this module's `amdsmi` attribute, so tests put a fake
there (`tests/support/fake_amdsmi.py`, `FakeAmdSmi.install`), with the clock and sleep the start-up check
of the energy counter uses (`_clock`, `_sleep`).

Units at the boundary: amdsmi reports power caps in microwatts, the energy counter as an accumulator of
ticks times a resolution in microjoules, power readings in whole watts, clock levels in hertz and clock
ranges in megahertz; everything above this module sees W, J and MHz.

Energy: the accumulator is read at each `energy_j()` and the difference from the previous read added to a
running total, so a counter that wraps is followed across the wrap. A counter whose first reading is below
2**32 ticks is treated as a 32-bit one (wrapping at about 65.5 kJ with the usual 15.3 µJ per tick: 87 s at
750 W); `max_read_interval_s` then tells the monitor to read it often enough. A 64-bit counter does not wrap
in practice; should one go backwards (the driver was reloaded), counting resumes from its new value.

At start-up each GPU's counter is checked against its power sensor over `COUNTER_CHECK_WINDOW_S`: a
counter whose average power disagrees with the sensor's (by more than `COUNTER_TOLERANCE` and
`COUNTER_TOLERANCE_W`), or that does not move while the GPU draws power, is not used: `has_energy_counter()`
is then False, `wattwise.monitor.EnergyMonitor` integrates the polled power instead, and one warning per GPU
and process says so.

Clocks: amdsmi has no "lock the SM clock" call. The nearest, used here, is `amdsmi_set_gpu_clk_range` on the
graphics clock (GFX, AMD's SM-equivalent), which the driver honours by switching the performance level to
manual. `reset_sm_clocks` sets the range back to the graphics clock's minimum and maximum as
`amdsmi_get_clock_info` reports them and the performance level back to auto. None of this has been run on
AMD hardware yet; GPUs whose driver refuses a clock range answer `NotSupportedError`.

Indices: a GPU's `index` is its position among the GPUs a ROCm PyTorch process sees (`torch.cuda`'s
numbering: HIP's order where amdsmi reports it, then the visibility variables; see `visible_amd_indices`);
amdsmi's own order stays internal.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wattwise.devices.base import (
    Device,
    DeviceDescription,
    DeviceError,
    DeviceLostError,
    DeviceSpec,
    HardwareGPU,
    NoPermissionError,
    NotSupportedError,
    PowerLimitRange,
    mapped_errors,
)
from wattwise.devices.registry import Wanted, select_found, spec_uuid
from wattwise.errors import UsageError, plugin_warning

#: The binding, imported on first use (see the module docstring); tests replace it with a fake.
amdsmi: Any = None
#: Clock and sleep of the start-up counter check; tests replace them with a virtual clock.
_clock: Callable[[], float] = time.monotonic
_sleep: Callable[[float], None] = time.sleep


def install_hint() -> str:
    """What to run to get the binding: the one ROCm ships (it must match the ROCm release installed)."""
    rocm = os.environ.get("ROCM_PATH") or "/opt/rocm"
    return f"install the binding your ROCm release ships: pip install {rocm}/share/amd_smi"


#: A power cap that reads back within this of the requested one counts as applied (driver rounding).
READBACK_TOLERANCE_W = 1.0
#: How long, and in how many power readings, the energy counter is compared with the power sensor.
COUNTER_CHECK_WINDOW_S = 0.5
COUNTER_CHECK_SAMPLES = 5
#: The counter is used when its average power is within this fraction of the sensor's, or within
#: `COUNTER_TOLERANCE_W` (the sensor reports whole watts, and an idle GPU draws little).
COUNTER_TOLERANCE = 0.2
COUNTER_TOLERANCE_W = 10.0
#: An upper bound on any AMD GPU's draw, to tell how often a 32-bit counter must be read.
_WRAP_POWER_BOUND_W = 1000.0
_TICKS_32_BIT = 1 << 32

# Status codes of amdsmi_wrapper.py, by value: the binding exposes them as its own constants too.
_STATUS_NOT_SUPPORTED = 2
_STATUS_NOT_YET_IMPLEMENTED = 3
_STATUS_FAIL_LOAD_MODULE = 4
_STATUS_NO_PERM = 10
_STATUS_IO = 12
_STATUS_INIT_ERROR = 18
_STATUS_NOT_FOUND = 31
_STATUS_NOT_INIT = 32
_STATUS_DRIVER_NOT_LOADED = 34
_STATUS_AMDGPU_RESTART_ERR = 54
_STATUS_SETTING_UNAVAILABLE = 55

_binding_lock = threading.Lock()
_import_failure: NotSupportedError | None = None
#: The binding amdsmi was initialised through (a swapped-in binding is initialised afresh).
_initialised_binding: object | None = None

#: Whether each GPU's energy counter passed the start-up check (by UUID), and why not when it failed.
_counter_verdicts: dict[str, str | None] = {}
#: Clock ranges set through this process, by UUID (amdsmi reports no set range on every driver).
_locked_sm_clocks_mhz: dict[str, tuple[int, int]] = {}
_state_lock = threading.Lock()


@dataclass(frozen=True)
class AmdIdentity:
    """What tells one AMD GPU from another.

    Attributes:
        uuid: amdsmi's UUID of the GPU (stable across reboots and visibility variables).
        serial: the ASIC serial as 16 lowercase hex digits; rocminfo and `ROCR_VISIBLE_DEVICES` write
            it `GPU-<serial>`.
        name: the market name, e.g. "AMD Instinct MI300X".
        bdf: the PCI address, e.g. "0000:c1:00.0".
        hip_id: HIP's number for the GPU before any visibility variable, where amdsmi reports it (newer
            releases: `amdsmi_get_gpu_enumeration_info`); None elsewhere.
        hip_uuid: HIP's UUID of the GPU, where amdsmi reports it; "" elsewhere.
    """

    uuid: str
    serial: str
    name: str
    bdf: str
    hip_id: int | None = None
    hip_uuid: str = ""

    def is_named_by(self, entry: str) -> bool:
        """True when a `GPU-...` visibility entry names this GPU (by ASIC serial, HIP's or amdsmi's UUID)."""
        wanted = entry[4:].lower()
        names = {self.serial, self.uuid.lower(), self.hip_uuid.lower().removeprefix("gpu-")}
        return bool(wanted) and wanted in names


def amdsmi_gpus() -> list[AmdsmiGPU]:
    """The AMD GPUs visible to this process, in ROCm's order after the visibility variables.

    Initialises amdsmi once per process and checks the energy counters (see the module docstring).

    Returns:
        The GPUs, indexed as a ROCm PyTorch process numbers them; empty when the variables hide all.

    Raises:
        NotSupportedError: amdsmi is not installed, ROCm's library or the amdgpu driver is missing, or
            a visibility variable names what cannot be followed.
    """
    binding = _initialised()
    with _amdsmi_errors("list the GPUs"):
        handles = list(binding.amdsmi_get_processor_handles())
        identities = [_identity(binding, h) for h in handles]
    if all(i.hip_id is not None for i in identities):  # HIP's own order, where amdsmi tells it
        order = sorted(range(len(handles)), key=lambda i: (identities[i].hip_id, i))
        handles, identities = [handles[i] for i in order], [identities[i] for i in order]
    visible = visible_amd_indices(os.environ, identities)
    gpus = [AmdsmiGPU(handles[i], index, identities[i]) for index, i in enumerate(visible)]
    check_energy_counters(gpus)
    return gpus


def discover_gpus(wanted: Wanted) -> list[Device]:
    """The registry's discover function: the visible AMD GPUs at `wanted.gpu_indices`.

    Raises:
        NotSupportedError: amdsmi, ROCm's library or the amdgpu driver is missing, or no AMD GPU is visible.
        UsageError: `wanted.gpu_indices` names a GPU that is not visible.
    """
    return select_found(list(amdsmi_gpus()), wanted, "amdsmi found no AMD GPU visible to this process")


def open_amdsmi_spec(spec: DeviceSpec) -> AmdsmiGPU:
    """Reopen a GPU from `AmdsmiGPU.spec()`, in any process, by its UUID (indices can change).

    Raises:
        DeviceError: the spec is not an amdsmi one, or no GPU here has its UUID.
    """
    uuid = spec_uuid(spec, "amdsmi", "amdsmi")
    binding = _initialised()
    with _amdsmi_errors(f"find GPU {uuid}"):
        for handle in binding.amdsmi_get_processor_handles():
            identity = _identity(binding, handle)
            if identity.uuid == uuid:
                return AmdsmiGPU(handle, int(spec.get("index", 0)), identity)
    raise DeviceError(f"no AMD GPU with UUID {uuid} on this machine (see `amd-smi list`)")


def visible_amd_indices(environ: Mapping[str, str], gpus: Sequence[AmdIdentity]) -> list[int]:
    """Positions (in amdsmi's order) of the GPUs a ROCm process sees, in the order it numbers them.

    ROCm applies `ROCR_VISIBLE_DEVICES` first (indices or `GPU-<serial>`), then `HIP_VISIBLE_DEVICES`, or
    `CUDA_VISIBLE_DEVICES` when that is unset, to what ROCR left (indices into it, or `GPU-<serial>`).
    Unset shows every GPU; a list ends at the first entry that names no GPU or repeats one, so "" and "-1"
    hide every GPU. `gpus` are in HIP's order: by `hip_id` where amdsmi reports it, else amdsmi's own order
    (both follow the PCI bus on the machines documented); neither has been checked on AMD hardware here.

    Args:
        environ: the process environment (or a test's mapping).
        gpus: every GPU amdsmi lists, in HIP's order.

    Returns:
        Positions into `gpus`, one per GPU the process sees, in its numbering.
    """
    shown = list(range(len(gpus)))
    if "ROCR_VISIBLE_DEVICES" in environ:
        shown = _follow(environ["ROCR_VISIBLE_DEVICES"], shown, gpus)
    hip = environ.get("HIP_VISIBLE_DEVICES", environ.get("CUDA_VISIBLE_DEVICES"))
    if hip is not None:
        shown = _follow(hip, shown, gpus)
    return shown


def _follow(value: str, shown: list[int], gpus: Sequence[AmdIdentity]) -> list[int]:
    kept: list[int] = []
    for raw in value.split(","):
        entry = raw.strip()
        position: int | None = None
        if re.fullmatch(r"[0-9]+", entry):
            position = shown[int(entry)] if int(entry) < len(shown) else None
        elif entry.upper().startswith("GPU-"):
            matches = [p for p in shown if gpus[p].is_named_by(entry)]
            position = matches[0] if len(matches) == 1 else None
        if position is None or position in kept:
            break
        kept.append(position)
    return kept


def check_energy_counters(gpus: Sequence[AmdsmiGPU]) -> None:
    """Compare each GPU's energy counter with its power sensor over one shared window; drop bad counters.

    GPUs already judged in this process keep their verdict; the others are watched together for
    `COUNTER_CHECK_WINDOW_S`, so the check costs one window however many GPUs there are.
    """
    todo = [g for g in gpus if g.counter_unjudged()]
    if not todo:
        return
    start_s = _clock()
    start_j = {g.uuid: g.read_counter_j() for g in todo}
    readings: dict[str, list[float]] = {g.uuid: [] for g in todo}
    for _ in range(COUNTER_CHECK_SAMPLES):
        _sleep(COUNTER_CHECK_WINDOW_S / COUNTER_CHECK_SAMPLES)
        for g in todo:
            with contextlib.suppress(DeviceError):
                readings[g.uuid].append(g.power_w())
    elapsed_s = _clock() - start_s
    for g in todo:
        if not readings[g.uuid] or elapsed_s <= 0:
            g.judge_counter(None)  # nothing to compare with: the counter is all there is
            continue
        sensor_w = sum(readings[g.uuid]) / len(readings[g.uuid])
        counter_w = (g.read_counter_j() - start_j[g.uuid]) / elapsed_s
        if abs(counter_w - sensor_w) <= max(COUNTER_TOLERANCE * sensor_w, COUNTER_TOLERANCE_W):
            g.judge_counter(None)
        else:
            g.judge_counter(
                f"its energy counter gave {counter_w:.0f} W over {elapsed_s:.2f} s while its power sensor read "
                f"{sensor_w:.0f} W: the counter is not used, energy is integrated from polled power instead"
            )


class AmdsmiGPU(HardwareGPU):
    """One AMD GPU. Thread-safe: the counter's running total is kept under a lock.

    Energy comes from the hardware counter when it passed the start-up check, else from polled power
    (see the module docstring).
    """

    backend = "amdsmi"

    def __init__(self, handle: object, index: int, identity: AmdIdentity) -> None:
        """Wrap an amdsmi processor handle; `index` is the user-visible index. Use `amdsmi_gpus()`."""
        self._handle = handle
        self._index = index
        self._id = identity
        self._name, self._uuid = identity.name, identity.uuid
        self._lock = threading.Lock()
        self._last_ticks: int | None = None
        self._total_uj = 0.0
        self._counter_bits = 64
        self._resolution_uj = 0.0
        self._has_counter = self._probe_counter()

    def _probe_counter(self) -> bool:
        try:
            ticks, self._resolution_uj = self._raw_counter()
        except NotSupportedError:
            return False
        self._counter_bits = 32 if ticks < _TICKS_32_BIT else 64
        return True

    def _amdsmi(self, action: str) -> contextlib.AbstractContextManager[None]:
        return _amdsmi_errors(f"GPU {self._index} ({self._id.uuid}): {action}")

    @property
    def max_read_interval_s(self) -> float | None:
        """Longest safe gap between counter reads (half a wrap at 1 kW) for a 32-bit counter, else None."""
        if not self._has_counter or self._counter_bits == 64:
            return None
        return _TICKS_32_BIT * self._resolution_uj / 1e6 / _WRAP_POWER_BOUND_W / 2.0

    def counter_unjudged(self) -> bool:
        """True when this GPU has a counter and no start-up check has judged it in this process yet."""
        with _state_lock:
            return self._has_counter and self._id.uuid not in _counter_verdicts

    def judge_counter(self, problem: str | None) -> None:
        """Record the start-up check's verdict (None: the counter is sound); warn once when it is not."""
        with _state_lock:
            first = self._id.uuid not in _counter_verdicts
            _counter_verdicts.setdefault(self._id.uuid, problem)
        if problem is not None and first:
            plugin_warning(f"wattwise: AMD GPU {self._index} ({self._id.uuid}, {self._id.name}): {problem}")

    def _counter_problem(self) -> str | None:
        if self.counter_unjudged():
            check_energy_counters([self])
        with _state_lock:
            return _counter_verdicts.get(self._id.uuid)

    def has_energy_counter(self) -> bool:
        return self._has_counter and self._counter_problem() is None

    def energy_j(self) -> float:
        if not self._has_counter:
            raise NotSupportedError(
                f"GPU {self._index} ({self._id.uuid}, {self._id.name}) has no energy counter amdsmi can read: "
                "measure it through EnergyMonitor, which integrates its polled power"
            )
        problem = self._counter_problem()
        if problem is not None:
            raise NotSupportedError(f"GPU {self._index} ({self._id.uuid}): {problem}")
        return self.read_counter_j()

    def read_counter_j(self) -> float:
        """The counter's running total in joules, followed across wraps, whatever the start-up check said."""
        with self._lock:
            ticks, resolution_uj = self._raw_counter()
            if self._last_ticks is None:
                self._total_uj = ticks * resolution_uj
            else:
                delta = ticks - self._last_ticks
                if delta < 0:
                    # A 32-bit counter wrapped; a 64-bit one was reset (driver reload): count from its value.
                    delta = delta + _TICKS_32_BIT if self._counter_bits == 32 else ticks
                self._total_uj += delta * resolution_uj
            self._last_ticks = ticks
            return self._total_uj / 1e6

    def _raw_counter(self) -> tuple[int, float]:
        with self._amdsmi("read the energy counter"):
            reading = _binding().amdsmi_get_energy_count(self._handle)
        return int(reading["energy_accumulator"]), float(reading["counter_resolution"])

    def power_w(self) -> float:
        """The power sensor's reading: current power on MI300 and newer, averaged power on older GPUs."""
        with self._amdsmi("read the power draw"):
            info = _binding().amdsmi_get_power_info(self._handle)
        for sensor in ("current_socket_power", "average_socket_power", "socket_power"):
            value = info.get(sensor)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        raise NotSupportedError(
            f"GPU {self._index} ({self._id.uuid}): amdsmi reports no power reading "
            "(all of current_socket_power, average_socket_power and socket_power are N/A)"
        )

    def _cap_info_uw(self) -> dict[str, int]:
        with self._amdsmi("read the power cap"):
            info = _binding().amdsmi_get_power_cap_info(self._handle)
        return {k: int(info[k]) for k in ("power_cap", "default_power_cap", "min_power_cap", "max_power_cap")}

    def power_limit_w(self) -> float:
        return self._cap_info_uw()["power_cap"] / 1e6

    def power_limit_range(self) -> PowerLimitRange:
        info = self._cap_info_uw()
        return PowerLimitRange(
            min_w=info["min_power_cap"] / 1e6,
            max_w=info["max_power_cap"] / 1e6,
            default_w=info["default_power_cap"] / 1e6,
        )

    def set_power_limit_w(self, watts: float) -> None:
        """Set the power cap (rounded to the µW), then read it back: a driver can ignore a set silently.

        Raises:
            UsageError: `watts` is outside the GPU's allowed range.
            NoPermissionError: this process may not change the cap (it needs root).
            DeviceError: the cap read back is not the one set.
        """
        rng = self.power_limit_range()
        if not (math.isfinite(watts) and rng.min_w <= watts <= rng.max_w):
            raise UsageError(
                f"power limit {watts} W is outside GPU {self._index}'s allowed range {rng.min_w:g}-{rng.max_w:g} W"
            )
        cap_uw = round(watts * 1e6)
        with self._amdsmi(f"set the power cap to {cap_uw / 1e6:g} W"):
            _binding().amdsmi_set_power_cap(self._handle, 0, cap_uw)
        readback_w = self.power_limit_w()
        if abs(readback_w - cap_uw / 1e6) > READBACK_TOLERANCE_W:
            raise DeviceError(
                f"GPU {self._index} ({self._id.uuid}): power cap set to {cap_uw / 1e6:g} W but it reads back as "
                f"{readback_w:g} W: the driver did not apply it (setting caps needs root; see `amd-smi metric -p`)"
            )

    def supported_sm_clocks_mhz(self) -> list[int]:
        """The graphics clock's levels (amdsmi lists them in Hz), highest first."""
        binding = _binding()
        with self._amdsmi("list the graphics clock levels"):
            levels = binding.amdsmi_get_clk_freq(self._handle, binding.AmdSmiClkType.GFX)
        mhz = {round(hz / 1e6) for hz in levels["frequency"][: levels["num_supported"]]}
        if not mhz:
            raise NotSupportedError(f"GPU {self._index} ({self._id.uuid}) lists no graphics clock levels")
        return sorted(mhz, reverse=True)

    def locked_sm_clocks_mhz(self) -> tuple[int, int] | None:
        """The graphics clock range this process set on this GPU, or None.

        A range set by another process (or before this one started) is not seen: the guard journals
        what it changes instead.
        """
        with _state_lock:
            return _locked_sm_clocks_mhz.get(self._id.uuid)

    def lock_sm_clocks_mhz(self, min_mhz: int, max_mhz: int) -> None:
        """Hold the graphics clock within [min_mhz, max_mhz] (amdsmi_set_gpu_clk_range; see the module)."""
        if not 0 < min_mhz <= max_mhz:
            raise UsageError(
                f"SM clock range for GPU {self._index} must satisfy 0 < min <= max (got {min_mhz}-{max_mhz} MHz)"
            )
        binding = _binding()
        with _state_lock:
            with self._amdsmi(f"set the graphics clock range to {min_mhz}-{max_mhz} MHz"):
                binding.amdsmi_set_gpu_clk_range(self._handle, int(min_mhz), int(max_mhz), binding.AmdSmiClkType.GFX)
            _locked_sm_clocks_mhz[self._id.uuid] = (int(min_mhz), int(max_mhz))

    def reset_sm_clocks(self) -> None:
        """Give the graphics clock its full range back and the performance level back to auto."""
        binding = _binding()
        with _state_lock:
            with self._amdsmi("reset the graphics clock range"):
                info = binding.amdsmi_get_clock_info(self._handle, binding.AmdSmiClkType.GFX)
                binding.amdsmi_set_gpu_clk_range(
                    self._handle, int(info["min_clk"]), int(info["max_clk"]), binding.AmdSmiClkType.GFX
                )
                binding.amdsmi_set_gpu_perf_level(self._handle, binding.AmdSmiDevPerfLevel.AUTO)
            _locked_sm_clocks_mhz.pop(self._id.uuid, None)

    def describe(self) -> DeviceDescription:
        info: DeviceDescription = {
            **super().describe(),
            "serial": self._id.serial,
            "bdf": self._id.bdf,
        }
        problem = self._counter_problem() if self._has_counter else None
        if problem is not None:
            info["energy_counter_note"] = problem
        return info


def _identity(binding: Any, handle: object) -> AmdIdentity:
    asic = binding.amdsmi_get_gpu_asic_info(handle)
    serial = str(asic.get("asic_serial", "")).lower().removeprefix("0x")
    name = str(asic.get("market_name") or "AMD GPU")
    hip_id, hip_uuid = _hip_enumeration(binding, handle)
    return AmdIdentity(
        uuid=str(binding.amdsmi_get_gpu_device_uuid(handle)),
        serial=serial,
        name=name,
        bdf=str(binding.amdsmi_get_gpu_device_bdf(handle)),
        hip_id=hip_id,
        hip_uuid=hip_uuid,
    )


def _hip_enumeration(binding: Any, handle: object) -> tuple[int | None, str]:
    """HIP's number and UUID of a GPU; (None, "") where this amdsmi release or driver cannot tell them."""
    query = getattr(binding, "amdsmi_get_gpu_enumeration_info", None)
    if query is None:
        return None, ""
    try:
        info = query(handle)
    except binding.AmdSmiException:
        return None, ""
    hip_id = info.get("hip_id")
    return (hip_id if isinstance(hip_id, int) else None), str(info.get("hip_uuid") or "")


def _amdsmi_errors(action: str) -> contextlib.AbstractContextManager[None]:
    """Turn the binding's exceptions into ours, keeping amdsmi's status code and wording."""
    return mapped_errors(_binding().AmdSmiException, _mapped_error, action)


def _mapped_error(err: Exception, action: str) -> DeviceError:
    code = getattr(err, "err_code", None)
    wording = " ".join(str(err).split())
    detail = f"{action}: {wording} (amdsmi status {code})"
    if code == _STATUS_NO_PERM:
        return NoPermissionError(
            f"{detail}. Changing power caps and clocks of AMD GPUs needs root (amdsmi writes the amdgpu "
            "driver's sysfs files); run as root, or through the node agent (backend agent)"
        )
    if code in (_STATUS_NOT_SUPPORTED, _STATUS_NOT_YET_IMPLEMENTED, _STATUS_SETTING_UNAVAILABLE):
        return NotSupportedError(f"{detail}; this GPU or its driver does not offer it")
    if code in (_STATUS_NOT_FOUND, _STATUS_IO, _STATUS_DRIVER_NOT_LOADED, _STATUS_AMDGPU_RESTART_ERR):
        return DeviceLostError(
            f"{detail}; the GPU fell off the bus or the amdgpu driver was reloaded (see `amd-smi list` and `dmesg`)"
        )
    return DeviceError(detail)


def _binding() -> Any:
    """The amdsmi binding, imported on first use; `NotSupportedError` naming the fix when it cannot be."""
    global amdsmi, _import_failure
    with _binding_lock:
        if amdsmi is not None:
            return amdsmi
        if _import_failure is not None:
            raise _import_failure
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(said):
                import amdsmi as binding
        except ImportError as err:
            _import_failure = NotSupportedError(f"the amdsmi Python package is not installed: {install_hint()}")
            raise _import_failure from err
        except Exception as err:  # the binding loads libamd_smi.so as it is imported (KeyError, OSError)
            reason = " ".join(said.getvalue().split()) or f"{type(err).__name__}: {err}"
            _import_failure = NotSupportedError(
                f"amdsmi is installed but ROCm's libamd_smi.so could not be loaded ({reason}): install the "
                "amd-smi-lib package of your ROCm release, or set ROCM_PATH to the ROCm folder"
            )
            raise _import_failure from err
        missing = [name for name in ("amdsmi_init", "AmdSmiException", "AmdSmiInitFlags") if not hasattr(binding, name)]
        if missing:  # e.g. a folder named amdsmi on the path (a clone of the amdsmi sources) shadows the package
            where = getattr(binding, "__file__", None) or ", ".join(getattr(binding, "__path__", [])) or "?"
            _import_failure = NotSupportedError(
                f"the module amdsmi found at {where} is not ROCm's amdsmi binding (it has no {missing[0]}): "
                f"rename what shadows it, or {install_hint()}"
            )
            raise _import_failure
        amdsmi = binding
        return amdsmi


def _initialised() -> Any:
    """The binding, with amdsmi initialised for AMD GPUs once per process (and per swapped-in binding)."""
    global _initialised_binding
    binding = _binding()
    with _binding_lock:
        if _initialised_binding is binding:
            return binding
        try:
            binding.amdsmi_init(binding.AmdSmiInitFlags.INIT_AMD_GPUS)
        except binding.AmdSmiException as err:
            raise NotSupportedError(_init_failure_reason(err)) from err
        _initialised_binding = binding
    return binding


def _init_failure_reason(err: Exception) -> str:
    code = getattr(err, "err_code", None)
    if code == _STATUS_DRIVER_NOT_LOADED:
        return "the amdgpu driver is not loaded (no AMD GPU here, or its kernel module is not loaded)"
    if code == _STATUS_NO_PERM:
        return "no permission to open the AMD GPUs (/dev/kfd, /dev/dri/*): add the user to the render and video groups"
    if code in (_STATUS_FAIL_LOAD_MODULE, _STATUS_INIT_ERROR, _STATUS_NOT_INIT):
        return (
            f"amdsmi_init failed ({' '.join(str(err).split())}): the amdsmi package and ROCm's "
            "libamd_smi.so must come from the same ROCm release"
        )
    return f"amdsmi_init failed: {' '.join(str(err).split())} (amdsmi status {code})"
