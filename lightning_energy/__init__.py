"""PyTorch Lightning adapter for wattwise: `EnergyCallback` and friends.

`EnergyCallback` measures energy and tunes or caps the GPU power limit; `RecurringBatchSizeCallback` chooses
the batch size of a job that runs again and again; `PipelineFrequencyCallback` follows a pipeline's
frequency plan. Each is loaded when first used, so a `Trainer` with the flag off pays nothing for wattwise.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_energy.batch_size import RecurringBatchSizeCallback
    from lightning_energy.callback import EnergyCallback
    from lightning_energy.pipeline import PipelineFrequencyCallback

#: Public name -> the module that defines it.
_MODULES = {
    "EnergyCallback": "lightning_energy.callback",
    "PipelineFrequencyCallback": "lightning_energy.pipeline",
    "RecurringBatchSizeCallback": "lightning_energy.batch_size",
}

__all__ = ["EnergyCallback", "PipelineFrequencyCallback", "RecurringBatchSizeCallback"]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(_MODULES[name])
    except ModuleNotFoundError as err:  # torch and the framework come with the `lightning` extra
        from wattwise.extras import missing_extra

        raise missing_extra(err, "lightning_energy", "lightning") from None
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
