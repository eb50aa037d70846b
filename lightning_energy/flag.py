"""`FlagEnergyCallback`: the `EnergyCallback` that `LIGHTNING_ENERGY=1` adds to every Trainer.

Its settings are the `LIGHTNING_ENERGY_*` variables, with the names and meanings of the
`ACCELERATE_ENERGY_*` ones (`wattwise.flags`). A Trainer that already has an `EnergyCallback` keeps only
its own: the flag's callback has its own `state_key` (Lightning refuses two stateful callbacks with the
same key) and steps aside at `setup`, doing nothing for that fit.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lightning_energy.callback import EnergyCallback
from wattwise import flags
from wattwise.config import EnergyConfig


class FlagEnergyCallback(EnergyCallback):
    """An `EnergyCallback` made from a ready `EnergyConfig` (the flag's), inert beside another one."""

    def __init__(self, config: EnergyConfig) -> None:
        super().__init__()
        self.config = config
        #: True while the Trainer has another `EnergyCallback`: this one then does nothing.
        self.inert = False

    @property
    @override
    def state_key(self) -> str:
        """The checkpoint key of the flag's callback, apart from a script's own `EnergyCallback`."""
        return self._generate_state_key(flag=flags.LIGHTNING, job=self.config.job)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Measure the fit unless the Trainer has its own `EnergyCallback` (then this one stays inert)."""
        if stage != "fit":
            return
        others = [
            cb
            for cb in trainer.callbacks  # type: ignore[attr-defined]
            if isinstance(cb, EnergyCallback) and cb is not self
        ]
        if others and not self.inert:
            rank_zero_info(
                f"wattwise: {flags.LIGHTNING} is set, but the Trainer has its own EnergyCallback: the flag adds nothing"
            )
        self.inert = bool(others)
        if self.inert:
            self.run = None
        else:
            super().setup(trainer, pl_module, stage)

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from a checkpoint's state, unless inert."""
        if not self.inert:
            super().load_state_dict(state_dict)


def from_env() -> list[FlagEnergyCallback]:
    """`[FlagEnergyCallback]` when `LIGHTNING_ENERGY` is on, else `[]`.

    A bad variable raises `wattwise.errors.ConfigError` naming it (from `Trainer(...)`, before anything runs).
    """
    if not flags.enabled(flags.LIGHTNING):
        return []
    return [FlagEnergyCallback(flags.config_from_env(flags.LIGHTNING))]
