"""Every framework hook an adapter implements is marked `@override`, as Lightning marks its own.

A hook that a framework renames or drops then fails the type check instead of silently never running.
"""

from __future__ import annotations

import inspect

import lightning.pytorch as pl
import pytest
from transformers import TrainerCallback

import accelerate_energy.hf_trainer
import lightning_energy.batch_size
import lightning_energy.callback
import lightning_energy.demo
import lightning_energy.flag
import lightning_energy.pipeline

BASES = (pl.Callback, pl.LightningModule, TrainerCallback)
MODULES = (
    lightning_energy.callback,
    lightning_energy.flag,
    lightning_energy.batch_size,
    lightning_energy.pipeline,
    lightning_energy.demo,
    accelerate_energy.hf_trainer,
)


def adapter_classes() -> list[type]:
    return [
        cls
        for module in MODULES
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__ and issubclass(cls, BASES)
    ]


def test_the_adapters_have_framework_classes_to_check() -> None:
    names = {cls.__name__ for cls in adapter_classes()}
    assert {
        "EnergyCallback",
        "FlagEnergyCallback",
        "RecurringBatchSizeCallback",
        "PipelineFrequencyCallback",
        "EmulatedModule",
        "EnergyTrainerCallback",
    } <= names


@pytest.mark.parametrize("cls", adapter_classes(), ids=lambda cls: cls.__name__)
def test_every_hook_an_adapter_implements_is_marked_override(cls: type) -> None:
    base = next(b for b in BASES if issubclass(cls, b))
    unmarked = []
    for name, member in vars(cls).items():
        if name.startswith("_") or not hasattr(base, name):
            continue
        function = member.fget if isinstance(member, property) else member
        if not getattr(function, "__override__", False):
            unmarked.append(name)
    assert not unmarked, f"{cls.__name__}: hooks without @override: {unmarked}"
