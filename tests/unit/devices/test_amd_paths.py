"""Every path NVIDIA GPUs take, taken by AMD GPUs (backend amdsmi) on the fake amdsmi binding, in this
process: discovery ("auto" after NVML), `wattwise devices`, the settings guard, power-limit tuning in the
Lightning callback and the Accelerate plugin, the acceptance checks and the node agent (those that start
processes: tests/integration/devices/test_amd_commands.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from torch import nn

import accelerate_energy
from accelerate_energy import EnergyPlugin
from lightning_energy import EnergyCallback
from tests.support.clock import VirtualClock
from tests.support.fake_amdsmi import AmdSmiDevPerfLevel, FakeAmdSmi, forget_process_state, mi300
from tests.support.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakeNvml
from wattwise.agent.agent import Agent
from wattwise.agent.config import AgentConfig
from wattwise.agent.journal import AgentJournal
from wattwise.agent.leases import Holder
from wattwise.cli.main import main
from wattwise.devices import discover, open_spec
from wattwise.settings.guard import SettingsGuard
from wattwise.settings.journal import journal_dir
from wattwise.tools.acceptance import PASSED, SKIPPED, run_checks

STEP_S = 0.01
#: Tuning over 500, 400 and 300 W: one step untouched, then per limit one warm-up and two measured steps.
TUNE = [
    "power_limit.wait_steps=1",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.step_w=100",
    "power_limit.min_profile_s=0",
    "monitor.sample_power=false",
    "monitor.sync_cuda=false",
]
TUNING_STEPS = 1 + 3 * (1 + 2)


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, real_auto_backend: None) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    forget_process_state(monkeypatch)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def no_nvidia(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND).install(monkeypatch)


# -- discovery and the command line ----------------------------------------------------------------


def test_auto_takes_the_amd_gpus_when_nvml_finds_none(monkeypatch: pytest.MonkeyPatch, no_nvidia: None) -> None:
    FakeAmdSmi([mi300(), mi300()]).install(monkeypatch)
    found = discover("auto")
    assert [(g.backend, g.index, g.name) for g in found.gpus] == [
        ("amdsmi", 0, "AMD Instinct MI300X"),
        ("amdsmi", 1, "AMD Instinct MI300X"),
    ]
    assert [n.split(":")[0] for n in found.notes] == ["nvml"]  # why NVML was passed over
    assert found.cpus == []


def test_auto_takes_nvidia_gpus_before_amd_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)
    fake = FakeAmdSmi([mi300()]).install(monkeypatch)
    assert [g.backend for g in discover("auto").gpus] == ["nvml"]
    assert fake.init_calls == 0  # amdsmi not even opened


def test_amdsmi_asked_for_by_name_or_by_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)  # an NVIDIA GPU too: the name wins over "auto"
    FakeAmdSmi([mi300(), mi300()]).install(monkeypatch)
    assert [g.backend for g in discover("amdsmi", gpu_indices=[1]).gpus] == ["amdsmi"]
    monkeypatch.setenv("WATTWISE_BACKEND", "amdsmi")
    assert [g.index for g in discover("auto").gpus] == [0, 1]


def test_a_spec_reopens_through_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = [mi300(), mi300()]
    FakeAmdSmi(fakes).install(monkeypatch)
    gpu = discover("amdsmi", gpu_indices=[1]).gpus[0]
    reopened = open_spec(json.loads(json.dumps(gpu.spec())))
    assert (reopened.backend, reopened.index, reopened.spec()["uuid"]) == ("amdsmi", 1, fakes[1].uuid)


def test_devices_lists_the_amd_gpus(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    FakeAmdSmi([mi300(name="AMD Instinct MI250X")]).install(monkeypatch)
    assert main(["devices", "--backend", "amdsmi"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "gpu0: AMD Instinct MI250X (amdsmi), power limit 500 W (range 300-500 W)"


def test_devices_backend_amdsmi_without_amd_gpus_is_one_line_and_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    FakeAmdSmi([]).install(monkeypatch)
    assert main(["devices", "--backend", "amdsmi"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("wattwise devices: error: amdsmi unavailable: amdsmi found no AMD GPU visible")
    assert "--backend is amdsmi" in err[0]


# -- the settings guard ----------------------------------------------------------------------------


def test_the_guard_restores_an_amd_power_cap_and_clock_range(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = mi300()
    FakeAmdSmi([fake_gpu]).install(monkeypatch)
    (gpu,) = discover("amdsmi").gpus
    with SettingsGuard() as guard:
        guard.set_power_limit(gpu, 350.0)
        guard.lock_sm_clocks(gpu, 1300, 1300)
        assert fake_gpu.cap_uw == 350_000_000 and fake_gpu.gfx_range_mhz == (1300, 1300)
        assert len(list(journal_dir().glob("*.json"))) == 1  # the originals are on disk before the change
    assert fake_gpu.cap_uw == 500_000_000
    assert (fake_gpu.gfx_range_mhz, fake_gpu.perf_level) == ((500, 2100), AmdSmiDevPerfLevel.AUTO)


# -- tuning in both adapters -----------------------------------------------------------------------


class ClockedModule(pl.LightningModule):
    """A tiny model whose every step lasts STEP_S on the fake GPU's clock."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.clock = clock

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.clock.sleep(STEP_S)
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        torch.manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
        return torch.utils.data.DataLoader(data, batch_size=4)


