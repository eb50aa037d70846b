"""Device backends come from one registry (name -> discover/open), and what differs between them is a
capability of the `Device`, never a check of its class outside `wattwise.devices`."""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import wattwise.devices
import wattwise.devices.rapl
from tests.support.clock import VirtualClock
from tests.support.fake_pynvml import FakeGpu, FakeNvml
from tests.support.paths import REPO_ROOT
from tests.support.powercap import FakePowercap
from wattwise.cli.main import build_parser
from wattwise.config import EnergyConfig, validate
from wattwise.devices import (
    Backend,
    Device,
    DeviceError,
    NotSupportedError,
    PowerLimitRange,
    SimulatedGPU,
    Wanted,
    backend_choices,
    discover,
    journalled_backends,
    name_job,
    open_spec,
    register,
    settings_identity,
    simulated_gpus,
)
from wattwise.devices import registry as device_registry
from wattwise.devices.agent import MAX_JOB_CHARS, AgentClient, AgentGPU
from wattwise.devices.base import DeviceDescription, DeviceSpec, PresetDescription
from wattwise.devices.simulated.presets import PRESETS
from wattwise.errors import ConfigError, UsageError
from wattwise.monitor import EnergyMonitor
from wattwise.settings.guard import SettingsGuard
from wattwise.settings.journal import JournalProblem, read_journal
from wattwise.tools.workload import emulate_step

PACKAGE = REPO_ROOT / "core" / "wattwise"
#: Where code above the device layer lives: none of it may test a device's class.
ABOVE_DEVICES = [
    PACKAGE,
    REPO_ROOT / "lightning_energy",
    REPO_ROOT / "accelerate_energy",
    REPO_ROOT / "benchmarks",
    REPO_ROOT / "examples",
]


class FakeTpu(Device):
    """A device of a backend registered by a test: a power limit it keeps in memory, and a release."""

    backend = "faketpu"

    def __init__(self, index: int, *, lease: str | None = None) -> None:
        self._index, self._lease = index, lease
        self.limit_w = 200.0
        self.released = 0

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        return "Fake TPU"

    def has_energy_counter(self) -> bool:
        return True

    def energy_j(self) -> float:
        return 0.0

    def power_w(self) -> float:
        return 50.0

    def power_limit_w(self) -> float:
        return self.limit_w

    def power_limit_range(self) -> PowerLimitRange:
        return PowerLimitRange(100.0, 200.0, 200.0)

    def set_power_limit_w(self, watts: float) -> None:
        self.limit_w = watts

    @property
    def settings_lease(self) -> str | None:
        return self._lease

    def release(self) -> None:
        self.released += 1
        self.limit_w = 200.0

    def spec(self) -> dict[str, Any]:
        return {"backend": "faketpu", "index": self._index}


def _fake_tpus(wanted: Wanted) -> list[Device]:
    return [FakeTpu(i) for i in (wanted.gpu_indices if wanted.gpu_indices is not None else [0, 1])]


def _open_fake_tpu(spec: dict[str, Any]) -> Device:
    return FakeTpu(int(spec["index"]))


pytestmark = pytest.mark.usefixtures("discovery_as_a_user_runs_it")


@contextlib.contextmanager
def registered(backend: Backend) -> Iterator[Backend]:
    """`backend` in the registry for the body of the `with`."""
    register(backend)
    try:
        yield backend
    finally:
        device_registry.unregister(backend.name)


@pytest.fixture
def fake_tpu() -> Iterator[Backend]:
    """A backend registered by the test, by name only (as "simulated" is)."""
    with registered(Backend("faketpu", _fake_tpus, _open_fake_tpu)) as backend:
        yield backend


# -- the registry ---------------------------------------------------------------------------------------


def test_the_backend_choices_are_auto_and_every_gpu_backend_in_registration_order() -> None:
    choices = backend_choices()
    assert choices[0] == "auto" and {"nvml", "simulated", "agent"} <= set(choices)
    assert choices[1:] == tuple(b.name for b in device_registry.backends("gpu"))
    assert "rapl" not in choices and "rapl" in device_registry.names()  # measured beside GPUs; reopened by spec


