"""Device discovery: NVML GPUs when a driver answers, else what is really there (RAPL, or nothing) with a note;
the simulated GPU only by name (backend "simulated", `WATTWISE_BACKEND`); specs reopen."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

import wattwise.devices
import wattwise.devices.rapl
from tests.support.fake_pynvml import NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakeNvml
from tests.support.powercap import FakePowercap
from wattwise.devices import (
    NO_GPU_CPU_NOTE,
    NO_GPU_NOTHING_NOTE,
    SIMULATED_BY_ENV_NOTE,
    DeviceError,
    NotSupportedError,
    PowerModel,
    SimulatedGPU,
    discover,
    open_spec,
    simulated_gpus,
)
from wattwise.errors import ConfigError, UsageError

pytestmark = pytest.mark.usefixtures("discovery_as_a_user_runs_it")


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    return FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND).install(monkeypatch)


@pytest.fixture
def no_rapl(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No powercap tree, whatever this machine has."""
    monkeypatch.setattr(
        wattwise.devices.rapl,
        "rapl_domains",
        functools.partial(wattwise.devices.rapl.rapl_domains, tmp_path / "no-powercap"),
    )


@pytest.fixture
def fake_rapl(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakePowercap:
    """One CPU package with its DRAM, readable."""
    tree = FakePowercap(tmp_path / "sys")
    tree.add_control_type("intel-rapl")
    tree.add_zone("intel-rapl:0", "package-0", energy_uj=1_000_000)
    tree.add_zone("intel-rapl:0:0", "dram")
    monkeypatch.setattr(
        wattwise.devices.rapl, "rapl_domains", functools.partial(wattwise.devices.rapl.rapl_domains, tree.root)
    )
    return tree


def test_auto_finds_nvml_gpus_and_no_simulated_one(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu(name="NVIDIA A100-SXM4-40GB"), FakeGpu(name="NVIDIA A100-SXM4-40GB")]).install(monkeypatch)
    found = discover("auto")
    assert [(g.backend, g.index, g.name) for g in found.gpus] == [
        ("nvml", 0, "NVIDIA A100-SXM4-40GB"),
        ("nvml", 1, "NVIDIA A100-SXM4-40GB"),
    ]
    assert not found.simulated
    assert not any(isinstance(g, SimulatedGPU) for g in found.all)
    assert found.cpus == [] and found.notes == []
    assert all(d.driven for d in found.all)  # real devices are driven by real work


def test_gpu_indices_select_among_the_nvml_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu(), FakeGpu(), FakeGpu()]).install(monkeypatch)
    assert [g.index for g in discover("nvml", gpu_indices=[2, 0]).gpus] == [2, 0]
    with pytest.raises(UsageError, match=r"asks for GPU\(s\) \[5\].*\[0, 1, 2\]"):
        discover("nvml", gpu_indices=[5])


def test_auto_without_a_gpu_or_rapl_finds_nothing_and_says_tuning_needs_a_gpu(
    no_driver: FakeNvml, no_rapl: None
) -> None:
    found = discover("auto")
    assert found.gpus == [] and found.cpus == [] and not found.simulated
    assert found.notes[-1] == NO_GPU_NOTHING_NOTE
    assert "nothing to measure" in NO_GPU_NOTHING_NOTE
    assert "tuning and capping need a GPU" in NO_GPU_NOTHING_NOTE and "simulated" in NO_GPU_NOTHING_NOTE
    (nvml_note,) = [n for n in found.notes if n.startswith("nvml: unavailable")]
    assert "libnvidia-ml.so not found" in nvml_note
    (rapl_note,) = [n for n in found.notes if n.startswith("rapl: unavailable")]
    assert "no-powercap not found" in rapl_note


