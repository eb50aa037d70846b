"""EnergyCallback in real Lightning fits on the emulated workload and simulated GPUs."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import lightning.pytorch as pl
import pytest
from lightning.pytorch.loggers import Logger

from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
from tests.support.tuned_gpu import BASE_S, clocked_gpu, tuned_choice
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.devices.base import NoPermissionError
from wattwise.run import EnergyPluginWarning

TUNE = [
    "power_limit.wait_steps=1",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.step_w=50",
    "monitor.sample_power=false",
]


def fit(callback: EnergyCallback, gpus, steps: int, tmp_path: Path, **trainer_kw) -> pl.Trainer:
    kw = {
        "accelerator": "cpu",
        "devices": 1,
        "max_steps": steps,
        "max_epochs": -1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "limit_val_batches": 0,
        "default_root_dir": str(tmp_path),
        "callbacks": [callback],
    }
    kw.update(trainer_kw)
    trainer = pl.Trainer(**kw)
    trainer.fit(EmulatedModule(gpus=gpus, dataset_size=trainer_kw.pop("dataset_size", 4096)))
    return trainer


class RecordingLogger(Logger):
    """A logger that keeps what it is given, as the user's TensorBoard or W&B logger would receive it."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        self.logged.append((step, dict(metrics)))


def test_measures_every_step_and_writes_the_summary(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    cb = EnergyCallback(output_dir=str(tmp_path / "run"), devices=[gpu], overrides=["monitor.sample_power=false"])
    logger = RecordingLogger()
    fit(cb, [gpu], 20, tmp_path, logger=logger, log_every_n_steps=5)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["simulated"] is True and summary["steps"] == 20
    # Every emulated step is BASE_S at 300 W busy power (245 W in the built-in model).
    busy_w = PowerModel.default().at_limit(300.0)[1]
    assert summary["energy_j"] == pytest.approx(20 * BASE_S * busy_w, rel=1e-6)
    assert summary["energy_per_device_j"] == {"rank0/gpu0": pytest.approx(summary["energy_j"])}
    steps = [(step, m) for step, m in logger.logged if "energy/step_j" in m]
    assert [step for step, _ in steps] == [5, 10, 15, 20]  # at the trainer's log_every_n_steps
    assert all(m["energy/step_j"] == pytest.approx(BASE_S * busy_w, rel=1e-6) for _, m in steps)
    assert all(m["power/avg_w"] == pytest.approx(busy_w, rel=1e-6) for _, m in steps)
    fit_logged = [m for _, m in logger.logged if "energy/fit_j" in m]
    assert fit_logged == [
        {
            "energy/fit_j": pytest.approx(summary["energy_j"]),
            "time/fit_s": pytest.approx(summary["time_s"]),
            "energy/fit_uncertainty_j": summary["energy_uncertainty_j"],
            "wattwise/simulated": 1.0,  # every batch of figures from a simulated GPU is marked
        }
    ]
    assert all(m["wattwise/simulated"] == 1.0 and "energy/step_uncertainty_j" in m for _, m in steps)
    # One row per logging interval, none per step: a step that logs nothing costs nothing.
    names = [r.split(",")[1] for r in (tmp_path / "run" / "windows.csv").read_text().splitlines()[1:]]
    assert names.count("steps") == 4 and "step" not in names


@pytest.mark.parametrize(("selector", "eta"), [("cost", 0.5), ("energy", 0.5), ("time", 0.5), ("cost", 0.9)])
def test_tuning_picks_what_the_power_model_says_and_restores_the_limit(tmp_path, virtual_clock, selector, eta):
    gpu = clocked_gpu(virtual_clock)
    cb = EnergyCallback(
        mode="tune", selector=selector, eta=eta, output_dir=str(tmp_path / "run"), devices=[gpu], overrides=TUNE
    )
    fit(cb, [gpu], 1 + 5 * 3 + 10, tmp_path)
    assert cb.summary is not None
    chosen = cb.summary["power_limit"]["chosen_power_limit_w"]
    assert chosen == tuned_choice(selector, eta)
    # Highest first; the sweep stops once two limits in a row cost more than the best (by time, every lower
    # limit is slower than the highest: two are profiled below it).
    profiled = [e["power_limit_w"] for e in cb.summary["power_limit"]["profile"]]
    assert profiled == ([300, 250, 200] if selector == "time" else [300, 250, 200, 150, 100])
    assert gpu.power_limit_w() == 300.0  # restored at the end of fit


class OwnModule(EmulatedModule):
    """A user's own module: its steps take BASE_S of the virtual clock and drive no simulated GPU themselves."""

    def __init__(self, clock) -> None:
        super().__init__(gpus=[])
        self.clock = clock

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None) -> None:
        self.clock.sleep(BASE_S)
        optimizer.step(closure=optimizer_closure)


