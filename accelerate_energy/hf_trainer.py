"""Hugging Face `transformers.Trainer` under `ACCELERATE_ENERGY=1`: checkpoints and logging.

The Trainer builds its own `Accelerator`, which the flag's start-up hook attaches like any other, so steps
(the Trainer's optimizer steps, gradient accumulation included) and the summary need nothing more. Two
things do, and this `TrainerCallback` adds them; the hook installs it in every Trainer it sees:

- **Checkpoints.** The Trainer's checkpoints do not go through `Accelerator.save_state`, so at each save
  (`on_save`, every process) the run's state is written beside the checkpoint as
  `checkpoint-N/wattwise_energy.json`; a resumed Trainer (`train(resume_from_checkpoint=...)`, whose
  state says step N at `on_train_begin`) reads it back. A checkpoint without the file resumes with the
  run's figures starting at the resume.
- **Logging.** At each of the Trainer's logs, the last logging interval's figures (`energy/step_j`,
  `time/step_s`, `power/avg_w`, `power/limit_w`) join the logged values, so every `report_to` tracker
  records them; the callback is placed first, so the reporting callbacks see them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from accelerate_energy.adapter import energy, write_state_file
from wattwise.metrics import step_metrics


class EnergyTrainerCallback(TrainerCallback):
    """Keeps an attached Trainer's energy run in its checkpoints and in its logs."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def _energy(self) -> Any:
        accelerator = getattr(self.trainer, "accelerator", None)
        return energy(accelerator) if accelerator is not None else None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """On a resume, read the run's state saved beside the checkpoint."""
        found = self._energy()
        if found is None or not state.global_step:
            return
        found.load_state_file(Path(args.output_dir) / f"checkpoint-{state.global_step}")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Write the run's state beside the checkpoint the Trainer just saved."""
        found = self._energy()
        if found is None or not found.run.started:
            return
        saved = found.state_dict()  # a collective under distributed training: every process is here
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.trainer.accelerator.is_main_process and folder.is_dir():
            write_state_file(folder, saved)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        """Add the last logging interval's energy, time and power figures to the Trainer's logs."""
        found = self._energy()
        if found is None or logs is None or found.run.last_step is None:
            return
        logs.update(step_metrics(found.run.last_step, found.run.applied_limit_w))


def install(trainer: Any) -> None:
    """Put the callback first in `trainer`'s callbacks (once)."""
    handler = trainer.callback_handler
    if not any(isinstance(cb, EnergyTrainerCallback) for cb in handler.callbacks):
        handler.callbacks.insert(0, EnergyTrainerCallback(trainer))
