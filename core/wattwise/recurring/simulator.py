"""Trace-driven simulation of a recurring job: the real optimizer, with the clock and GPUs replaced by a trace.

Each recurrence needs one run that reaches the target. A run samples one traced training run (seeded)
of its batch size: it reaches the target at that run's target epoch, unless the optimizer stops it
first or the maximum epochs run out. Its epochs take the time and average power the power trace gives
at the run's power limit. The first run of a batch size profiles the power limits during its first
epoch (the epoch split evenly between the limits, as in Zeus), then remembers the least-cost limit.
A run that fails is paid for and followed by another run in the same recurrence, so the totals are the
cost of whole recurrences: failed runs and profiling included.

With `noise` (a fraction), every figure wattwise's policy sees and pays varies as on real hardware: each
epoch's time and average power, and each profiled limit's, are the trace's times 1 + N(0, noise), drawn
from their own seeded stream (the default and the oracle keep the trace's means).

Three policies are compared: `default` (the default batch size at the highest power limit, every time),
`wattwise` (the optimizer), and `oracle` (the least expected cost of any fixed batch size and power
limit, computed from the trace's means, failures and their retries included, no profiling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wattwise.errors import UsageError
from wattwise.power_limit import select_power_limit
from wattwise.profile import ProfileEntry
from wattwise.recurring.optimizer import BatchSizeOptimizer
from wattwise.recurring.policy import WATTWISE_POLICY, PolicyConfig
from wattwise.recurring.spec import JobSpec, Phase
from wattwise.recurring.trace import PowerPoint, WorkloadTrace
from wattwise.store import JobStore, MemoryJobStore

#: A recurrence that has not reached the target after this many runs means the simulation is broken.
MAX_RUNS_PER_RECURRENCE = 1000
#: With noise, how much each profiled limit's time and power vary on their own (relative standard deviation):
#: the power-limit tuner's windows on the realistic simulated GPU measure to within about this.
PROFILE_NOISE = 0.003


@dataclass(frozen=True)
class SimulatedRun:
    """One run of the simulated job (one entry of the JSON `history`)."""

    recurrence: int
    batch_size: int
    power_limit_w: float
    energy_j: float
    time_s: float
    reached: bool
    epochs: int
    phase: Phase
    profiled: bool


@dataclass(frozen=True)
class Totals:
    """Cumulative energy, time and cost of a policy over all recurrences."""

    energy_j: float
    time_s: float
    cost: float


@dataclass(frozen=True)
class Setting:
    """A fixed batch size and power limit."""

    batch_size: int
    power_limit_w: float


@dataclass(frozen=True)
class SimulationResult:
    """The totals of each policy over the recurrences, the oracle's setting, and every run of wattwise's policy."""

    default: Totals
    wattwise: Totals
    oracle: Totals
    oracle_setting: Setting
    history: tuple[SimulatedRun, ...]


class _Clock:
    """Simulated seconds: advanced by the runs, read by the optimizer for heartbeats."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def reach_probability(trace: WorkloadTrace, batch_size: int, max_epochs: int) -> float:
    """Fraction of the traced runs of `batch_size` that reach the target within `max_epochs`."""
    epochs = trace.target_epochs[batch_size]
    return sum(1 for e in epochs if not math.isnan(e) and e <= max_epochs) / len(epochs)


def check_simulable(trace: WorkloadTrace, spec: JobSpec) -> None:
    """UsageError when the job can never finish a recurrence on this trace."""
    if not any(reach_probability(trace, b, spec.max_epochs) > 0 for b in trace.batch_sizes):
        raise UsageError(
            f"no traced run of {trace.dataset}/{trace.network} reaches target {trace.target_metric:g} within "
            f"--max-epochs {spec.max_epochs}; raise --max-epochs or lower --target-metric"
        )
    if reach_probability(trace, spec.default_batch_size, spec.max_epochs) == 0:
        raise UsageError(
            f"no traced run at --default-batch-size {spec.default_batch_size} reaches target "
            f"{trace.target_metric:g} within --max-epochs {spec.max_epochs}; pick a default that does"
        )


def profile_power_limit(trace: WorkloadTrace, spec: JobSpec, batch_size: int) -> float:
    """The power limit that JIT profiling picks for `batch_size`: least cost per epoch."""
    entries = [ProfileEntry(p.power_limit_w, p.time_per_epoch_s, p.energy_per_epoch_j) for p in trace.power[batch_size]]
    return select_power_limit(entries, "cost", eta=spec.eta, max_power_w=spec.max_power_w).power_limit_w


def _epoch_cost(spec: JobSpec, point: PowerPoint) -> float:
    return spec.cost(point.energy_per_epoch_j, point.time_per_epoch_s)


