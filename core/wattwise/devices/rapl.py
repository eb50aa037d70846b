"""CPU energy through RAPL's powercap interface in sysfs (`/sys/class/powercap`).

This is the only module that reads that tree. It exposes each CPU package zone (`intel-rapl:0`, name
`package-0`) and each DRAM subzone (`intel-rapl:0:2`, name `dram`), from Intel's driver and, where a
kernel names them so, AMD's (`amd-rapl:...`). Core, uncore and platform (`psys`) zones are left out:
they are parts of, or include, the package, so adding them would count energy twice. So are the
`intel-rapl-mmio` zones, which repeat the package counters through another interface.

Counters: `energy_uj` (µJ) counts up to `max_energy_range_uj` and wraps to 0. Each domain keeps a
running total, so `energy_j()` is monotonic across wraps, provided the counter is read at least once
per wrap period (a missed wrap cannot be detected). `max_read_interval_s` gives a safe read interval
(minutes on Intel machines); the monitor's sampler reads every device at least that often while a
measurement is open.

RAPL has no instantaneous power reading: `power_w()` divides the energy between two counter reads by
the time between them. Power limits exist in RAPL but are out of scope here.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from wattwise.devices.base import (
    Device,
    DeviceDescription,
    DeviceError,
    DeviceLostError,
    DeviceSpec,
    NoPermissionError,
    NotSupportedError,
)
from wattwise.devices.registry import Wanted
from wattwise.errors import UsageError

POWERCAP_ROOT = Path("/sys/class/powercap")
#: No CPU package or DRAM domain draws this much: the bound behind `max_read_interval_s`.
_WRAP_POWER_BOUND_W = 1000.0
_ZONE_NAME = re.compile(r"(intel|amd)-rapl(:[0-9]+)+")


def rapl_domains(
    root: Path = POWERCAP_ROOT,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> list[RaplDomain]:
    """The CPU package and DRAM domains under `root`, packages in order, each followed by its DRAM.

    Raises `NotSupportedError` with the reason and the fix when there is no powercap tree, no RAPL
    zone, or when the counters are unreadable (root-only since Linux 5.10).
    """
    if not root.is_dir():
        raise NotSupportedError(
            f"{root} not found: not Linux, or the RAPL powercap driver is not loaded (`sudo modprobe intel_rapl_msr`)"
        )
    try:
        zones = sorted((p for p in root.iterdir() if _ZONE_NAME.fullmatch(p.name)), key=_zone_sort_key)
    except OSError as err:
        raise NotSupportedError(f"cannot list {root}: {err}") from err
    wanted = [z for z in zones if _is_package_or_dram(_read_text(z / "name"))]
    if not wanted:
        raise NotSupportedError(
            f"no RAPL package or DRAM zone under {root} (a CPU without RAPL, or a virtual machine or "
            "container that does not expose it)"
        )
    try:
        return [RaplDomain(zone, index, clock=clock, sleep=sleep) for index, zone in enumerate(wanted)]
    except NoPermissionError as err:
        raise NotSupportedError(str(err)) from err


def discover_domains(wanted: Wanted) -> list[RaplDomain]:
    """The registry's discover function: every RAPL domain (a CPU backend: `wanted` selects nothing).

    `rapl_domains` is looked up at each call, so a test can point it at a fake powercap tree.
    """
    return rapl_domains()


def open_rapl_spec(
    spec: DeviceSpec,
    root: Path = POWERCAP_ROOT,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> RaplDomain:
    """Reopen a domain from `RaplDomain.spec()`, in any process."""
    zone = spec.get("zone")
    if spec.get("backend") != "rapl" or not isinstance(zone, str) or not _ZONE_NAME.fullmatch(zone):
        raise DeviceError(f"not a RAPL device spec (needs backend 'rapl' and a zone): {spec!r}")
    if not (root / zone).is_dir():
        raise NotSupportedError(f"RAPL zone {zone} not found under {root}")
    return RaplDomain(root / zone, int(spec.get("index", 0)), clock=clock, sleep=sleep)


class RaplDomain(Device):
    """One RAPL zone (a CPU package or its DRAM) with a wrap-proof running energy total.

    `energy_j()` counts from 0 when the object is created. Thread-safe: reads and the running total
    are under one lock.
    """

    backend = "rapl"

    def __init__(
        self,
        zone_dir: Path,
        index: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
        min_power_interval_s: float = 0.1,
    ) -> None:
        """`zone_dir` is a powercap zone such as `/sys/class/powercap/intel-rapl:0`.

        Use `rapl_domains()` rather than this. `min_power_interval_s`: see `power_w`.
        """
        if not min_power_interval_s > 0:
            raise UsageError(f"min_power_interval_s must be positive (got {min_power_interval_s})")
        self._dir = zone_dir
        self._zone = zone_dir.name
        self._index = index
        self._clock = clock
        self._sleep = sleep
        self._min_power_interval_s = min_power_interval_s
        self._domain = _read_text(zone_dir / "name")
        self._package = int(self._zone.split(":")[1])
        self._max_range_uj = _read_int(zone_dir / "max_energy_range_uj")
        self._lock = threading.Lock()
        self._last_raw_uj = self._read_energy_uj()
        self._total_uj = 0
        self._power_ref: tuple[float, int] | None = None  # (time s, total µJ) at the last power_w()

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        if self._domain == "dram":
            return f"DRAM of CPU package {self._package}"
        return f"CPU {self._domain}"

    @property
    def key(self) -> str:
        """Label "cpu0" for package 0 and "dram0" for its DRAM, never confused with a GPU's "gpu0"."""
        return f"dram{self._package}" if self._domain == "dram" else f"cpu{self._package}"

    @property
    def zone(self) -> str:
        """The powercap zone, e.g. "intel-rapl:0:2"."""
        return self._zone

    @property
    def max_read_interval_s(self) -> float:
        """Longest safe gap between two counter reads: half the wrap time at 1 kW.

        About 131 s for Intel's usual 262 kJ range; less where the kernel reports a smaller range.
        """
        return self._max_range_uj / 1e6 / _WRAP_POWER_BOUND_W / 2.0

    def has_energy_counter(self) -> bool:
        return True

    def energy_j(self) -> float:
        with self._lock:
            return self._advance_uj() / 1e6

    def power_w(self) -> float:
        """Average power since the previous `power_w()` call on this domain.

        RAPL has no instantaneous reading. A first call, or one less than `min_power_interval_s` after
        the previous, waits out that interval so the two reads are far enough apart for the
        counter's ~1 ms update period not to matter.
        """
        with self._lock:
            start_s, start_uj = self._power_ref or (self._clock(), self._advance_uj())
        wait_s = start_s + self._min_power_interval_s - self._clock()
        if wait_s > 0:
            self._sleep(wait_s)
        with self._lock:
            end_s, end_uj = self._clock(), self._advance_uj()
            self._power_ref = (end_s, end_uj)
        return (end_uj - start_uj) / 1e6 / (end_s - start_s)

    def spec(self) -> DeviceSpec:
        return {"backend": self.backend, "zone": self._zone, "index": self._index}

    def describe(self) -> DeviceDescription:
        return {**super().describe(), "zone": self._zone}

    def _advance_uj(self) -> int:
        """Read the counter and add the energy since the last read, across a wrap. Lock held."""
        raw_uj = self._read_energy_uj()
        delta_uj = raw_uj - self._last_raw_uj
        if delta_uj < 0:
            delta_uj += self._max_range_uj
        self._total_uj += delta_uj
        self._last_raw_uj = raw_uj
        return self._total_uj

    def _read_energy_uj(self) -> int:
        try:
            return _read_int(self._dir / "energy_uj")
        except NoPermissionError as err:
            prefix = self._zone.split(":")[0]
            raise NoPermissionError(
                f"{err}. RAPL energy counters are root-only since Linux 5.10: run as root, or allow "
                f"reading them until the next reboot: sudo chmod o+r {self._dir.parent}/{prefix}:*/energy_uj"
            ) from err


def _is_package_or_dram(domain: str) -> bool:
    return domain == "dram" or re.fullmatch(r"package-[0-9]+", domain) is not None


def _zone_sort_key(path: Path) -> tuple[str, tuple[int, ...]]:
    prefix, *numbers = path.name.split(":")
    return prefix, tuple(int(n) for n in numbers)


def _read_text(path: Path) -> str:
    """A sysfs attribute's content, with read failures as our errors."""
    try:
        return path.read_text().strip()
    except PermissionError as err:
        raise NoPermissionError(f"cannot read {path}: permission denied") from err
    except FileNotFoundError as err:
        raise DeviceLostError(f"{path} is gone (the RAPL driver was unloaded?)") from err
    except OSError as err:
        raise DeviceError(f"cannot read {path}: {err}") from err


def _read_int(path: Path) -> int:
    text = _read_text(path)
    try:
        return int(text)
    except ValueError as err:
        raise DeviceError(f"{path} holds {text!r}, not a whole number") from err
