"""EnergyCallback on Lightning's own `BoringModel`: what a step is, what a step costs, and the life cycle
(validation, short runs, resumes, repeated fits, reuse, checkpoints) as the callback's docstring states it.

Each training batch keeps a simulated GPU busy for its modelled step time on a virtual clock, so every
figure is exact: a step at limit W takes `BASE_S * time_factor(W)` and uses its busy power meanwhile.
"""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader

import wattwise.run.measurement
from lightning_energy import EnergyCallback
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.power_limit import profile_limits_w, select_power_limit
from wattwise.profile import ProfileEntry
from wattwise.record.files import read_run_dir
from wattwise.record.summary import format_summary
from wattwise.run import EnergyPluginWarning

BASE_S = 0.01
MODEL = PowerModel.default()
#: Small tuning: limits 300, 200 and 100 W, one warm-up and two profiled steps each.
QUICK_TUNE = [
    "power_limit.wait_steps=0",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.step_w=100",
]
NO_SAMPLER = "monitor.sample_power=false"


def step_time_s(limit_w: float) -> float:
    return BASE_S * MODEL.at_limit(limit_w)[0]


def step_energy_j(limit_w: float) -> float:
    time_factor, busy_w = MODEL.at_limit(limit_w)
    return BASE_S * time_factor * busy_w


class GPUBoringModel(BoringModel):
    """`BoringModel` whose every training batch keeps the simulated GPU busy for its modelled step time."""

    def __init__(self, gpu: SimulatedGPU, batches: int = 64) -> None:
        super().__init__()
        self.gpu = gpu
        self.batches = batches

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.gpu.run_step()
        return super().training_step(batch, batch_idx)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, self.batches))


class TwoOptimizers(GPUBoringModel):
    """Manual optimization: each batch steps two optimizers."""

    def __init__(self, gpu: SimulatedGPU, batches: int = 64) -> None:
        super().__init__(gpu, batches)
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        self.gpu.run_step()
        for opt in self.optimizers():
            loss = self.step(batch)
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        return [torch.optim.SGD(self.layer.parameters(), lr=0.1), torch.optim.SGD(self.layer.parameters(), lr=0.1)]


class RecordingGPU(SimulatedGPU):
    """Counts its energy-counter reads and records each power-limit change with the batch it happened in."""

    def __init__(self, clock: Any) -> None:
        super().__init__(0, base_step_time_s=BASE_S, clock=clock, sleep=clock.sleep)
        self.reads = 0
        self.batch_idx: int | None = None
        self.changes: list[tuple[int | None, float]] = []

    def energy_j(self) -> float:
        self.reads += 1
        return super().energy_j()

    def set_power_limit_w(self, watts: float) -> None:
        self.changes.append((self.batch_idx, watts))
        super().set_power_limit_w(watts)


class BatchTracker(pl.Callback):
    """Tells the GPU which training batch runs (before EnergyCallback's hook: it comes first in the list)."""

    def __init__(self, gpu: RecordingGPU) -> None:
        self.gpu = gpu

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.gpu.batch_idx = batch_idx

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.gpu.batch_idx = None


def make_gpu(clock: Any) -> RecordingGPU:
    return RecordingGPU(clock)


def make_trainer(tmp_path: Path, callbacks: list[pl.Callback], **kw: Any) -> pl.Trainer:
    args: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": -1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "limit_val_batches": 0,
        "default_root_dir": str(tmp_path),
        "callbacks": callbacks,
    }
    args.update(kw)
    return pl.Trainer(**args)


def energy_callback(gpu: SimulatedGPU, out: Path, overrides: Sequence[str] = (), **kw: Any) -> EnergyCallback:
    return EnergyCallback(devices=[gpu], output_dir=str(out), overrides=[NO_SAMPLER, *overrides], **kw)


def read_summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def plugin_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]


