"""Hugging Face Accelerate adapter for wattwise: one environment variable, at most one line in a script.

    accelerator = accelerate_energy.attach(Accelerator(...))   # does nothing unless ACCELERATE_ENERGY=1

A Hugging Face Trainer takes `Trainer(..., callbacks=[accelerate_energy.EnergyTrainerCallback()])`.
With `ACCELERATE_ENERGY=1` even that line is optional: `accelerate_energy.flag_hook` (imported at start-up
by the installed `wattwise-accelerate.pth`) has `accelerate_energy.auto_attach` attach every `Accelerator`.
The names below are loaded when first used, so that start-up hook loads neither torch nor accelerate
before the script does.
"""

from __future__ import annotations

# Not `typing.TYPE_CHECKING`: the flag's start-up hook imports this package in every Python process, and
# importing `typing` alone would cost a few milliseconds there (type checkers read the name the same way).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from accelerate_energy.adapter import AccelerateEnergy, attach, energy, energy_run, epoch_end, not_training
    from accelerate_energy.batch_size import RecurringRun, recurring_batch_size
    from accelerate_energy.hf_trainer import EnergyTrainerCallback
    from accelerate_energy.pipeline import follow_frequency_plan
    from accelerate_energy.plugin import EnergyPlugin

#: Public name -> the module that defines it.
_MODULES = {
    "AccelerateEnergy": "accelerate_energy.adapter",
    "EnergyPlugin": "accelerate_energy.plugin",
    "EnergyTrainerCallback": "accelerate_energy.hf_trainer",
    "RecurringRun": "accelerate_energy.batch_size",
    "attach": "accelerate_energy.adapter",
    "energy": "accelerate_energy.adapter",
    "energy_run": "accelerate_energy.adapter",
    "epoch_end": "accelerate_energy.adapter",
    "follow_frequency_plan": "accelerate_energy.pipeline",
    "not_training": "accelerate_energy.adapter",
    "recurring_batch_size": "accelerate_energy.batch_size",
}

__all__ = [
    "AccelerateEnergy",
    "EnergyPlugin",
    "EnergyTrainerCallback",
    "RecurringRun",
    "attach",
    "energy",
    "energy_run",
    "epoch_end",
    "follow_frequency_plan",
    "not_training",
    "recurring_batch_size",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    try:
        module = importlib.import_module(_MODULES[name])
    except ModuleNotFoundError as err:  # torch and the framework come with the `accelerate` extra
        from wattwise.extras import missing_extra

        raise missing_extra(err, "accelerate_energy", "accelerate") from None
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
