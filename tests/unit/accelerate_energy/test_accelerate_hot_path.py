"""What an Accelerate user checks of wattwise on a plain loop with Accelerate's own regression model.

A step is an optimizer step; a step that does not log is free (no synchronize, no counter read, no
collective); evaluation, checkpoints and marked stretches are left out of step and profile figures;
tuning cut short says so; checkpoints load whether wattwise was on or off when they were saved.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from accelerate.test_utils.training import RegressionDataset, RegressionModel
from torch import nn

import accelerate_energy
from accelerate_energy import EnergyPlugin
from tests.support.accelerate_fixtures import TUNE, TUNING_STEPS, Recorder, plugin, reset_accelerate, summary
from tests.support.clock import VirtualClock
from tests.support.tuned_gpu import BASE_S, clocked_gpu
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.run import EnergyPluginWarning
from wattwise.tools.workload import emulate_step

BATCH = 4
BUSY_W = PowerModel.default().at_limit(300.0)[1]

pytestmark = pytest.mark.usefixtures("fresh_accelerate")


class CountingGPU(SimulatedGPU):
    """A simulated GPU that counts how often its energy counter is read."""

    reads = 0

    def energy_j(self) -> float:
        self.reads += 1
        return super().energy_j()


def window_rows(tmp_path: Path, name: str = "run") -> list[tuple[str, float]]:
    """(window name, time_s) of each row of windows.csv."""
    lines = (tmp_path / name / "windows.csv").read_text().splitlines()[1:]
    return [(cells[1], float(cells[2])) for cells in (line.split(",") for line in lines)]


def loss_of(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


def prepared(accelerator: Accelerator, batches: int, *, optimizers: int = 1) -> tuple[Any, ...]:
    """Accelerate's regression model, one optimizer (or one per parameter) and a loader of `batches`."""
    torch.manual_seed(0)
    model = RegressionModel(a=1, b=1)
    params = [[model.a, model.b]] if optimizers == 1 else [[model.a], [model.b]]
    opts = [torch.optim.SGD(p, lr=0.01) for p in params]
    loader = torch.utils.data.DataLoader(RegressionDataset(length=batches * BATCH, seed=0), batch_size=BATCH)
    model, *rest = accelerator.prepare(model, *opts, loader)
    return model, rest[:-1], rest[-1]


def gpus_of(accelerator: Accelerator) -> list[Any]:
    run = accelerate_energy.energy_run(accelerator)
    return run.gpus if run is not None else []


def train(
    accelerator: Accelerator,
    batches: int,
    *,
    optimizers: int = 1,
    after_step: Callable[[int, nn.Module, Any], None] | None = None,
    during_step: Callable[[torch.Tensor], None] | None = None,
) -> nn.Module:
    """A plain Accelerate loop; each batch lasts the simulated GPU's modelled step time.

    `after_step(i, model, loader)` runs after batch i (from 1); `during_step(loss)` after its backward.
    """
    model, opts, loader = prepared(accelerator, batches, optimizers=optimizers)
    gpus = gpus_of(accelerator)
    for i, batch in enumerate(loader, start=1):
        with accelerator.accumulate(model):

            def work(batch: dict[str, torch.Tensor] = batch) -> None:
                loss = loss_of(model, batch)
                accelerator.backward(loss)
                if during_step is not None:
                    during_step(loss)

            emulate_step(gpus, work)
            for opt in opts:
                opt.step()
                opt.zero_grad()
        if after_step is not None:
            after_step(i, model, loader)
    return model


# -- 1. a step is an optimizer step ------------------------------------------------------------------
def test_gradient_accumulation_counts_one_step_per_optimizer_step(tmp_path, clock):
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True, gradient_accumulation_steps=4), plugin(tmp_path), devices=[clocked_gpu(clock)]
    )
    train(accelerator, batches=12)
    accelerator.end_training()

    s = summary(tmp_path)
    assert s["steps"] == 3
    assert s["energy_j"] == pytest.approx(12 * BASE_S * BUSY_W)  # every micro-batch is measured


def test_two_optimizers_count_each_ones_step(tmp_path, clock):
    accelerator = accelerate_energy.attach(Accelerator(cpu=True), plugin(tmp_path), devices=[clocked_gpu(clock)])
    train(accelerator, batches=7, optimizers=2)
    accelerator.end_training()

    assert summary(tmp_path)["steps"] == 2 * 7