def oracle(trace: WorkloadTrace, spec: JobSpec, recurrences: int) -> tuple[Setting, Totals]:
    """The fixed setting of least expected recurrence cost, from the trace's means.

    At a batch size whose runs reach the target within the maximum epochs with probability p, a
    recurrence costs the mean reaching run plus (1 - p) / p failed runs of `max_epochs` epochs each.
    """
    best: tuple[float, Setting, Totals] | None = None
    for batch_size in trace.batch_sizes:
        p = reach_probability(trace, batch_size, spec.max_epochs)
        if p == 0:
            continue
        reached = [e for e in trace.target_epochs[batch_size] if not math.isnan(e) and e <= spec.max_epochs]
        epochs = math.fsum(reached) / len(reached) + (1 - p) / p * spec.max_epochs
        for point in trace.power[batch_size]:
            cost = epochs * _epoch_cost(spec, point)
            if best is None or cost < best[0]:
                totals = Totals(
                    energy_j=recurrences * epochs * point.energy_per_epoch_j,
                    time_s=recurrences * epochs * point.time_per_epoch_s,
                    cost=recurrences * cost,
                )
                best = (cost, Setting(batch_size, point.power_limit_w), totals)
    if best is None:
        raise UsageError("no traced batch size ever reaches the target; nothing to compare against")
    return best[1], best[2]


def _sample_target_epoch(trace: WorkloadTrace, batch_size: int, rng: np.random.Generator) -> float:
    epochs = trace.target_epochs[batch_size]
    return epochs[int(rng.integers(len(epochs)))]


def simulate_default(trace: WorkloadTrace, spec: JobSpec, recurrences: int, rng: np.random.Generator) -> Totals:
    """The default batch size at the highest power limit every time; a failed run is retried."""
    point = trace.power[spec.default_batch_size][-1]
    energy_j = time_s = 0.0
    for _ in range(recurrences):
        for _ in range(MAX_RUNS_PER_RECURRENCE):
            target = _sample_target_epoch(trace, spec.default_batch_size, rng)
            reached = not math.isnan(target) and target <= spec.max_epochs
            epochs = int(target) if reached else spec.max_epochs
            energy_j += epochs * point.energy_per_epoch_j
            time_s += epochs * point.time_per_epoch_s
            if reached:
                break
        else:
            raise RuntimeError("the default batch size never reached the target")
    return Totals(energy_j, time_s, spec.cost(energy_j, time_s))


def simulate_wattwise(
    trace: WorkloadTrace,
    spec: JobSpec,
    recurrences: int,
    *,
    trace_rng: np.random.Generator,
    policy_rng: np.random.Generator,
    policy: PolicyConfig = WATTWISE_POLICY,
    store: JobStore | None = None,
    noise: float = 0.0,
    noise_rng: np.random.Generator | None = None,
) -> tuple[SimulatedRun, ...]:
    """Drive `BatchSizeOptimizer` through `recurrences` recurrences; every run it made, in order.

    `noise`: the relative standard deviation of each epoch's (and profiled limit's) time and power, drawn
    from `noise_rng` (see the module docstring); 0: the trace's figures exactly.
    """
    vary = _Noise(noise, noise_rng if noise_rng is not None else np.random.default_rng(0))
    clock = _Clock()
    optimizer = BatchSizeOptimizer(
        spec, store if store is not None else MemoryJobStore(), policy=policy, rng=policy_rng, clock=clock
    )
    history: list[SimulatedRun] = []
    for recurrence in range(1, recurrences + 1):
        for _ in range(MAX_RUNS_PER_RECURRENCE):
            run = _simulate_run(trace, spec, optimizer, clock, recurrence, trace_rng, vary)
            history.append(run)
            if run.reached:
                break
        else:
            raise RuntimeError(f"recurrence {recurrence} never reached the target")
    return tuple(history)


class _Noise:
    """Figures as a real GPU gives them: the trace's times 1 + N(0, `relative`), each drawn afresh."""

    def __init__(self, relative: float, rng: np.random.Generator) -> None:
        if not (math.isfinite(relative) and 0.0 <= relative < 0.5):
            raise UsageError(f"noise must be a fraction in [0, 0.5) (got {relative})")
        self.relative, self.rng = relative, rng

    def point(self, point: PowerPoint) -> tuple[float, float]:
        """(energy J, time s) of one epoch at `point`, varied."""
        if self.relative == 0.0:
            return point.energy_per_epoch_j, point.time_per_epoch_s
        time_f, power_f = (max(0.5, 1.0 + self.relative * float(z)) for z in self.rng.standard_normal(2))
        time_s = point.time_per_epoch_s * time_f
        return point.energy_per_epoch_j * time_f * power_f, time_s


def _profiled_limit(trace: WorkloadTrace, spec: JobSpec, batch_size: int, vary: _Noise) -> float:
    """The limit JIT profiling picks for `batch_size` from its figures as measured.

    An epoch's variation (data, temperature, neighbours) moves every limit profiled within it alike, so one
    draw varies the whole profile; the tuner's own windows resolve the limits far more finely (about 1%:
    `benchmarks/physics.py`), and `PROFILE_NOISE` of each limit's own varies it on top.
    """
    if vary.relative == 0.0:
        return profile_power_limit(trace, spec, batch_size)
    time_f, power_f = (max(0.5, 1.0 + vary.relative * float(z)) for z in vary.rng.standard_normal(2))
    entries = []
    for p in trace.power[batch_size]:
        own_t, own_p = (1.0 + PROFILE_NOISE * float(z) for z in vary.rng.standard_normal(2))
        time_s = p.time_per_epoch_s * time_f * own_t
        entries.append(ProfileEntry(p.power_limit_w, time_s, p.energy_per_epoch_j * time_f * own_t * power_f * own_p))
    return select_power_limit(entries, "cost", eta=spec.eta, max_power_w=spec.max_power_w).power_limit_w


