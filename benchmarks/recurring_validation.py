"""Out-of-sample validation of the recurring-job policy's knobs on Zeus's traces (`recurring.py --validate`).

The policy's default knobs were set on the same V100 and A40 traces that `recurring.py` reports, so
those figures are in sample. Here the knobs are validated the way a model is:

- Cross-GPU: the knobs are chosen on one GPU's traces (seeds 1-5) and reported on the other GPU's
  traces with fresh seeds (6-25), both ways, beside the current defaults and Zeus's policy on the same
  test split. The GPUs differ in time and power per epoch (so in the costs and in the oracle's
  setting); the epochs to target come from the same training runs on both (Zeus's traces share them).
- Leave one workload out: the knobs are chosen on five workloads of one GPU (seeds 1-5) and reported on
  the sixth with seeds 6-25, on the same GPU and on the other one (workload, seeds and GPU all unseen).

Rules, fixed before any result was looked at:

- Grid: `GRID`, three values of each continuous knob (the current default among them); the structural
  switches (pruning rounds, bandit model, resuming pruned exploration) stay as they are.
- Choosing on a training split: among the settings whose worst workload is at most 1.06, the least mean
  cost / oracle; when none is, the least worst workload. Ties go to the earlier setting in `GRID`, whose
  first entry is the current default.
- New defaults: the same chooser on both GPUs' training splits pooled, adopted only when tuning
  transfers: in both cross-GPU directions the knobs chosen on the training GPU do at least as well on
  the test split (mean cost / oracle) as the current defaults. Otherwise the defaults stay.

Cost / oracle of a workload is its cost summed over the seeds divided by the oracle's summed the same
way, as in `recurring.py`; "mean" and "worst" are over the workloads (over the GPU-workload pairs when
pooled). The simulations run in worker processes, each (knobs, GPU, workload, seed) once.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import NamedTuple

from recurring_workloads import BETA, ETA, GPUS, TARGET_MAX, TARGET_MEAN, WORKLOADS, Workload

from wattwise.recurring.policy import WATTWISE_POLICY, ZEUS_POLICY, PolicyConfig
from wattwise.recurring.simulator import job_for_trace, simulate
from wattwise.recurring.spec import JobSpec
from wattwise.recurring.trace import WorkloadTrace, load_trace

TUNE_SEEDS = tuple(range(1, 6))
REPORT_SEEDS = tuple(range(6, 26))
#: The knobs searched and their values, the current default's among them.
KNOBS: dict[str, tuple[float, ...]] = {
    "prune_margin": (0.25, 0.5, 1.0),
    "epochs_noise_prior": (0.025, 0.05, 0.1),
    "epochs_spread_prior": (0.05, 0.1, 0.2),
    "prior_weight": (3.0, 10.0, 30.0),
}


def knob_grid(base: PolicyConfig = WATTWISE_POLICY) -> tuple[PolicyConfig, ...]:
    """Every combination of `KNOBS` on top of `base`, `base` itself first."""
    grid = [
        replace(base, prune_margin=margin, epochs_noise_prior=noise, epochs_spread_prior=spread, prior_weight=weight)
        for margin, noise, spread, weight in itertools.product(
            KNOBS["prune_margin"], KNOBS["epochs_noise_prior"], KNOBS["epochs_spread_prior"], KNOBS["prior_weight"]
        )
    ]
    return (base, *(config for config in grid if config != base))


GRID = knob_grid()


def describe(config: PolicyConfig) -> str:
    """The searched knobs of `config`, short: "margin 0.5, noise 0.05, spread 0.1, weight 10"."""
    short = {"prune_margin": "margin", "epochs_noise_prior": "noise", "epochs_spread_prior": "spread"}
    searched = ", ".join(f"{short.get(name, 'weight')} {getattr(config, name):g}" for name in KNOBS)
    others = [
        f.name
        for f in fields(config)
        if f.name not in KNOBS and getattr(config, f.name) != getattr(WATTWISE_POLICY, f.name)
    ]
    return searched + (f" ({', '.join(others)} changed)" if others else "")


class Task(NamedTuple):
    """One simulation: a policy setting on one GPU's trace of one workload, one seed."""

    config: PolicyConfig
    gpu: str
    workload: Workload
    seed: int