def test_a_registered_backend_is_a_choice_everywhere_and_gone_once_unregistered(
    fake_tpu: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "faketpu" in backend_choices()
    cfg = EnergyConfig()
    cfg.devices.backend = "faketpu"
    validate(cfg)  # the config accepts it
    assert build_parser().parse_args(["cap", "--watts", "150", "--backend", "faketpu", "--", "true"]).backend == (
        "faketpu"
    )
    monkeypatch.setenv("WATTWISE_BACKEND", "faketpu")
    assert [g.backend for g in discover("auto").gpus] == ["faketpu", "faketpu"]
    device_registry.unregister("faketpu")
    assert "faketpu" not in backend_choices()
    choices = re.escape(", ".join(backend_choices()))
    with pytest.raises(ConfigError, match=rf"devices.backend must be one of {choices} \(got 'faketpu'\)"):
        validate(cfg)
    with pytest.raises(ConfigError, match="WATTWISE_BACKEND must be one of"):
        discover("auto")


def test_a_registered_backend_is_discovered_by_name_and_reopened_from_its_spec(fake_tpu: Backend) -> None:
    found = discover("faketpu", gpu_indices=[3])
    assert [(g.backend, g.index) for g in found.gpus] == [("faketpu", 3)] and found.notes == []
    reopened = open_spec(json.loads(json.dumps(found.gpus[0].spec())))
    assert isinstance(reopened, FakeTpu) and reopened.index == 3


def test_auto_probes_a_registered_backend_after_nvml(bare_machine: None) -> None:
    with registered(Backend("faketpu", _fake_tpus, _open_fake_tpu, probe=True)):
        found = discover("auto")
        assert [g.backend for g in found.gpus] == ["faketpu", "faketpu"]
        assert found.notes[0].startswith("nvml: unavailable")  # NVML was tried first, and said why not
        assert not any(n.startswith("faketpu") for n in found.notes)


def test_auto_notes_each_unavailable_probed_backend_and_goes_on(bare_machine: None) -> None:
    def unavailable(wanted: Wanted) -> list[Device]:
        raise NotSupportedError("no TPU driver")

    with registered(Backend("faketpu", unavailable, _open_fake_tpu, probe=True)):
        found = discover("auto")
        assert found.gpus == [] and "faketpu: unavailable (no TPU driver)" in found.notes
        with pytest.raises(NotSupportedError, match=r"^no TPU driver$"):
            discover("faketpu")  # no `needs`: raised as the backend raised it


def test_a_backend_asked_for_by_name_says_what_it_needs() -> None:
    def unavailable(wanted: Wanted) -> list[Device]:
        raise NotSupportedError("libtpu.so not found")

    needed = Backend("faketpu", unavailable, _open_fake_tpu, title="TPU runtime", needs="a TPU and its runtime")
    with (
        registered(needed),
        pytest.raises(
            NotSupportedError,
            match=(
                r"^TPU runtime unavailable: libtpu.so not found; devices.backend is faketpu, which needs a TPU and its "
                r"runtime \(use auto"
            ),
        ),
    ):
        discover("faketpu")


def test_a_backend_that_claims_auto_is_taken_before_probing(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)  # a GPU is there, but the claim comes first
    with registered(Backend("faketpu", _fake_tpus, _open_fake_tpu, claim=lambda: "the TPU wants it")):
        found = discover("auto")
        assert [g.backend for g in found.gpus] == ["faketpu", "faketpu"] and found.notes == ["the TPU wants it"]


def test_a_backend_name_is_registered_once_and_auto_is_no_name(fake_tpu: Backend) -> None:
    with pytest.raises(ValueError, match="'faketpu' is already registered"):
        register(Backend("faketpu", _fake_tpus, _open_fake_tpu))
    with pytest.raises(ValueError, match="other than 'auto'"):
        register(Backend("auto", _fake_tpus, _open_fake_tpu))


def test_unknown_names_are_refused_naming_the_choices() -> None:
    choices = re.escape(", ".join(backend_choices()))
    with pytest.raises(UsageError, match=rf"^devices.backend must be one of {choices} \(got 'tpu'\)"):
        discover("tpu")
    with pytest.raises(DeviceError, match=r"unknown backend 'tpu' \(known backends: nvml, .*rapl"):
        open_spec({"backend": "tpu", "index": 0})
    with pytest.raises(SystemExit):
        build_parser().parse_args(["cap", "--watts", "150", "--backend", "tpu", "--", "true"])


# -- capabilities, per backend ----------------------------------------------------------------------------


def test_hardware_gpus_restore_their_own_settings_and_are_driven_by_real_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)
    tree = FakePowercap(tmp_path / "sys")
    tree.add_control_type("intel-rapl")
    tree.add_zone("intel-rapl:0", "package-0")
    monkeypatch.setattr(
        wattwise.devices.rapl, "rapl_domains", functools.partial(wattwise.devices.rapl.rapl_domains, tree.root)
    )
    found = discover("nvml", include_cpu=True)
    assert [d.backend for d in found.all] == ["nvml", "rapl"]
    for device in found.all:
        assert device.settings_lease is None and device.simulation is None
        name_job([device], "bert")  # nobody shows a holder: nothing to name
        assert not hasattr(device, "job")
        with pytest.raises(NotSupportedError, match="no settings lease to release"):
            device.release()


