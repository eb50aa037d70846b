"""NVIDIA GPUs through NVML (the `nvidia-ml-py` binding, imported as `pynvml`).

This is the only module that imports `pynvml`. It is imported at module level and every call looks it
up through this module's `pynvml` attribute at call time, comparing NVML error codes by value, so tests
swap in a fake binding by monkeypatching `wattwise.devices.nvml.pynvml` (`tests/support/fake_pynvml.py` does this
in `FakeNvml.install`).

Energy: Volta and newer GPUs have a hardware counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ since
the driver loaded). Older GPUs answer "not supported": `has_energy_counter()` is False for them and
`energy_j()` raises `NotSupportedError`; `wattwise.monitor.EnergyMonitor` then integrates their polled
`power_w()` with its `PowerSampler`, the one integrator of polled power for every backend.

`CUDA_VISIBLE_DEVICES` is honoured: a device's `index` is its position among the GPUs CUDA shows this
process (what `torch.cuda` calls it); NVML's own index stays internal.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pynvml

from wattwise.devices.base import (
    Device,
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
from wattwise.errors import UsageError

#: A power limit that reads back within this of the requested one counts as applied (driver rounding).
READBACK_TOLERANCE_MW = 1000

_init_lock = threading.Lock()
#: The binding module NVML was initialised through (a swapped-in binding is initialised afresh).
_initialised_binding: object | None = None

#: SM clocks locked through this process, by GPU UUID. NVML has no getter for locked clocks on every
#: driver, so this is what `locked_sm_clocks_mhz` can honestly report; shared by all objects of a GPU.
_locked_sm_clocks_mhz: dict[str, tuple[int, int]] = {}
_locked_lock = threading.Lock()

#: NVML's workload power profiles (`NVML_POWER_PROFILE_*` in nvml.h, driver 570 and later), by id: the
#: names wattwise gives them. A profile a newer driver adds is named `profile_<id>`.
WORKLOAD_POWER_PROFILES: dict[int, str] = {
    0: "max_p",
    1: "max_q",
    2: "compute",
    3: "memory_bound",
    4: "network",
    5: "balanced",
    6: "llm_inference",
    7: "llm_training",
    8: "rbm",
    9: "dcpcie",
    10: "hmma_sparse",
    11: "hmma_dense",
    12: "sync_balanced",
    13: "hpc",
    14: "mig",
    15: "max_q_1",
    16: "network_bound",
    17: "high_throughput_inference",
    18: "medium_throughput_inference",
    19: "low_latency_inference",
    20: "training",
    21: "inference",
    22: "max_q_2",
    23: "max_q_3",
    24: "low_priority_background",
}
#: Bits in NVML's 255-profile mask (8 words of 32).
_MASK_WORDS = 8


def profile_name(profile_id: int) -> str:
    """The name wattwise gives NVML's workload power profile `profile_id`."""
    return WORKLOAD_POWER_PROFILES.get(profile_id, f"profile_{profile_id}")


def profile_id(name: str) -> int:
    """The id of the workload power profile called `name` (`profile_name`'s inverse).

    Raises:
        UsageError: no profile has that name.
    """
    for pid, known in WORKLOAD_POWER_PROFILES.items():
        if known == name:
            return pid
    match = re.fullmatch(r"profile_(\d+)", name)
    if match and int(match.group(1)) < _MASK_WORDS * 32:
        return int(match.group(1))
    raise UsageError(
        f"no workload power profile is called {name!r}; NVML's are {', '.join(WORKLOAD_POWER_PROFILES.values())}"
    )


def _mask_ids(mask: Any) -> list[int]:
    """The profile ids whose bits are set in an `nvmlMask255_t`."""
    words = list(mask.mask)
    return [w * 32 + b for w in range(min(len(words), _MASK_WORDS)) for b in range(32) if int(words[w]) >> b & 1]


