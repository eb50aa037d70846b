"""The closed sets of wattwise's words, spelled once for every layer.

A leaf module: it imports nothing of wattwise, so config, devices/, store/, record/, run/ and the adapters
may all import it. Each set is a `StrEnum`: its members compare equal to their strings, so summary.json,
the store's rows and the configuration keep the words they always had, and OmegaConf validates a field
typed with one of them.
"""

from __future__ import annotations

from enum import StrEnum


class RunMode(StrEnum):
    """What the power-limit part does in a run (`power_limit.mode`, the history's mode column)."""

    #: Change nothing; measure only.
    MEASURE = "measure"
    #: Profile limits during the first steps and keep the best (`power_limit.selector`).
    TUNE = "tune"
    #: Hold a fixed cap (`power_limit.cap_w` or `cap_fraction`).
    CAP = "cap"


class Selector(StrEnum):
    """How the tuner picks a limit from its profile (`power_limit.selector`)."""

    #: Least energy per step.
    ENERGY = "energy"
    #: Least time per step.
    TIME = "time"
    #: Least Zeus cost, `eta * E + (1 - eta) * MaxPower * T`.
    COST = "cost"
    #: Least energy within `max_slowdown` of the fastest limit.
    SLOWDOWN = "slowdown"


class RunStatus(StrEnum):
    """How a training run ended (summary.json's `status`, the history's status column)."""

    #: The framework's fit or the script ended normally.
    COMPLETED = "completed"
    #: Training raised.
    FAILED = "failed"
    #: A signal (SIGTERM, SIGINT, a preemption) ended it.
    INTERRUPTED = "interrupted"


class TunerPhase(StrEnum):
    """Where the power-limit tuner is in its profile of one limit."""

    #: Steps before the first limit (`power_limit.wait_steps`).
    WAIT = "wait"
    #: A new limit settles before it is measured (`power_limit.warmup_steps`).
    WARMUP = "warmup"
    #: Waiting for a step in which the energy counter changed, so the window opens on an update.
    ALIGN = "align"
    #: The limit's window is open.
    PROFILE = "profile"
    #: A limit is chosen, or tuning ended without one.
    DONE = "done"


class AllocationPolicy(StrEnum):
    """Which GPUs the node agent lets a caller lease (`allocation` in the agent's configuration)."""

    #: Any GPU, to any member of the agent's group.
    NONE = "none"
    #: The GPUs a scheduler's prolog registered for the caller's job.
    REGISTERED = "registered"
    #: The GPUs the caller's cgroup may open.
    CGROUP = "cgroup"


class EndedHow(StrEnum):
    """How one process of a run ended, when the processes ended apart (a signal, an exception)."""

    #: It ended of itself (its script returned, or it was told to end).
    ENDED = "ended"
    #: An exception ended it; its type is the detail.
    RAISED = "raised"
    #: A signal reached it; the signal's name is the detail.
    SIGNALLED = "signalled"


class RankNoteKind(StrEnum):
    """What the summary says of one process of a run (`RankNote`), each kind rendered as one note."""

    #: The processes ended apart: how each ended.
    ENDED_APART = "ended_apart"
    #: Its figures file could not be read: its energy is missing.
    UNREADABLE = "unreadable"
    #: It left no figures while the main process waited: its energy is missing.
    NO_FIGURES = "no_figures"
    #: It left its figures after the summary was written: they are beside it, not in the totals.
    LATE = "late"


class SimulatedGpuName(StrEnum):
    """Which GPU generation the realistic simulated GPU stands for (`devices.simulated_gpu`)."""

    #: NVIDIA H100 SXM (Hopper), as measured by this project's acceptance run.
    H100 = "h100"
    #: NVIDIA A100 SXM (Ampere GA100).
    A100 = "a100"
    #: NVIDIA V100 (Volta).
    V100 = "v100"
    #: AMD Instinct MI300X (CDNA 3).
    MI300X = "mi300x"


class IntensityProvider(StrEnum):
    """Whose codes of the bundled carbon-intensity table: a country's (`DE`) or a cloud's region (`gcp:...`)."""

    COUNTRY = "country"
    AWS = "aws"
    AZURE = "azure"
    GCP = "gcp"


class PowerReading(StrEnum):
    """What a GPU's power reading reports: the power averaged over a window, or at that moment."""

    #: Averaged over a window (1 s on NVIDIA's Ampere, except GA100, and newer).
    AVERAGED = "averaged"
    #: The power at that moment (GA100 and older).
    INSTANTANEOUS = "instantaneous"


class PhysicsName(StrEnum):
    """Which physics a simulated GPU follows (`devices.simulated_physics`, `WATTWISE_SIMULATED_PHYSICS`)."""

    #: Like a real GPU: a counter that advances in steps, reads that take time, settings that settle, noise.
    REALISTIC = "realistic"
    #: Exact: the counter integrates the model at every read, settings act at once, no noise (unit tests).
    IDEAL = "ideal"


class SweepPhase(StrEnum):
    """Where the power-cap sweep of `wattwise acceptance --levers` is with its current cap."""

    #: The next cap (and its workload power profile) is set at the next step.
    APPLY = "apply"
    #: The cap settles for a few steps before it is measured.
    SETTLE = "settle"
    #: Waiting for a step in which the energy counter changed, so the window opens on an update.
    ALIGN = "align"
    #: The cap's window is open.
    MEASURE = "measure"
    #: Waiting for a step in which the counter changed, so the window ends on an update.
    CLOSING = "closing"
    #: Every cap is measured, or a refused profile ended the sweep.
    DONE = "done"