@functools.lru_cache(maxsize=64)
def _job(traces: Path, gpu: str, workload: Workload) -> tuple[WorkloadTrace, JobSpec, int]:
    trace = load_trace(
        traces / "summary_train.csv", traces / f"summary_power_{gpu}.csv", workload.name, workload.target_metric
    )
    spec = job_for_trace(
        trace, default_batch_size=workload.default_batch_size, max_epochs=workload.max_epochs, eta=ETA, beta=BETA
    )
    return trace, spec, 2 * len(trace.batch_sizes) * len(trace.power_limits_w)


def simulate_task(traces: Path, task: Task) -> tuple[float, float]:
    """The policy's cost and the oracle's over the task's recurrences (as in `recurring.run_cell`)."""
    trace, spec, recurrences = _job(traces, task.gpu, task.workload)
    result = simulate(trace, spec, recurrences, task.seed, policy=task.config)
    return result.wattwise.cost, result.oracle.cost


class Simulations:
    """Runs tasks in `workers` processes (in this one when 1), each task once: results are kept."""

    def __init__(self, traces: Path, workers: int) -> None:
        self.traces = traces
        self.workers = workers
        self.done: dict[Task, tuple[float, float]] = {}
        self._pool = ProcessPoolExecutor(max_workers=workers) if workers > 1 else None

    def run(self, tasks: Iterable[Task]) -> None:
        todo = list(dict.fromkeys(t for t in tasks if t not in self.done))
        if self._pool is None:
            results = [simulate_task(self.traces, t) for t in todo]
        else:
            results = list(self._pool.map(functools.partial(simulate_task, self.traces), todo, chunksize=8))
        self.done.update(zip(todo, results, strict=True))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


@dataclass(frozen=True)
class Split:
    """The traces a figure is computed on: GPUs, workloads and seeds."""

    gpus: tuple[str, ...]
    workloads: tuple[Workload, ...]
    seeds: tuple[int, ...]

    def tasks(self, config: PolicyConfig) -> list[Task]:
        return [Task(config, g, w, s) for g in self.gpus for w in self.workloads for s in self.seeds]


@dataclass(frozen=True)
class Score:
    """Cost / oracle (summed over the seeds) per (GPU, workload) of one split, and per seed the mean over
    those pairs of that seed's cost / oracle (the oracle's cost is the same for every seed, so their mean
    is `mean`)."""

    ratios: dict[tuple[str, str], float]
    per_seed: tuple[float, ...]

    @property
    def mean(self) -> float:
        return math.fsum(self.ratios.values()) / len(self.ratios)

    @property
    def worst(self) -> float:
        return max(self.ratios.values())

    def ratio(self, workload: Workload) -> float:
        """The ratio of `workload` on a split of one GPU."""
        (value,) = (r for (_, name), r in self.ratios.items() if name == workload.name)
        return value


def scores(sims: Simulations, configs: Sequence[PolicyConfig], split: Split) -> list[Score]:
    """The score of each of `configs` on `split`."""
    sims.run(t for c in configs for t in split.tasks(c))
    result = []
    for config in configs:
        ratios = {}
        per_seed: dict[int, list[float]] = {s: [] for s in split.seeds}
        for gpu in split.gpus:
            for workload in split.workloads:
                costs = [sims.done[Task(config, gpu, workload, s)] for s in split.seeds]
                ratios[gpu, workload.name] = math.fsum(c for c, _ in costs) / math.fsum(o for _, o in costs)
                for seed, (cost, oracle) in zip(split.seeds, costs, strict=True):
                    per_seed[seed].append(cost / oracle)
        result.append(Score(ratios, tuple(math.fsum(v) / len(v) for v in per_seed.values())))
    return result