# -- 2. steps that do not log are free ---------------------------------------------------------------
def test_steps_between_logging_points_read_nothing_sync_nothing_and_log_nothing(tmp_path, clock, monkeypatch):
    syncs: list[int] = []
    monkeypatch.setattr("wattwise.run.measurement.cuda_sync", lambda: syncs.append(1))
    recorder = Recorder()
    gpu = clocked_gpu(clock, CountingGPU)
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True, log_with=[recorder]),
        plugin(tmp_path, "monitor.sync_cuda=true", log_every_n_steps=50),
        devices=[gpu],
    )
    accelerator.init_trackers("hot-path")
    steps = 200
    train(accelerator, batches=steps)
    during_training = (len(syncs), gpu.reads)
    accelerator.end_training()

    # Opening the run and the epoch, then a few per logging point; not one per step.
    assert 1 <= during_training[0] <= steps // 50 + 3
    assert 1 <= during_training[1] <= 3 * (steps // 50) + 3
    rows = window_rows(tmp_path)
    assert {name for name, _ in rows} == {"steps", "epoch", "fit"}
    assert [t for name, t in rows if name == "steps"] == [pytest.approx(50 * BASE_S)] * (steps // 50)
    step_logs = [step for step, values in recorder.logged if "energy/step_j" in values]
    assert step_logs == [50, 100, 150, 200]
    assert summary(tmp_path)["steps"] == steps


# -- 3. evaluation is not training -------------------------------------------------------------------
EVAL_EVERY = 5
EVAL_BATCHES = 2
EVAL_BATCH_S = 0.05


def evaluate_every(n: int, accelerator: Accelerator, clock: VirtualClock, done: list[int]) -> Callable[..., None]:
    """An evaluation every `n` steps: eval mode, a slow pass gathering its predictions, train mode."""

    def after_step(i: int, model: nn.Module, loader: Any) -> None:
        if i % n:
            return
        model.eval()
        with torch.no_grad():
            for batch, _ in zip(loader, range(EVAL_BATCHES), strict=False):
                accelerator.gather_for_metrics(model(batch["x"]))
                clock.sleep(EVAL_BATCH_S)
        model.train()
        done.append(i)

    return after_step


def test_evaluation_is_reported_apart_and_left_out_of_step_figures(tmp_path, clock):
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True), plugin(tmp_path, log_every_n_steps=10), devices=[clocked_gpu(clock)]
    )
    evaluations: list[int] = []
    train(accelerator, batches=20, after_step=evaluate_every(EVAL_EVERY, accelerator, clock, evaluations))
    accelerator.end_training()

    s = summary(tmp_path)
    eval_s = EVAL_BATCHES * EVAL_BATCH_S
    assert evaluations == [5, 10, 15, 20]  # the last one ends with the run
    validation = s["non_training"]["validation"]
    assert validation["count"] == len(evaluations)
    assert validation["time_s"] == pytest.approx(len(evaluations) * eval_s)
    assert s["time_s"] == pytest.approx(20 * BASE_S + len(evaluations) * eval_s)  # the run's total keeps it
    assert [t for name, t in window_rows(tmp_path) if name == "steps"] == [pytest.approx(10 * BASE_S)] * 2


def test_tuning_profiles_are_not_inflated_by_evaluation(tmp_path, clock):
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True), plugin(tmp_path, *TUNE, mode="tune"), devices=[clocked_gpu(clock)]
    )
    evaluations: list[int] = []
    train(accelerator, batches=TUNING_STEPS + 2, after_step=evaluate_every(2, accelerator, clock, evaluations))
    accelerator.end_training()

    model = PowerModel.default()
    profile = summary(tmp_path)["power_limit"]["profile"]
    assert [e["power_limit_w"] for e in profile] == [300.0, 250.0, 200.0, 150.0, 100.0]
    for entry in profile:
        slowdown, power_w = model.at_limit(entry["power_limit_w"])
        assert entry["time_s"] == pytest.approx(slowdown * BASE_S)
        assert entry["energy_j"] == pytest.approx(power_w * slowdown * BASE_S)
    assert summary(tmp_path)["non_training"]["validation"]["count"] == len(evaluations)


def test_a_stretch_marked_not_training_is_reported_under_its_kind(tmp_path, clock):
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True), plugin(tmp_path, log_every_n_steps=4), devices=[clocked_gpu(clock)]
    )

    def after_step(i: int, model: nn.Module, loader: Any) -> None:
        if i == 2:
            with accelerate_energy.not_training(accelerator, "custom"):
                clock.sleep(0.3)

    train(accelerator, batches=4, after_step=after_step)
    accelerator.end_training()

    s = summary(tmp_path)
    assert s["non_training"]["custom"] == {
        "time_s": pytest.approx(0.3),
        "energy_j": pytest.approx(0.3 * PowerModel.default().idle_power_w),
        "count": 1,
        "energy_uncertainty_j": pytest.approx(0.0),  # an exact counter
    }
    assert [t for name, t in window_rows(tmp_path) if name == "steps"] == [pytest.approx(4 * BASE_S)]


def test_not_training_does_nothing_when_wattwise_is_off(clock):
    accelerator = accelerate_energy.attach(Accelerator(cpu=True), EnergyPlugin(enabled=False))
    with accelerate_energy.not_training(accelerator, "custom"):
        clock.sleep(0.1)
    assert accelerate_energy.energy(accelerator) is None


