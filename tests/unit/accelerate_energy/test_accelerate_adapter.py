"""`accelerate_energy.attach` in real Accelerate loops on simulated GPUs driven by a virtual clock."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from torch import nn

import accelerate_energy
from accelerate_energy import EnergyPlugin
from tests.support.accelerate_fixtures import QUIET, TUNE, TUNING_STEPS, Recorder, plugin, summary
from tests.support.tuned_gpu import BASE_S, clocked_gpu, tuned_choice
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.devices.base import NoPermissionError
from wattwise.run import EnergyPluginWarning
from wattwise.tools.workload import emulate_step, tiny_dataset, tiny_model

BATCH = 8


pytestmark = pytest.mark.usefixtures("fresh_accelerate")


class DeniedGPU(SimulatedGPU):
    def set_power_limit_w(self, watts: float) -> None:
        raise NoPermissionError("setting the power limit needs root or CAP_SYS_ADMIN")


def train(
    accelerator: Accelerator, batches: int, *, epochs: int = 1, mark_epochs: bool = False, during: Any = None
) -> None:
    """A plain Accelerate loop; each micro-batch lasts the simulated GPU's modelled step time."""
    torch.manual_seed(0)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(tiny_dataset(batches * BATCH), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    session = accelerate_energy.energy_run(accelerator)
    gpus = session.gpus if session is not None else []
    for _ in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                emulate_step(gpus, lambda: accelerator.backward(nn.functional.mse_loss(model(x), y)))  # noqa: B023
                optimizer.step()
                optimizer.zero_grad()
            if during is not None:
                during()
        if mark_epochs:
            accelerate_energy.epoch_end(accelerator)


def test_a_step_is_an_optimizer_step_that_really_happened(tmp_path, clock):
    gpu = clocked_gpu(clock)
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True, gradient_accumulation_steps=4), plugin(tmp_path, log_every_n_steps=1), devices=[gpu]
    )
    train(accelerator, batches=20)
    accelerator.end_training()

    s = summary(tmp_path)
    busy_w = PowerModel.default().at_limit(300.0)[1]
    assert s["steps"] == 5  # 20 micro-batches, 4 per optimizer step
    assert s["framework"] == "accelerate" and s["status"] == "completed"
    assert s["energy_j"] == pytest.approx(20 * BASE_S * busy_w)
    assert s["time_s"] == pytest.approx(20 * BASE_S)
    assert [e["energy_j"] for e in s["epochs"]] == [pytest.approx(s["energy_j"])]
    rows = (tmp_path / "run" / "windows.csv").read_text().splitlines()
    # Logging every optimizer step: one `steps` row per step, each four micro-batches long.
    step_times_s = [float(r.split(",")[2]) for r in rows if r.split(",")[1] == "steps"]
    assert step_times_s == [pytest.approx(4 * BASE_S)] * 5


@pytest.mark.parametrize(("selector", "eta"), [("cost", 0.5), ("energy", 0.5), ("time", 0.5)])
def test_tuning_picks_what_the_power_model_says_and_restores_the_limit(tmp_path, clock, selector, eta):
    gpu = clocked_gpu(clock)
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True), plugin(tmp_path, *TUNE, mode="tune", selector=selector, eta=eta), devices=[gpu]
    )
    seen_w: list[float] = []
    train(accelerator, batches=TUNING_STEPS + 4, during=lambda: seen_w.append(gpu.power_limit_w()))
    accelerator.end_training()

    chosen = tuned_choice(selector, eta)
    assert summary(tmp_path)["power_limit"]["chosen_power_limit_w"] == chosen
    assert seen_w[-1] == chosen  # applied after tuning
    assert gpu.power_limit_w() == 300.0  # restored at end_training


def test_cap_applies_during_training_and_is_restored_after(tmp_path, clock):
    gpu = clocked_gpu(clock)
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True), plugin(tmp_path, mode="cap", cap_fraction=0.5), devices=[gpu]
    )
    seen_w: list[float] = []
    train(accelerator, batches=4, during=lambda: seen_w.append(gpu.power_limit_w()))
    accelerator.end_training()

    assert seen_w == [150.0] * 4
    assert gpu.power_limit_w() == 300.0
    assert summary(tmp_path)["power_limit"] == {"mode": "cap", "chosen_power_limit_w": 150.0}
    # What attach made, printed, says what it does.
    assert repr(accelerate_energy.energy(accelerator)).startswith("AccelerateEnergy(mode='cap', eta=0.5, job=None, ")


