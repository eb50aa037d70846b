"""What power-limit tuning decides on and what it yields, the data the decisions and the record share.

`ProfileEntry`: what one power limit cost, the datum tuning decides on and the record keeps. `Payback`: what
a tuned run gained and what tuning cost it (`wattwise.power_limit.payback`). Their own module, so that the
decisions (`wattwise.power_limit`, `wattwise.carbon.policy`) and the record (`wattwise.record.summary`)
share them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProfileEntry:
    """What one power limit cost: time and energy (all GPUs of this job) of one training step."""

    power_limit_w: float
    time_s: float
    energy_j: float

    @property
    def avg_power_w(self) -> float:
        """Average power over the step, in watts (0 for a step of no time)."""
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0


@dataclass(frozen=True)
class Payback:
    """What a tuned run gained and what tuning cost it, against the same steps at the highest limit.

    Three figures, in the order a user weighs them: the lever's effect per step at the chosen limit (what a
    longer run gets); what profiling cost beyond running at the highest limit; and this run, tuning
    included, with the break-even: after how many steps at the chosen limit tuning has paid back, by the
    selector's objective (the Zeus cost for "cost", energy for "energy" and "slowdown", time for "time").
    Energy in J, time in s; a saving is positive, an added time positive (slower).
    """

    #: At the chosen limit: energy saved per step, how precisely it is known, and time added per step.
    energy_per_step_saved_j: float
    energy_per_step_saved_uncertainty_j: float
    time_per_step_added_s: float
    #: The same as fractions of the highest limit's energy and time per step.
    energy_saved_fraction: float
    time_added_fraction: float
    #: Tuning: the steps it ran at lower limits, and the energy and time they took beyond the highest limit's.
    tuning_steps: int
    tuning_energy_j: float
    tuning_time_s: float
    #: This run: the steps at the chosen limit, and its energy saved and time added, tuning included.
    steps_at_chosen: int
    run_energy_saved_j: float
    run_energy_saved_uncertainty_j: float
    run_time_added_s: float
    #: The objective: its saving per step at the chosen limit, tuning's cost in it, and this run's saving in it.
    objective: str
    objective_per_step_saved: float
    tuning_objective: float
    run_objective_saved: float
    #: Steps at the chosen limit after which tuning has paid back by the objective; None: it never does (the
    #: chosen limit is no better by the objective than the highest).
    break_even_steps: int | None

    @property
    def paid_back(self) -> bool:
        """This run ran at the chosen limit long enough for tuning to pay back."""
        return self.break_even_steps is not None and self.steps_at_chosen >= self.break_even_steps

    def json_derived(self) -> dict[str, tuple[str, bool]]:
        """`paid_back`, derived from the steps at the chosen limit and the break-even, is written after it."""
        return {"break_even_steps": ("paid_back", self.paid_back)}
