"""PyTorch Lightning adapter for wattwise: `EnergyCallback` and friends."""

from lightning_energy.batch_size import RecurringBatchSizeCallback
from lightning_energy.callback import EnergyCallback
from lightning_energy.pipeline import PipelineFrequencyCallback

__all__ = ["EnergyCallback", "PipelineFrequencyCallback", "RecurringBatchSizeCallback"]
