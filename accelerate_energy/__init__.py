"""Hugging Face Accelerate adapter for wattwise: one environment variable, at most one line in a script.

    accelerator = accelerate_energy.attach(Accelerator(...))   # does nothing unless ACCELERATE_ENERGY=1
"""

from accelerate_energy.adapter import AccelerateEnergy, attach, energy, energy_run, epoch_end, not_training
from accelerate_energy.batch_size import RecurringRun, recurring_batch_size
from accelerate_energy.pipeline import follow_frequency_plan
from accelerate_energy.plugin import EnergyPlugin

__all__ = ["AccelerateEnergy", "EnergyPlugin", "RecurringRun", "attach", "energy", "energy_run", "epoch_end",
           "follow_frequency_plan", "not_training", "recurring_batch_size"]