def paired_difference(a: Score, b: Score) -> tuple[float, float]:
    """Mean of `a` less mean of `b` on the same seeds, and its standard error over the seeds."""
    diffs = [x - y for x, y in zip(a.per_seed, b.per_seed, strict=True)]
    mean = math.fsum(diffs) / len(diffs)
    if len(diffs) < 2:
        return mean, math.nan
    variance = math.fsum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
    return mean, math.sqrt(variance / len(diffs))


def choose(sims: Simulations, grid: Sequence[PolicyConfig], train: Split) -> tuple[PolicyConfig, Score]:
    """The setting of `grid` that the rule picks on `train` (the only traces it sees), and its score there."""
    found = scores(sims, grid, train)
    feasible = [i for i, s in enumerate(found) if s.worst <= TARGET_MAX]
    if feasible:
        best = min(feasible, key=lambda i: found[i].mean)
    else:
        best = min(range(len(grid)), key=lambda i: found[i].worst)
    return grid[best], found[best]


@dataclass(frozen=True)
class CrossGpu:
    """Knobs chosen on `train`, their score there, and on `test` beside the current defaults and Zeus."""

    train: Split
    test: Split
    chosen: PolicyConfig
    in_sample: Score
    out_of_sample: Score
    defaults: Score
    zeus: Score


def cross_gpu(sims: Simulations, grid: Sequence[PolicyConfig], train: Split, test: Split) -> CrossGpu:
    chosen, in_sample = choose(sims, grid, train)
    out_of_sample, defaults, zeus = scores(sims, (chosen, WATTWISE_POLICY, ZEUS_POLICY), test)
    return CrossGpu(train, test, chosen, in_sample, out_of_sample, defaults, zeus)


@dataclass(frozen=True)
class HeldOut:
    """One workload left out of tuning on `tune_gpu`: the knobs chosen without it, its ratio per GPU."""

    workload: Workload
    tune_gpu: str
    chosen: PolicyConfig
    ratios: dict[str, float]


def leave_one_workload_out(
    sims: Simulations, grid: Sequence[PolicyConfig], tune_gpu: str, workloads: Sequence[Workload]
) -> list[HeldOut]:
    """For each workload, knobs chosen on the others (`tune_gpu`, tuning seeds), reported on every GPU."""
    chosen = {
        w: choose(sims, grid, Split((tune_gpu,), tuple(o for o in workloads if o != w), TUNE_SEEDS))[0]
        for w in workloads
    }
    report = {w: Split(GPUS, (w,), REPORT_SEEDS) for w in workloads}
    sims.run(t for w in workloads for t in report[w].tasks(chosen[w]))
    result = []
    for w in workloads:
        (score,) = scores(sims, (chosen[w],), report[w])
        result.append(HeldOut(w, tune_gpu, chosen[w], {g: score.ratios[g, w.name] for g in GPUS}))
    return result


@dataclass(frozen=True)
class Validation:
    directions: list[CrossGpu]
    held_out: list[HeldOut]
    #: The Zeus policy's score on each GPU, report seeds (for the held-out tables).
    zeus: dict[str, Score]
    pooled: PolicyConfig
    pooled_score: Score
    adopt: bool
    elapsed_s: float


def validate(traces: Path, workers: int, workloads: Sequence[Workload] = WORKLOADS) -> Validation:
    started = time.monotonic()
    sims = Simulations(traces, workers)
    try:
        every = tuple(workloads)
        directions = [
            cross_gpu(sims, GRID, Split((a,), every, TUNE_SEEDS), Split((b,), every, REPORT_SEEDS))
            for a, b in (GPUS, GPUS[::-1])
        ]
        held_out = [h for gpu in GPUS for h in leave_one_workload_out(sims, GRID, gpu, workloads)]
        zeus = {d.test.gpus[0]: d.zeus for d in directions}
        pooled, pooled_score = choose(sims, GRID, Split(GPUS, every, TUNE_SEEDS))
    finally:
        sims.close()
    adopt = pooled != WATTWISE_POLICY and all(d.out_of_sample.mean <= d.defaults.mean for d in directions)
    return Validation(directions, held_out, zeus, pooled, pooled_score, adopt, time.monotonic() - started)