@pytest.mark.parametrize("include_cpu", [False, True])
def test_auto_without_a_gpu_measures_the_cpu_through_rapl(
    no_driver: FakeNvml, fake_rapl: FakePowercap, include_cpu: bool
) -> None:
    found = discover("auto", include_cpu=include_cpu)
    assert found.gpus == [] and not found.simulated
    assert [(d.backend, d.key) for d in found.cpus] == [("rapl", "cpu0"), ("rapl", "dram0")]
    assert found.all == found.cpus and all(d.driven for d in found.cpus)
    assert found.notes[-1] == NO_GPU_CPU_NOTE
    assert "CPU (RAPL) only" in NO_GPU_CPU_NOTE and "tuning and capping need a GPU" in NO_GPU_CPU_NOTE


def test_auto_with_a_driver_but_no_gpu_finds_no_gpu_either(monkeypatch: pytest.MonkeyPatch, no_rapl: None) -> None:
    FakeNvml([]).install(monkeypatch)
    found = discover("auto")
    assert found.gpus == [] and not found.simulated
    assert any("found no GPU" in n for n in found.notes)
    assert found.notes[-1] == NO_GPU_NOTHING_NOTE


def test_auto_with_a_gpu_leaves_the_cpu_out_unless_asked(
    monkeypatch: pytest.MonkeyPatch, fake_rapl: FakePowercap
) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)
    assert discover("auto").cpus == []
    assert [d.key for d in discover("auto", include_cpu=True).cpus] == ["cpu0", "dram0"]


def test_nvml_with_a_driver_but_no_gpu_still_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([]).install(monkeypatch)
    with pytest.raises(NotSupportedError, match="NVML unavailable: NVML found no GPU"):
        discover("nvml")


# -- WATTWISE_BACKEND ---------------------------------------------------------------------------------


def test_wattwise_backend_simulated_makes_auto_use_the_simulated_gpu(
    monkeypatch: pytest.MonkeyPatch, fake_rapl: FakePowercap
) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)  # a GPU is there, but the simulated one was asked for
    monkeypatch.setenv("WATTWISE_BACKEND", "simulated")
    found = discover("auto", num_simulated=2)
    assert [type(g) for g in found.gpus] == [SimulatedGPU, SimulatedGPU] and found.simulated
    assert found.cpus == []
    assert found.notes == [SIMULATED_BY_ENV_NOTE]
    assert "WATTWISE_BACKEND=simulated" in SIMULATED_BY_ENV_NOTE and "modelled" in SIMULATED_BY_ENV_NOTE


def test_wattwise_backend_nvml_makes_auto_fail_without_a_gpu(
    monkeypatch: pytest.MonkeyPatch, no_driver: FakeNvml
) -> None:
    monkeypatch.setenv("WATTWISE_BACKEND", "nvml")
    with pytest.raises(NotSupportedError, match="NVML unavailable"):
        discover("auto")


@pytest.mark.parametrize("value", ["auto", "", "  "])
def test_wattwise_backend_auto_or_empty_is_the_real_auto(
    monkeypatch: pytest.MonkeyPatch, no_driver: FakeNvml, no_rapl: None, value: str
) -> None:
    monkeypatch.setenv("WATTWISE_BACKEND", value)
    found = discover("auto")
    assert found.gpus == [] and found.notes[-1] == NO_GPU_NOTHING_NOTE


def test_an_explicit_backend_wins_over_wattwise_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)
    monkeypatch.setenv("WATTWISE_BACKEND", "simulated")
    assert [g.backend for g in discover("nvml").gpus] == ["nvml"]
    monkeypatch.setenv("WATTWISE_BACKEND", "nvml")
    found = discover("simulated")
    assert found.simulated and found.notes == []


@pytest.mark.parametrize("value", ["bogus", "Simulated", "cuda"])
def test_a_bad_wattwise_backend_is_a_config_error_naming_the_variable_and_the_choices(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("WATTWISE_BACKEND", value)
    choices = "auto, nvml, simulated, agent, amdsmi"
    with pytest.raises(ConfigError, match=rf"^WATTWISE_BACKEND must be one of {choices} \(got '{value}'\)"):
        discover("auto")


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so not found"),
        (NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
    ],
)
def test_nvml_without_a_driver_raises_not_supported_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, code: int, reason: str
) -> None:
    FakeNvml(init_error=code).install(monkeypatch)
    with pytest.raises(NotSupportedError, match=f"NVML unavailable: .*{reason}"):
        discover("nvml")