def test_without_permission_training_goes_on_measuring_with_one_warning(tmp_path, clock):
    gpu = clocked_gpu(clock, DeniedGPU)
    accelerator = accelerate_energy.attach(Accelerator(cpu=True), plugin(tmp_path, *TUNE, mode="tune"), devices=[gpu])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(accelerator, batches=TUNING_STEPS)
        accelerator.end_training()

    ours = [w for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert len(ours) == 1 and "measurement only" in str(ours[0].message)
    s = summary(tmp_path)
    assert s["steps"] == TUNING_STEPS and s["energy_j"] > 0
    pl = s["power_limit"]  # no choice, and why tuning was abandoned
    assert pl["chosen_power_limit_w"] is None and pl["tuning"]["reason"].startswith("abandoned: ")
    notes = [n for n in s["notes"] if "measurement only" in n]  # the summary says why nothing was tuned
    assert len(notes) == 1 and notes[0] in str(ours[0].message)


def test_the_users_own_loop_drives_tuning_when_asked(tmp_path, clock):
    gpu = clocked_gpu(clock)
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True), plugin(tmp_path, *TUNE, "devices.simulated_drive=steps", mode="tune"), devices=[gpu]
    )
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(tiny_dataset((TUNING_STEPS + 10) * BATCH), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:  # the user's own steps: no emulated work, BASE_S each on the clock
        accelerator.backward(nn.functional.mse_loss(model(x), y))
        clock.sleep(BASE_S)
        optimizer.step()
        optimizer.zero_grad()
    accelerator.end_training()

    s = summary(tmp_path)
    assert s["power_limit"]["chosen_power_limit_w"] == tuned_choice()
    assert s["simulated_driven_by"] == "steps"


def test_strict_mode_raises_without_permission(tmp_path, clock):
    gpu = clocked_gpu(clock, DeniedGPU)
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True), plugin(tmp_path, mode="cap", cap_w=200.0, strict=True), devices=[gpu]
    )
    with pytest.raises(NoPermissionError):
        train(accelerator, batches=2)


def test_metrics_reach_the_trackers_combined_and_numbered_by_optimizer_step(tmp_path, clock):
    recorder = Recorder()
    gpu = clocked_gpu(clock)
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=True, log_with=[recorder]),
        plugin(tmp_path, "log_every_n_steps=2", mode="cap", cap_w=200.0),
        devices=[gpu],
    )
    accelerator.init_trackers("energy-test")
    train(accelerator, batches=3, epochs=2, mark_epochs=True)
    accelerator.end_training()

    steps = [(step, m) for step, m in recorder.logged if "energy/step_j" in m]
    assert [step for step, _ in steps] == [2, 4, 6]  # every log_every_n_steps optimizer steps
    assert all(m["power/limit_w"] == 200.0 for _, m in steps)
    epochs = [(step, m["energy/epoch_j"]) for step, m in recorder.logged if "energy/epoch_j" in m]
    assert [step for step, _ in epochs] == [3, 6]
    fit = [m for _, m in recorder.logged if "energy/fit_j" in m]
    assert fit == [
        {
            "energy/fit_j": pytest.approx(summary(tmp_path)["energy_j"]),
            "time/fit_s": pytest.approx(summary(tmp_path)["time_s"]),
            "energy/fit_uncertainty_j": summary(tmp_path)["energy_uncertainty_j"],
            "wattwise/simulated": 1.0,  # every batch of figures from a simulated GPU is marked
        }
    ]
    assert all(m["wattwise/simulated"] == 1.0 and "energy/step_uncertainty_j" in m for _, m in steps)


def test_epochs_are_measured_where_the_script_marks_them(tmp_path, clock):
    gpu = clocked_gpu(clock)
    accelerator = accelerate_energy.attach(Accelerator(cpu=True), plugin(tmp_path), devices=[gpu])
    train(accelerator, batches=3, epochs=2, mark_epochs=True)
    accelerator.end_training()

    s = summary(tmp_path)
    busy_w = PowerModel.default().at_limit(300.0)[1]
    assert [e["epoch"] for e in s["epochs"]] == [0, 1]
    assert [e["energy_j"] for e in s["epochs"]] == [pytest.approx(3 * BASE_S * busy_w)] * 2
    assert s["steps"] == 6


def test_resumed_run_keeps_energy_and_choice_without_profiling_again(tmp_path, clock):
    gpu = clocked_gpu(clock)
    first = accelerate_energy.attach(Accelerator(cpu=True), plugin(tmp_path, *TUNE, mode="tune"), devices=[gpu])
    train(first, batches=TUNING_STEPS + 2)
    first.save_state(str(tmp_path / "checkpoint"))
    first.end_training()
    before = summary(tmp_path)

    set_calls: list[float] = []

    class CountingGPU(SimulatedGPU):
        def set_power_limit_w(self, watts: float) -> None:
            set_calls.append(watts)
            super().set_power_limit_w(watts)

    gpu2 = CountingGPU(0, PowerModel.default(), base_step_time_s=BASE_S, clock=clock, sleep=clock.sleep)
    second = accelerate_energy.attach(
        Accelerator(cpu=True),
        EnergyPlugin(enabled=True, output_dir=str(tmp_path / "run2"), mode="tune", overrides=[*QUIET, *TUNE]),
        devices=[gpu2],
    )
    torch.manual_seed(0)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = second.prepare(model, optimizer)
    second.load_state(str(tmp_path / "checkpoint"))
    x, y = tiny_dataset(BATCH).tensors
    for _ in range(3):
        emulate_step([gpu2], lambda: second.backward(nn.functional.mse_loss(model(x), y)))
        optimizer.step()
        optimizer.zero_grad()
    second.end_training()

    after = summary(tmp_path, "run2")
    chosen = before["power_limit"]["chosen_power_limit_w"]
    assert after["power_limit"]["chosen_power_limit_w"] == chosen
    assert set(set_calls) == {chosen, 300.0}  # the chosen limit, then the restore: no profiling
    assert after["resumed_energy_j"] == pytest.approx(before["energy_j"])
    assert after["steps"] == before["steps"] + 3
