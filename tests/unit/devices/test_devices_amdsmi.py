"""The amdsmi backend (AMD Instinct GPUs) against a fake binding that behaves like ROCm's amdsmi."""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import re
import sys
from pathlib import Path

import pytest

import wattwise.devices.amdsmi as backend
from tests.support import fake_amdsmi
from tests.support.amdsmi_signatures import signature_table
from tests.support.clock import VirtualClock
from tests.support.fake_amdsmi import (
    AMDSMI_STATUS_DRIVER_NOT_LOADED,
    AMDSMI_STATUS_NO_PERM,
    AmdSmiDevPerfLevel,
    FakeAmdGpu,
    FakeAmdSmi,
    forget_process_state,
)
from tests.support.paths import DATA_DIR
from wattwise.devices.amdsmi import AmdsmiGPU, amdsmi_gpus, open_amdsmi_spec
from wattwise.devices.base import (
    DeviceError,
    DeviceLostError,
    NoPermissionError,
    NotSupportedError,
    PowerLimitRange,
)
from wattwise.errors import EnergyPluginWarning, UsageError
from wattwise.monitor import EnergyMonitor

SIGNATURES = DATA_DIR / "amdsmi_signatures.json"


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test is a process of its own: no visibility variables, no verdicts or ranges from before."""
    forget_process_state(monkeypatch)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


def four_gpus() -> list[FakeAmdGpu]:
    """Four GPUs told apart by power draw (200, 210, 220, 230 W)."""
    return [FakeAmdGpu(demand_w=200.0 + 10 * i) for i in range(4)]


def only_gpu(monkeypatch: pytest.MonkeyPatch, fake_gpu: FakeAmdGpu, **options: object) -> AmdsmiGPU:
    FakeAmdSmi([fake_gpu], **options).install(monkeypatch)  # type: ignore[arg-type]
    (gpu,) = amdsmi_gpus()
    return gpu


# -- energy and power ------------------------------------------------------------------------------


def test_energy_counter_is_read_in_joules(monkeypatch: pytest.MonkeyPatch, clock: VirtualClock) -> None:
    FakeAmdSmi([FakeAmdGpu(demand_w=500.0)], clock=clock).install(monkeypatch)
    (gpu,) = amdsmi_gpus()
    assert gpu.has_energy_counter()
    start_j = gpu.energy_j()
    clock.sleep(10.0)
    # 5000 J in ticks of 15.259 µJ: within one tick.
    assert gpu.energy_j() - start_j == pytest.approx(5000.0, abs=2e-5)


def test_a_32_bit_counter_is_followed_across_its_wrap(monkeypatch: pytest.MonkeyPatch, clock: VirtualClock) -> None:
    # 10**8 ticks (1.5 kJ) before the wrap; the start-up check takes 350 J of them.
    fake_gpu = FakeAmdGpu(demand_w=700.0, counter_bits=32, counter_start_ticks=2**32 - 10**8)
    FakeAmdSmi([fake_gpu], clock=clock).install(monkeypatch)
    (gpu,) = amdsmi_gpus()
    start_j = gpu.energy_j()
    clock.sleep(30.0)  # 21 kJ
    assert fake_gpu.ticks < 2**32 - 10**8  # the raw accumulator did wrap
    assert gpu.energy_j() - start_j == pytest.approx(21_000.0, abs=1e-3)
    # The monitor reads a 32-bit counter at least twice per wrap at 1 kW: 2**32 x 15.259 µJ / 1 kW / 2.
    assert gpu.max_read_interval_s == pytest.approx(2**32 * 15.259e-6 / 1000 / 2)


def test_a_64_bit_counter_needs_no_background_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = only_gpu(monkeypatch, FakeAmdGpu(counter_start_ticks=2**40))
    assert gpu.max_read_interval_s is None


@pytest.mark.parametrize(("sensor", "watts"), [("current_socket_power", 312.4), ("average_socket_power", 187.6)])
def test_power_is_read_from_the_sensor_the_gpu_has(monkeypatch: pytest.MonkeyPatch, sensor: str, watts: float) -> None:
    gpu = only_gpu(monkeypatch, FakeAmdGpu(power_sensor=sensor, demand_w=watts))
    assert gpu.power_w() == round(watts)  # amdsmi reports whole watts


def test_a_counter_that_disagrees_with_the_power_sensor_is_not_used_and_said_once(
    monkeypatch: pytest.MonkeyPatch, clock: VirtualClock
) -> None:
    fake_gpu = FakeAmdGpu(demand_w=400.0, counter_scale=0.5)
    FakeAmdSmi([fake_gpu, FakeAmdGpu(demand_w=400.0)], clock=clock).install(monkeypatch)
    with pytest.warns(EnergyPluginWarning) as caught:
        bad, good = amdsmi_gpus()
        amdsmi_gpus()
        open_amdsmi_spec(bad.spec()).has_energy_counter()
    assert (bad.has_energy_counter(), good.has_energy_counter()) == (False, True)
    (warning,) = caught
    assert re.search(
        r"AMD GPU 0 .*counter gave 200 W .* sensor read 400 W.*integrated from polled power", str(warning.message)
    )
    assert "integrated from polled power" in bad.describe()["energy_counter_note"]
    with pytest.raises(NotSupportedError, match="counter gave 200 W"):
        bad.energy_j()


def test_the_counter_check_watches_every_gpu_in_one_window(
    monkeypatch: pytest.MonkeyPatch, clock: VirtualClock
) -> None:
    FakeAmdSmi(four_gpus(), clock=clock).install(monkeypatch)
    start_s = clock()
    amdsmi_gpus()
    assert clock() - start_s == pytest.approx(backend.COUNTER_CHECK_WINDOW_S)


def test_a_gpu_measured_from_polled_power_when_its_counter_is_rejected(
    monkeypatch: pytest.MonkeyPatch, clock: VirtualClock
) -> None:
    fake_gpu = FakeAmdGpu(demand_w=300.0, counter_scale=3.0)
    FakeAmdSmi([fake_gpu], clock=clock).install(monkeypatch)
    with pytest.warns(EnergyPluginWarning, match="its energy counter gave 900 W .* integrated from polled power"):
        (gpu,) = amdsmi_gpus()  # opening it checks the counter against the power sensor
    with EnergyMonitor([gpu], clock=clock, wall_clock=clock, sample_interval_s=3600.0) as monitor:
        assert monitor.sampler is not None
        monitor.begin_window("fit")
        for _ in range(4):
            clock.sleep(0.5)
            monitor.sampler.sample_once()
        m = monitor.end_window("fit")
    assert m.energy_j == {"gpu0": pytest.approx(600.0)}  # 2 s at 300 W, not the counter's 1800 J


def test_a_gpu_without_an_energy_counter_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = only_gpu(monkeypatch, FakeAmdGpu(has_energy_counter=False))
    assert not gpu.has_energy_counter()
    assert gpu.describe()["energy_counter"] is False
    with pytest.raises(NotSupportedError, match=r"no energy counter.*EnergyMonitor"):
        gpu.energy_j()


# -- discovery, visibility variables, reopening ----------------------------------------------------


@pytest.mark.parametrize(
    ("env", "positions"),
    [
        ({}, [0, 1, 2, 3]),
        ({"HIP_VISIBLE_DEVICES": "2,0"}, [2, 0]),
        ({"CUDA_VISIBLE_DEVICES": " 3 , 1 "}, [3, 1]),
        ({"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "3"}, [1]),  # HIP's own variable wins
        ({"ROCR_VISIBLE_DEVICES": "1,2,3", "HIP_VISIBLE_DEVICES": "0"}, [1]),  # HIP indexes what ROCR left
        ({"ROCR_VISIBLE_DEVICES": "3,2"}, [3, 2]),
        ({"ROCR_VISIBLE_DEVICES": "SERIAL2,0"}, [2, 0]),  # GPU-<ASIC serial>, as rocminfo prints it
        ({"HIP_VISIBLE_DEVICES": "1,7,2"}, [1]),  # the list ends at the first entry naming no GPU
        ({"HIP_VISIBLE_DEVICES": "1,1"}, [1]),
        ({"HIP_VISIBLE_DEVICES": ""}, []),
        ({"ROCR_VISIBLE_DEVICES": "-1"}, []),
    ],
)
def test_visibility_variables_pick_and_renumber_gpus(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], positions: list[int]
) -> None:
    fakes = four_gpus()
    FakeAmdSmi(fakes).install(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value.replace("SERIAL2", "GPU-" + fakes[2].serial.removeprefix("0x")))
    gpus = amdsmi_gpus()
    assert [g.index for g in gpus] == list(range(len(positions)))
    assert [g.uuid for g in gpus] == [fakes[p].uuid for p in positions]
    assert [g.power_w() for g in gpus] == [fakes[p].demand_w for p in positions]


def test_gpus_are_numbered_in_hips_order_where_amdsmi_reports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # amdsmi lists them A, B, C; HIP numbers them C, A, B.
    fakes = [FakeAmdGpu(hip_id=1), FakeAmdGpu(hip_id=2), FakeAmdGpu(hip_id=0)]
    FakeAmdSmi(fakes).install(monkeypatch)
    assert [g.uuid for g in amdsmi_gpus()] == [fakes[2].uuid, fakes[0].uuid, fakes[1].uuid]
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    assert [g.uuid for g in amdsmi_gpus()] == [fakes[0].uuid]
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "GPU-" + fakes[1].serial.removeprefix("0x"))
    assert [g.uuid for g in amdsmi_gpus()] == [fakes[1].uuid]


@pytest.mark.parametrize(
    ("fake", "reason"),
    [
        (FakeAmdSmi(init_error=AMDSMI_STATUS_DRIVER_NOT_LOADED), "amdgpu driver is not loaded"),
        (FakeAmdSmi(init_error=AMDSMI_STATUS_NO_PERM), "render and video groups"),
    ],
)
def test_a_failed_init_is_not_supported_with_a_reason(
    monkeypatch: pytest.MonkeyPatch, fake: FakeAmdSmi, reason: str
) -> None:
    fake.install(monkeypatch)
    with pytest.raises(NotSupportedError, match=reason):
        amdsmi_gpus()


def test_without_the_binding_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("amdsmi") is not None:
        pytest.skip("the amdsmi package is installed here")
    monkeypatch.setattr(backend, "amdsmi", None)
    monkeypatch.setattr(backend, "_import_failure", None)
    monkeypatch.setenv("ROCM_PATH", "/opt/rocm-7.0.2")
    with pytest.raises(NotSupportedError, match=re.escape("pip install /opt/rocm-7.0.2/share/amd_smi")) as raised:
        amdsmi_gpus()
    assert "wattwise[" not in str(raised.value)  # wattwise is on no package index: never send the user to one
    monkeypatch.delenv("ROCM_PATH")
    monkeypatch.setattr(backend, "_import_failure", None)
    with pytest.raises(NotSupportedError, match=re.escape("pip install /opt/rocm/share/amd_smi")):
        amdsmi_gpus()


def test_a_binding_whose_library_is_missing_names_the_rocm_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What amdsmi 7.0.2 does without libamd_smi.so: print, then fail on the missing library entry.
    (tmp_path / "amdsmi.py").write_text(
        "print('Unable to find libamd_smi.so library try installing amd-smi-lib')\n_libraries = {}\n"
        "_libraries['libamd_smi.so']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "amdsmi", raising=False)
    monkeypatch.setattr(backend, "amdsmi", None)
    monkeypatch.setattr(backend, "_import_failure", None)
    with pytest.raises(NotSupportedError, match=r"libamd_smi.so could not be loaded.*amd-smi-lib.*ROCM_PATH"):
        amdsmi_gpus()
    assert capsys.readouterr().out == ""  # the binding's own print does not reach the user twice


def test_a_folder_named_amdsmi_that_shadows_the_binding_is_named_instead_of_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A folder called amdsmi on the path (the amdsmi sources, unpacked) imports as an empty namespace package.
    (tmp_path / "amdsmi").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "amdsmi", raising=False)
    monkeypatch.setattr(backend, "amdsmi", None)
    monkeypatch.setattr(backend, "_import_failure", None)
    try:
        with pytest.raises(
            NotSupportedError,
            match=r"amdsmi found at .*amdsmi is not ROCm's amdsmi binding \(it has "
            r"no amdsmi_init\)",
        ):
            amdsmi_gpus()
    finally:
        sys.modules.pop("amdsmi", None)  # imported (an empty namespace package): monkeypatch would leave it


def test_amdsmi_is_initialised_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeAmdSmi(four_gpus()).install(monkeypatch)
    gpus = amdsmi_gpus()
    amdsmi_gpus()
    open_amdsmi_spec(gpus[0].spec())
    assert fake.init_calls == 1


def test_spec_reopens_the_same_gpu_by_uuid_in_another_process(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = four_gpus()
    FakeAmdSmi(fakes).install(monkeypatch)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2")
    (gpu,) = amdsmi_gpus()
    spec = json.loads(json.dumps(gpu.spec()))
    assert spec == {"backend": "amdsmi", "uuid": fakes[2].uuid, "index": 0}

    FakeAmdSmi(fakes).install(monkeypatch)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES")
    reopened = open_amdsmi_spec(spec)
    assert (reopened.uuid, reopened.index, reopened.power_w()) == (fakes[2].uuid, 0, fakes[2].demand_w)
    with pytest.raises(DeviceError, match="no AMD GPU with UUID nope"):
        open_amdsmi_spec({"backend": "amdsmi", "uuid": "nope", "index": 0})
    with pytest.raises(DeviceError, match="not an amdsmi device spec"):
        open_amdsmi_spec({"backend": "nvml", "uuid": fakes[2].uuid})


def test_describe_names_the_gpu_and_its_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeAmdGpu(name="AMD Instinct MI250X", bdf="0000:c1:00.0")
    info = only_gpu(monkeypatch, fake_gpu).describe()
    assert (info["key"], info["name"], info["backend"], info["uuid"], info["bdf"]) == (
        "gpu0",
        "AMD Instinct MI250X",
        "amdsmi",
        fake_gpu.uuid,
        "0000:c1:00.0",
    )
    assert info["power_limit_range_w"] == [100.0, 750.0]


# -- power caps ------------------------------------------------------------------------------------


def test_power_cap_and_range_are_in_watts(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = only_gpu(monkeypatch, FakeAmdGpu(min_cap_w=200.0, max_cap_w=750.0, default_cap_w=700.0))
    assert gpu.power_limit_w() == 700.0
    assert gpu.power_limit_range() == PowerLimitRange(min_w=200.0, max_w=750.0, default_w=700.0)


def test_set_power_cap_is_applied_in_microwatts_and_confirmed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeAmdGpu(demand_w=600.0)
    gpu = only_gpu(monkeypatch, fake_gpu)
    gpu.set_power_limit_w(450.0000004)
    assert fake_gpu.cap_uw == 450_000_000
    assert (gpu.power_limit_w(), gpu.power_w()) == (450.0, 450.0)  # the draw follows the cap


@pytest.mark.parametrize("watts", [99.0, 750.5, math.nan])
def test_set_power_cap_outside_the_range_names_the_range(monkeypatch: pytest.MonkeyPatch, watts: float) -> None:
    fake_gpu = FakeAmdGpu(min_cap_w=100.0, max_cap_w=750.0)
    gpu = only_gpu(monkeypatch, fake_gpu)
    with pytest.raises(UsageError, match="allowed range 100-750 W"):
        gpu.set_power_limit_w(watts)
    assert fake_gpu.cap_uw == 750_000_000


def test_set_power_cap_without_root_says_what_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeAmdGpu()
    gpu = only_gpu(monkeypatch, fake_gpu, privileged=False)
    with pytest.raises(NoPermissionError, match=r"Permission Denied.*status 10.*needs root.*node agent"):
        gpu.set_power_limit_w(300.0)
    assert fake_gpu.cap_uw == 750_000_000


def test_a_driver_that_ignores_the_cap_is_caught_by_the_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = only_gpu(monkeypatch, FakeAmdGpu(ignores_set=True))
    with pytest.raises(DeviceError, match="set to 300 W but it reads back as 750 W"):
        gpu.set_power_limit_w(300.0)


# -- graphics clocks -------------------------------------------------------------------------------


def test_graphics_clock_levels_are_listed_in_mhz_highest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = only_gpu(monkeypatch, FakeAmdGpu(gfx_levels_mhz=[500, 1700, 2100, 1700]))
    assert gpu.supported_sm_clocks_mhz() == [2100, 1700, 500]


def test_a_clock_range_is_set_reported_and_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeAmdGpu(gfx_levels_mhz=[500, 1300, 2100])
    gpu = only_gpu(monkeypatch, fake_gpu)
    assert gpu.locked_sm_clocks_mhz() is None
    gpu.lock_sm_clocks_mhz(1300, 1300)
    assert (fake_gpu.gfx_range_mhz, fake_gpu.perf_level) == ((1300, 1300), AmdSmiDevPerfLevel.MANUAL)
    same_gpu = open_amdsmi_spec(gpu.spec())
    assert same_gpu.locked_sm_clocks_mhz() == (1300, 1300)
    same_gpu.reset_sm_clocks()
    assert (fake_gpu.gfx_range_mhz, fake_gpu.perf_level) == ((500, 2100), AmdSmiDevPerfLevel.AUTO)
    assert gpu.locked_sm_clocks_mhz() is None


def test_clock_ranges_refused_by_the_driver_or_without_root_map_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    unprivileged = only_gpu(monkeypatch, FakeAmdGpu(), privileged=False)
    with pytest.raises(NoPermissionError, match="needs root"):
        unprivileged.lock_sm_clocks_mhz(500, 1300)
    fixed = only_gpu(monkeypatch, FakeAmdGpu(clock_range_settable=False))
    with pytest.raises(NotSupportedError, match=r"Feature not supported.*does not offer it"):
        fixed.lock_sm_clocks_mhz(500, 1300)
    assert unprivileged.locked_sm_clocks_mhz() is None
    with pytest.raises(UsageError, match="0 < min <= max"):
        fixed.lock_sm_clocks_mhz(1300, 500)


def test_a_lost_gpu_raises_device_lost_with_amdsmis_message(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeAmdGpu()
    gpu = only_gpu(monkeypatch, fake_gpu)
    fake_gpu.lost = True
    with pytest.raises(DeviceLostError, match=f"GPU 0 \\({fake_gpu.uuid}\\).*Device Not found.*amd-smi list"):
        gpu.power_w()
    with pytest.raises(DeviceLostError):
        gpu.energy_j()


# -- the fake itself -------------------------------------------------------------------------------


def _fake_table() -> dict[str, object]:
    functions = {
        name: list(inspect.signature(getattr(FakeAmdSmi, name)).parameters)[1:]  # drop self
        for name in dir(FakeAmdSmi)
        if name.startswith("amdsmi_")
    }
    return {"functions": functions}


def test_the_fake_has_the_real_bindings_function_names_and_parameters() -> None:
    real = json.loads(SIGNATURES.read_text())
    assert real["version"] == fake_amdsmi.AMDSMI_VERSION
    assert _fake_table()["functions"] == real["functions"]
    assert {n: v for n, v in vars(fake_amdsmi).items() if n.startswith("AMDSMI_STATUS_")}.items() <= (
        real["status_codes"].items()
    )
    for enum_name, members in real["enums"].items():
        fake_enum = getattr(fake_amdsmi, enum_name)
        assert {m: fake_enum[m].value for m in fake_enum.__members__}.items() <= members.items(), enum_name
    assert real["exceptions"] == sorted(
        n for n in vars(fake_amdsmi) if n.startswith("AmdSmi") and n.endswith("Exception")
    )


def test_the_backend_calls_only_what_the_real_binding_has() -> None:
    real = json.loads(SIGNATURES.read_text())
    called = set(re.findall(r"[.\"](amdsmi_\w+)[(\"]", Path(backend.__file__).read_text()))
    assert called and called <= set(real["functions"])


def test_the_stored_table_matches_an_installed_binding() -> None:
    spec = importlib.util.find_spec("amdsmi")
    if spec is None or spec.origin is None:
        pytest.skip("the amdsmi package is not installed here: the stored table (amdsmi 7.0.2) is checked instead")
    installed = signature_table(Path(spec.origin).parent, "installed")
    stored = json.loads(SIGNATURES.read_text())
    assert installed["functions"] == stored["functions"]
    assert installed["enums"] == stored["enums"]
