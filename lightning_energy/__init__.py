"""PyTorch Lightning adapter for wattwise: `EnergyCallback` and friends."""

from lightning_energy.callback import EnergyCallback

__all__ = ["EnergyCallback"]
