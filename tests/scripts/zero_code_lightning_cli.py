"""`LightningCLI` on Lightning's own `BoringModel` and `BoringDataModule`, with no wattwise line."""

from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel

LightningCLI(BoringModel, BoringDataModule)
