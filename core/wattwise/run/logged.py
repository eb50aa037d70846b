"""The metrics both adapters log, by name: steps at the logging cadence, epochs, and the whole fit.

Figures are already combined over processes (energy summed, time maxed), so they are logged once. Each
energy figure comes with how precisely it was measured (`energy/step_uncertainty_j` beside
`energy/step_j`, and so on), and every batch of figures from a simulated GPU carries the flag
`wattwise/simulated` = 1 (absent on hardware), so a tracker's chart of them is never taken for a
measurement.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wattwise.record.summary import RunSummary
from wattwise.run.measurement import Figures

if TYPE_CHECKING:
    from wattwise.run.run import Run

#: The metric that marks figures from a simulated GPU (1.0), logged with each of their batches.
SIMULATED_FLAG = "wattwise/simulated"


def simulated(run: Run) -> bool:
    """Whether the run's figures come from a simulated GPU of any of its processes.

    The same on every process (agreed where the measurement opened): a process with no GPU logs the simulated
    mark too, so that every process logs the same metrics (Lightning's `sync_dist` reduces each one).
    """
    m = run.measurement
    return m.figures_simulated if m is not None else any(gpu.simulated for gpu in run.gpus)


def _marked(metrics: dict[str, float], is_simulated: bool) -> dict[str, float]:
    if is_simulated:
        metrics[SIMULATED_FLAG] = 1.0
    return metrics


def step_metrics(rec: Figures, power_limit_w: float | None, *, simulated: bool = False) -> dict[str, float]:
    """The step figures a logger receives: energy (and its uncertainty), time and average power per step, the limit."""
    metrics = {
        "energy/step_j": rec.energy_j,
        "energy/step_uncertainty_j": rec.energy_uncertainty_j,
        "time/step_s": rec.time_s,
        "power/avg_w": rec.avg_power_w,
    }
    if power_limit_w is not None:
        metrics["power/limit_w"] = power_limit_w
    return _marked(metrics, simulated)


#: The names of the epoch figures a logger receives (`epoch_metrics`).
EPOCH_METRICS = frozenset({"energy/epoch_j", "energy/epoch_uncertainty_j", "time/epoch_s", "power/epoch_avg_w"})


def epoch_metrics(rec: Figures, *, simulated: bool = False) -> dict[str, float]:
    """The epoch figures a logger receives: energy (and its uncertainty), time and average power of the epoch."""
    return _marked(
        {
            "energy/epoch_j": rec.energy_j,
            "energy/epoch_uncertainty_j": rec.energy_uncertainty_j,
            "time/epoch_s": rec.time_s,
            "power/epoch_avg_w": rec.avg_power_w,
        },
        simulated,
    )


def fit_metrics(summary: RunSummary) -> dict[str, float]:
    """The whole run's energy (and its uncertainty) and time, as a logger receives them at the end."""
    metrics = {"energy/fit_j": summary.energy_j, "time/fit_s": summary.time_s}
    if summary.energy_uncertainty_j is not None:
        metrics["energy/fit_uncertainty_j"] = summary.energy_uncertainty_j
    return _marked(metrics, summary.simulated)
