"""The RAPL backend against a fake powercap sysfs tree."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.support.fake_pynvml import FakeClock
from tests.support.powercap import INTEL_RANGE_UJ, FakePowercap
from wattwise.devices.base import DeviceError, NotSupportedError
from wattwise.devices.rapl import open_rapl_spec, rapl_domains


@pytest.fixture
def powercap(tmp_path: Path) -> FakePowercap:
    """A two-socket server: packages with core and DRAM subzones, a psys zone, MMIO duplicates."""
    tree = FakePowercap(tmp_path)
    tree.add_control_type("intel-rapl")
    tree.add_control_type("intel-rapl-mmio")
    for package in (0, 1):
        tree.add_zone(f"intel-rapl:{package}", f"package-{package}", energy_uj=1_000_000)
        tree.add_zone(f"intel-rapl:{package}:0", "core")
        tree.add_zone(f"intel-rapl:{package}:1", "dram")
    tree.add_zone("intel-rapl:2", "psys")
    tree.add_zone("intel-rapl-mmio:0", "package-0")
    return tree


def test_package_and_dram_domains_are_found_and_the_rest_skipped(powercap: FakePowercap) -> None:
    domains = rapl_domains(powercap.root)
    assert [d.zone for d in domains] == ["intel-rapl:0", "intel-rapl:0:1", "intel-rapl:1", "intel-rapl:1:1"]
    assert [d.index for d in domains] == [0, 1, 2, 3]
    assert [d.key for d in domains] == ["cpu0", "dram0", "cpu1", "dram1"]
    assert [d.name for d in domains[:2]] == ["CPU package-0", "DRAM of CPU package 0"]
    assert all(d.has_energy_counter() and d.backend == "rapl" for d in domains)


def test_domains_are_numbered_in_package_order_beyond_ten_packages(tmp_path: Path) -> None:
    tree = FakePowercap(tmp_path)
    for package in range(12):
        tree.add_zone(f"intel-rapl:{package}", f"package-{package}")
    assert [d.key for d in rapl_domains(tree.root)] == [f"cpu{p}" for p in range(12)]


def test_amd_rapl_zones_are_found(tmp_path: Path) -> None:
    tree = FakePowercap(tmp_path)
    tree.add_zone("amd-rapl:0", "package-0")
    tree.add_zone("amd-rapl:0:0", "core")
    assert [d.zone for d in rapl_domains(tree.root)] == ["amd-rapl:0"]


def test_energy_is_reported_in_joules(powercap: FakePowercap) -> None:
    package = rapl_domains(powercap.root)[0]
    start_j = package.energy_j()
    powercap.add_energy("intel-rapl:0", 2.5)
    assert package.energy_j() - start_j == pytest.approx(2.5)


def test_energy_stays_monotonic_across_counter_wraparound(powercap: FakePowercap) -> None:
    range_j = INTEL_RANGE_UJ / 1e6
    powercap.set_energy("intel-rapl:0:1", INTEL_RANGE_UJ - 1_000_000)
    dram = rapl_domains(powercap.root)[1]
    readings_j = [dram.energy_j()]
    # Raw counter values read in turn: it wraps before the 1st and before the 3rd; the 4th repeats.
    for raw_uj in (500_000, INTEL_RANGE_UJ // 2, 250_000, 250_000):
        powercap.set_energy("intel-rapl:0:1", raw_uj)
        readings_j.append(dram.energy_j())
    steps_j = [b - a for a, b in itertools.pairwise(readings_j)]
    half_j = INTEL_RANGE_UJ // 2 / 1e6
    assert steps_j == pytest.approx([1.0 + 0.5, half_j - 0.5, range_j - half_j + 0.25, 0.0])


def test_power_is_derived_from_two_counter_reads(powercap: FakePowercap) -> None:
    clock = FakeClock()
    sleeps_s: list[float] = []

    def sleep(seconds: float) -> None:  # the CPU package draws 50 W while we wait
        sleeps_s.append(seconds)
        clock.advance(seconds)
        powercap.add_energy("intel-rapl:0", 50.0 * seconds)

    powercap.set_energy("intel-rapl:0", INTEL_RANGE_UJ - 3_000_000)  # 3 J before a wrap
    package = rapl_domains(powercap.root, clock=clock, sleep=sleep)[0]
    assert package.power_w() == pytest.approx(50.0)
    assert sleeps_s == [pytest.approx(0.1)]

    clock.advance(2.0)  # then 100 W for 2 s
    powercap.add_energy("intel-rapl:0", 200.0)
    assert package.power_w() == pytest.approx(100.0)
    assert len(sleeps_s) == 1  # the previous call's read serves as the start


def test_a_missing_powercap_tree_is_not_supported_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(NotSupportedError, match="not found"):
        rapl_domains(tmp_path / "no-such-dir")


def test_a_tree_without_rapl_zones_is_not_supported_with_a_reason(tmp_path: Path) -> None:
    tree = FakePowercap(tmp_path)
    tree.add_control_type("intel-rapl")
    with pytest.raises(NotSupportedError, match="no RAPL package or DRAM zone"):
        rapl_domains(tree.root)


def test_unreadable_counters_say_why_and_how_to_fix(powercap: FakePowercap, monkeypatch: pytest.MonkeyPatch) -> None:
    # Root reads any file whatever its mode, so the kernel's refusal is simulated at the read.
    real_read_text = Path.read_text

    def read_text(path: Path, *args: object, **kwargs: object) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read_text(path)

    monkeypatch.setattr(Path, "read_text", read_text)
    fix = r"root-only since Linux 5\.10.*sudo chmod o\+r .*/intel-rapl:\*/energy_uj"
    with pytest.raises(NotSupportedError, match=fix):
        rapl_domains(powercap.root)


def test_spec_reopens_the_same_domain(powercap: FakePowercap) -> None:
    dram = rapl_domains(powercap.root)[3]
    spec = json.loads(json.dumps(dram.spec()))
    assert spec == {"backend": "rapl", "zone": "intel-rapl:1:1", "index": 3}
    reopened = open_rapl_spec(spec, root=powercap.root)
    assert (reopened.zone, reopened.index, reopened.key) == ("intel-rapl:1:1", 3, "dram1")
    start_j = reopened.energy_j()
    powercap.add_energy("intel-rapl:1:1", 4.0)
    assert reopened.energy_j() - start_j == pytest.approx(4.0)


def test_a_bad_or_stale_spec_is_refused(powercap: FakePowercap) -> None:
    with pytest.raises(DeviceError, match="not a RAPL device spec"):
        open_rapl_spec({"backend": "rapl", "zone": "../../etc", "index": 0}, root=powercap.root)
    with pytest.raises(NotSupportedError, match="intel-rapl:7 not found"):
        open_rapl_spec({"backend": "rapl", "zone": "intel-rapl:7", "index": 0}, root=powercap.root)


def test_rapl_domains_have_no_power_limit(powercap: FakePowercap) -> None:
    package = rapl_domains(powercap.root)[0]
    with pytest.raises(NotSupportedError):
        package.power_limit_w()
    with pytest.raises(NotSupportedError):
        package.set_power_limit_w(100.0)
    assert "power_limit_w" not in package.describe()


def test_the_safe_read_interval_follows_the_counter_range(powercap: FakePowercap) -> None:
    package = rapl_domains(powercap.root)[0]
    assert package.max_read_interval_s == pytest.approx(131.07, abs=0.01)