# -- 1. a step is an optimizer step ------------------------------------------------------------------------
def test_with_gradient_accumulation_a_step_is_an_optimizer_step(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    cb = energy_callback(gpu, tmp_path / "run")
    trainer = make_trainer(tmp_path, [cb], max_steps=3, accumulate_grad_batches=4)
    trainer.fit(GPUBoringModel(gpu))
    summary = read_summary(tmp_path / "run")
    assert trainer.global_step == 3
    assert summary["steps"] == 3
    assert summary["energy_j"] == pytest.approx(12 * step_energy_j(300.0), rel=1e-9)  # 12 batches ran


def test_with_gradient_accumulation_limits_change_only_where_an_optimizer_step_begins(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    cb = energy_callback(gpu, tmp_path / "run", QUICK_TUNE, mode="tune")
    trainer = make_trainer(tmp_path, [BatchTracker(gpu), cb], max_steps=12, accumulate_grad_batches=4)
    trainer.fit(GPUBoringModel(gpu))
    summary = read_summary(tmp_path / "run")
    during = [(idx, w) for idx, w in gpu.changes if idx is not None]
    chosen = summary["power_limit"]["chosen_power_limit_w"]
    assert [w for _, w in during] == [300.0, 200.0, 100.0, chosen]
    # Steps 0, 3, 6 and 9 begin each limit; each optimizer step is 4 batches.
    assert [idx for idx, _ in during] == [0, 12, 24, 36]
    assert gpu.changes[-1] == (None, 300.0)  # restored after training
    # A profiled step is an optimizer step: the time and energy of its 4 batches.
    for entry in summary["power_limit"]["profile"]:
        w = entry["power_limit_w"]
        assert entry["time_s"] == pytest.approx(4 * step_time_s(w), rel=1e-9)
        assert entry["energy_j"] == pytest.approx(4 * step_energy_j(w), rel=1e-9)


def test_manual_optimization_with_two_optimizers_counts_every_optimizer_step(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    cb = energy_callback(gpu, tmp_path / "run")
    trainer = make_trainer(tmp_path, [cb], max_epochs=1, limit_train_batches=6)
    trainer.fit(TwoOptimizers(gpu))
    summary = read_summary(tmp_path / "run")
    assert trainer.global_step == 12
    assert summary["steps"] == trainer.global_step


# -- 2. a step that neither logs nor profiles is free ------------------------------------------------------
def test_steps_between_logging_points_read_no_counter_and_sync_nothing(tmp_path, virtual_clock, monkeypatch):
    syncs: list[None] = []
    monkeypatch.setattr(wattwise.run.measurement, "cuda_sync", lambda: syncs.append(None))
    gpu = make_gpu(virtual_clock)
    cb = energy_callback(gpu, tmp_path / "run", ["monitor.sync_cuda=true"])
    trainer = make_trainer(tmp_path, [cb], max_steps=200, log_every_n_steps=50)
    trainer.fit(GPUBoringModel(gpu, batches=256))
    summary = read_summary(tmp_path / "run")
    assert summary["steps"] == 200
    # A read or a sync per step would be 200 of each; per logging point there are a few.
    assert 0 < len(syncs) <= 200 // 50 + 10
    assert 0 < gpu.reads <= 2 * (200 // 50) + 10
    with open(tmp_path / "run" / "windows.csv") as fh:
        names = [row["window_name"] for row in csv.DictReader(fh)]
    assert names.count("steps") == 200 // 50
    assert set(names) <= {"fit", "epoch", "steps"}


class EpochMetrics(pl.loggers.Logger):
    """A logger that keeps every batch of metrics it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "kept"

    @property
    def version(self) -> str:
        return "0"

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.logged.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


def test_short_epochs_read_the_counter_once_at_each_boundary_and_log_each_epoch(tmp_path, virtual_clock):
    # 8 epochs of 8 steps, no logging point inside the fit: the fit's start and end, and one read where
    # each epoch ends and the next begins (it was two: a real GPU's read costs milliseconds).
    gpu = make_gpu(virtual_clock)
    logger = EpochMetrics()
    cb = energy_callback(gpu, tmp_path / "run", log_every_n_steps=1000)
    trainer = make_trainer(tmp_path, [cb], max_steps=64, logger=logger)
    trainer.fit(GPUBoringModel(gpu, batches=8))
    summary = read_summary(tmp_path / "run")
    assert [e["epoch"] for e in summary["epochs"]] == list(range(8))
    assert all(e["time_s"] == pytest.approx(8 * step_time_s(300.0), rel=1e-9) for e in summary["epochs"])
    assert gpu.reads <= 8 + 3
    epochs = [(step, m["energy/epoch_j"]) for step, m in logger.logged if "energy/epoch_j" in m]
    assert epochs == [(8 * (i + 1), pytest.approx(e["energy_j"])) for i, e in enumerate(summary["epochs"])]
    # What a ModelCheckpoint or EarlyStopping `monitor` reads: the last epoch's figure.
    assert float(trainer.callback_metrics["energy/epoch_j"]) == pytest.approx(summary["epochs"][-1]["energy_j"])


def test_a_run_writes_under_the_trainers_log_dir_unless_output_dir_is_set(tmp_path, virtual_clock, monkeypatch):
    monkeypatch.chdir(tmp_path)
    gpu = make_gpu(virtual_clock)
    logger = pl.loggers.CSVLogger(tmp_path / "logs")
    cb = EnergyCallback(devices=[gpu], overrides=[NO_SAMPLER])
    make_trainer(tmp_path, [cb], max_steps=4, logger=logger).fit(GPUBoringModel(gpu, batches=8))
    folder = tmp_path / "logs" / "lightning_logs" / "version_0" / "wattwise"
    summary = read_summary(folder)  # beside the logger's metrics.csv, where a Lightning user looks
    assert summary["steps"] == 4 and not (tmp_path / "wattwise_runs").exists()
    assert f"written under the Trainer's log_dir, in {folder}" in " ".join(summary["notes"])
    # output_dir set: there, whatever the logger.
    cb = EnergyCallback(devices=[gpu], output_dir=str(tmp_path / "mine"), overrides=[NO_SAMPLER])
    make_trainer(tmp_path, [cb], max_steps=4, logger=pl.loggers.CSVLogger(tmp_path / "logs")).fit(
        GPUBoringModel(gpu, batches=8)
    )
    assert read_summary(tmp_path / "mine")["steps"] == 4
    assert not any("log_dir" in n for n in read_summary(tmp_path / "mine")["notes"])
    assert not (tmp_path / "logs" / "lightning_logs" / "version_1" / "wattwise").exists()


# -- 3. validation is not training -------------------------------------------------------------------------
VAL_S = 0.05


class SlowValidation(GPUBoringModel):
    """Each validation batch takes VAL_S on the virtual clock, with the GPU idle."""

    def __init__(self, gpu: SimulatedGPU, batches: int = 64) -> None:
        super().__init__(gpu, batches)
        self.val_batches_run = 0
        self.validations: list[bool] = []  # one per validation run: was it the sanity check?

    def on_validation_start(self) -> None:
        self.validations.append(self.trainer.sanity_checking)

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        self.gpu.sleep(VAL_S)
        self.val_batches_run += 1
        return super().validation_step(batch, batch_idx)


def test_validation_is_reported_apart_and_kept_out_of_power_limit_profiles(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    cb = energy_callback(gpu, tmp_path / "run", QUICK_TUNE, mode="tune")
    model = SlowValidation(gpu, batches=16)
    # Validation every 4 steps: the 100 W profile (steps 7 and 8) spans the one after step 8.
    trainer = make_trainer(
        tmp_path, [cb], max_steps=12, val_check_interval=0.25, limit_val_batches=2, num_sanity_val_steps=2
    )
    trainer.fit(model)
    summary = read_summary(tmp_path / "run")
    assert model.validations[0] is True and len(model.validations) >= 3
    validation = summary["non_training"]["validation"]
    assert validation["count"] == len(model.validations)  # the sanity check included, as documented
    assert validation["time_s"] == pytest.approx(model.val_batches_run * VAL_S, rel=1e-9)
    assert validation["energy_j"] == pytest.approx(validation["time_s"] * MODEL.idle_power_w, rel=1e-9)
    profile = summary["power_limit"]["profile"]
    assert [e["power_limit_w"] for e in profile] == [300.0, 200.0, 100.0]
    for entry in profile:
        assert entry["time_s"] == pytest.approx(step_time_s(entry["power_limit_w"]), rel=1e-9)
        assert entry["energy_j"] == pytest.approx(step_energy_j(entry["power_limit_w"]), rel=1e-9)
    # The fit itself includes validation.
    train_s = sum(step_time_s(w) for w in gpu_limits_per_step(summary, 12))
    assert summary["time_s"] == pytest.approx(train_s + validation["time_s"], rel=1e-9)


def test_training_batches_after_a_validation_inside_an_accumulation_step_are_training(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    cb = energy_callback(gpu, tmp_path / "run")
    model = SlowValidation(gpu, batches=24)
    # Validation every 6 batches, an optimizer step every 4: after batches 6 and 18 a step goes on.
    trainer = make_trainer(
        tmp_path,
        [cb],
        max_epochs=1,
        accumulate_grad_batches=4,
        val_check_interval=6,
        limit_val_batches=2,
        num_sanity_val_steps=0,
    )
    trainer.fit(model)
    summary = read_summary(tmp_path / "run")
    assert summary["steps"] == trainer.global_step == 6
    validation = summary["non_training"]["validation"]
    assert validation["count"] == len(model.validations) == 4
    assert validation["time_s"] == pytest.approx(model.val_batches_run * VAL_S, rel=1e-9)
    assert summary["time_s"] - validation["time_s"] == pytest.approx(24 * step_time_s(300.0), rel=1e-9)


def gpu_limits_per_step(summary: dict[str, Any], steps: int) -> list[float]:
    """The limit each step of a QUICK_TUNE run ran at: 3 steps per limit, then the chosen one."""
    limits = [300.0] * 3 + [200.0] * 3 + [100.0] * 3
    chosen = summary["power_limit"]["chosen_power_limit_w"]
    return (limits + [chosen] * steps)[:steps]


# -- 4. tuning that cannot finish in the run ---------------------------------------------------------------
def test_tuning_profiles_across_short_epochs_and_finishes(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    cb = energy_callback(gpu, tmp_path / "run", mode="tune")  # default profile: 9 limits, 7 steps each
    trainer = make_trainer(tmp_path, [cb], max_epochs=40, limit_train_batches=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(GPUBoringModel(gpu))
    summary = read_summary(tmp_path / "run")
    assert summary["steps"] == 200 and len(summary["epochs"]) == 40
    tuning = summary["power_limit"]["tuning"]
    limits = profile_limits_w(100.0, 300.0, 25.0)
    assert tuning["finished"] is True and tuning["reason"] is None
    # From the highest down to two limits past the cheapest (whose costs rise from there): the sweep stops.
    cheapest = limits.index(summary["power_limit"]["chosen_power_limit_w"])
    assert tuning["profiled"] == limits[: cheapest + 3]
    for entry in summary["power_limit"]["profile"]:  # windows of 5 steps span two epochs
        assert entry["time_s"] == pytest.approx(step_time_s(entry["power_limit_w"]), rel=1e-9)
    assert plugin_warnings(caught) == []


@pytest.mark.parametrize(("max_steps", "profiled"), [(20, [300.0, 275.0]), (5, [])], ids=["two-limits", "none"])
def test_tuning_that_cannot_finish_says_so_once_and_keeps_a_measured_limit(
    tmp_path, virtual_clock, max_steps, profiled
):
    gpu = make_gpu(virtual_clock)
    cb = energy_callback(gpu, tmp_path / "run", mode="tune")  # needs 2 + 9 * 7 = 65 steps
    trainer = make_trainer(tmp_path, [cb], max_steps=max_steps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(GPUBoringModel(gpu))
    summary = read_summary(tmp_path / "run")
    ours = plugin_warnings(caught)
    assert len(ours) == 1 and "tuning may not finish" in ours[0]
    assert any("tuning may not finish" in note for note in summary["notes"])
    pl_summary = summary["power_limit"]
    tuning = pl_summary["tuning"]
    assert tuning["finished"] is False and tuning["reason"]
    assert tuning["profiled"] == profiled
    applied = {e["value"] for e in summary["settings_timeline"]}
    if profiled:
        entries = [ProfileEntry(**e) for e in pl_summary["profile"]]
        best = select_power_limit(entries, "cost", eta=0.5, max_power_w=300.0).power_limit_w
        assert pl_summary["chosen_power_limit_w"] == best
        assert applied <= set(profiled)  # never a limit it did not measure
        assert summary["settings_timeline"][-1]["value"] == best
    else:
        assert pl_summary["chosen_power_limit_w"] is None
        assert applied <= {300.0}  # the GPU stays at its maximum limit


# -- 5. resuming from a mid-epoch checkpoint ---------------------------------------------------------------
def checkpoint_at(tmp_path: Path, step: int) -> Path:
    [path] = (tmp_path / "ckpt").glob(f"*step={step}.ckpt")
    return path


def saving_every(tmp_path: Path, steps: int) -> ModelCheckpoint:
    return ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=steps, save_top_k=-1)


def test_resume_mid_epoch_records_the_resumed_epoch_whole(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    cb1 = energy_callback(gpu, tmp_path / "run1")
    make_trainer(tmp_path, [cb1, saving_every(tmp_path, 20)], max_steps=30, enable_checkpointing=True).fit(
        GPUBoringModel(gpu)
    )

    gpu2 = make_gpu(virtual_clock)
    cb2 = energy_callback(gpu2, tmp_path / "run2")
    trainer = make_trainer(tmp_path, [cb2], max_steps=100)
    trainer.fit(GPUBoringModel(gpu2), ckpt_path=str(checkpoint_at(tmp_path, 20)))
    summary = read_summary(tmp_path / "run2")
    assert summary["steps"] == 100
    assert summary["resumed_energy_j"] == pytest.approx(20 * step_energy_j(300.0), rel=1e-9)
    assert summary["energy_j"] == pytest.approx(100 * step_energy_j(300.0), rel=1e-9)
    epochs = [e["epoch"] for e in summary["epochs"]]
    assert epochs.count(0) == 1 and epochs[0] == 0
    epoch0 = summary["epochs"][0]  # its 20 steps before the checkpoint and its 44 after
    assert epoch0["time_s"] == pytest.approx(64 * step_time_s(300.0), rel=1e-9)
    assert epoch0["energy_j"] == pytest.approx(64 * step_energy_j(300.0), rel=1e-9)


def test_resume_from_a_checkpoint_at_the_last_batch_of_an_epoch_keeps_the_epochs_apart(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    cb1 = energy_callback(gpu, tmp_path / "run1")
    make_trainer(tmp_path, [cb1, saving_every(tmp_path, 64)], max_steps=70, enable_checkpointing=True).fit(
        GPUBoringModel(gpu)
    )  # 64 batches an epoch

    gpu2 = make_gpu(virtual_clock)
    cb2 = energy_callback(gpu2, tmp_path / "run2")
    make_trainer(tmp_path, [cb2], max_steps=100).fit(GPUBoringModel(gpu2), ckpt_path=str(checkpoint_at(tmp_path, 64)))
    summary = read_summary(tmp_path / "run2")
    assert summary["steps"] == 100
    assert [(e["epoch"], e["time_s"]) for e in summary["epochs"]] == [
        (0, pytest.approx(64 * step_time_s(300.0), rel=1e-9)),
        (1, pytest.approx(36 * step_time_s(300.0), rel=1e-9)),
    ]


def test_resume_after_tuning_keeps_the_choice_and_counts_the_whole_run_at_it(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    cb1 = energy_callback(gpu, tmp_path / "run1", QUICK_TUNE, mode="tune")  # tuning ends after 9 steps
    make_trainer(tmp_path, [cb1, saving_every(tmp_path, 20)], max_steps=25, enable_checkpointing=True).fit(
        GPUBoringModel(gpu)
    )
    first = read_summary(tmp_path / "run1")

    gpu2 = make_gpu(virtual_clock)
    cb2 = energy_callback(gpu2, tmp_path / "run2", QUICK_TUNE, mode="tune")
    make_trainer(tmp_path, [cb2], max_steps=40).fit(GPUBoringModel(gpu2), ckpt_path=str(checkpoint_at(tmp_path, 20)))
    second = read_summary(tmp_path / "run2")
    chosen = first["power_limit"]["chosen_power_limit_w"]
    assert second["power_limit"]["chosen_power_limit_w"] == chosen
    assert second["power_limit"]["profile"] == first["power_limit"]["profile"]
    assert [w for _, w in gpu2.changes] == [chosen, 300.0]  # applied, then restored: no profiling again
    tuning = second["power_limit"]["tuning"]
    assert tuning["finished"] is True
    assert tuning["steps_at_chosen"] == 40 - 9  # 11 before the checkpoint, 20 after the resume
    by_limit = {e["power_limit_w"]: e["energy_j"] for e in second["power_limit"]["profile"]}
    assert second["power_limit"]["energy_saved_j"] == pytest.approx(31 * (by_limit[300.0] - by_limit[chosen]))
    assert second["steps"] == 40 and second["resumed_energy_j"] > 0


# -- 6. repeated fits with one callback --------------------------------------------------------------------
def test_each_fit_with_the_same_callback_writes_its_own_summary(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    out = tmp_path / "run"
    cb = energy_callback(gpu, out)
    make_trainer(tmp_path, [cb], max_steps=5).fit(GPUBoringModel(gpu))
    first_text = (out / "summary.json").read_text()
    first_windows = (out / "windows.csv").read_text()
    make_trainer(tmp_path, [cb], max_steps=7).fit(GPUBoringModel(gpu))
    assert [s["steps"] for s in cb.summaries] == [5, 7]
    assert read_summary(out / "fit-2")["steps"] == 7
    assert (out / "summary.json").read_text() == first_text
    assert (out / "windows.csv").read_text() == first_windows


# -- 7. a tuned limit is reused by the next run of the job ------------------------------------------------
def test_reused_limit_reports_the_selector_that_chose_it(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    cb1 = energy_callback(gpu, tmp_path / "a", QUICK_TUNE, mode="tune", job="j", selector="energy")
    make_trainer(tmp_path, [cb1], max_steps=12).fit(GPUBoringModel(gpu))
    first = read_summary(tmp_path / "a")["power_limit"]
    assert first["reused"] is False and first["tuning"]["finished"] is True

    cb2 = energy_callback(gpu, tmp_path / "b", QUICK_TUNE, mode="tune", job="j", selector="time")
    make_trainer(tmp_path, [cb2], max_steps=5).fit(GPUBoringModel(gpu))
    second = read_summary(tmp_path / "b")["power_limit"]
    assert second["reused"] is True
    assert second["selector"] == "energy"
    assert second["chosen_power_limit_w"] == first["chosen_power_limit_w"]
    assert second["reused_from"]["chosen_at"]
    # The run that chose it: the first run's output folder.
    assert second["reused_from"]["run_id"].startswith(f"{tmp_path / 'a'} on ")
    assert f"reused from run {tmp_path / 'a'} on " in format_summary(read_run_dir(tmp_path / "b").summary)


# -- 8. checkpoints with and without the callback ----------------------------------------------------------
def test_a_checkpoint_saved_without_the_callback_resumes_with_it(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    make_trainer(tmp_path, [saving_every(tmp_path, 10)], max_steps=10, enable_checkpointing=True).fit(
        GPUBoringModel(gpu)
    )
    gpu2 = make_gpu(virtual_clock)
    cb = energy_callback(gpu2, tmp_path / "run")
    trainer = make_trainer(tmp_path, [cb], max_steps=25)
    trainer.fit(GPUBoringModel(gpu2), ckpt_path=str(checkpoint_at(tmp_path, 10)))
    assert trainer.global_step == 25
    summary = read_summary(tmp_path / "run")
    assert summary["steps"] == 15  # the steps it measured
    assert summary["energy_j"] == pytest.approx(15 * step_energy_j(300.0), rel=1e-9)
    assert summary["resumed_energy_j"] == 0


def test_a_checkpoint_saved_with_the_callback_resumes_without_it(tmp_path, virtual_clock):
    gpu = make_gpu(virtual_clock)
    cb = energy_callback(gpu, tmp_path / "run", QUICK_TUNE, mode="tune")
    make_trainer(tmp_path, [cb, saving_every(tmp_path, 10)], max_steps=10, enable_checkpointing=True).fit(
        GPUBoringModel(gpu)
    )
    assert any(
        k.startswith("EnergyCallback") for k in torch.load(checkpoint_at(tmp_path, 10), weights_only=False)["callbacks"]
    )
    trainer = make_trainer(tmp_path, [], max_steps=25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's "add the following callbacks" notice
        trainer.fit(GPUBoringModel(make_gpu(virtual_clock)), ckpt_path=str(checkpoint_at(tmp_path, 10)))
    assert trainer.global_step == 25


def test_the_state_key_names_the_job_as_lightning_builds_it_and_follows_a_renamed_job() -> None:
    # Lightning reads `state_key` on every hook call (the callback keeps it) and files the callback's
    # checkpoint state under it: it must stay Lightning's own form, for the job the callback has now.
    callback = EnergyCallback(job="resnet")
    assert callback.state_key == "EnergyCallback{'job': 'resnet'}" == callback.state_key
    callback.config.job = "bert"
    assert callback.state_key == "EnergyCallback{'job': 'bert'}"
    assert EnergyCallback().state_key == "EnergyCallback{'job': None}"


def test_a_callback_that_monitors_an_epoch_figure_gets_it_at_each_epochs_end(tmp_path, virtual_clock):
    # Epoch figures otherwise come at the next exchange of figures; EarlyStopping reads its `monitor` at
    # the epoch's end (and stops the fit when it is missing), so there the epoch ends with its own exchange.
    gpu = make_gpu(virtual_clock)
    logger = EpochMetrics()
    cb = energy_callback(gpu, tmp_path / "run", log_every_n_steps=1000)
    stop = EarlyStopping(monitor="energy/epoch_j", mode="min", patience=100, check_on_train_epoch_end=True)
    trainer = make_trainer(tmp_path, [cb, stop], max_steps=24, logger=logger)
    trainer.fit(GPUBoringModel(gpu, batches=8))
    summary = read_summary(tmp_path / "run")
    assert [e["epoch"] for e in summary["epochs"]] == [0, 1, 2]
    assert stop.best_score.item() == pytest.approx(min(e["energy_j"] for e in summary["epochs"]))
    epochs = [step for step, m in logger.logged if "energy/epoch_j" in m]
    assert epochs == [8, 16, 24]
