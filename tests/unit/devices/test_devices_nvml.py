"""The NVML backend against a fake binding (`fake_pynvml`) that behaves like nvidia-ml-py."""

from __future__ import annotations

import inspect
import json
import math

import pytest

from tests.support import fake_pynvml
from tests.support.fake_pynvml import (
    NVML_DEVICE_ARCH_PASCAL,
    NVML_DEVICE_ARCH_VOLTA,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    FakeClock,
    FakeGpu,
    FakeNvml,
)
from wattwise.devices.base import (
    DeviceError,
    DeviceLostError,
    NoPermissionError,
    NotSupportedError,
    PowerLimitRange,
)
from wattwise.devices.nvml import NvmlGPU, nvml_gpus, open_nvml_spec
from wattwise.errors import UsageError
from wattwise.monitor import EnergyMonitor

UUIDS = [f"GPU-{i}{i}{i}{i}aaaa-bbbb-cccc-dddd-eeeeeeeeeeee" for i in range(4)]


@pytest.fixture(autouse=True)
def _no_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def four_gpus() -> list[FakeGpu]:
    """Four GPUs told apart by UUID and by power draw (100, 110, 120, 130 W)."""
    return [FakeGpu(uuid=UUIDS[i], demand_w=100.0 + 10 * i) for i in range(4)]


def only_gpu(monkeypatch: pytest.MonkeyPatch, fake_gpu: FakeGpu, **fake_options: object) -> NvmlGPU:
    FakeNvml([fake_gpu], **fake_options).install(monkeypatch)  # type: ignore[arg-type]
    (gpu,) = nvml_gpus()
    return gpu


# -- energy and power ------------------------------------------------------------------------------