def _pair(score: Score) -> str:
    return f"{score.mean:.3f} / {score.worst:.3f}"


def _difference(a: Score, b: Score) -> str:
    mean, error = paired_difference(a, b)
    return f"{mean:+.4f} ± {error:.4f}"


def missed_targets(validation: Validation) -> list[str]:
    """The out-of-sample targets missed: mean and worst workload, and the mean against Zeus's."""
    missed = []
    for d in validation.directions:
        name = f"{d.train.gpus[0]}->{d.test.gpus[0]}"
        s = d.out_of_sample
        if s.mean > TARGET_MEAN:
            missed.append(f"{name}: mean {s.mean:.3f} > {TARGET_MEAN}")
        if s.worst > TARGET_MAX:
            missed.append(f"{name}: worst {s.worst:.3f} > {TARGET_MAX}")
        if s.mean > d.zeus.mean:
            missed.append(f"{name}: mean {s.mean:.3f} above Zeus's {d.zeus.mean:.3f}")
    return missed


def text_report(v: Validation, workloads: Sequence[Workload] = WORKLOADS) -> str:
    seeds = f"seeds {TUNE_SEEDS[0]}-{TUNE_SEEDS[-1]}"
    report = f"seeds {REPORT_SEEDS[0]}-{REPORT_SEEDS[-1]}"
    lines = [
        f"Cross-GPU: knobs chosen on the train GPU ({seeds}), reported on the test GPU ({report});",
        f"grid of {len(GRID)} settings: " + "; ".join(f"{k} {list(vals)}" for k, vals in KNOBS.items()),
        "cost / oracle: mean over workloads / worst workload",
        f"{'train':<6}{'test':<6}{'chosen knobs':<50}{'in sample':>16}{'out of sample':>16}{'defaults':>16}"
        f"{'Zeus':>16}{'chosen - defaults':>20}{'Zeus - chosen':>18}",
    ]
    for d in v.directions:
        lines.append(
            f"{d.train.gpus[0]:<6}{d.test.gpus[0]:<6}{describe(d.chosen):<50}{_pair(d.in_sample):>16}"
            f"{_pair(d.out_of_sample):>16}{_pair(d.defaults):>16}{_pair(d.zeus):>16}"
            f"{_difference(d.out_of_sample, d.defaults):>20}{_difference(d.zeus, d.out_of_sample):>18}"
        )
    lines.append("differences: of the means, ± their standard error over the test seeds (paired)")
    lines += ["", f"per workload on the test GPU ({report}): chosen / defaults / Zeus"]
    lines.append(f"{'workload':<32}" + "".join(f"{d.train.gpus[0] + '->' + d.test.gpus[0]:>24}" for d in v.directions))
    for w in workloads:
        cells = [
            f"{d.out_of_sample.ratio(w):.3f} / {d.defaults.ratio(w):.3f} / {d.zeus.ratio(w):.3f}" for d in v.directions
        ]
        lines.append(f"{w.name:<32}" + "".join(f"{c:>24}" for c in cells))
    lines += ["", f"Leave one workload out: knobs chosen on the other five ({seeds}), held-out workload ({report})"]
    lines.append(
        f"{'held out':<32}{'tuned on':<10}{'chosen knobs':<50}"
        + "".join(f"{g:>8}" for g in GPUS)
        + "".join(f"{'Zeus ' + g:>11}" for g in GPUS)
    )
    for h in v.held_out:
        lines.append(
            f"{h.workload.name:<32}{h.tune_gpu:<10}{describe(h.chosen):<50}"
            + "".join(f"{h.ratios[g]:>8.3f}" for g in GPUS)
            + "".join(f"{v.zeus[g].ratio(h.workload):>11.3f}" for g in GPUS)
        )
    for gpu in GPUS:
        for test in GPUS:
            values = [h.ratios[test] for h in v.held_out if h.tune_gpu == gpu]
            flag = "" if max(values) <= TARGET_MAX else f"  (worst above {TARGET_MAX})"
            lines.append(
                f"tuned on {gpu}, held-out workloads on {test}: mean {math.fsum(values) / len(values):.3f}, "
                f"worst {max(values):.3f} (Zeus {_pair(v.zeus[test])}){flag}"
            )
    lines += ["", *_decision(v)]
    return "\n".join(lines)