def _set_mask(mask: Any, ids: Sequence[int]) -> None:
    """Set exactly the bits of `ids` in an `nvmlMask255_t`."""
    words = [0] * _MASK_WORDS
    for pid in ids:
        words[pid // 32] |= 1 << (pid % 32)
    for w in range(_MASK_WORDS):
        mask.mask[w] = words[w]


def nvml_gpus() -> list[NvmlGPU]:
    """The GPUs visible to this process, in `CUDA_VISIBLE_DEVICES` order (all of them when unset).

    Initialises NVML once per process. Raises `NotSupportedError` with a human reason when NVML or the
    driver is missing, or when `CUDA_VISIBLE_DEVICES` names a MIG instance. Returns an empty list when
    `CUDA_VISIBLE_DEVICES` hides every GPU.
    """
    _ensure_initialised()
    with _nvml_errors("list the GPUs"):
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        uuids = [_text(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
    visible = visible_nvml_indices(os.environ.get("CUDA_VISIBLE_DEVICES"), uuids)
    return [NvmlGPU(handles[nvml_index], index) for index, nvml_index in enumerate(visible)]


def discover_gpus(wanted: Wanted) -> list[Device]:
    """The registry's discover function: the visible GPUs at `wanted.gpu_indices`.

    Raises:
        NotSupportedError: NVML or its driver is missing, or no GPU is visible to this process.
        UsageError: `wanted.gpu_indices` names a GPU that is not visible.
    """
    return select_found(list(nvml_gpus()), wanted, "NVML found no GPU visible to this process")


def open_nvml_spec(spec: DeviceSpec) -> NvmlGPU:
    """Reopen a GPU from `NvmlGPU.spec()`, in any process, by its UUID (indices can change)."""
    uuid = spec_uuid(spec, "nvml", "NVML")
    _ensure_initialised()
    with _nvml_errors(f"find GPU {uuid}"):
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    index = int(spec.get("index", 0))
    return NvmlGPU(handle, index)


def driver_versions() -> dict[str, str]:
    """The versions NVML gives, for reports: "driver", "nvml" and "cuda_driver".

    Those it cannot give (no driver, an old binding) are left out.
    """
    out: dict[str, str] = {}
    with contextlib.suppress(Exception):
        _ensure_initialised()
        out["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        out["nvml"] = _text(pynvml.nvmlSystemGetNVMLVersion())
        out["cuda_driver"] = str(pynvml.nvmlSystemGetCudaDriverVersion())
    return out


def visible_nvml_indices(
    cuda_visible_devices: str | None, uuids: Sequence[str], mig_parent: Callable[[str], str | None] | None = None
) -> list[int]:
    """NVML indices of the GPUs CUDA shows this process, in CUDA's order.

    Follows CUDA's rules: unset shows every GPU; entries are indices or (unique prefixes of)
    `GPU-<uuid>`; the list ends at the first entry that names no GPU or repeats one, so "" and "-1"
    hide every GPU. Integer entries are read in NVML's (PCI bus) order, which is CUDA's order under
    `CUDA_DEVICE_ORDER=PCI_BUS_ID` and, on machines whose GPUs are all the same model, by default too.

    Args:
        cuda_visible_devices: The variable's value; None when unset.
        uuids: Every GPU's `GPU-...` UUID, in NVML's order.
        mig_parent: Maps a `MIG-...` entry to its parent GPU's UUID (None: unknown), for callers that
            change whole GPUs (the node agent's clients); None: a `MIG-` entry raises.

    Raises:
        NotSupportedError: A `MIG-` entry and no `mig_parent` (measuring MIG instances is not supported).
    """
    if cuda_visible_devices is None:
        return list(range(len(uuids)))
    visible: list[int] = []
    for raw in cuda_visible_devices.split(","):
        entry = raw.strip()
        if entry.upper().startswith("MIG-") and mig_parent is not None:
            entry = mig_parent(entry) or ""
            if entry in uuids and uuids.index(entry) in visible:
                continue  # a second instance of the same GPU
        if entry.upper().startswith("MIG-"):
            raise NotSupportedError(
                f"CUDA_VISIBLE_DEVICES names a MIG instance ({entry}); MIG is not supported yet: "
                "list whole GPUs by index or GPU-<uuid>"
            )
        nvml_index = _resolve_visible_entry(entry, uuids)
        if nvml_index is None or nvml_index in visible:
            break
        visible.append(nvml_index)
    return visible


def mig_parent_uuid(mig_uuid: str) -> str | None:
    """The `GPU-...` UUID of the GPU a MIG instance (`MIG-...`) lives on; None when NVML cannot tell."""
    try:
        _ensure_initialised()
        handle = pynvml.nvmlDeviceGetHandleByUUID(mig_uuid)
        return _text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)))
    except Exception:  # no NVML, no such instance, an old binding: the entry names no GPU
        return None


def _resolve_visible_entry(entry: str, uuids: Sequence[str]) -> int | None:
    if re.fullmatch(r"[0-9]+", entry):
        index = int(entry)
        return index if index < len(uuids) else None
    if entry.upper().startswith("GPU-"):
        matches = [i for i, uuid in enumerate(uuids) if uuid.lower().startswith(entry.lower())]
        return matches[0] if len(matches) == 1 else None
    return None


#: How often NVML's energy counter changes value (measured on an H100: 21 values in 2 s, 20 changes).
NVML_ENERGY_UPDATE_PERIOD_S = 0.1


class NvmlGPU(HardwareGPU):
    """One NVIDIA GPU. Thread-safe, as NVML calls are.

    Energy comes from the hardware counter on Volta and newer. Older GPUs have none: the monitor
    measures them from polled power (see the module docstring).
    """

    backend = "nvml"

    def __init__(self, handle: object, index: int) -> None:
        """Wrap an NVML handle; `index` is the user-visible index. Use `nvml_gpus()` rather than this."""
        self._handle = handle
        self._index = index
        with _nvml_errors(f"GPU {index}: read its identity"):
            self._uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            self._name = _text(pynvml.nvmlDeviceGetName(handle))
        self._has_counter = self._probe_energy_counter()

    def _probe_energy_counter(self) -> bool:
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except pynvml.NVMLError as err:
            # Pre-Volta GPUs answer "not supported"; drivers older than the counter lack the function.
            if err.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                return False
            raise _mapped_error(err, f"GPU {self._index} ({self._uuid}): read the energy counter") from err
        return True

    def _nvml(self, action: str) -> contextlib.AbstractContextManager[None]:
        return _nvml_errors(f"GPU {self._index} ({self._uuid}): {action}")

    def has_energy_counter(self) -> bool:
        return self._has_counter

    @property
    def energy_update_period_s(self) -> float:
        """0.1 s: the counter changed 10 times a second on an H100 (driver 580.159.04; 21 values in 2 s).

        Without a counter, power readings (which the driver itself averages) are integrated.
        """
        return NVML_ENERGY_UPDATE_PERIOD_S

    def energy_j(self) -> float:
        if not self._has_counter:
            raise NotSupportedError(
                f"GPU {self._index} ({self._uuid}, {self._name}) has no energy counter (GPUs older than "
                "Volta): measure it through EnergyMonitor, which integrates its polled power"
            )
        with self._nvml("read the energy counter"):
            return pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1000.0

    def power_w(self) -> float:
        with self._nvml("read the power draw"):
            return pynvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0

    def power_limit_w(self) -> float:
        with self._nvml("read the power limit"):
            return pynvml.nvmlDeviceGetPowerManagementLimit(self._handle) / 1000.0

    def power_limit_range(self) -> PowerLimitRange:
        min_mw, max_mw, default_mw = self._limit_constraints_mw()
        return PowerLimitRange(min_w=min_mw / 1000.0, max_w=max_mw / 1000.0, default_w=default_mw / 1000.0)

    def _limit_constraints_mw(self) -> tuple[int, int, int]:
        with self._nvml("read the power-limit range"):
            min_mw, max_mw = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(self._handle)
            default_mw = pynvml.nvmlDeviceGetPowerManagementDefaultLimit(self._handle)
        return int(min_mw), int(max_mw), int(default_mw)

    def set_power_limit_w(self, watts: float) -> None:
        """Set the limit (rounded to the mW), then read it back: drivers can ignore a set silently.

        Raises `UsageError` outside the allowed range, `NoPermissionError` without root or
        CAP_SYS_ADMIN, and `DeviceError` when the limit read back is not the one set.
        """
        min_mw, max_mw, _ = self._limit_constraints_mw()
        limit_mw = round(watts * 1000) if math.isfinite(watts) else None
        if limit_mw is None or not min_mw <= limit_mw <= max_mw:
            raise UsageError(
                f"power limit {watts} W is outside GPU {self._index}'s allowed range "
                f"{min_mw / 1000:g}-{max_mw / 1000:g} W"
            )
        with self._nvml(f"set the power limit to {limit_mw / 1000:g} W"):
            try:
                pynvml.nvmlDeviceSetPowerManagementLimit(self._handle, limit_mw)
            except pynvml.NVMLError as err:
                if err.value != pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                    raise
                # A driver without the v1 entry point. The binding's _v2 wrapper discards the
                # driver's return code, so only the read-back below can tell whether it worked.
                pynvml.nvmlDeviceSetPowerManagementLimit_v2(self._handle, pynvml.NVML_POWER_SCOPE_GPU, limit_mw)
            readback_mw = int(pynvml.nvmlDeviceGetPowerManagementLimit(self._handle))
        if abs(readback_mw - limit_mw) > READBACK_TOLERANCE_MW:
            raise DeviceError(
                f"GPU {self._index} ({self._uuid}): power limit set to {limit_mw / 1000:g} W but it reads "
                f"back as {readback_mw / 1000:g} W: the driver did not apply it (setting limits needs "
                "root or CAP_SYS_ADMIN, and some drivers refuse without reporting an error)"
            )

    def supported_sm_clocks_mhz(self) -> list[int]:
        """Graphics (SM) clocks supported at the highest memory clock, highest first."""
        with self._nvml("list the supported clocks"):
            memory_mhz = pynvml.nvmlDeviceGetSupportedMemoryClocks(self._handle)
            if not memory_mhz:
                raise NotSupportedError(f"GPU {self._index} ({self._uuid}) lists no supported clocks")
            graphics_mhz = pynvml.nvmlDeviceGetSupportedGraphicsClocks(self._handle, max(memory_mhz))
        return sorted({int(f) for f in graphics_mhz}, reverse=True)

    def locked_sm_clocks_mhz(self) -> tuple[int, int] | None:
        """The SM clock range this process locked on this GPU, or None.

        NVML offers no getter for locked clocks on every driver, so a lock set by another process
        (or before this one started) is not seen: the guard journals what it changes instead.
        """
        with _locked_lock:
            return _locked_sm_clocks_mhz.get(self._uuid)

    def lock_sm_clocks_mhz(self, min_mhz: int, max_mhz: int) -> None:
        if not 0 < min_mhz <= max_mhz:
            raise UsageError(
                f"SM clock range for GPU {self._index} must satisfy 0 < min <= max (got {min_mhz}-{max_mhz} MHz)"
            )
        with _locked_lock:
            with self._nvml(f"lock the SM clocks to {min_mhz}-{max_mhz} MHz"):
                pynvml.nvmlDeviceSetGpuLockedClocks(self._handle, int(min_mhz), int(max_mhz))
            _locked_sm_clocks_mhz[self._uuid] = (int(min_mhz), int(max_mhz))

    def reset_sm_clocks(self) -> None:
        with _locked_lock:
            with self._nvml("reset the locked SM clocks"):
                pynvml.nvmlDeviceResetGpuLockedClocks(self._handle)
            _locked_sm_clocks_mhz.pop(self._uuid, None)

    def workload_power_profiles(self) -> list[str]:
        info = pynvml.c_nvmlWorkloadPowerProfileProfilesInfo_v1_t()
        with self._profiles("list the workload power profiles"):
            pynvml.nvmlDeviceWorkloadPowerProfileGetProfilesInfo(self._handle, info)
        return [profile_name(pid) for pid in _mask_ids(info.perfProfilesMask)]

    def requested_workload_power_profiles(self) -> list[str]:
        current = pynvml.c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t()
        with self._profiles("read the requested workload power profiles"):
            pynvml.nvmlDeviceWorkloadPowerProfileGetCurrentProfiles(self._handle, current)
        return [profile_name(pid) for pid in _mask_ids(current.requestedProfilesMask)]

    def request_workload_power_profiles(self, names: Sequence[str]) -> None:
        wanted = {profile_id(name) for name in names}
        now = {profile_id(name) for name in self.requested_workload_power_profiles()}
        if now - wanted:
            clear = pynvml.c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t()
            _set_mask(clear.requestedProfilesMask, sorted(now - wanted))
            with self._profiles("clear requested workload power profiles"):
                pynvml.nvmlDeviceWorkloadPowerProfileClearRequestedProfiles(self._handle, clear)
        if wanted - now:
            request = pynvml.c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t()
            _set_mask(request.requestedProfilesMask, sorted(wanted - now))
            with self._profiles(f"request the workload power profiles {', '.join(sorted(names))}"):
                pynvml.nvmlDeviceWorkloadPowerProfileSetRequestedProfiles(self._handle, request)

    @contextlib.contextmanager
    def _profiles(self, action: str) -> Iterator[None]:
        """NVML's errors for workload power profiles; a driver or binding without them is not supported."""
        if not hasattr(pynvml, "nvmlDeviceWorkloadPowerProfileGetProfilesInfo"):
            raise NotSupportedError(
                f"GPU {self._index} ({self._uuid}): {action}: this nvidia-ml-py has no workload power profiles "
                "(they came with 12.570)"
            )
        where = f"GPU {self._index} ({self._uuid}): {action}"
        try:
            yield
        except pynvml.NVMLError as err:
            if getattr(err, "value", None) == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                raise NotSupportedError(f"{where}: this driver has no workload power profiles (570 and later)") from err
            raise _mapped_error(err, where) from err


def _nvml_errors(action: str) -> contextlib.AbstractContextManager[None]:
    """Turn the binding's errors into ours, keeping NVML's message and code."""
    return mapped_errors(pynvml.NVMLError, _mapped_error, action)


def _mapped_error(err: Exception, action: str) -> DeviceError:
    code = getattr(err, "value", None)
    detail = f"{action}: {err} (NVML error {code})"
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return NoPermissionError(
            f"{detail}. Changing power limits and clocks needs root or CAP_SYS_ADMIN "
            "(`sudo nvidia-smi -pm 1`, persistence mode, is not enough)"
        )
    if code == pynvml.NVML_ERROR_NOT_SUPPORTED:
        return NotSupportedError(detail)
    if code in (pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_GPU_NOT_FOUND, pynvml.NVML_ERROR_RESET_REQUIRED):
        return DeviceLostError(f"{detail}; the GPU fell off the bus or needs a reset (see `nvidia-smi`)")
    return DeviceError(detail)


def _ensure_initialised() -> None:
    global _initialised_binding
    with _init_lock:
        if _initialised_binding is pynvml:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise NotSupportedError(_init_failure_reason(err)) from err
        _initialised_binding = pynvml


def _init_failure_reason(err: Exception) -> str:
    code = getattr(err, "value", None)
    if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVIDIA driver library libnvidia-ml.so not found (no NVIDIA driver installed here)"
    if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVIDIA driver not loaded (no NVIDIA GPU, or its kernel module is not loaded)"
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return "no permission to open the NVIDIA devices (/dev/nvidia*)"
    if code == pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "NVML library and NVIDIA kernel driver versions differ (reboot after a driver upgrade)"
    return f"nvmlInit failed: {err} (NVML error {code})"


def _text(value: str | bytes) -> str:
    """Names and UUIDs are bytes in older bindings, str in newer ones."""
    return value.decode() if isinstance(value, bytes) else value
