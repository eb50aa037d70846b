"""What the lever checks share: the papers' figures, how long each check measures, and the tables' words.

Pure: no device work, no torch; `Sizes` only reads a device's counter period.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from wattwise.devices.base import Device
from wattwise.power_limit import CONFIRM_ROUNDS

#: A measurement window spans at least this many updates of the energy counter, so that its quantisation
#: (up to one update's energy at each end) stays within a few per cent.
MIN_COUNTER_UPDATES = 20
#: The shortest window on a device whose counter changes at every read (the ideal simulated GPU).
MIN_WINDOW_S = 0.5
#: Steps a window holds at least, whatever the counter.
MIN_WINDOW_STEPS = 5
#: Steps trained at a new cap before its window opens, however short the settling time (the first steps
#: of a Trainer load kernels and allocate).
SETTLE_STEPS = 3
#: Periods of the energy counter a sweep window waits, at each end, for a step in which the counter changes.
ALIGN_PERIODS = 3
#: A tuning run that has not finished after this long stops (its summary says tuning did not finish).
TUNE_RUN_LIMIT_S = 120.0
#: Two power limits closer than this are the same limit (the sweep sets whole watts, the tuner need not).
SAME_LIMIT_W = 1.0


def same_limit(a_w: float | None, b_w: float | None) -> bool:
    """Whether two power limits are the same setting (within `SAME_LIMIT_W`)."""
    return a_w is not None and b_w is not None and abs(a_w - b_w) < SAME_LIMIT_W


def label(figures: Mapping[str, object]) -> str:
    """How a table names what a check's figures are: "simulated" on the simulated GPU, else "measured"."""
    return "simulated" if figures.get("simulated") else "measured"


@dataclasses.dataclass(frozen=True)
class PaperCapRow:
    """A published power-cap result: time and energy at a cap relative to the default limit."""

    source: str
    gpu: str
    model: str
    cap_w: float
    default_w: float
    time_ratio: float
    energy_ratio: float


#: McDonald et al. 2022 (arXiv:2205.09646), Figure 1: BERT training on a V100 capped at 150 W of 250 W.
MCDONALD_V100 = PaperCapRow(
    source="McDonald et al. 2022, Figure 1",
    gpu="V100",
    model="BERT",
    cap_w=150.0,
    default_w=250.0,
    time_ratio=1.085,
    energy_ratio=0.877,
)
#: What the Zeus paper reports for just-in-time power-limit tuning, in one line.
ZEUS_CLAIM = (
    "Zeus (NSDI'23): the power limit that minimises eta * energy + (1 - eta) * max power * time, found by "
    "profiling each limit for a few steps during the training itself (just in time) instead of offline"
)
#: What the Perseus paper reports for pipeline frequency planning, in one line.
PERSEUS_CLAIM = "Perseus (SOSP'24): up to 30% less energy with no throughput loss (GPT-3, Bloom; large pipelines)"
#: The etas of `tuning_vs_sweep`: the Zeus default, and energy only.
TUNING_ETAS = (0.5, 1.0)
#: Microbatches per pipeline iteration, and its schedule.
PIPELINE_MICROBATCHES = 4
PIPELINE_SCHEDULE = "1f1b"
#: Iterations each pipeline run (the plan's, the maximum clock's) spans at least.
PIPELINE_RUN_ITERATIONS = 10


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How long each check measures: the default length, or `--quick`'s."""

    #: Power caps of the sweep, default limit and minimum included.
    caps: int
    #: Counter updates per measurement window (at least `MIN_COUNTER_UPDATES`).
    window_updates: int
    #: Seconds of training at a new cap before its window opens (the driver's controller settles).
    settle_s: float
    #: Tuning runs at the first eta of `TUNING_ETAS`, and at each other eta.
    repeats: int
    other_eta_repeats: int
    #: SM clocks the pipeline is profiled at.
    pipeline_clocks: int
    #: Steps trained at the chosen limit after tuning, before a tuning run stops.
    steps_after_tuning: int
    #: Rounds a tuning run may measure undecided limits again (`power_limit.confirm_rounds`).
    confirm_rounds: int = CONFIRM_ROUNDS

    @classmethod
    def of(cls, quick: bool) -> Sizes:
        """The sizes of a `--quick` run, or of a run at default length."""
        if quick:
            return cls(
                caps=4,
                window_updates=20,
                settle_s=0.5,
                repeats=2,
                other_eta_repeats=1,
                pipeline_clocks=3,
                steps_after_tuning=10,
                confirm_rounds=1,
            )
        return cls(
            caps=5,
            window_updates=40,
            settle_s=1.0,
            repeats=2,
            other_eta_repeats=2,
            pipeline_clocks=4,
            steps_after_tuning=30,
        )

    def window_s(self, gpu: Device) -> float:
        """Seconds a measurement window lasts on `gpu`: `window_updates` counter updates, `MIN_WINDOW_S` at least."""
        return max(MIN_WINDOW_S, self.window_updates * gpu.energy_update_period_s)

    @staticmethod
    def profile_window_s(gpu: Device) -> float:
        """Seconds the pipeline profiler measures the shortest instruction for: `MIN_COUNTER_UPDATES` updates.

        The longer instructions' windows last proportionally longer (one repeat count for all).
        """
        return max(MIN_WINDOW_S, MIN_COUNTER_UPDATES * gpu.energy_update_period_s)

    def tuning_runs(self) -> list[tuple[float, int]]:
        """(eta, repeat) of every tuning run: `repeats` at eta 0.5; as many at the other eta, or one when quick."""
        first, *others = TUNING_ETAS
        return [(first, r) for r in range(self.repeats)] + [
            (eta, r) for eta in others for r in range(self.other_eta_repeats)
        ]


# -- estimates for --budget-s ----------------------------------------------------------------------------
#: Seconds a check spends outside its windows on a real GPU: building the model, moving it to the GPU,
#: the Trainer's start and first steps (importing torch and transformers comes once, before the first).
SETUP_S = 10.0
#: Seconds a tuning run spends outside its profile windows: the model, the Trainer, the steps after.
TUNE_RUN_SETUP_S = 7.0
#: The pipeline profiler's windows against `Sizes.profile_window_s`: its repeat count follows the shortest
#: instruction, the longer ones (a backward, the deeper stage, a lower clock) take about this much more.
PROFILE_WINDOW_SPREAD = 2.5