def test_a_simulated_gpu_is_its_own_simulation_and_restores_its_own_settings() -> None:
    (gpu,) = simulated_gpus(1)
    assert gpu.simulation is gpu and gpu.settings_lease is None


def test_an_agent_gpu_is_restored_by_the_agent_under_a_lease_per_socket_and_gpu() -> None:
    local = simulated_gpus(2)[1]
    gpu = AgentGPU(local, AgentClient("/run/test/agent.sock"))
    assert gpu.settings_lease == "/run/test/agent.sock#1"
    assert gpu.simulation is local  # emulated work drives the local view, which shares the agent's settings
    name_job([gpu], "bert\nnightly" * 20)
    assert gpu.job.startswith("bert?nightly") and len(gpu.job) == MAX_JOB_CHARS


def test_an_agent_gpu_over_real_hardware_has_no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)
    gpu = AgentGPU(discover("nvml").gpus[0], AgentClient("/run/test/agent.sock"))
    assert gpu.simulation is None and gpu.settings_lease == "/run/test/agent.sock#0"


def test_the_guard_asks_the_device_whether_someone_else_restores_it(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    leased, own = FakeTpu(0, lease="tpu-agent#0"), FakeTpu(1)
    guard = SettingsGuard(journal, recover=False)
    try:
        guard.set_power_limit(leased, 150.0)
        assert not list(journal.glob("*.json"))  # someone else restores it: nothing journalled here
        guard.set_power_limit(own, 150.0)
        (written,) = journal.glob("*.json")
        assert [c["device"]["index"] for c in json.loads(written.read_text())["changes"]] == [1]
        result = guard.restore_all()
        assert (leased.released, own.released) == (1, 0)  # given back, or set back to its original
        assert (leased.limit_w, own.limit_w) == (200.0, 200.0) and len(result.restored) == 2
    finally:
        guard.close()


def test_the_guard_locks_and_journals_the_backends_that_register_an_identity(tmp_path: Path) -> None:
    assert {"nvml", "simulated"} <= set(journalled_backends())
    assert not {"agent", "rapl"} & set(journalled_backends())  # the agent restores; RAPL has no settings
    journal, kept = tmp_path / "journal", tmp_path / "kept.json"
    with registered(Backend("faketpu", _fake_tpus, _open_fake_tpu, identity=lambda spec: f"tpu{spec['index']}")):
        assert "faketpu" in journalled_backends()
        assert settings_identity({"backend": "faketpu", "index": 2}) == "tpu2"
        with SettingsGuard(journal, recover=False) as guard:
            guard.set_power_limit(FakeTpu(0), 150.0)
            assert [p.name.startswith("device-faketpu-gpu0-") for p in journal.glob("device-*.lock")] == [True]
            (written,) = journal.glob("*.json")
            kept.write_bytes(written.read_bytes())
        assert [c["device"]["backend"] for c in read_journal(kept).changes] == ["faketpu"]
    assert settings_identity({"backend": "faketpu", "index": 2}) is None
    with pytest.raises(JournalProblem, match="names no GPU of backend nvml"):
        read_journal(kept)  # recovery refuses a journal naming a backend it cannot restore


def test_the_monitor_times_an_agent_gpu_by_its_simulations_clock_and_reads_wrapping_counters_often(
    tmp_path: Path,
) -> None:
    clock = VirtualClock()
    sim = SimulatedGPU(0, clock=clock, sleep=clock.sleep)
    monitor = EnergyMonitor([AgentGPU(sim, AgentClient("/run/test/agent.sock"))], sample_power=False)
    try:
        monitor.begin_window("w")
        clock.sleep(2.5)
        assert monitor.end_window("w").time_s == 2.5  # the simulated GPU's virtual clock, not the wall's
        assert monitor.sampler is None  # no wrapping counter, a counter on every device: nothing to sample
    finally:
        monitor.close()
    tree = FakePowercap(tmp_path / "sys")
    tree.add_control_type("intel-rapl")
    tree.add_zone("intel-rapl:0", "package-0")
    (domain,) = wattwise.devices.rapl.rapl_domains(tree.root)
    assert domain.max_read_interval_s is not None and domain.max_read_interval_s > 60
    assert sim.max_read_interval_s is None
    monitor = EnergyMonitor([domain], sample_power=False, sample_interval_s=1e6)
    try:
        assert monitor.sampler is not None and monitor.sampler.interval_s <= domain.max_read_interval_s / 2
    finally:
        monitor.close()


def test_emulated_work_drives_the_simulation_behind_any_device() -> None:
    (sim,) = simulated_gpus(1, base_step_time_s=0.01)

    class Wrapped(FakeTpu):
        @property
        def simulation(self) -> Any:
            return sim

    emulate_step([Wrapped(0)], lambda: None)
    assert sim.driven  # the wrapped device's simulated GPU ran the step


# -- the source: no class checks above the devices, no import of the agent below it -------------------


def _device_classes() -> set[str]:
    """The classes `wattwise.devices` derives from `Device`, however indirectly (each backend's devices)."""
    bases = {}
    for path in (PACKAGE / "devices").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = {name for base in node.bases for name in _named(base)}
    devices = {"Device"}
    while grown := {name for name, of in bases.items() if of & devices} - devices:
        devices |= grown
    return devices - {"Device"}


def _named(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _named(element)]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return [node.id] if isinstance(node, ast.Name) else []


def test_no_code_above_the_devices_checks_a_device_class() -> None:
    device_classes = _device_classes()
    assert {"SimulatedGPU", "NvmlGPU", "RaplDomain", "AgentGPU"} <= device_classes
    found = []
    for root in ABOVE_DEVICES:
        for path in root.rglob("*.py"):
            if path.is_relative_to(PACKAGE / "devices"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("isinstance", "issubclass")
                    and len(node.args) == 2
                ):
                    checked = set(_named(node.args[1])) & device_classes
                    if checked:
                        found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {', '.join(sorted(checked))}")
    assert found == [], "ask the Device for a capability instead: " + "; ".join(found)


def test_the_devices_never_import_the_node_agent() -> None:
    found = []
    for path in (PACKAGE / "devices").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found += [
                    f"{path.name}:{node.lineno} {m}"
                    for m in modules
                    if m == "wattwise.agent" or m.startswith("wattwise.agent.")
                ]
    assert found == []  # tests/integration/devices/test_device_imports.py checks what importing loads


def test_every_backends_spec_and_description_hold_only_the_keys_their_typed_dicts_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`DeviceSpec` and `DeviceDescription` name every key a backend writes: a reader can rely on them."""
    FakeNvml([FakeGpu()]).install(monkeypatch)
    tree = FakePowercap(tmp_path / "sys")
    tree.add_control_type("intel-rapl")
    tree.add_zone("intel-rapl:0", "package-0")
    monkeypatch.setattr(
        wattwise.devices.rapl, "rapl_domains", functools.partial(wattwise.devices.rapl.rapl_domains, tree.root)
    )
    (simulated,) = simulated_gpus(1, persist_dir=tmp_path / "sim")
    devices = [*discover("nvml", include_cpu=True).all, simulated, AgentGPU(simulated, AgentClient(tmp_path / "s"))]
    spec_keys = DeviceSpec.__required_keys__ | DeviceSpec.__optional_keys__
    description_keys = DeviceDescription.__required_keys__ | DeviceDescription.__optional_keys__
    for device in devices:
        spec, description = device.spec(), device.describe()
        assert DeviceSpec.__required_keys__ <= set(spec) <= spec_keys, device.backend
        assert DeviceDescription.__required_keys__ <= set(description) <= description_keys, device.backend
    assert {d.backend for d in devices} == {"nvml", "rapl", "simulated", "agent"}
    assert [set(p.describe()) == PresetDescription.__required_keys__ for p in PRESETS.values()] == [True] * len(PRESETS)
