"""The metrics both adapters log, by name: steps at the logging cadence, epochs, and the whole fit.

Figures are already combined over processes (energy summed, time maxed), so they are logged once.
"""

from __future__ import annotations

from wattwise.record.summary import RunSummary
from wattwise.run.measurement import Figures


def step_metrics(rec: Figures, power_limit_w: float | None) -> dict[str, float]:
    """The step figures a logger receives: energy, time and average power per step, and the power limit."""
    metrics = {"energy/step_j": rec.energy_j, "time/step_s": rec.time_s, "power/avg_w": rec.avg_power_w}
    if power_limit_w is not None:
        metrics["power/limit_w"] = power_limit_w
    return metrics


def epoch_metrics(rec: Figures) -> dict[str, float]:
    """The epoch figures a logger receives: energy, time and average power of the epoch."""
    return {"energy/epoch_j": rec.energy_j, "time/epoch_s": rec.time_s, "power/epoch_avg_w": rec.avg_power_w}


def fit_metrics(record: RunSummary) -> dict[str, float]:
    """The whole run's energy and time, as a logger receives them at the end."""
    return {"energy/fit_j": record.energy_j, "time/fit_s": record.time_s}
