"""Lightning's entry point for the flag: `LIGHTNING_ENERGY=1` adds an `EnergyCallback` to every Trainer.

Registered under `lightning.pytorch.callbacks_factory`, which every `Trainer.__init__` calls with no
arguments. With the flag off it returns an empty list, and a Trainer pays nothing for it.
"""

import os


def callbacks() -> list[object]:
    """`[FlagEnergyCallback]` when `LIGHTNING_ENERGY` is on, else `[]`.

    The callback is built from the `LIGHTNING_ENERGY_*` variables.
    """
    if os.environ.get("LIGHTNING_ENERGY", "").strip().lower() in ("", "0", "false", "no", "off"):
        return []
    from lightning_energy.flag import from_env  # a bad value of LIGHTNING_ENERGY itself is refused there

    return [*from_env()]
