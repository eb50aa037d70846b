"""Every framework hook an adapter implements is marked `@override`, as Lightning marks its own.

A hook that a framework renames or drops then fails the type check instead of silently never running.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import lightning.pytorch as pl
import pytest
from transformers import TrainerCallback
from typing_extensions import override

import accelerate_energy
import lightning_energy

BASES = (pl.Callback, pl.LightningModule, TrainerCallback)


def adapter_modules() -> list[ModuleType]:
    """Every module of both adapter packages, so that a class in a module added later is checked too."""
    return [
        importlib.import_module(info.name)
        for package in (lightning_energy, accelerate_energy)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
    ]


def adapter_classes() -> list[type]:
    return [
        cls
        for module in adapter_modules()
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


def unmarked_hooks(cls: type) -> list[str]:
    """The public methods (and properties) of `cls` that its framework base class has and that lack `@override`."""
    base = next(b for b in BASES if issubclass(cls, b))
    unmarked = []
    for name, member in vars(cls).items():
        if name.startswith("_") or not hasattr(base, name):
            continue
        function = member.fget if isinstance(member, property) else member
        if not getattr(function, "__override__", False):
            unmarked.append(name)
    return unmarked


@pytest.mark.parametrize("cls", adapter_classes(), ids=lambda cls: cls.__name__)
def test_every_hook_an_adapter_implements_is_marked_override(cls: type) -> None:
    unmarked = unmarked_hooks(cls)
    assert not unmarked, f"{cls.__name__}: hooks without @override: {unmarked}"


def test_a_hook_without_override_is_found_and_a_method_of_its_own_is_not() -> None:
    class Unmarked(pl.Callback):
        def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None: ...

        @override
        def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None: ...

        def summary(self) -> None: ...

    assert unmarked_hooks(Unmarked) == ["on_fit_start"]