def _simulate_run(
    trace: WorkloadTrace,
    spec: JobSpec,
    optimizer: BatchSizeOptimizer,
    clock: _Clock,
    recurrence: int,
    rng: np.random.Generator,
    vary: _Noise,
) -> SimulatedRun:
    recommendation = optimizer.next_batch_size()
    batch_size = recommendation.batch_size
    profiled = recommendation.power_limit_w is None
    if recommendation.power_limit_w is None:
        power_limit_w = _profiled_limit(trace, spec, batch_size, vary)
        optimizer.remember_power_limit(batch_size, power_limit_w)
    else:
        power_limit_w = recommendation.power_limit_w
    point = trace.point(batch_size, power_limit_w)
    points = trace.power[batch_size]
    target = _sample_target_epoch(trace, batch_size, rng)

    energy_j = time_s = 0.0
    epoch = 0
    reached = False
    while True:
        epoch += 1
        if profiled and epoch == 1:
            varied = [vary.point(p) for p in points]
            epoch_energy_j = math.fsum(e for e, _ in varied) / len(points)
            epoch_time_s = math.fsum(t for _, t in varied) / len(points)
        else:
            epoch_energy_j, epoch_time_s = vary.point(point)
        energy_j += epoch_energy_j
        time_s += epoch_time_s
        clock.now_s += epoch_time_s
        reached = not math.isnan(target) and epoch >= target
        metric = spec.target_metric if reached else None
        if optimizer.should_stop(recommendation.run_id, epoch, energy_j, time_s, metric):
            break
    optimizer.report_result(recommendation.run_id, energy_j=energy_j, time_s=time_s, reached=reached)
    return SimulatedRun(
        recurrence=recurrence,
        batch_size=batch_size,
        power_limit_w=power_limit_w,
        energy_j=energy_j,
        time_s=time_s,
        reached=reached,
        epochs=epoch,
        phase=recommendation.phase,
        profiled=profiled,
    )


def simulate(
    trace: WorkloadTrace,
    spec: JobSpec,
    recurrences: int,
    seed: int,
    *,
    policy: PolicyConfig = WATTWISE_POLICY,
    store: JobStore | None = None,
    noise: float = 0.0,
) -> SimulationResult:
    """Run the three policies on `trace` for `recurrences` recurrences (deterministic given `seed`).

    `noise`: wattwise's policy sees and pays figures that vary by this fraction (the module docstring).
    """
    if recurrences < 1:
        raise UsageError(f"--recurrences must be at least 1 (got {recurrences})")
    unknown = sorted(set(spec.batch_sizes) - set(trace.batch_sizes))
    if unknown:
        raise UsageError(f"batch sizes {unknown} are not in the trace, which has {list(trace.batch_sizes)}")
    check_simulable(trace, spec)
    default_seq, trace_seq, policy_seq, noise_seq = np.random.SeedSequence(seed).spawn(4)
    history = simulate_wattwise(
        trace,
        spec,
        recurrences,
        trace_rng=np.random.default_rng(trace_seq),
        policy_rng=np.random.default_rng(policy_seq),
        policy=policy,
        store=store,
        noise=noise,
        noise_rng=np.random.default_rng(noise_seq),
    )
    energy_j = math.fsum(r.energy_j for r in history)
    time_s = math.fsum(r.time_s for r in history)
    setting, oracle_totals = oracle(trace, spec, recurrences)
    return SimulationResult(
        default=simulate_default(trace, spec, recurrences, np.random.default_rng(default_seq)),
        wattwise=Totals(energy_j, time_s, spec.cost(energy_j, time_s)),
        oracle=oracle_totals,
        oracle_setting=setting,
        history=history,
    )


def job_for_trace(
    trace: WorkloadTrace,
    *,
    default_batch_size: int,
    max_epochs: int,
    eta: float,
    beta: float,
) -> JobSpec:
    """The job that the trace's workload is: its traced batch sizes and the GPU's highest power limit.

    A default batch size larger than any traced one becomes the largest traced one.
    """
    largest = trace.batch_sizes[-1]
    default = largest if default_batch_size > largest else default_batch_size
    if default not in trace.batch_sizes:
        raise UsageError(
            f"--default-batch-size {default_batch_size} is not traced for {trace.dataset}/{trace.network}; "
            f"pick one of {list(trace.batch_sizes)}"
        )
    return JobSpec(
        name=f"{trace.dataset}/{trace.network}",
        batch_sizes=trace.batch_sizes,
        default_batch_size=default,
        target_metric=trace.target_metric,
        max_epochs=max_epochs,
        max_power_w=trace.max_power_w,
        eta=eta,
        beta=beta,
    )