def _decision(v: Validation) -> list[str]:
    lines = [
        f"pooled choice (both GPUs, {len(TUNE_SEEDS)} tuning seeds): {describe(v.pooled)}, "
        f"in sample {_pair(v.pooled_score)}"
    ]
    if v.pooled == WATTWISE_POLICY:
        lines.append("it is the current default: the defaults stay")
    elif v.adopt:
        lines.append("tuning transfers across GPUs (both directions at least as good as the defaults): adopt it")
    else:
        lines.append("tuning does not transfer across GPUs in both directions: the defaults stay")
    missed = missed_targets(v)
    lines.append(
        f"targets out of sample (mean <= {TARGET_MEAN}, worst <= {TARGET_MAX}, mean <= Zeus's): "
        + ("met" if not missed else "MISSED: " + "; ".join(missed))
    )
    return lines


def markdown_report(v: Validation, workloads: Sequence[Workload] = WORKLOADS) -> str:
    report = f"seeds {REPORT_SEEDS[0]}-{REPORT_SEEDS[-1]}"
    lines = [
        f"Knobs chosen on one GPU's traces (seeds {TUNE_SEEDS[0]}-{TUNE_SEEDS[-1]}), reported on the other "
        f"GPU's ({report}); cost / oracle, mean over workloads / worst workload.",
        "",
        "| tuned on | reported on | chosen knobs | in sample | **out of sample** | current defaults | Zeus's policy "
        "| chosen − defaults | Zeus − chosen |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for d in v.directions:
        lines.append(
            f"| {d.train.gpus[0].upper()} | {d.test.gpus[0].upper()} | {describe(d.chosen)} | {_pair(d.in_sample)} "
            f"| **{_pair(d.out_of_sample)}** | {_pair(d.defaults)} | {_pair(d.zeus)} "
            f"| {_difference(d.out_of_sample, d.defaults)} | {_difference(d.zeus, d.out_of_sample)} |"
        )
    lines += ["", "Differences: of the means, ± their standard error over the test seeds (paired by seed)."]
    heads = [f"{d.train.gpus[0].upper()} → {d.test.gpus[0].upper()}" for d in v.directions]
    lines += [
        "",
        f"Per workload on the test GPU ({report}): cost / oracle of the chosen knobs (Zeus's policy).",
        "",
        "| workload | "
        + " | ".join(heads)
        + " | "
        + " | ".join(f"left out of tuning on {a.upper()}, on {b.upper()}" for a, b in (GPUS, GPUS[::-1]))
        + " |",
        "|---|" + "---:|" * (len(heads) + 2),
    ]
    for w in workloads:
        cells = [f"{d.out_of_sample.ratio(w):.3f} ({d.zeus.ratio(w):.3f})" for d in v.directions]
        held = {h.tune_gpu: h for h in v.held_out if h.workload == w}
        # Held out: the workload left out of tuning, reported on the other GPU (nothing of it seen).
        cells += [f"{held[a].ratios[b]:.3f}" for a, b in (GPUS, GPUS[::-1])]
        lines.append(f"| {w.name.split('/')[0]} | " + " | ".join(cells) + " |")
    means = [f"{_pair(d.out_of_sample)} ({_pair(d.zeus)})" for d in v.directions]
    for a, b in (GPUS, GPUS[::-1]):
        values = [h.ratios[b] for h in v.held_out if h.tune_gpu == a]
        means.append(f"{math.fsum(values) / len(values):.3f} / {max(values):.3f}")
    lines.append("| **mean / worst** | " + " | ".join(means) + " |")
    lines += ["", *(f"{line}." for line in _decision(v))]
    return "\n".join(lines)
