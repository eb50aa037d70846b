"""The adapter: an `Accelerator`'s life cycle forwarded to one `wattwise.run.Run`.

Accelerate has no callbacks, so `attach` hooks the accelerator instance itself:

- `prepare_optimizer` (which `prepare` uses): the run starts when the first optimizer is prepared, and a
  step post-hook on each wrapped torch optimizer ends one step and begins the next. That hook runs only
  when the optimizer really stepped: not on gradient-accumulation micro-batches (Accelerate's
  `AcceleratedOptimizer` skips the inner `step` while `sync_gradients` is False), not when the gradient
  scaler skipped the step for an overflow. **A step is one optimizer step** (with two optimizers, each
  one's step counts), so `profile_steps` means the same work as under Lightning, and a power-limit change
  happens only between optimizer steps. Steps that neither log nor close a profile only count.
- What is not training is paused out of the step and profile figures (reported apart in the summary):
  an evaluation, from a `gather_for_metrics` call made while every prepared model is in eval mode, and
  `save_state`, each until the next `backward` or optimizer step; `not_training(accelerator)` marks any
  other stretch by hand.
- `end_training`: the run finishes (summary written on the main process, settings restored) before the
  process group is destroyed. Without `end_training`, the run finishes at interpreter exit.
- Checkpoints: `save_state` writes the run's state beside the checkpoint as `wattwise_energy.json`, and
  `load_state` reads it when it is there, through Accelerate's state pre-hooks, not
  `register_for_checkpointing`: so a checkpoint saved with wattwise off loads with it on, and the reverse.

Metrics go through `accelerator.log` to the user's trackers, at the logging cadence, already combined
over processes.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch.utils.hooks import RemovableHandle
from typing_extensions import override

from accelerate_energy.plugin import EnergyPlugin
from wattwise.config import EnergyConfig
from wattwise.devices.base import Device
from wattwise.errors import plugin_warning
from wattwise.record.summary import format_summary
from wattwise.run import DEFAULT_LOG_EVERY_N_STEPS, Figures, Run
from wattwise.run.logged import epoch_metrics, fit_metrics, simulated, step_metrics
from wattwise.safe_files import write_text
from wattwise.vocabulary import Framework, RunStatus

log = logging.getLogger(__name__)

#: Attribute of an attached accelerator that holds its `AccelerateEnergy`.
_ATTRIBUTE = "_wattwise_energy"


#: The run's state in a checkpoint folder written by `save_state`.
STATE_FILE = "wattwise_energy.json"


class AccelerateEnergy:
    """The energy run of one `Accelerator`. Made by `attach`; see the module docstring."""

    def __init__(
        self,
        accelerator: Accelerator,
        config: EnergyConfig,
        *,
        devices: list[Device] | None = None,
        print_summary: bool = True,
        framework: str = Framework.ACCELERATE,
    ) -> None:
        self.accelerator = accelerator
        self.config = config
        #: Print the few-line summary on stderr (main process) when the run finishes.
        self.print_summary = print_summary
        #: Who drives the run, as its summary and the run history say ("transformers" for the HF Trainer).
        self.run = Run(config, framework=framework, devices=devices, local_rank=accelerator.local_process_index)
        self.run.log_every_n_steps = config.log_every_n_steps or DEFAULT_LOG_EVERY_N_STEPS
        self._step_hooks: dict[int, RemovableHandle] = {}
        self._state_hooks: list[RemovableHandle] = []
        self._epoch_first_step = 0
        #: The whole run's figures as logged once it finished (`fit_metrics`); None before, or unmeasured.
        self.fit_metrics: dict[str, float] | None = None

    @override
    def __repr__(self) -> str:
        """The settings that say what this run does: `AccelerateEnergy(mode='tune', eta=0.5, ...)`."""
        return self.config.described_as(type(self).__name__)

    def install(self) -> None:
        """Hook the accelerator's optimizer preparation, evaluation, checkpoints and end of training."""
        acc = self.accelerator
        if energy(acc) is not None:
            raise RuntimeError("wattwise is already attached to this accelerator")
        setattr(acc, _ATTRIBUTE, self)
        prepare_optimizer, end_training = acc.prepare_optimizer, acc.end_training
        backward, gather_for_metrics, save_state = acc.backward, acc.gather_for_metrics, acc.save_state
        run = self.run

        def prepare_optimizer_measured(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            prepared = prepare_optimizer(optimizer, *args, **kwargs)
            self._follow(prepared)
            return prepared

        def end_training_measured() -> None:
            self.finish(RunStatus.COMPLETED)
            end_training()

        def backward_measured(loss: Any, **kwargs: Any) -> Any:
            if run.paused:  # training again after an evaluation or a checkpoint
                run.resume()
            return backward(loss, **kwargs)

        def gather_for_metrics_measured(*args: Any, **kwargs: Any) -> Any:
            if not run.paused and self._evaluating():
                run.pause("validation")
            return gather_for_metrics(*args, **kwargs)

        def save_state_measured(*args: Any, **kwargs: Any) -> Any:
            run.pause("checkpoint")
            return save_state(*args, **kwargs)

        acc.prepare_optimizer = prepare_optimizer_measured
        acc.end_training = end_training_measured
        acc.backward = backward_measured
        acc.gather_for_metrics = gather_for_metrics_measured
        acc.save_state = save_state_measured
        self._state_hooks = [
            acc.register_save_state_pre_hook(self._save_hook),
            acc.register_load_state_pre_hook(self._load_hook),
        ]

    def _evaluating(self) -> bool:
        models = getattr(self.accelerator, "_models", [])
        return bool(models) and not any(getattr(m, "training", True) for m in models)

    @property
    def summary(self) -> dict[str, Any] | None:
        """The run's summary once it finished (on every process), else None."""
        return self.run.summary

    # -- life cycle ------------------------------------------------------------------------------------
    def _follow(self, prepared: torch.optim.Optimizer) -> None:
        """Count the real steps of every prepared optimizer.

        One prepared again (as after `find_executable_batch_size` retries with a smaller batch) is followed
        once.
        """
        inner = getattr(prepared, "optimizer", prepared)  # the torch optimizer inside AcceleratedOptimizer
        old = self._step_hooks.pop(id(inner), None)
        if old is not None:
            old.remove()
        self._step_hooks[id(inner)] = inner.register_step_post_hook(self._on_optimizer_step)
        if not self.run.started:
            self.run.start()
            self.run.epoch_begin()
            self.run.step_begin()
            self._epoch_first_step = self.run.step_count
            atexit.register(self._at_exit)

    def _on_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        run = self.run
        rec = run.step_end()
        if rec is not None:
            self.accelerator.log(step_metrics(rec, run.power_limit_w, simulated=simulated(run)), step=run.step_count)
        run.step_begin()

    def epoch_end(self) -> Figures | None:
        """Close the epoch (time and energy over all processes) and open the next one."""
        run = self.run
        if not run.started or run.finished:
            return None
        rec = self._close_epoch()
        run.epoch_begin()
        return rec

    def _close_epoch(self) -> Figures | None:
        rec = self.run.epoch_end()
        self._epoch_first_step = self.run.step_count
        if rec is not None:
            self.accelerator.log(epoch_metrics(rec, simulated=simulated(self.run)), step=self.run.step_count)
        return rec

    def finish(self, status: RunStatus = RunStatus.COMPLETED) -> dict[str, Any] | None:
        """End the run on every process: restore settings, write the summary (main process), log it."""
        run = self.run
        if not run.started or run.finished:
            return self.summary
        atexit.unregister(self._at_exit)
        for hook in self._step_hooks.values():
            hook.remove()
        self._step_hooks.clear()
        if run.step_count > self._epoch_first_step:  # the last (or only) epoch
            self._close_epoch()
        record = run.finish(status)
        if record is not None:
            self.fit_metrics = fit_metrics(record)
            self.accelerator.log(self.fit_metrics, step=run.step_count)
            if self.print_summary:
                self.accelerator.print(format_summary(record, output_dir=self.config.output_dir), file=sys.stderr)
        return self.summary

    def _at_exit(self) -> None:
        """The script ended without `end_training`: finish the run.

        Apart from the other processes (`Run.finish_alone`) when they may not meet: an exception, or the
        process group gone.
        """
        exc = getattr(sys, "last_value", None)  # set by the interpreter for an uncaught exception
        if exc is None and self._processes_can_meet():
            self.finish(RunStatus.COMPLETED)
            return
        self.run.abort(exc)
        status = RunStatus.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else RunStatus.FAILED
        if self.run.collective.world_size == 1:
            self.finish(status)
        else:  # the other processes may have died or be stuck in a collective: meeting them could hang
            self.run.finish_alone(status if exc is not None else RunStatus.COMPLETED, exc)

    def _processes_can_meet(self) -> bool:
        if self.run.collective.world_size == 1:
            return True
        return bool(torch.distributed.is_initialized())

    # -- checkpoints (Accelerate's save/load state pre-hooks) ----------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The run's state, for a checkpoint (a collective under distributed training: every process calls it)."""
        return self.run.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the run from a checkpoint's state."""
        self.run.load_state_dict(state)

    def _save_hook(self, models: list[Any], weights: list[Any], output_dir: str) -> None:
        """`save_state` (every process): the run's state beside the checkpoint, written by the main process."""
        state = self.state_dict()  # a collective under distributed training: every process is here
        if not self.accelerator.is_main_process:
            return
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        write_state_file(folder, state)

    def _load_hook(self, models: list[Any], input_dir: str) -> None:
        """`load_state`: resume the run's state when the checkpoint has it."""
        self.load_state_file(Path(input_dir))

    def load_state_file(self, folder: Path) -> None:
        """Resume the run's state from a checkpoint folder's `STATE_FILE` when it has one.

        A checkpoint saved with wattwise off has none: the run then starts its figures at the resume.
        """
        path = folder / STATE_FILE
        if not path.is_file():
            log.info(
                "wattwise: %s has no %s (saved with wattwise off?): energy counts from this resume", folder, STATE_FILE
            )
            return
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            plugin_warning(f"wattwise: ignoring {path} ({err}): energy counts from this resume")
            return
        if isinstance(state, dict):
            self.load_state_dict(state)


@contextlib.contextmanager
def not_training(accelerator: Accelerator, kind: str = "validation") -> Iterator[None]:
    """Mark a stretch that is not training (`kind`: "validation", "checkpoint", ...).

    It is left out of step figures and power-limit profiles and reported apart in the summary. Nothing when wattwise
    is off.
    """
    found = energy(accelerator)
    if found is None:
        yield
        return
    found.run.pause(kind)
    try:
        yield
    finally:
        found.run.resume()


def attach(
    accelerator: Accelerator, plugin: EnergyPlugin | None = None, *, devices: list[Device] | None = None
) -> Accelerator:
    """Turn wattwise on for `accelerator` when the plugin is enabled; returns the same accelerator.

    `plugin` defaults to `EnergyPlugin()`, which reads the `ACCELERATE_ENERGY_*` environment variables;
    when it is not enabled nothing is touched. `devices` replaces device discovery (tests, custom set-ups).
    A bad setting raises `wattwise.errors.ConfigError` here, before training starts.
    """
    plugin = plugin if plugin is not None else EnergyPlugin()
    if plugin.enabled and energy(accelerator) is None:
        AccelerateEnergy(accelerator, plugin.to_config(), devices=devices).install()
    return accelerator


def write_state_file(folder: Path, state: dict[str, Any]) -> None:
    """A run's state (`AccelerateEnergy.state_dict`) as `STATE_FILE` in a checkpoint folder."""
    write_text(folder / STATE_FILE, json.dumps(state, indent=1, allow_nan=False) + "\n")


def energy(accelerator: Accelerator) -> AccelerateEnergy | None:
    """The energy handle of an attached accelerator (its `run`, `summary`), or None when off."""
    found = getattr(accelerator, _ATTRIBUTE, None)
    return found if isinstance(found, AccelerateEnergy) else None


def energy_run(accelerator: Accelerator) -> Run | None:
    """The energy run of `accelerator` (its `gpus`, `last_step`, ...), or None when wattwise is off."""
    found = energy(accelerator)
    return found.run if found is not None else None


def epoch_end(accelerator: Accelerator) -> Figures | None:
    """Optional: mark the end of an epoch (per-epoch energy in the summary; tuning never profiles across it).

    Without it the run is one epoch. Does nothing when wattwise is off.
    """
    found = energy(accelerator)
    return found.epoch_end() if found is not None else None