class MetricMode(StrEnum):
    """Which way a recurring job's target metric is better (`JobSpec.metric_mode`, the adapters' `mode`)."""

    #: Higher is better (an accuracy): the target is reached at or above it.
    MAX = "max"
    #: Lower is better (a loss): the target is reached at or below it.
    MIN = "min"


class RecurringRunState(StrEnum):
    """Where a recurring job's run stands in the job store (`StoredRun.state`, the runs table's `state`)."""

    #: Started; its result is not reported yet.
    OPEN = "open"
    #: It reached the job's target metric.
    REACHED = "reached"
    #: It did not: early-stopped, out of epochs, or crashed and reported as failed.
    FAILED = "failed"


class RecurringPhase(StrEnum):
    """Why a recurring job's run got its batch size (`StoredRun.phase`)."""

    #: The pruning exploration asked for this batch size.
    EXPLORE = "explore"
    #: Thompson sampling chose it among the batch sizes that survived pruning.
    EXPLOIT = "exploit"
    #: Another exploration run was still open, so this run got the best choice so far.
    CONCURRENT = "concurrent"


class StopReason(StrEnum):
    """Why a recurring job's run should stop now (`BatchSizeOptimizer.stop_reason`, the adapters')."""

    #: It reached the target metric.
    REACHED = "reached"
    #: It used the job's maximum epochs.
    MAX_EPOCHS = "max_epochs"
    #: One more epoch would take its cost above the job's limit.
    COST = "cost"


class BanditModel(StrEnum):
    """How the recurring policy's bandit models the epochs to reach the target (`PolicyConfig.bandit`)."""

    #: Cost = cost per epoch x epochs to target, the epochs shared across batch sizes by empirical Bayes
    #: (wattwise's default).
    SHARED_EPOCHS = "shared-epochs"
    #: Zeus's: a Gaussian on each batch size's raw run costs, with that batch size's own variance.
    PER_ARM = "per-arm"


class ReleaseOutcome(StrEnum):
    """What the node agent did when a holder gave a GPU back (the agent's `released`)."""

    #: Restored to its original settings by this request.
    RESTORED = "restored"
    #: Held on by the process group the lease was handed to, which runs on.
    KEPT = "kept"
    #: The caller held nothing: the agent restored it already, when its holder ended.
    NOT_HELD = "not held"
    #: The GPU refused its original settings; it stays held (see the agent's log).
    FAILED = "failed"


class StartObjective(StrEnum):
    """What `wattwise advise` minimises when it picks a job's start (`--objective`)."""

    #: Grams of CO2e: the facility's energy times the grid's carbon intensity.
    EMISSIONS = "emissions"
    #: The facility's joules: the GPUs' energy times the PUE.
    FACILITY_ENERGY = "facility-energy"
    #: Currency: the facility's energy times the price.
    COST = "cost"


class StatementKind(StrEnum):
    """Which energy statement `wattwise report` writes (`--statement`)."""

    #: The paper's: what the work used, with its uncertainty and how it was measured.
    PAPER = "paper"
    #: The EU AI Act's "known or estimated energy consumption" (Regulation 2024/1689, Annex XI).
    EU_AI_ACT = "eu-ai-act"


class SolverName(StrEnum):
    """Which solver `wattwise frontier` builds the time-energy frontier with (`--solver`, the file's `solver`)."""

    #: The fast solver: exact for the convex relaxation, rounded to real plans.
    FAST = "fast"
    #: CP-SAT's exact plans, for small pipelines (the pipeline extra's OR-Tools).
    EXACT = "exact"


class CarbonMode(StrEnum):
    """Which limit the carbon-aware power limit holds (`wattwise.carbon.policy`)."""

    #: The grid is clean: the time-optimal limit.
    TIME = "time"
    #: The grid is dirty (or its intensity unknown): the energy-optimal limit.
    ENERGY = "energy"


class SettingName(StrEnum):
    """A GPU setting wattwise changes and restores, named as the `Device` method that reads it.

    The `setting` of the settings journal, of the agent's audit log and of a run's settings timeline.
    """

    POWER_LIMIT = "power_limit_w"
    SM_CLOCKS = "locked_sm_clocks_mhz"
    WORKLOAD_PROFILES = "requested_workload_power_profiles"


class PlanMode(StrEnum):
    """Which point of a pipeline's frontier `wattwise plan` chose (PLAN.json's `mode`)."""

    #: The least energy at no slowdown against the maximum frequency (no `--straggler-time`).
    INTRINSIC = "intrinsic"
    #: The least energy for an iteration that waits for a straggler's time (`--straggler-time T`).
    STRAGGLER = "straggler"


class Framework(StrEnum):
    """Who drives a run (summary.json's and the run history's `framework`)."""

    LIGHTNING = "lightning"
    ACCELERATE = "accelerate"
    #: The Hugging Face Trainer, through Accelerate.
    TRANSFORMERS = "transformers"
    #: `wattwise run`, `wattwise measure` or the library called directly.
    CLI = "cli"