def test_lightning_tunes_the_amd_power_cap_restores_it_and_the_report_names_the_gpu(
    monkeypatch: pytest.MonkeyPatch, clock: VirtualClock, tmp_path: Path
) -> None:
    fake_gpu = mi300()
    FakeAmdSmi([fake_gpu], clock=clock).install(monkeypatch)
    cb = EnergyCallback(
        mode="tune", selector="energy", backend="amdsmi", output_dir=str(tmp_path / "run"), overrides=TUNE
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=TUNING_STEPS + 4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[cb],
        default_root_dir=str(tmp_path),
    )
    trainer.fit(ClockedModule(clock))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    tuned = summary["power_limit"]
    assert [e["power_limit_w"] for e in tuned["profile"]] == [500, 400, 300]
    # Energy per step is the capped draw (450, 400, 300 W) times STEP_S, read from the AMD counter.
    assert [e["energy_j"] for e in tuned["profile"]] == pytest.approx([4.5, 4.0, 3.0], rel=1e-3)
    assert tuned["chosen_power_limit_w"] == 300
    assert summary["simulated"] is False
    assert fake_gpu.cap_uw == 500_000_000  # restored at the end of fit
    # The report's device line names the AMD GPU and how it was measured.
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "report")]) == 0
    statement = (tmp_path / "report" / "energy_statement.md").read_text()
    assert "with 1x AMD Instinct MI300X (device rank0/gpu0)" in statement and "measured with amdsmi" in statement


def test_lightning_caps_the_amd_gpu_during_fit_and_measures_it(
    monkeypatch: pytest.MonkeyPatch, clock: VirtualClock, tmp_path: Path
) -> None:
    fake_gpu = mi300()
    FakeAmdSmi([fake_gpu], clock=clock).install(monkeypatch)
    seen_w: list[float] = []

    class Spy(pl.Callback):
        def on_train_batch_end(self, *args: object) -> None:
            seen_w.append(fake_gpu.cap_uw / 1e6)

    cb = EnergyCallback(
        mode="cap",
        cap_w=350.0,
        backend="amdsmi",
        output_dir=str(tmp_path / "run"),
        overrides=["monitor.sample_power=false", "monitor.sync_cuda=false"],
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=5,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[cb, Spy()],
        default_root_dir=str(tmp_path),
    )
    trainer.fit(ClockedModule(clock))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert seen_w == [350.0] * 5 and fake_gpu.cap_uw == 500_000_000
    # Five steps of STEP_S at the capped 350 W, from the AMD counter.
    assert summary["energy_j"] == pytest.approx(5 * STEP_S * 350.0, rel=1e-3)