def test_simulated_backend_gives_simulated_gpus_without_asking_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)  # a GPU is there, but simulated was asked for
    found = discover("simulated", num_simulated=2)
    assert [type(g) for g in found.gpus] == [SimulatedGPU, SimulatedGPU]
    assert [g.key for g in found.gpus] == ["gpu0", "gpu1"]
    assert found.notes == []


def test_an_unknown_backend_is_a_usage_error_listing_the_choices() -> None:
    with pytest.raises(UsageError, match=r"auto, nvml, simulated.*'cuda'"):
        discover("cuda")


def test_a_simulated_gpu_is_one_object_per_process(no_driver: FakeNvml) -> None:
    first = discover("simulated").gpus[0]
    second = discover("simulated").gpus[0]
    assert first is second  # the workload and the monitor share its counter and settings


def test_simulated_gpus_keep_their_settings_under_the_state_dir(tmp_path: Path) -> None:
    (gpu,) = simulated_gpus(1)
    gpu.set_power_limit_w(200.0)
    state = tmp_path / "home" / "simulated" / "gpu0.json"
    assert json.loads(state.read_text())["power_limit_w"] == 200.0


def test_at_least_one_simulated_gpu() -> None:
    with pytest.raises(UsageError, match="at least 1"):
        simulated_gpus(0)


def test_simulated_gpus_at_the_indices_asked_for() -> None:
    assert [g.index for g in discover("simulated", gpu_indices=[3]).gpus] == [3]


# -- specs --------------------------------------------------------------------------------------------


def test_open_spec_round_trips_a_simulated_gpu_and_its_limit(tmp_path: Path) -> None:
    (gpu,) = simulated_gpus(1, persist_dir=tmp_path / "sims")
    gpu.set_power_limit_w(175.0)
    spec = json.loads(json.dumps(gpu.spec()))  # as the journal stores it
    reopened = open_spec(spec)
    assert isinstance(reopened, SimulatedGPU)
    assert reopened is not gpu
    assert reopened.spec() == gpu.spec()
    assert reopened.power_limit_w() == 175.0
    reopened.set_power_limit_w(300.0)  # what the guard's recovery does in another process
    assert open_spec(spec).power_limit_w() == 300.0


def test_open_spec_keeps_a_custom_models_limit_range(tmp_path: Path) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text("power_limit,time,power\n150,1.5,120\n250,1.0,200\n")
    (gpu,) = simulated_gpus(1, power_model=csv)
    reopened = open_spec(gpu.spec())
    rng = reopened.power_limit_range()
    assert (rng.min_w, rng.max_w) == (150.0, 250.0)
    with pytest.raises(UsageError):
        reopened.set_power_limit_w(300.0)


def test_open_spec_without_a_state_file_opens_a_fresh_gpu() -> None:
    gpu = SimulatedGPU(1, PowerModel.default())
    reopened = open_spec(gpu.spec())
    assert reopened.index == 1
    assert reopened.spec() == gpu.spec()


def test_open_spec_reopens_an_nvml_gpu_by_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu(), FakeGpu(max_limit_w=350.0, default_limit_w=350.0)]).install(monkeypatch)
    gpu = discover("nvml").gpus[1]
    reopened = open_spec(json.loads(json.dumps(gpu.spec())))
    assert reopened.spec() == gpu.spec()
    assert reopened.power_limit_range().max_w == 350.0


def test_open_spec_of_an_unknown_backend_is_a_device_error() -> None:
    with pytest.raises(DeviceError, match="unknown backend 'tpu'"):
        open_spec({"backend": "tpu", "index": 0})