def test_volta_and_newer_read_the_energy_counter_in_joules(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    FakeNvml([FakeGpu(architecture=NVML_DEVICE_ARCH_VOLTA, demand_w=250.0)], clock=clock).install(monkeypatch)
    (gpu,) = nvml_gpus()
    assert gpu.has_energy_counter()
    start_j = gpu.energy_j()
    clock.advance(10.0)
    assert gpu.energy_j() - start_j == pytest.approx(2500.0)


def test_power_is_reported_in_watts(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = only_gpu(monkeypatch, FakeGpu(demand_w=123.456))
    assert gpu.power_w() == pytest.approx(123.456)


def test_gpu_without_energy_counter_says_so_and_is_measured_by_the_monitor_from_polled_power(
    monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    # A Pascal GPU has no energy counter: the monitor's power sampler integrates its polled power.
    fake_gpu = FakeGpu(name="Tesla P100-PCIE-16GB", architecture=NVML_DEVICE_ARCH_PASCAL, demand_w=100.0)
    FakeNvml([fake_gpu], clock=clock).install(monkeypatch)
    (gpu,) = nvml_gpus()
    assert not gpu.has_energy_counter()
    assert gpu.describe()["energy_counter"] is False
    with pytest.raises(NotSupportedError, match=r"no energy counter.*EnergyMonitor"):
        gpu.energy_j()

    # The background thread would wait an hour: the test takes the samples itself.
    with EnergyMonitor([gpu], clock=clock, wall_clock=clock, sample_interval_s=3600.0) as monitor:
        assert monitor.sampler is not None
        monitor.begin_window("fit")
        for _ in range(4):  # 2 s at 100 W
            clock.advance(0.5)
            monitor.sampler.sample_once()
        fake_gpu.demand_w = 300.0
        for _ in range(4):  # 2 s at 300 W
            clock.advance(0.5)
            monitor.sampler.sample_once()
        m = monitor.end_window("fit")
    # Trapezoids over 0.5 s samples: 2 s at 100 W, one interval averaging 100 and 300 W, 1.5 s at 300 W.
    assert m.time_s == pytest.approx(4.0)
    assert m.energy_j == {"gpu0": pytest.approx(200.0 + 100.0 + 450.0)}
    assert m.approximate == ()


# -- discovery, CUDA_VISIBLE_DEVICES, reopening -----------------------------------------------------


@pytest.mark.parametrize(
    ("cuda_visible_devices", "nvml_indices"),
    [
        (None, [0, 1, 2, 3]),
        ("2,0", [2, 0]),
        (" 3 , 1 ", [3, 1]),
        ("GPU-2222,1", [2, 1]),  # a unique UUID prefix, as CUDA accepts
        (f"{UUIDS[3]},{UUIDS[0]}", [3, 0]),
        ("GPU-,1", []),  # a prefix every UUID shares names no GPU
        ("1,7,2", [1]),  # CUDA ignores everything from the first entry that names no GPU
        ("1,1", [1]),
        ("", []),
        ("-1", []),
    ],
)
def test_cuda_visible_devices_picks_and_renumbers_gpus(
    monkeypatch: pytest.MonkeyPatch, cuda_visible_devices: str | None, nvml_indices: list[int]
) -> None:
    fakes = four_gpus()
    FakeNvml(fakes).install(monkeypatch)
    if cuda_visible_devices is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cuda_visible_devices)
    gpus = nvml_gpus()
    assert [g.index for g in gpus] == list(range(len(nvml_indices)))
    assert [g.uuid for g in gpus] == [UUIDS[i] for i in nvml_indices]
    assert [g.power_w() for g in gpus] == [fakes[i].demand_w for i in nvml_indices]


def test_mig_instances_in_cuda_visible_devices_are_refused_with_a_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    FakeNvml(four_gpus()).install(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-5c2d1e0a-1111-2222-3333-444444444444")
    with pytest.raises(NotSupportedError, match="MIG is not supported"):
        nvml_gpus()


@pytest.mark.parametrize(
    ("init_error", "reason"),
    [
        (NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so not found"),
        (NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver not loaded"),
    ],
)
def test_missing_driver_is_not_supported_with_a_reason(
    monkeypatch: pytest.MonkeyPatch, init_error: int, reason: str
) -> None:
    FakeNvml(init_error=init_error).install(monkeypatch)
    with pytest.raises(NotSupportedError, match=reason):
        nvml_gpus()


def test_installed_binding_without_a_driver_gives_a_reason() -> None:
    try:
        gpus = nvml_gpus()
    except NotSupportedError as err:
        assert "NVIDIA driver" in str(err)
    else:
        pytest.skip(f"this machine has an NVIDIA driver and {len(gpus)} GPU(s)")


def test_nvml_is_initialised_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(four_gpus()).install(monkeypatch)
    gpus = nvml_gpus()
    nvml_gpus()
    open_nvml_spec(gpus[0].spec())
    assert fake.init_calls == 1


def test_spec_reopens_the_same_gpu_by_uuid_in_another_process(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = four_gpus()
    FakeNvml(fakes).install(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    (gpu,) = nvml_gpus()
    spec = json.loads(json.dumps(gpu.spec()))
    assert spec == {"backend": "nvml", "uuid": UUIDS[2], "index": 0}

    # Another process: a fresh NVML, and a different CUDA_VISIBLE_DEVICES.
    FakeNvml(fakes).install(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    reopened = open_nvml_spec(spec)
    assert (reopened.uuid, reopened.index) == (UUIDS[2], 0)
    assert reopened.power_w() == fakes[2].demand_w


def test_reopening_a_gpu_that_is_gone_keeps_nvmls_message(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml(four_gpus()).install(monkeypatch)
    missing = "GPU-99999999-0000-0000-0000-000000000000"
    with pytest.raises(DeviceError, match=f"{missing}.*Not Found") as caught:
        open_nvml_spec({"backend": "nvml", "uuid": missing, "index": 0})
    assert type(caught.value) is DeviceError
    with pytest.raises(DeviceError, match="not an NVML device spec"):
        open_nvml_spec({"backend": "rapl", "zone": "intel-rapl:0"})


def test_names_and_uuids_are_text_from_old_and_new_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = only_gpu(monkeypatch, FakeGpu(name="Tesla V100-SXM2-16GB", uuid=UUIDS[0]), strings_as_bytes=True)
    info = gpu.describe()
    assert (info["name"], info["uuid"], info["backend"]) == ("Tesla V100-SXM2-16GB", UUIDS[0], "nvml")


# -- power limits ----------------------------------------------------------------------------------


def test_power_limit_and_range_are_in_watts(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = only_gpu(monkeypatch, FakeGpu(min_limit_w=100.0, max_limit_w=400.0, default_limit_w=350.0))
    assert gpu.power_limit_w() == 350.0
    assert gpu.power_limit_range() == PowerLimitRange(min_w=100.0, max_w=400.0, default_w=350.0)


def test_set_power_limit_is_applied_and_confirmed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeGpu(demand_w=300.0)
    gpu = only_gpu(monkeypatch, fake_gpu)
    gpu.set_power_limit_w(250.0004)
    assert fake_gpu.limit_mw == 250_000
    assert gpu.power_limit_w() == 250.0
    assert gpu.power_w() == 250.0  # the draw now follows the limit


@pytest.mark.parametrize("watts", [99.0, 400.5, math.nan])
def test_set_power_limit_outside_the_range_names_the_range(monkeypatch: pytest.MonkeyPatch, watts: float) -> None:
    fake_gpu = FakeGpu(min_limit_w=100.0, max_limit_w=400.0)
    gpu = only_gpu(monkeypatch, fake_gpu)
    with pytest.raises(UsageError, match="allowed range 100-400 W"):
        gpu.set_power_limit_w(watts)
    assert fake_gpu.limit_mw == 400_000


def test_set_power_limit_without_privileges_says_what_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeGpu()
    gpu = only_gpu(monkeypatch, fake_gpu, privileged=False)
    with pytest.raises(NoPermissionError, match=r"Insufficient Permissions.*root or CAP_SYS_ADMIN"):
        gpu.set_power_limit_w(200.0)
    assert fake_gpu.limit_mw == 400_000


def test_a_driver_that_ignores_the_set_is_caught_by_the_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = only_gpu(monkeypatch, FakeGpu(ignores_set=True))
    with pytest.raises(DeviceError, match="set to 200 W but it reads back as 400 W"):
        gpu.set_power_limit_w(200.0)


def test_the_v2_setter_is_used_when_the_driver_lacks_v1_and_is_confirmed_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_gpu = FakeGpu()
    fake = FakeNvml([fake_gpu], missing_functions={"nvmlDeviceSetPowerManagementLimit"}).install(monkeypatch)
    (gpu,) = nvml_gpus()
    gpu.set_power_limit_w(200.0)
    assert fake_gpu.limit_mw == 200_000

    # Without privileges the _v2 wrapper reports success; only the read-back notices.
    fake.privileged = False
    with pytest.raises(DeviceError, match=r"reads back as 200 W.*root or CAP_SYS_ADMIN"):
        gpu.set_power_limit_w(300.0)


# -- SM clocks -------------------------------------------------------------------------------------


def test_supported_sm_clocks_are_listed_highest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeGpu(memory_clocks_mhz=[405, 1215, 810], graphics_clocks_mhz=[210, 1410, 1005, 1410])
    gpu = only_gpu(monkeypatch, fake_gpu)
    assert gpu.supported_sm_clocks_mhz() == [1410, 1005, 210]


def test_locked_clocks_are_set_reported_and_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeGpu(uuid=UUIDS[0])
    gpu = only_gpu(monkeypatch, fake_gpu)
    assert gpu.locked_sm_clocks_mhz() is None
    gpu.lock_sm_clocks_mhz(1005, 1410)
    assert fake_gpu.locked_clocks_mhz == (1005, 1410)
    same_gpu = open_nvml_spec(gpu.spec())
    assert same_gpu.locked_sm_clocks_mhz() == (1005, 1410)
    same_gpu.reset_sm_clocks()
    assert fake_gpu.locked_clocks_mhz is None
    assert gpu.locked_sm_clocks_mhz() is None


def test_an_inverted_clock_range_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeGpu()
    gpu = only_gpu(monkeypatch, fake_gpu)
    with pytest.raises(UsageError, match="0 < min <= max"):
        gpu.lock_sm_clocks_mhz(1410, 1005)
    assert fake_gpu.locked_clocks_mhz is None


def test_locking_clocks_without_privileges_or_support_maps_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    unprivileged = only_gpu(monkeypatch, FakeGpu(), privileged=False)
    with pytest.raises(NoPermissionError, match="CAP_SYS_ADMIN"):
        unprivileged.lock_sm_clocks_mhz(1005, 1410)
    pascal = only_gpu(monkeypatch, FakeGpu(architecture=NVML_DEVICE_ARCH_PASCAL))
    with pytest.raises(NotSupportedError, match="Not Supported"):
        pascal.lock_sm_clocks_mhz(1005, 1410)
    assert unprivileged.locked_sm_clocks_mhz() is None


def test_a_lost_gpu_raises_device_lost_with_nvmls_message(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeGpu(uuid=UUIDS[1])
    gpu = only_gpu(monkeypatch, fake_gpu)
    fake_gpu.lost = True
    with pytest.raises(DeviceLostError, match=f"GPU 0 \\({UUIDS[1]}\\).*GPU is lost"):
        gpu.power_w()
    with pytest.raises(DeviceLostError):
        gpu.energy_j()


# -- the fake itself -------------------------------------------------------------------------------


def test_fake_binding_matches_the_installed_binding() -> None:
    real = pytest.importorskip("pynvml")
    assert {n: getattr(fake_pynvml, n) for n in dir(fake_pynvml) if n.startswith("NVML_ERROR_")} == {
        n: getattr(real, n) for n in dir(real) if n.startswith("NVML_ERROR_")
    }
    for name in [n for n in dir(real) if n.startswith("NVML_ERROR_")]:
        code = getattr(real, name)
        fake_error, real_error = fake_pynvml.NVMLError(code), real.NVMLError(code)
        assert type(fake_error).__name__ == type(real_error).__name__
        assert fake_error.value == real_error.value == code
        if code in fake_pynvml._ERROR_STRINGS:
            assert str(fake_error) == str(real_error)
    for name in [n for n in dir(FakeNvml) if n.startswith("nvml")]:
        fake_params = list(inspect.signature(getattr(FakeNvml, name)).parameters)[1:]  # drop self
        assert list(inspect.signature(getattr(real, name)).parameters) == fake_params, name


def test_driver_versions_are_what_nvml_says_and_none_it_cannot_give(monkeypatch: pytest.MonkeyPatch) -> None:
    from wattwise.devices.nvml import driver_versions
    from wattwise.tools.acceptance import versions

    fake = FakeNvml([FakeGpu()]).install(monkeypatch)
    assert versions() == {"driver": None, "nvml": None, "cuda_driver": None}  # a binding without the calls
    monkeypatch.setattr(fake, "nvmlSystemGetDriverVersion", lambda: b"580.159.04", raising=False)
    monkeypatch.setattr(fake, "nvmlSystemGetNVMLVersion", lambda: "13.580.159.04", raising=False)
    monkeypatch.setattr(fake, "nvmlSystemGetCudaDriverVersion", lambda: 13000, raising=False)
    assert driver_versions() == {"driver": "580.159.04", "nvml": "13.580.159.04", "cuda_driver": "13000"}
    assert versions() == driver_versions()