def test_the_users_own_steps_drive_tuning_when_asked(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    overrides = [*TUNE, "devices.simulated_drive=steps"]
    cb = EnergyCallback(mode="tune", output_dir=str(tmp_path / "run"), devices=[gpu], overrides=overrides)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=1 + 5 * 3 + 10,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
        callbacks=[cb],
    )
    trainer.fit(OwnModule(virtual_clock))
    assert cb.summary is not None
    assert cb.summary["power_limit"]["chosen_power_limit_w"] == tuned_choice()
    assert cb.summary["simulated_driven_by"] == "steps"


def test_cap_mode_applies_the_cap_during_fit_and_restores_after(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    seen = []

    class Spy(pl.Callback):
        def on_train_batch_end(self, *args):
            seen.append(gpu.power_limit_w())

    cb = EnergyCallback(mode="cap", cap_fraction=0.5, devices=[gpu], output_dir=str(tmp_path / "run"))
    fit(cb, [gpu], 5, tmp_path, callbacks=[cb, Spy()])
    assert seen == [150.0] * 5
    assert gpu.power_limit_w() == 300.0


class DeniedGPU(SimulatedGPU):
    def set_power_limit_w(self, watts: float) -> None:
        raise NoPermissionError("setting the power limit needs root or CAP_SYS_ADMIN")


def test_without_permission_training_goes_on_measuring_with_one_warning(tmp_path, virtual_clock):
    gpu = DeniedGPU(0, base_step_time_s=BASE_S, clock=virtual_clock, sleep=virtual_clock.sleep)
    cb = EnergyCallback(mode="tune", devices=[gpu], output_dir=str(tmp_path / "run"), overrides=TUNE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(cb, [gpu], 30, tmp_path)
    ours = [w for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert len(ours) == 1 and "CAP_SYS_ADMIN" in str(ours[0].message)
    assert cb.summary is not None and cb.summary["steps"] == 30 and cb.summary["energy_j"] > 0
    pl = cb.summary["power_limit"]  # no choice, and why tuning was abandoned
    assert pl["chosen_power_limit_w"] is None and pl["tuning"]["reason"].startswith("abandoned: ")
    assert "CAP_SYS_ADMIN" in pl["tuning"]["reason"]


def test_strict_mode_raises_without_permission(tmp_path, virtual_clock):
    gpu = DeniedGPU(0, base_step_time_s=BASE_S, clock=virtual_clock, sleep=virtual_clock.sleep)
    cb = EnergyCallback(mode="cap", cap_w=200.0, strict=True, devices=[gpu], output_dir=str(tmp_path / "r"))
    with pytest.raises(NoPermissionError):
        fit(cb, [gpu], 5, tmp_path)


def test_exception_in_training_restores_the_limit(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)

    class Boom(EmulatedModule):
        def training_step(self, batch, batch_idx):
            if batch_idx == 4:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    cb = EnergyCallback(mode="cap", cap_w=150.0, devices=[gpu], output_dir=str(tmp_path / "run"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=10,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[cb],
    )
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Boom(gpus=[gpu]))
    assert gpu.power_limit_w() == 300.0
    assert cb.summary is not None and cb.summary["status"] == "failed"


def test_resumed_fit_keeps_energy_and_choice_without_profiling_again(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    ckpt_dir = tmp_path / "ckpt"
    cb1 = EnergyCallback(mode="tune", devices=[gpu], output_dir=str(tmp_path / "run1"), overrides=TUNE)
    steps1 = 1 + 5 * 3 + 4
    fit(
        cb1,
        [gpu],
        steps1,
        tmp_path,
        enable_checkpointing=True,
        callbacks=[cb1, pl.callbacks.ModelCheckpoint(dirpath=ckpt_dir, save_last=True, every_n_train_steps=steps1)],
    )
    first = cb1.summary
    assert first is not None
    ckpt = ckpt_dir / "last.ckpt"
    assert ckpt.exists()

    set_calls = []

    class CountingGPU(SimulatedGPU):
        def set_power_limit_w(self, watts):
            set_calls.append(watts)
            super().set_power_limit_w(watts)

    gpu2 = CountingGPU(0, base_step_time_s=BASE_S, clock=virtual_clock, sleep=virtual_clock.sleep)
    cb2 = EnergyCallback(mode="tune", devices=[gpu2], output_dir=str(tmp_path / "run2"), overrides=TUNE)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps1 + 10,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[cb2],
    )
    trainer.fit(EmulatedModule(gpus=[gpu2]), ckpt_path=str(ckpt))
    second = cb2.summary
    assert second is not None
    chosen = first["power_limit"]["chosen_power_limit_w"]
    assert second["power_limit"]["chosen_power_limit_w"] == chosen
    assert set_calls[0] == chosen and set(set_calls) <= {chosen, 300.0}  # applied, then restored: no profiling
    busy_w = PowerModel.default().at_limit(chosen)[1]
    t = PowerModel.default().at_limit(chosen)[0] * BASE_S
    assert second["energy_j"] == pytest.approx(first["energy_j"] + 10 * busy_w * t, rel=1e-6)
    assert second["steps"] == steps1 + 10


def test_tuned_limit_is_reused_by_the_next_run_of_the_same_job(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    cb1 = EnergyCallback(mode="tune", job="nightly", devices=[gpu], output_dir=str(tmp_path / "a"), overrides=TUNE)
    fit(cb1, [gpu], 25, tmp_path)
    cb2 = EnergyCallback(mode="tune", job="nightly", devices=[gpu], output_dir=str(tmp_path / "b"), overrides=TUNE)
    fit(cb2, [gpu], 5, tmp_path)
    assert cb2.summary is not None and cb1.summary is not None
    assert cb2.summary["power_limit"]["reused"] is True
    assert cb2.summary["power_limit"]["chosen_power_limit_w"] == cb1.summary["power_limit"]["chosen_power_limit_w"]
    other = EnergyCallback(mode="tune", job="other-job", devices=[gpu], output_dir=str(tmp_path / "c"), overrides=TUNE)
    with pytest.warns(EnergyPluginWarning, match="tuning may not finish: the run makes 5 optimizer steps"):
        fit(other, [gpu], 5, tmp_path)  # not reused: it tunes, in too few steps
    assert other.summary is not None and other.summary["power_limit"]["reused"] is False


def test_bad_arguments_fail_when_the_callback_is_built():
    from wattwise.errors import ConfigError

    with pytest.raises(ConfigError, match=r"power_limit\.mode"):
        EnergyCallback(mode="turbo")
    with pytest.raises(ConfigError, match="eta"):
        EnergyCallback(eta=3.0)


class FlakyGPU(SimulatedGPU):
    """A GPU whose energy counter starts failing mid-run with an error no backend maps (a driver bug)."""

    def __init__(self, *args, fail_after: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reads_left = fail_after

    def energy_j(self) -> float:
        self.reads_left -= 1
        if self.reads_left < 0:
            raise RuntimeError("driver returned garbage")
        return super().energy_j()


def test_an_unexpected_measurement_error_never_stops_training(tmp_path, virtual_clock):
    gpu = FlakyGPU(0, base_step_time_s=BASE_S, clock=virtual_clock, sleep=virtual_clock.sleep, fail_after=12)
    # Counters are read only where figures are logged or decided: log every step, so the fault is hit.
    cb = EnergyCallback(
        mode="cap",
        cap_w=200.0,
        devices=[gpu],
        output_dir=str(tmp_path / "run"),
        log_every_n_steps=1,
        overrides=["monitor.sample_power=false"],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(cb, [gpu], 15, tmp_path)
    assert trainer.global_step == 15
    ours = [w for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert len(ours) == 1 and "driver returned garbage" in str(ours[0].message)
    assert gpu.power_limit_w() == 300.0  # the cap was restored when measurement stopped


def test_printing_the_callback_names_its_settings() -> None:
    callback = EnergyCallback(mode="tune", eta=0.3, job="resnet50-nightly", backend="simulated")
    assert repr(callback) == "EnergyCallback(mode='tune', eta=0.3, job='resnet50-nightly', backend='simulated')"
    assert str(EnergyCallback()) == "EnergyCallback(mode='measure', eta=0.5, job=None, backend='auto')"