@pytest.mark.parametrize("frozen_teacher", [False, True])
def test_gathering_metrics_while_training_does_not_pause(tmp_path, clock, frozen_teacher):
    """`gather_for_metrics` in the training step (loss logging), also beside a prepared model kept in
    eval mode (a frozen teacher), is training: the step's time stays in the step figures."""
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True), plugin(tmp_path, log_every_n_steps=3), devices=[clocked_gpu(clock)]
    )
    if frozen_teacher:
        accelerator.prepare(RegressionModel()).eval()
    train(accelerator, batches=6, during_step=lambda loss: accelerator.gather_for_metrics(loss.detach()))
    accelerator.end_training()

    s = summary(tmp_path)
    assert s["non_training"] == {}
    assert [t for name, t in window_rows(tmp_path) if name == "steps"] == [pytest.approx(3 * BASE_S)] * 2


# -- 4. tuning cut short -----------------------------------------------------------------------------
@pytest.mark.parametrize(("batches", "profiled"), [(8, [300.0, 250.0]), (2, [])])
def test_a_run_too_short_for_tuning_says_so_once_and_keeps_a_profiled_limit(tmp_path, clock, batches, profiled):
    gpu = clocked_gpu(clock)
    accelerator = accelerate_energy.attach(Accelerator(cpu=True), plugin(tmp_path, *TUNE, mode="tune"), devices=[gpu])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(accelerator, batches=batches)
        accelerator.end_training()

    ours = [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert len(ours) == 1 and "tuning did not finish" in ours[0], ours
    pl = summary(tmp_path)["power_limit"]
    assert pl["tuning"]["finished"] is False and pl["tuning"]["reason"]
    assert pl["tuning"]["profiled"] == profiled
    assert [e["power_limit_w"] for e in pl["profile"]] == profiled
    assert pl["chosen_power_limit_w"] in (profiled or [None])
    assert any("tuning did not finish" in n for n in summary(tmp_path)["notes"])
    assert gpu.power_limit_w() == 300.0  # restored


# -- 5. checkpoints ----------------------------------------------------------------------------------
def save_after(accelerator: Accelerator, batches: int, folder: Path) -> nn.Module:
    model = train(accelerator, batches=batches)
    accelerator.save_state(str(folder))
    return model


def resume_and_train(accelerator: Accelerator, folder: Path, steps: int) -> None:
    model, opts, _ = prepared(accelerator, 1)
    accelerator.load_state(str(folder))
    for _ in range(steps):
        emulate_step(gpus_of(accelerator), lambda: accelerator.backward(model(torch.ones(2)).sum()))
        opts[0].step()
        opts[0].zero_grad()


def test_a_checkpoint_saved_with_wattwise_off_loads_with_it_on(tmp_path, clock):
    off = accelerate_energy.attach(Accelerator(cpu=True), EnergyPlugin(enabled=False))
    save_after(off, 3, tmp_path / "ckpt")
    off.end_training()
    reset_accelerate()
    assert not (tmp_path / "ckpt" / "wattwise_energy.json").exists()

    on = accelerate_energy.attach(Accelerator(cpu=True), plugin(tmp_path), devices=[clocked_gpu(clock)])
    resume_and_train(on, tmp_path / "ckpt", steps=4)
    on.end_training()

    s = summary(tmp_path)
    assert s["steps"] == 4 and s["resumed_energy_j"] == 0.0
    assert s["energy_j"] == pytest.approx(4 * BASE_S * BUSY_W)


def test_a_checkpoint_saved_with_wattwise_on_loads_with_it_off(tmp_path, clock):
    on = accelerate_energy.attach(Accelerator(cpu=True), plugin(tmp_path), devices=[clocked_gpu(clock)])
    saved = save_after(on, 3, tmp_path / "ckpt")
    on.end_training()
    reset_accelerate()
    assert (tmp_path / "ckpt" / "wattwise_energy.json").is_file()

    off = accelerate_energy.attach(Accelerator(cpu=True), EnergyPlugin(enabled=False))
    model, _, _ = prepared(off, 1)
    off.load_state(str(tmp_path / "ckpt"))  # no "number of custom checkpoints ... does not match"

    assert model.a.item() == pytest.approx(saved.a.item()) and model.a.item() != 1.0


def test_a_run_resumed_with_wattwise_on_both_times_keeps_energy_and_steps(tmp_path, clock):
    first = accelerate_energy.attach(Accelerator(cpu=True), plugin(tmp_path, name="run1"), devices=[clocked_gpu(clock)])
    first.register_save_state_pre_hook(lambda models, weights, folder: clock.sleep(0.2))  # a slow write
    save_after(first, 6, tmp_path / "ckpt")
    first.end_training()
    reset_accelerate()

    second = accelerate_energy.attach(
        Accelerator(cpu=True), plugin(tmp_path, name="run2"), devices=[clocked_gpu(clock)]
    )
    resume_and_train(second, tmp_path / "ckpt", steps=4)
    second.end_training()

    before, after = summary(tmp_path, "run1"), summary(tmp_path, "run2")
    assert before["non_training"]["checkpoint"]["count"] == 1
    assert before["non_training"]["checkpoint"]["time_s"] == pytest.approx(0.2)
    assert after["resumed_energy_j"] == pytest.approx(6 * BASE_S * BUSY_W)
    assert after["steps"] == 6 + 4
    assert after["energy_j"] == pytest.approx(10 * BASE_S * BUSY_W)