def test_accelerate_tunes_the_amd_power_cap_and_restores_it(
    monkeypatch: pytest.MonkeyPatch, clock: VirtualClock, tmp_path: Path
) -> None:
    for var in [v for v in os.environ if v.startswith("ACCELERATE_ENERGY")]:
        monkeypatch.delenv(var)
    fake_gpu = mi300()
    FakeAmdSmi([fake_gpu], clock=clock).install(monkeypatch)
    plugin = EnergyPlugin(
        enabled=True, mode="tune", selector="energy", backend="amdsmi", output_dir=str(tmp_path / "run"), overrides=TUNE
    )
    try:
        accelerator = accelerate_energy.attach(Accelerator(cpu=True), plugin)
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        rows = 4 * (TUNING_STEPS + 4)
        data = torch.utils.data.TensorDataset(torch.randn(rows, 4), torch.randn(rows, 1))
        loader = torch.utils.data.DataLoader(data, batch_size=4)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        caps_w: list[float] = []
        for x, y in loader:
            clock.sleep(STEP_S)
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
            caps_w.append(fake_gpu.cap_uw / 1e6)
        accelerator.end_training()
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
    tuned = json.loads((tmp_path / "run" / "summary.json").read_text())["power_limit"]
    assert [e["power_limit_w"] for e in tuned["profile"]] == [500, 400, 300]
    assert tuned["chosen_power_limit_w"] == 300 and caps_w[-1] == 300.0
    assert fake_gpu.cap_uw == 500_000_000  # restored at end_training


# -- the acceptance checks -------------------------------------------------------------------------


def test_acceptance_checks_an_amd_gpu_when_there_is_no_nvidia_one(
    monkeypatch: pytest.MonkeyPatch, no_nvidia: None, tmp_path: Path
) -> None:
    fake_gpu = mi300()
    FakeAmdSmi([fake_gpu]).install(monkeypatch)
    report = run_checks(tmp_path / "acc", only=["discovery", "power_limit"])
    got = {c["name"]: c for c in report["checks"]}
    assert report["gpu"]["describe"]["backend"] == "amdsmi"
    assert got["discovery"]["status"] == PASSED
    (gpu,) = got["discovery"]["figures"]["gpus"]
    assert (gpu["name"], gpu["power_limit_min_w"], gpu["power_limit_max_w"]) == ("AMD Instinct MI300X", 300.0, 500.0)
    assert gpu["sm_clocks_mhz"] == {"count": 3, "max": 2100, "min": 500}
    assert got["power_limit"]["status"] == PASSED
    assert (got["power_limit"]["figures"]["read_back_w"], got["power_limit"]["figures"]["restored_w"]) == (300.0, 500.0)
    assert fake_gpu.cap_uw == 500_000_000


def test_acceptance_without_any_gpu_skips_naming_both_libraries(
    monkeypatch: pytest.MonkeyPatch, no_nvidia: None, tmp_path: Path
) -> None:
    FakeAmdSmi([]).install(monkeypatch)
    report = run_checks(tmp_path / "acc", only=["discovery"])
    (check,) = report["checks"]
    assert check["status"] == SKIPPED and "nor AMD GPU through amdsmi" in check["reason"]
    assert report["gpu"] is None


# -- the node agent --------------------------------------------------------------------------------


def amd_agent(tmp_path: Path) -> Agent:
    """An agent serving the AMD GPUs, as `wattwise agent serve --backend amdsmi` builds it."""
    journal = AgentJournal(tmp_path / "agent-state")
    journal.prepare()
    return Agent(discover("amdsmi").gpus, "amdsmi", AgentConfig(), journal)


def test_the_agent_changes_amd_gpus_under_a_lease_and_restores_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_gpu = mi300()
    FakeAmdSmi([fake_gpu]).install(monkeypatch)
    holder = Holder(pid=101, uid=1000, job="bert", start_ticks=5)
    agent = amd_agent(tmp_path)
    assert agent.set_power_limit(0, holder, {1000}, 350.0)["power_limit_w"] == 350.0
    agent.lock_sm_clocks(0, holder, {1000}, 1300, 1300)
    assert (fake_gpu.cap_uw, fake_gpu.gfx_range_mhz) == (350_000_000, (1300, 1300))
    # The agent dies without restoring; the next one restores from its journal.
    lines = amd_agent(tmp_path).recover()
    assert lines == ["GPU 0: power limit 500 W, SM clocks unlocked"]
    assert (fake_gpu.cap_uw, fake_gpu.gfx_range_mhz) == (500_000_000, (500, 2100))
