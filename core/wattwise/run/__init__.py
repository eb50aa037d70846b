"""One training run and its parts: measurement, power, carbon, recurring, agreement.

The run (`wattwise.run.run.Run`) is what both adapters drive; its public names are here.
"""

from wattwise.run.run import DEFAULT_LOG_EVERY_N_STEPS, EnergyPluginWarning, Figures, Run, process_guard

__all__ = ["DEFAULT_LOG_EVERY_N_STEPS", "EnergyPluginWarning", "Figures", "Run", "process_guard"]
