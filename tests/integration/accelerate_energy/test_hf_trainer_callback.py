"""`EnergyTrainerCallback` given to a Hugging Face Trainer in `Trainer(callbacks=[...])`, without the flag:
fits of a tiny GPT-2 on the CPU, measured on a simulated GPU, in this process (issue 27), one of them
preempted by SIGTERM; and the callback the flag adds, in a script's process."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[dev]')")

import torch
from accelerate.state import AcceleratorState, GradientState
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from accelerate_energy import EnergyTrainerCallback
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.errors import ConfigError, EnergyPluginWarning
from wattwise.tools.workload import emulate_step

QUIET = "devices.backend=simulated monitor.sample_power=false monitor.sync_cuda=false"
TUNE = "power_limit.wait_steps=1 power_limit.warmup_steps=1 power_limit.profile_steps=2 power_limit.step_w=100"


class Tracker(TrainerCallback):
    """Stands for a `report_to` tracker: every log the Trainer sent it."""

    logs: ClassVar[list[dict[str, Any]]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.logs.append({"step": state.global_step, **(logs or {})})


class RandomTokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 128, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone()}


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [k for k in os.environ if k.startswith("ACCELERATE_ENERGY")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    Tracker.logs.clear()


def trainer(out: Path, max_steps: int, *callbacks: Any, logging_steps: int = 5) -> Trainer:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        save_steps=10,
        save_strategy="steps",
        logging_steps=logging_steps,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    return Trainer(model=model, args=args, train_dataset=RandomTokens(), callbacks=[Tracker(), *callbacks])


def test_the_callback_in_callbacks_measures_the_run_and_logs_at_the_trainers_logging_steps(tmp_path: Path) -> None:
    # 40 steps, logging_steps=5: each of the Trainer's 8 step logs carries the energy of its interval.
    t = trainer(tmp_path / "out", 40, EnergyTrainerCallback(output_dir=str(tmp_path / "run"), overrides=QUIET))
    assert isinstance(t.callback_handler.callbacks[0], EnergyTrainerCallback)  # first: trackers see its figures
    t.train()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 40 and summary["framework"] == "transformers" and summary["status"] == "completed"
    with_energy = [log["step"] for log in Tracker.logs if "energy/step_j" in log]
    assert with_energy == [5, 10, 15, 20, 25, 30, 35, 40]
    assert all(log["energy/step_j"] > 0 and log["time/step_s"] > 0 for log in Tracker.logs if "energy/step_j" in log)
    # The Trainer's own history (what scripts and notebooks read) holds the same figures, then the run's.
    history = t.state.log_history
    assert [e["step"] for e in history if "energy/step_j" in e] == with_energy
    assert [e["energy/step_j"] for e in history if "energy/step_j" in e] == [
        log["energy/step_j"] for log in Tracker.logs if "energy/step_j" in log
    ]
    assert history[-1]["energy/fit_j"] == pytest.approx(summary["energy_j"])
    assert history[-1]["step"] == 40 and "energy/fit_uncertainty_j" in history[-1]


class Drive(TrainerCallback):
    """Each optimizer step keeps the simulated GPU busy for its modelled step time (what tuning compares)."""

    def __init__(self, gpu: SimulatedGPU) -> None:
        self.gpu = gpu

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        emulate_step([self.gpu], lambda: None)


def test_a_copied_checkpoint_resumes_its_energy_state_without_tuning_again(tmp_path: Path, virtual_clock) -> None:
    def callbacks(name: str) -> tuple[EnergyTrainerCallback, Drive]:
        gpu = SimulatedGPU(
            0, PowerModel.default(), base_step_time_s=0.01, clock=virtual_clock, sleep=virtual_clock.sleep
        )
        return (
            EnergyTrainerCallback(
                mode="tune", output_dir=str(tmp_path / name), overrides=f"{QUIET} {TUNE}", devices=[gpu]
            ),
            Drive(gpu),
        )

    trainer(tmp_path / "out", 20, *callbacks("first")).train()
    first = json.loads((tmp_path / "first" / "summary.json").read_text())
    assert first["power_limit"]["tuning"]["finished"] is True
    # The checkpoint moves elsewhere (copied, downloaded); the resumed Trainer has another output_dir.
    copied = tmp_path / "elsewhere" / "checkpoint-20"
    shutil.copytree(tmp_path / "out" / "checkpoint-20", copied)
    saved = json.loads((copied / "wattwise_energy.json").read_text())
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    trainer(tmp_path / "out2", 30, *callbacks("second")).train(resume_from_checkpoint=str(copied))
    second = json.loads((tmp_path / "second" / "summary.json").read_text())
    assert second["steps"] == 30
    assert second["resumed_energy_j"] == pytest.approx(saved["energy_j"])
    chosen = first["power_limit"]["chosen_power_limit_w"]
    assert second["power_limit"]["chosen_power_limit_w"] == chosen
    assert {e["value"] for e in second["settings_timeline"]} == {chosen}  # nothing profiled again


def test_a_callback_added_after_the_trainer_was_built_says_where_it_goes(tmp_path: Path) -> None:
    t = trainer(tmp_path / "out", 2)
    t.add_callback(EnergyTrainerCallback(output_dir=str(tmp_path / "run"), overrides=QUIET))
    with pytest.warns(EnergyPluginWarning, match=r"pass it when building the Trainer: Trainer\(\.\.\., callbacks="):
        t.train()
    assert not (tmp_path / "run" / "summary.json").exists()


def test_two_energy_callbacks_are_refused_when_the_trainer_is_built(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="the Trainer has 2 EnergyTrainerCallback callbacks; give it one"):
        trainer(tmp_path / "out", 2, EnergyTrainerCallback(), EnergyTrainerCallback())


class PreemptedAt(TrainerCallback):
    """SIGTERM reaches the process after optimizer step `step`; the script's own handler (installed before
    training, as a preemptible script does) asks the Trainer to stop at the end of that step."""

    def __init__(self, step: int, gpu: SimulatedGPU) -> None:
        self.step, self.gpu = step, gpu
        self.received: int | None = None
        #: The GPU's limit just before and just after the signal.
        self.limits_w: list[float] = []

    def handler(self, signum: int, frame: Any) -> None:
        self.received = signum

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            self.limits_w.append(self.gpu.power_limit_w())
            os.kill(os.getpid(), signal.SIGTERM)
            self.limits_w.append(self.gpu.power_limit_w())
        if self.received is not None:
            control.should_training_stop = True


def test_sigterm_in_a_tuned_trainer_restores_the_gpu_and_lets_the_scripts_handling_stop_it(
    tmp_path: Path, virtual_clock
) -> None:
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.01, clock=virtual_clock, sleep=virtual_clock.sleep)
    gpu.set_power_limit_w(250.0)  # the GPU's own limit
    preempted = PreemptedAt(6, gpu)
    energy = EnergyTrainerCallback(
        mode="tune", output_dir=str(tmp_path / "run"), overrides=f"{QUIET} {TUNE}", devices=[gpu]
    )
    found = signal.signal(signal.SIGTERM, preempted.handler)
    try:
        t = trainer(tmp_path / "out", 40, energy, Drive(gpu), preempted)
        interrupted = "tuning did not finish: the run was interrupted by a signal after 6 optimizer steps"
        with pytest.warns(EnergyPluginWarning, match=interrupted):
            t.train()
        assert signal.getsignal(signal.SIGTERM) == preempted.handler  # the script's handler is back
    finally:
        signal.signal(signal.SIGTERM, found)
    assert preempted.received == signal.SIGTERM  # the script's own handling ran ...
    assert t.state.global_step == 6  # ... and stopped the Trainer where it stops without wattwise
    assert preempted.limits_w == [200.0, 250.0]  # tuning's second limit, restored at the signal itself
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("interrupted", 6)
    assert [e["value"] for e in summary["settings_timeline"]] == [300.0, 200.0]  # nothing changed after it
    assert gpu.power_limit_w() == 250.0
