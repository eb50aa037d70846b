"""The three levers measured on one GPU against the papers they come from: `wattwise acceptance --levers`.

    python -m wattwise.acceptance --levers [--quick] [--simulated] [--only NAME ...] [--budget-s S]

1. `cap_sweep` (McDonald et al. 2022, "Great Power, Great Responsibility"): a BERT-style masked language
   model, built from a `transformers` config (random tokens, nothing downloaded), trained with the Hugging
   Face `Trainer` at four or five power caps from the GPU's minimum to its default; per cap the time and
   energy of a training step relative to the default limit, beside the paper's V100 row (150 W of 250 W:
   108.5% of the time, 87.7% of the energy). Each cap's window spans at least `MIN_COUNTER_UPDATES`
   updates of the energy counter (`Device.energy_update_period_s`).
2. `tuning_vs_sweep` (Zeus, NSDI'23): the same training with just-in-time power-limit tuning (a wattwise
   `Run` in mode "tune") at eta 0.5 and eta 1.0, repeated: the limit each run chose, its energy and time
   against the default limit, and the Zeus cost of that limit against the best cap of the sweep.
3. `pipeline_measured` (Perseus, SOSP'24): two stages of a small transformer profiled with
   `PipelineProfiler`, the frontier and the no-slowdown plan (`wattwise frontier`, `wattwise plan`), then
   each stage's instruction sequence run under the plan by the `FrequencyController` (clocks locked
   through the settings guard) and at the maximum clock: measured time and energy against the plan's
   prediction. On one GPU the stages run one after the other; the iteration is composed from the measured
   instruction times by the schedule's DAG, and its energy is the stages' measured energy plus the
   blocking power over the time a stage waits.

Every setting goes through one `SettingsGuard` per check, which restores it on every exit path (SIGTERM
and SIGINT included; after a SIGKILL the next start restores it). On the simulated GPU (`--simulated`) the
same checks run a tiny model on the CPU whose steps last the simulated GPU's modelled time, and every
figure says "simulated". `transformers` and `torch` are imported inside the checks only.

One module a lever (`levers_cap_sweep`, `levers_tuning`, `levers_pipeline`), on what they share
(`levers_common`: the papers' figures and the checks' sizes; `levers_figures`: the typed rows they write;
`levers_rig`: the model and its training; `levers_training`: the Trainer and its callbacks, imported only
by a running check). This module is their entry point: the checks in order, their estimates and tables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from wattwise.devices.base import Device
from wattwise.tools.levers_cap_sweep import (
    cap_caps_w,
    cap_rows,
    cap_table,
    check_cap_sweep,
    estimate_cap_sweep_s,
    sweep_profile,
)
from wattwise.tools.levers_common import MCDONALD_V100, MIN_COUNTER_UPDATES, MIN_WINDOW_S, SETUP_S, Sizes
from wattwise.tools.levers_figures import CapWindow
from wattwise.tools.levers_pipeline import (
    VirtualClock,
    check_pipeline_measured,
    compose_iteration,
    estimate_pipeline_s,
    pipeline_clocks_mhz,
    pipeline_table,
)
from wattwise.tools.levers_rig import Rig
from wattwise.tools.levers_tuning import (
    best_cap_w,
    check_tuning_vs_sweep,
    choice_holds,
    estimate_tuning_s,
    tuning_row,
    tuning_table,
)

if TYPE_CHECKING:
    from wattwise.tools.checks import Check

#: What the acceptance runner, its tests and the benchmarks import from here, wherever it is defined.
__all__ = [
    "LEVER_CHECKS",
    "MCDONALD_V100",
    "MIN_COUNTER_UPDATES",
    "MIN_WINDOW_S",
    "TABLES",
    "CapWindow",
    "Rig",
    "Sizes",
    "VirtualClock",
    "best_cap_w",
    "cap_caps_w",
    "cap_rows",
    "cap_table",
    "choice_holds",
    "compose_iteration",
    "estimate_s",
    "pipeline_clocks_mhz",
    "pipeline_table",
    "section",
    "sweep_profile",
    "tuning_row",
    "tuning_table",
]

#: The lever checks, in the order they run (each may use the figures of those before it).
LEVER_CHECKS: list[tuple[str, Check]] = [
    ("cap_sweep", check_cap_sweep),
    ("tuning_vs_sweep", check_tuning_vs_sweep),
    ("pipeline_measured", check_pipeline_measured),
]

#: The Markdown section of each lever check, by name (`acceptance.md`), from its figures as written.
TABLES: dict[str, Callable[[Any], list[str]]] = {
    "cap_sweep": cap_table,
    "tuning_vs_sweep": tuning_table,
    "pipeline_measured": pipeline_table,
}


#: About how long each lever check takes on a GPU with the sizes given, by name.
ESTIMATES: dict[str, Callable[[Device, Sizes], float]] = {
    "cap_sweep": lambda gpu, sizes: estimate_cap_sweep_s(gpu, sizes, SETUP_S),
    "tuning_vs_sweep": estimate_tuning_s,
    "pipeline_measured": lambda gpu, sizes: estimate_pipeline_s(gpu, sizes, SETUP_S),
}


def estimate_s(name: str, gpu: Device | None, quick: bool) -> float:
    """About how long lever check `name` takes on `gpu` (for `--budget-s`): windows, settling, set-up."""
    estimate = ESTIMATES.get(name)
    return estimate(gpu, Sizes.of(quick)) if gpu is not None and estimate is not None else 0.0


def section(name: str, figures: Mapping[str, Any]) -> list[str]:
    """The lines `acceptance.md` shows for check `name` before its figures (none for a check not a lever's)."""
    table = TABLES.get(name)
    return table(figures) if table is not None and figures else []
