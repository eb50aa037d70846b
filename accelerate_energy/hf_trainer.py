"""Hugging Face `transformers.Trainer`: `EnergyTrainerCallback`, explicit or added by `ACCELERATE_ENERGY=1`.

    trainer = Trainer(..., callbacks=[EnergyTrainerCallback(mode="tune", output_dir="runs")])

The callback takes the keyword arguments of the Lightning `EnergyCallback` (`wattwise.config.SETTINGS`,
`config`, `overrides`, `devices`). The Trainer builds its own `Accelerator`: when the Trainer is built,
the callback attaches it with its settings (importing this module wraps `Trainer.__init__` for that), so
steps (the Trainer's optimizer steps, gradient accumulation included) and the summary come from the
Accelerate adapter. Under `ACCELERATE_ENERGY=1` the flag's start-up hook adds a callback with the flag's
settings to every Trainer that has none; a Trainer with its own keeps only its own. The callback adds:

- **Checkpoints.** The Trainer's checkpoints do not go through `Accelerator.save_state`, so at each save
  (`on_save`, every process) the run's state is written beside the checkpoint as
  `checkpoint-N/wattwise_energy.json`. A resumed Trainer reads it back from the checkpoint it resumes
  from: the path given to `train(resume_from_checkpoint=...)` (a copied or downloaded checkpoint
  included), or the last checkpoint of `output_dir` for `resume_from_checkpoint=True`. A checkpoint
  without the file resumes with the run's figures starting at the resume.
- **The end.** When training ends (`on_train_end`) the run finishes: settings restored, summary written
  before `train` returns.
- **Logging.** The step figures are combined at the Trainer's own `logging_steps` (unless
  `log_every_n_steps` is set), and at each of the Trainer's logs the last logging interval's figures
  (`energy/step_j`, `energy/step_uncertainty_j`, `time/step_s`, `power/avg_w`, `power/limit_w`, and
  `wattwise/simulated` = 1 on a simulated GPU) join the logged values once, so the Trainer's own log lines
  and every `report_to` tracker record them; the callback is placed first, so the reporting callbacks see
  them. `trainer.state.log_history` holds them too, and, once training ends, the whole run's figures
  (`energy/fit_j`, `energy/fit_uncertainty_j`, `time/fit_s`) as its last entry.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from typing_extensions import override

from accelerate_energy.adapter import AccelerateEnergy, energy, write_state_file
from accelerate_energy.wrapping import after_init
from wattwise import flags
from wattwise.config import EnergyConfig, arguments_config, refuse_positional
from wattwise.devices.base import Device
from wattwise.errors import ConfigError, UsageError, plugin_warning
from wattwise.run import Figures
from wattwise.run.logged import simulated, step_metrics
from wattwise.vocabulary import Framework, RunStatus

#: The framework a Trainer's run names in its summary and the run history.
TRANSFORMERS = Framework.TRANSFORMERS


class EnergyTrainerCallback(TrainerCallback):
    """Measure energy in a Hugging Face Trainer and optionally tune or cap the GPU power limit.

    The keyword arguments `mode`, `selector`, `eta`, `max_slowdown`, `cap_w`, `cap_fraction`, `job`,
    `output_dir`, `strict`, `backend` and `log_every_n_steps` are the settings of `wattwise.config.SETTINGS`,
    as for the Lightning `EnergyCallback` (`log_every_n_steps` None: the Trainer's `logging_steps`).

    Args:
        config: an OmegaConf YAML (see `configs/energy.yaml`) with any other setting.
        overrides: dotlist overrides applied last, a list or one string of them separated by spaces.
        devices: devices to use instead of discovering them (tests, custom setups).

    Raises:
        ConfigError: an argument of the wrong type or value, or given by position, when the callback is made.
    """

    def __init__(
        self,
        *args: Any,
        mode: str | None = None,
        selector: str | None = None,
        eta: float | None = None,
        max_slowdown: float | None = None,
        cap_w: float | None = None,
        cap_fraction: float | None = None,
        job: str | None = None,
        output_dir: str | None = None,
        strict: bool | None = None,
        backend: str | None = None,
        log_every_n_steps: int | None = None,
        config: str | None = None,
        overrides: str | list[str] | None = None,
        devices: list[Device] | None = None,
    ) -> None:
        refuse_positional(type(self).__name__, args)
        given = {
            "mode": mode,
            "selector": selector,
            "eta": eta,
            "max_slowdown": max_slowdown,
            "cap_w": cap_w,
            "cap_fraction": cap_fraction,
            "job": job,
            "output_dir": output_dir,
            "strict": strict,
            "backend": backend,
            "log_every_n_steps": log_every_n_steps,
        }
        #: The callback's settings; None for the flag's callback, whose accelerator the flag attaches.
        self.config: EnergyConfig | None = arguments_config(
            type(self).__name__, given, config=config, overrides=overrides
        )
        self._devices = devices
        self.trainer: Any = None
        #: The checkpoint folder the Trainer's `train` was asked to resume from (None: a fresh start).
        self.resume_from: Path | None = None
        self._logged: Figures | None = None

    @override
    def __repr__(self) -> str:
        """The settings that say what this callback does: `EnergyTrainerCallback(mode='tune', eta=0.5, ...)`."""
        if self.config is None:
            return f"{type(self).__name__}(settings from the ACCELERATE_ENERGY_* environment variables)"
        return self.config.described_as(type(self).__name__)

    @classmethod
    def for_flag(cls) -> EnergyTrainerCallback:
        """The callback `ACCELERATE_ENERGY=1` adds: the flag's start-up hook attaches the accelerator itself."""
        callback = cls()
        callback.config = None
        return callback

    def bind(self, trainer: Any) -> None:
        """Take `trainer` (just built): attach its accelerator with this callback's settings, follow `train`."""
        self.trainer = trainer
        accelerator = trainer.accelerator
        if self.config is not None and energy(accelerator) is None:
            AccelerateEnergy(accelerator, self.config, devices=self._devices, framework=TRANSFORMERS).install()
        found = energy(accelerator)
        if found is not None:  # the flag's hook attached the accelerator: its run is the Trainer's all the same
            found.run.framework = TRANSFORMERS
        train = trainer.train

        @functools.wraps(train)
        def train_noting_the_checkpoint(*args: Any, **kwargs: Any) -> Any:
            self.resume_from = _checkpoint(trainer, kwargs.get("resume_from_checkpoint", args[0] if args else None))
            return train(*args, **kwargs)

        trainer.train = train_noting_the_checkpoint

    def _energy(self) -> AccelerateEnergy | None:
        accelerator = getattr(self.trainer, "accelerator", None)
        return energy(accelerator) if accelerator is not None else None

    @override
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Take the Trainer's logging cadence; on a resume, read the run's state saved in the checkpoint."""
        if self.trainer is None:
            plugin_warning(
                "wattwise: EnergyTrainerCallback was added after the Trainer was built, so it measures "
                "nothing; pass it when building the Trainer: "
                "Trainer(..., callbacks=[EnergyTrainerCallback()])",
                stacklevel=2,
            )
            return
        found = self._energy()
        if found is None:
            return
        found.run.framework = TRANSFORMERS  # also when the flag's hook attached the accelerator after `bind`
        if found.config.log_every_n_steps is None and args.logging_strategy == "steps":
            found.run.log_every_n_steps = max(1, int(state.logging_steps))
        if not state.global_step:
            return
        folder = self.resume_from or Path(args.output_dir) / f"checkpoint-{state.global_step}"
        found.load_state_file(folder)

    @override
    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Finish the run (every process): settings restored, summary written when `train` returns."""
        found = self._energy()
        if found is None:
            return
        found.finish(RunStatus.COMPLETED)
        if found.fit_metrics is not None:  # the run's figures join the Trainer's history, as its train summary does
            state.log_history.append({**found.fit_metrics, "step": state.global_step})

    @override
    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Write the run's state beside the checkpoint the Trainer just saved."""
        found = self._energy()
        if found is None or not found.run.started:
            return
        saved = found.state_dict()  # a collective under distributed training: every process is here
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.trainer.accelerator.is_main_process and folder.is_dir():
            write_state_file(folder, saved)

    @override
    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Add the last logging interval's energy, time and power figures to the Trainer's logs (once each)."""
        found = self._energy()
        if found is None or logs is None:
            return
        rec = found.run.last_step
        if rec is None or rec is self._logged:
            return
        self._logged = rec
        metrics = step_metrics(rec, found.run.power_limit_w, simulated=simulated(found.run))
        logs.update(metrics)
        # The Trainer appended a copy of `logs` to its history just before this call: the figures go there too.
        history = state.log_history
        if history and history[-1].get("step") == state.global_step:
            history[-1].update(metrics)


def _checkpoint(trainer: Any, resume_from_checkpoint: Any) -> Path | None:
    """The folder `Trainer.train(resume_from_checkpoint=...)` resumes from, as the Trainer resolves it."""
    if resume_from_checkpoint is True:
        last = get_last_checkpoint(trainer.args.output_dir)
        return Path(last) if last is not None else None
    if isinstance(resume_from_checkpoint, str | Path):
        return Path(resume_from_checkpoint)
    return None


def install(trainer: Any) -> None:
    """Bind the Trainer's `EnergyTrainerCallback`, first in its callbacks, or add the flag's when the flag is on.

    Raises:
        ConfigError: the Trainer was given more than one `EnergyTrainerCallback`.
    """
    handler = trainer.callback_handler
    ours = [cb for cb in handler.callbacks if isinstance(cb, EnergyTrainerCallback)]
    if len(ours) > 1:
        raise ConfigError(f"the Trainer has {len(ours)} EnergyTrainerCallback callbacks; give it one")
    if ours:
        callback = ours[0]
        handler.callbacks.remove(callback)
    elif flags.enabled(flags.ACCELERATE):
        callback = EnergyTrainerCallback.for_flag()
    else:
        return
    handler.callbacks.insert(0, callback)
    callback.bind(trainer)


def equip_every_trainer() -> None:
    """Wrap `Trainer.__init__` (once) so that each Trainer built from now on is equipped by `install`."""
    after_init(Trainer, _install_or_warn)


def _install_or_warn(trainer: Any) -> None:
    try:
        install(trainer)
    except UsageError:  # a user's mistake (two callbacks, a bad setting) is refused before training
        raise
    except Exception as err:  # an energy plugin never breaks training
        plugin_warning(
            f"wattwise: could not equip the Trainer ({err}); its run is measured, but not kept "
            "across checkpoints nor logged through report_to",
            stacklevel=3,
        )


# Every Trainer built from now on binds its callback (the flag's start-up hook calls the same).
equip_every_trainer()
