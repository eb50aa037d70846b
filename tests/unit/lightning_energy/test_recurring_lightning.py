"""RecurringBatchSizeCallback in real Lightning fits of the emulated workload on a virtual-clock GPU.

The module's validation metric follows a schedule per batch size (`reach_epoch`), so whether and when a
run reaches the target is known in advance, and the energy figures are exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.utilities.parsing import lightning_getattr

from lightning_energy import EnergyCallback, RecurringBatchSizeCallback
from lightning_energy.demo import EmulatedModule
from tests.support.recurring_jobs import MAX_EPOCHS, stored
from tests.support.tuned_gpu import clocked_gpu, tuned_choice
from wattwise.devices import SimulatedGPU
from wattwise.errors import UsageError
from wattwise.run import EnergyPluginWarning
from wattwise.tools.workload import tiny_dataset

#: 192 samples: 12 steps an epoch at batch size 16, 24 at 8; tuning (1 + 5 x 3 steps) ends in epoch 2.
DATASET = 192
TUNE = [
    "power_limit.wait_steps=1",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.step_w=50",
    "monitor.sample_power=false",
]


class ScheduledModule(EmulatedModule):
    """Logs `val_acc` 1.0 from the epoch `reach_epoch[batch_size]` on, else 0.0 (never, if absent)."""

    def __init__(self, gpu: SimulatedGPU, reach_epoch: dict[int, int], fail_in_epoch: int | None = None) -> None:
        super().__init__(gpus=[gpu], dataset_size=DATASET)
        self.reach_epoch = reach_epoch
        self.fail_in_epoch = fail_in_epoch
        self.trained_batch_sizes: set[int] = set()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.current_epoch + 1 == self.fail_in_epoch:
            raise RuntimeError("out of memory")
        self.trained_batch_sizes.add(len(batch[0]))
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        batch_size = lightning_getattr(self, "batch_size")  # on the module or the datamodule
        assert isinstance(batch_size, int)
        reach = self.reach_epoch.get(batch_size)
        self.log("val_acc", 1.0 if reach is not None and self.current_epoch + 1 >= reach else 0.0)


def recurring(batch_sizes: list[int], default: int, beta: float = 2.0) -> RecurringBatchSizeCallback:
    return RecurringBatchSizeCallback(
        job="nightly",
        batch_sizes=batch_sizes,
        default_batch_size=default,
        target_metric=0.9,
        max_epochs=MAX_EPOCHS,
        max_power_w=300.0,
        monitor="val_acc",
        mode="max",
        beta=beta,
    )


def energy(tmp_path: Path, gpu: SimulatedGPU, name: str) -> EnergyCallback:
    return EnergyCallback(devices=[gpu], output_dir=str(tmp_path / name), overrides=TUNE)


def fit(module: pl.LightningModule, callbacks: list[pl.Callback], tmp_path: Path, **kw: Any) -> pl.Trainer:
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=MAX_EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=1,
        default_root_dir=str(tmp_path),
        callbacks=callbacks,
    )
    trainer.fit(module, **kw)
    return trainer


def test_the_first_run_trains_at_the_default_batch_size_tunes_and_records_its_result(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    module = ScheduledModule(gpu, reach_epoch={16: 2})
    rec_cb, energy_cb = recurring([8, 16, 32], default=16), energy(tmp_path, gpu, "run1")
    trainer = fit(module, [rec_cb, energy_cb], tmp_path)

    assert rec_cb.recommendation is not None and rec_cb.recommendation.batch_size == 16
    assert module.batch_size == 16 and module.trained_batch_sizes == {16}
    assert trainer.current_epoch == 2  # stopped when the target was reached, not at max_epochs
    summary = energy_cb.summary
    assert summary is not None and summary["power_limit"]["mode"] == "tune"
    assert energy_cb.run is not None and energy_cb.run.job_name == "nightly"  # the holder's name at the agent
    (run,) = stored("nightly").runs
    assert (run.batch_size, run.state, run.epochs, run.phase) == (16, "reached", 2, "explore")
    assert (run.energy_j, run.time_s) == (summary["energy_j"], summary["time_s"])
    assert rec_cb.result == run
    assert summary["power_limit"]["chosen_power_limit_w"] == tuned_choice()
    assert stored("nightly").power_limits == {16: tuned_choice()}
    assert summary["settings"]["batch_size"] == 16


def test_tuning_uses_the_jobs_eta_not_the_energy_callbacks(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    energy_cb = EnergyCallback(
        eta=1.0, selector="energy", devices=[gpu], output_dir=str(tmp_path / "r"), overrides=TUNE
    )
    fit(ScheduledModule(gpu, reach_epoch={16: 2}), [recurring([8, 16, 32], default=16), energy_cb], tmp_path)
    assert energy_cb.summary is not None
    assert (energy_cb.summary["power_limit"]["selector"], energy_cb.summary["power_limit"]["eta"]) == ("cost", 0.5)
    assert energy_cb.summary["power_limit"]["chosen_power_limit_w"] == tuned_choice()


@pytest.mark.parametrize("energy_first", [False, True], ids=["recurring-first", "energy-first"])
def test_a_batch_size_run_again_is_capped_at_its_remembered_limit_without_profiling(
    tmp_path, virtual_clock, energy_first
):
    gpu = clocked_gpu(virtual_clock)
    fit(ScheduledModule(gpu, reach_epoch={16: 2}), [recurring([16], 16), energy(tmp_path, gpu, "run1")], tmp_path)
    limit_w = tuned_choice()
    assert limit_w < 300.0

    seen_w: list[float] = []

    class Spy(pl.Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            seen_w.append(gpu.power_limit_w())

    rec_cb, energy_cb = recurring([16], 16), energy(tmp_path, gpu, "run2")
    callbacks: list[pl.Callback] = [energy_cb, rec_cb, Spy()] if energy_first else [rec_cb, energy_cb, Spy()]
    fit(ScheduledModule(gpu, reach_epoch={16: 2}), callbacks, tmp_path)

    assert rec_cb.recommendation is not None and rec_cb.recommendation.power_limit_w == limit_w
    assert energy_cb.summary is not None
    assert energy_cb.summary["power_limit"] == {"mode": "cap", "chosen_power_limit_w": limit_w}
    assert seen_w == [limit_w] * 24  # two epochs of 12 steps, all at the limit: nothing profiled
    assert gpu.power_limit_w() == 300.0  # restored after fit
    second = stored("nightly").runs[1]
    assert (second.phase, second.power_limit_w, second.state) == ("exploit", limit_w, "reached")
    assert second.energy_j == energy_cb.summary["energy_j"]


def test_a_run_that_would_cost_more_than_beta_times_the_best_is_stopped(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    beta = 3.5
    fit(
        ScheduledModule(gpu, reach_epoch={16: 2}),
        [recurring([8, 16], 16, beta), energy(tmp_path, gpu, "run1")],
        tmp_path,
    )
    rec_cb, energy_cb = recurring([8, 16], 16, beta), energy(tmp_path, gpu, "run2")
    module = ScheduledModule(gpu, reach_epoch={16: 2})  # batch size 8 never reaches the target
    trainer = fit(module, [rec_cb, energy_cb], tmp_path)

    assert module.trained_batch_sizes == {8}  # exploration walks down from the default
    assert trainer.should_stop and trainer.current_epoch < MAX_EPOCHS
    best, stopped = stored("nightly").runs
    assert stopped.state == "failed" and stopped.epochs == trainer.current_epoch
    assert best.cost is not None and stopped.cost is not None and energy_cb.summary is not None
    last = energy_cb.summary["epochs"][-1]
    last_epoch_cost = rec_cb.spec.cost(last["energy_j"], last["time_s"])
    # It stopped because one more epoch like the last would have gone over beta x the best cost.
    assert stopped.cost <= beta * best.cost < stopped.cost + last_epoch_cost


@pytest.mark.parametrize("energy_first", [False, True], ids=["recurring-first", "energy-first"])
def test_a_run_that_raises_is_recorded_as_failed_with_its_energy(tmp_path, virtual_clock, energy_first):
    gpu = clocked_gpu(virtual_clock)
    rec_cb, energy_cb = recurring([16], 16), energy(tmp_path, gpu, "run1")
    with (
        pytest.warns(EnergyPluginWarning, match="tuning did not finish"),
        pytest.raises(RuntimeError, match="out of memory"),
    ):
        fit(
            ScheduledModule(gpu, reach_epoch={16: 3}, fail_in_epoch=2),
            [energy_cb, rec_cb] if energy_first else [rec_cb, energy_cb],
            tmp_path,
        )

    (run,) = stored("nightly").runs
    # Failed in its second epoch: recorded as failed, with the energy spent until then.
    assert (run.state, run.epochs) == ("failed", 1)
    assert energy_cb.summary is not None and energy_cb.summary["status"] == "failed"
    assert run.energy_j == energy_cb.summary["energy_j"] > 0


def test_the_batch_size_is_set_on_the_datamodule(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)

    class Data(pl.LightningDataModule):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 1

        def train_dataloader(self) -> torch.utils.data.DataLoader[Any]:
            return torch.utils.data.DataLoader(tiny_dataset(DATASET), batch_size=self.batch_size)

        def val_dataloader(self) -> torch.utils.data.DataLoader[Any]:
            return torch.utils.data.DataLoader(tiny_dataset(8, seed=1), batch_size=self.batch_size)

    module, data = ScheduledModule(gpu, reach_epoch={8: 1}), Data()
    del module.batch_size  # the datamodule holds it
    rec_cb = RecurringBatchSizeCallback(
        job="dm",
        batch_sizes=[8],
        default_batch_size=8,
        target_metric=0.9,
        max_epochs=2,
        max_power_w=300.0,
        monitor="val_acc",
        mode="max",
    )
    fit(module, [rec_cb, energy(tmp_path, gpu, "run")], tmp_path, datamodule=data)
    assert data.batch_size == 8 and module.trained_batch_sizes == {8}
    assert [r.state for r in stored("dm").runs] == ["reached"]


def test_misconfigurations_fail_at_setup_with_the_fix(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    with pytest.raises(UsageError, match="needs exactly one EnergyCallback"):
        fit(ScheduledModule(gpu, {}), [recurring([16], 16)], tmp_path)
    module = ScheduledModule(gpu, {})
    loader = module.train_dataloader()
    with pytest.raises(UsageError, match="dataloaders passed to `fit\\(\\)` ignore it"):
        fit(module, [recurring([16], 16), energy(tmp_path, gpu, "a")], tmp_path, train_dataloaders=loader)
    with pytest.raises(UsageError, match="'bs' not found"):
        fit(
            ScheduledModule(gpu, {}),
            [
                RecurringBatchSizeCallback(
                    job="x",
                    batch_sizes=[16],
                    default_batch_size=16,
                    target_metric=1.0,
                    max_epochs=1,
                    max_power_w=300.0,
                    monitor="val_acc",
                    batch_size_attr="bs",
                ),
                energy(tmp_path, gpu, "b"),
            ],
            tmp_path,
        )
    # Refused after its first epoch: the run it ends is too short to tune.
    with (
        pytest.warns(EnergyPluginWarning, match="tuning did not finish"),
        pytest.raises(UsageError, match="'val_loss', which validation did not log"),
    ):
        fit(
            ScheduledModule(gpu, {}),
            [
                RecurringBatchSizeCallback(
                    job="y",
                    batch_sizes=[16],
                    default_batch_size=16,
                    target_metric=1.0,
                    max_epochs=1,
                    max_power_w=300.0,
                    monitor="val_loss",
                ),
                energy(tmp_path, gpu, "c"),
            ],
            tmp_path,
        )


def test_bad_arguments_fail_when_the_callback_is_built():
    with pytest.raises(UsageError, match="mode must be 'min'"):
        RecurringBatchSizeCallback(
            job="j",
            batch_sizes=[8],
            default_batch_size=8,
            target_metric=0.9,
            max_epochs=3,
            max_power_w=300.0,
            monitor="val_acc",
            mode="up",
        )  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="default_batch_size 16 is not one of"):
        RecurringBatchSizeCallback(
            job="j",
            batch_sizes=[8],
            default_batch_size=16,
            target_metric=0.9,
            max_epochs=3,
            max_power_w=300.0,
            monitor="val_acc",
        )


def test_a_run_that_stops_before_tuning_finished_remembers_no_limit_and_the_next_run_tunes_on(
    tmp_path, virtual_clock, monkeypatch
):
    # The target is reached after epoch 1 (12 steps): tuning 5 limits needs 16; 300, 250, 200 and 150 W fit.
    monkeypatch.setenv("WATTWISE_STORE", str(tmp_path / "limits.sqlite"))
    gpu = clocked_gpu(virtual_clock)
    rec_cb, energy_cb = recurring([16], 16), energy(tmp_path, gpu, "run1")
    with pytest.warns(EnergyPluginWarning, match="tuning did not finish"):
        fit(ScheduledModule(gpu, reach_epoch={16: 1}), [rec_cb, energy_cb], tmp_path)
    summary = energy_cb.summary
    assert summary is not None
    tuning = summary["power_limit"]["tuning"]
    assert tuning["finished"] is False and tuning["profiled"] and tuning["reason"]
    # An unfinished profile is no choice: nothing is remembered for the batch size, and the next run tunes
    # on from the limits this one profiled instead of being capped at the best of them.
    assert stored("nightly").power_limits == {}
    rec_cb2, energy_cb2 = recurring([16], 16), energy(tmp_path, gpu, "run2")
    fit(ScheduledModule(gpu, reach_epoch={16: 2}), [rec_cb2, energy_cb2], tmp_path)
    assert rec_cb2.recommendation is not None and rec_cb2.recommendation.power_limit_w is None
    second = energy_cb2.summary
    assert second is not None and second["power_limit"]["tuning"]["finished"] is True
    assert second["power_limit"]["tuning"]["profiled"][: len(tuning["profiled"])] == tuning["profiled"]
    assert stored("nightly").power_limits == {16: second["power_limit"]["chosen_power_limit_w"]}
