"""Power-limit choice: the cost arithmetic and the selectors (pure).

Zeus (NSDI'23) trades energy against time with one knob, eta in [0, 1]:

    cost = eta * E + (1 - eta) * MaxPower * T

where MaxPower is the maximum power limit times the number of GPUs, so both terms are joules.
eta = 1 minimises energy alone; eta = 0 minimises time alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wattwise.codec import is_number
from wattwise.errors import Key, UsageError
from wattwise.profile import Payback, ProfileEntry
from wattwise.vocabulary import Selector, TunerPhase

#: Most power limits one tuning run profiles: each costs warm-up and profile steps.
MAX_PROFILED_LIMITS = 1000
#: Most steps a profile window is sized to (`PowerLimitTuner.size_windows`), whatever the step time.
MAX_PROFILE_STEPS = 100_000
#: How much a measured cost varies between runs of one workload on a real GPU beyond the energy counter's
#: resolution, relative to the cost: step times and power vary by a few per cent from step to step, about
#: 0.2% over a window of 20 counter updates. Costs closer than this are a tie (`PowerLimitTuner._select`).
RUN_TO_RUN = 0.002
#: The least saving, relative to the cost, for which tuning on hardware chooses a lower limit than a higher
#: one: the same workload's cost differs by about 0.45% between two windows of 20 counter updates
#: (benchmarks/physics.py, realistic physics), so a smaller difference would not choose alike twice.
MIN_SAVING = 0.005
#: Rounds of measuring again the limits whose ranking the windows leave open (`PowerLimitTuner`).
CONFIRM_ROUNDS = 2
#: On a coarse energy counter a limit is measured in up to this many consecutive windows, each a part of
#: the shortest profile window, and only as many as its cost needs to be told from the best limit's
#: (`PowerLimitTuner`'s `window_parts`); the highest limit, which every saving is measured against, in all.
WINDOW_PARTS = 4
#: A limit not yet told from the best may be measured in up to twice `WINDOW_PARTS` windows while its
#: window's ends leave its energy known to no better than this fraction (their 95% bound): on a coarse
#: counter that bound is about a training step's energy at each end, so long steps need longer windows to
#: tell close limits apart (`PowerLimitTuner._measure_further`).
RESOLUTION = 0.01
#: The downward sweep stops once this many limits in a row cost more than the best one by more than their
#: uncertainty: lower limits only run slower (`PowerLimitTuner`'s `stop_after_worse`).
STOP_AFTER_WORSE = 2


def zeus_cost(energy_j: float, time_s: float, *, eta: float, max_power_w: float) -> float:
    """`eta * energy_j + (1 - eta) * max_power_w * time_s`, in joules."""
    check_eta(eta)
    return eta * energy_j + (1.0 - eta) * max_power_w * time_s


def check_eta(eta: float) -> None:
    """Refuse an eta outside [0, 1].

    Raises:
        UsageError: `eta` is not between 0 and 1.
    """
    if not (0.0 <= eta <= 1.0) or math.isnan(eta):
        raise UsageError(Key("eta"), f" must be between 0 and 1 (got {eta}); 1 minimises energy, 0 minimises time")


def select_power_limit(
    profile: Sequence[ProfileEntry],
    selector: str,
    *,
    eta: float = 0.5,
    max_power_w: float | None = None,
    max_slowdown: float = 0.1,
) -> ProfileEntry:
    """Pick the entry of `profile` that the selector prefers.

    - "energy": least energy per step.
    - "time": least time per step.
    - "cost": least Zeus cost; `max_power_w` defaults to the highest profiled limit (one GPU).
    - "slowdown": least energy among the limits whose step time is at most `(1 + max_slowdown)` times the
      step time at the highest profiled limit (the time the job takes without wattwise).

    Ties go to the higher power limit (the faster, safer choice).
    """
    if not profile:
        raise ValueError("cannot select a power limit from an empty profile")
    check_profile(profile)
    if selector not in tuple(Selector):
        raise UsageError(f"selector must be one of {', '.join(Selector)} (got {selector!r})")
    # Highest limit first, so that min() keeps the higher limit on ties.
    ordered = sorted(profile, key=lambda e: -e.power_limit_w)
    if selector == Selector.ENERGY:
        return min(ordered, key=lambda e: e.energy_j)
    if selector == Selector.TIME:
        return min(ordered, key=lambda e: e.time_s)
    if selector == Selector.COST:
        check_eta(eta)
        pmax = max_power_w if max_power_w is not None else ordered[0].power_limit_w
        return min(ordered, key=lambda e: zeus_cost(e.energy_j, e.time_s, eta=eta, max_power_w=pmax))
    if max_slowdown < 0 or math.isnan(max_slowdown):
        raise UsageError(f"max_slowdown must be >= 0, a fraction such as 0.1 for 10% (got {max_slowdown})")
    limit_s = ordered[0].time_s * (1.0 + max_slowdown)
    allowed = [e for e in ordered if e.time_s <= limit_s]
    return min(allowed, key=lambda e: e.energy_j)


@dataclass(frozen=True)
class Ranking:
    """Profiled limits as their windows measured them, and how far those measurements rank them.

    Each limit's cost (or energy) per step is known to within `uncertainty_j` (its energy per step, J)
    weighted as the cost weighs energy, and `run_to_run` of the cost (the workload's own variation over one
    window; over `windows` windows of one limit, that divided by their square root). The limits whose cost
    is within the combined uncertainty of the least cost, or within `min_saving` of it (a fraction of it),
    tie, and a tie goes to the highest of them (the faster, safer choice), so that repeated runs choose
    alike.
    """

    profile: Sequence[ProfileEntry]
    uncertainty_j: Sequence[float]
    selector: str
    eta: float = 0.5
    max_power_w: float | None = None
    max_slowdown: float = 0.1
    run_to_run: float = 0.0
    #: How many windows each entry of `profile` pools (None: one each).
    windows: Sequence[int] | None = None
    min_saving: float = 0.0
    #: Limits already told from the best as costlier (in fewer windows than the others: their uncertainty is
    #: wider): never a tie by their uncertainty, so a tie cannot go to a limit measured less than the best one;
    #: still a tie where the best saves less than `min_saving` beside them, as measured in the end.
    told: frozenset[float] = frozenset()
    #: How far each entry's cost per step may be off from the steps' own spread, relative to it: the
    #: standard deviation of one step's time over the square root of the steps measured (None: not known).
    spread: Sequence[float] | None = None

    def _best(self) -> tuple[int, list[float], list[float]]:
        """The selector's best entry (its index), and each entry's value and uncertainty (J per step)."""
        best = select_power_limit(
            self.profile, self.selector, eta=self.eta, max_power_w=self.max_power_w, max_slowdown=self.max_slowdown
        )
        pmax = self.max_power_w if self.max_power_w is not None else max(e.power_limit_w for e in self.profile)
        weight = self.eta if self.selector == Selector.COST else 1.0
        counts = list(self.windows) if self.windows is not None else [1] * len(self.profile)
        values = [
            zeus_cost(e.energy_j, e.time_s, eta=self.eta, max_power_w=pmax)
            if self.selector == Selector.COST
            else e.energy_j
            for e in self.profile
        ]
        spread = list(self.spread) if self.spread is not None else [0.0] * len(self.profile)
        sigmas = [
            math.hypot(
                weight * self.uncertainty_j[i],
                self.run_to_run * values[i] / math.sqrt(max(1, counts[i])),
                spread[i] * values[i],
            )
            for i in range(len(self.profile))
        ]
        return list(self.profile).index(best), values, sigmas

    def choice(self) -> tuple[ProfileEntry | None, str | None]:
        """The selector's choice, as far as the measurements resolve it.

        The highest limit of the best one's ties; a limit already told from the best as costlier (`told`)
        is no tie, whatever its uncertainty. When that is the highest limit measured and it ties with
        another, it is chosen only when both were measured to within `min_saving` (no lower limit saves that
        much); otherwise the measurements cannot tell them apart: no choice, and the reason.

        Returns:
            (the choice, None), or (None, why no choice was made).
        """
        if self.selector == Selector.TIME:
            return select_power_limit(self.profile, "time"), None
        profile = self.profile
        b, values, sigmas = self._best()
        top_w = max(e.power_limit_w for e in profile)
        allowed = list(profile)
        if self.selector == Selector.SLOWDOWN:
            top = max(profile, key=lambda e: e.power_limit_w)
            allowed = [e for e in profile if e.time_s <= top.time_s * (1.0 + self.max_slowdown)]
        floor = self.min_saving * values[b]
        ties = [
            i
            for i, e in enumerate(profile)
            if e in allowed
            and (
                values[i] - values[b] <= floor  # saves less than counts: a tie, however it was measured
                or (
                    (i == b or e.power_limit_w not in self.told)
                    and values[i] - values[b] <= math.hypot(sigmas[i], sigmas[b])
                )
            )
        ]
        top_i = max(ties, key=lambda i: profile[i].power_limit_w)
        chosen = profile[top_i]
        if chosen.power_limit_w != top_w or len(ties) == 1:
            return chosen, None
        if floor > 0 and math.hypot(sigmas[top_i], sigmas[b]) <= floor and values[top_i] - values[b] <= floor:
            return chosen, None  # measured well enough to say that no lower limit saves `min_saving`
        other = min((i for i in ties if i != top_i), key=lambda i: values[i])
        return None, (
            f"the profile windows cannot tell {profile[other].power_limit_w:g} W from {top_w:g} W: their "
            f"{'cost' if self.selector == Selector.COST else 'energy'} per step differs by "
            f"{abs(values[top_i] - values[other]):.3g} J, within what was measured "
            f"({math.hypot(sigmas[other], sigmas[top_i]):.3g} J); longer windows (power_limit.min_profile_s) "
            "resolve it"
        )

    def tie_open(self, i: int, j: int) -> bool:
        """Whether entries `i` and `j` could rank the other way in a repeat of their windows.

        Their difference lies within twice their combined uncertainty of the tie's threshold (`choice`):
        a repeat of the same windows could fall on either side of it. Never with exact figures.
        """
        _, values, sigmas = self._best()
        sigma = math.hypot(sigmas[i], sigmas[j])
        low = min(values[i], values[j])
        return sigma > 0 and abs(abs(values[i] - values[j]) - max(self.min_saving * low, sigma)) < 2.0 * sigma

    def undecided(self) -> list[float]:
        """The limits to measure again before choosing: the best one and those whose tie with it is open.

        A limit's tie with the best (`choice`) is open when its difference from the best lies within twice
        their combined uncertainty of the tie's threshold: a repeat of the same windows could fall on either
        side. Empty when every tie is clear (always, with exact figures).
        """
        if self.selector == Selector.TIME or len(self.profile) < 2:
            return []
        b = self._best()[0]
        open_ties = [e.power_limit_w for i, e in enumerate(self.profile) if i != b and self.tie_open(i, b)]
        if not open_ties:
            return []
        return sorted({self.profile[b].power_limit_w, *open_ties}, reverse=True)


def check_profile(profile: Sequence[ProfileEntry]) -> None:
    """Raise a `UsageError` naming the row unless every entry has a positive, finite limit, time and energy.

    A step of zero time or zero energy is no measurement: choosing it would report a 100% saving.
    """
    for row, entry in enumerate(profile, start=1):
        for name, value in (
            ("power_limit_w", entry.power_limit_w),
            ("time_s", entry.time_s),
            ("energy_j", entry.energy_j),
        ):
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (math.isfinite(value) and value > 0)
            ):
                raise UsageError(
                    f"power-limit profile row {row} (power_limit_w {entry.power_limit_w!r}): {name} "
                    f"must be a positive number (got {value!r}); re-measure that limit"
                )


def profile_limits_w(min_w: float, max_w: float, step_w: float) -> list[float]:
    """Limits to profile: from the maximum down in steps of `step_w`, the minimum always included."""
    if not (math.isfinite(step_w) and step_w > 0):
        raise UsageError(f"step_w must be > 0 watts (got {step_w})")
    count = math.ceil((max_w - min_w) / step_w - 1e-9) + 1
    if count > MAX_PROFILED_LIMITS:
        least_w = math.ceil((max_w - min_w) / (MAX_PROFILED_LIMITS - 1))
        raise UsageError(
            f"step_w {step_w:g} W would profile {count} power limits between {min_w:g} and "
            f"{max_w:g} W (at most {MAX_PROFILED_LIMITS}); raise step_w to at least {least_w} W"
        )
    limits: list[float] = []
    w = max_w
    while w > min_w + 1e-9:
        limits.append(w)
        w -= step_w
    limits.append(min_w)
    return limits


def cap_limit_w(max_w: float, min_w: float, *, cap_w: float | None, cap_fraction: float | None) -> float:
    """The power limit of mode "cap": a fixed cap or a fraction of the maximum, within the allowed range."""
    target = cap_w if cap_w is not None else (cap_fraction or 1.0) * max_w
    if not (min_w <= target <= max_w):
        raise UsageError(
            f"power cap {target:g} W is outside the GPU's allowed range "
            f"[{min_w:g}, {max_w:g}] W; set cap_w or cap_fraction inside it"
        )
    return target


@dataclass
class TunerAction:
    """What the driver must do at the start of a step."""

    #: Apply this power limit (to every GPU of the job) before the step, or None for no change.
    set_limit_w: float | None = None
    #: Open the profiling window before this step.
    begin_window: bool = False


class PowerLimitTuner:
    """Just-in-time power-limit profiling (Zeus's optimizer), as a pure state machine.

    Phases: `wait` (the first `wait_steps` steps, untouched) -> for each limit, highest first: `warmup`
    (`warmup_steps` at that limit), `align` (with `align_to_counter`: steps until the energy counter
    changes) then `profile` (`profile_steps` measured as one window) -> `done` (the selected limit applied).
    With `align_to_counter`, a window opens just after a step in which the energy counter changed and ends
    on such a step too, once it holds its steps: the counter's steps then fall within one training step of
    the window's ends, not anywhere within one period of the counter (`on_step_end`'s `counter_changed`).
    A coarse energy counter quantises short windows, so with `min_window_s` the
    first window, once it holds `profile_steps` steps, is sized by `size_windows`: when it lasted less than
    `min_window_s`, it and every later window hold as many steps as that duration needs. Sizing is done
    once, from one duration that the driver makes every process agree on, so processes stay in step.
    Steps are optimizer steps. The driver calls `on_step_begin`,
    `on_step_end` and `record` (with the window's time and energy, summed over all GPUs of the job);
    what is not training (evaluation, checkpoints) is paused out of the window by the driver, so a
    window may span epochs. A run too short to profile every limit ends with `finish_early`: the best
    limit measured so far is chosen, and `finished` stays False with the reason. A choice whose cost the
    windows cannot tell from the highest limit's (their difference within the energy's uncertainty that
    the driver gives `end_window`) is not made: tuning gives up, saying so (`unresolved`).

    With noisy figures (`run_to_run`, or an uncertainty given to `end_window`), a sweep whose ranking a
    repeat could change (`Ranking.undecided`: the best limit and those whose tie with it is open) is followed by
    up to `confirm_rounds` rounds that measure those limits again (`confirming`); each limit's figures are
    then those of all its windows' steps together (`_merge`). A run that ends or runs short during a round
    chooses from what it measured, as a finished tuning (`settle`).
    """

    def __init__(
        self,
        limits_w: Sequence[float],
        *,
        selector: str = "cost",
        eta: float = 0.5,
        max_slowdown: float = 0.1,
        max_power_w: float | None = None,
        wait_steps: int = 2,
        warmup_steps: int = 2,
        profile_steps: int = 5,
        min_window_s: float = 0.0,
        align_to_counter: bool = False,
        run_to_run: float = 0.0,
        min_saving: float = 0.0,
        confirm_rounds: int = CONFIRM_ROUNDS,
        window_parts: int = 1,
        stop_after_worse: int = STOP_AFTER_WORSE,
    ) -> None:
        if not limits_w:
            raise UsageError("power-limit tuning needs at least one limit to profile")
        if selector not in tuple(Selector):
            raise UsageError(f"selector must be one of {', '.join(Selector)} (got {selector!r})")
        check_eta(eta)
        if profile_steps < 1:
            raise UsageError(f"profile_steps must be at least 1 (got {profile_steps})")
        for name, steps in (("warmup_steps", warmup_steps), ("wait_steps", wait_steps)):
            if steps < 0:
                raise UsageError(f"{name} must be >= 0 (got {steps})")
        if confirm_rounds < 0:
            raise UsageError(f"confirm_rounds must be >= 0 (got {confirm_rounds})")
        if window_parts < 1 or stop_after_worse < 0:
            raise UsageError(
                f"window_parts must be >= 1 and stop_after_worse >= 0 (got {window_parts}, {stop_after_worse})"
            )
        if not (0.0 <= min_saving < 1.0):
            raise UsageError(f"min_saving must be a fraction of the cost in [0, 1) (got {min_saving})")
        if not (0.0 <= min_window_s < math.inf):
            raise UsageError(f"min_window_s must be a finite number of seconds >= 0 (got {min_window_s})")
        self.limits_w = [float(w) for w in limits_w]
        self.selector = selector
        self.eta = eta
        self.max_slowdown = max_slowdown
        self.max_power_w = max_power_w if max_power_w is not None else max(self.limits_w)
        self.wait_steps = wait_steps
        self.warmup_steps = warmup_steps
        #: The warm-up of the limit being measured: `warmup_steps` for each step of the profile grid that the
        #: limit moved to reach it (`on_step_begin`).
        self.limit_warmup_steps = warmup_steps
        self.profile_steps = profile_steps
        #: A profile window lasts at least this long (a coarse energy counter quantises shorter windows).
        self.min_window_s = float(min_window_s)
        #: Windows begin and end on steps in which the energy counter changed (see the class docstring).
        self.align_to_counter = align_to_counter
        #: Relative variation of a measured cost between runs (`RUN_TO_RUN` on hardware; 0: exact figures).
        self.run_to_run = run_to_run
        #: A lower limit must save at least this fraction of the cost (`MIN_SAVING` on hardware; 0: any).
        self.min_saving = min_saving
        #: Most rounds of measuring again the limits the sweep left undecided.
        self.confirm_rounds = confirm_rounds
        #: Rounds of measuring again made so far.
        self.rounds = 0
        #: Windows a limit is measured in, at most, each lasting `min_window_s / window_parts` (see the class
        #: docstring); 1: one window of `min_window_s` each.
        self.window_parts = window_parts
        #: Stop the sweep after this many limits in a row cost more than the best (0: profile every limit).
        self.stop_after_worse = stop_after_worse
        #: The limits to profile, in order: the sweep (`limits_w`), then each round's limits measured again.
        self.queue: list[float] = list(self.limits_w)
        #: How many of `queue`'s first limits the sweep profiles: all of `limits_w` unless it stopped early.
        self.sweep_size = len(self.limits_w)
        #: Why the sweep stopped before the lowest limit (None: it did not).
        self.stopped_early: str | None = None
        #: The consecutive windows measured so far at the current limit, and their total time, energy, steps
        #: and energy uncertainty (J).
        self.parts = 0
        self._part_totals = (0.0, 0.0, 0, 0.0)
        #: Limits in a row that cost more than the best one by more than their uncertainty.
        self.worse_in_a_row = 0
        #: The steps measured at each limit so far, every window of it (its parts, its rounds measured again).
        self.steps_measured: dict[float, int] = {}
        #: Every step run at each limit while tuning (warm-up, alignment and windows): what tuning cost.
        self.steps_at: dict[float, int] = {}
        #: wattwise's own time in the run's hooks while tuning, in seconds (the driver adds it: the counter
        #: reads that find the windows' ends, the windows' readings): part of what tuning cost (`payback`).
        self.own_time_s = 0.0
        #: The limits told from the best one in fewer than `window_parts` windows: a round of measuring again
        #: leaves them out.
        self.told_early: set[float] = set()
        #: The steps' own spread at each limit: (sum over its windows of steps x the squared relative standard
        #: deviation of one step's time, the steps counted), from what the driver measured (`end_window`).
        self.step_spread: dict[float, tuple[float, int]] = {}
        #: Every window measured: (limit W, time s per step, energy J per step, uncertainty J per step, steps).
        self.windows: list[tuple[float, float, float, float, int]] = []
        #: How many windows each entry of `profile` pools.
        self.window_counts: list[int] = []
        self.phase = TunerPhase.WAIT if wait_steps > 0 else self._limit_start()
        self.limit_index = 0
        self.steps_in_phase = 0
        self.window_open = False
        self.profile: list[ProfileEntry] = []
        self.chosen: ProfileEntry | None = None
        #: Why tuning stopped before every limit was profiled (None: it finished, or goes on).
        self.unfinished_reason: str | None = None
        #: Tuning gave up because the windows could not tell the best limit from the highest one.
        self.unresolved = False
        #: Each profiled limit's energy uncertainty per step (J), beside `profile`.
        self.uncertainty_j: list[float] = []
        self._applied: float | None = None
        self._window_steps = 0
        #: The windows were sized (`size_windows`); with `min_window_s` 0 there is nothing to size.
        self.windows_sized = self.min_window_s == 0.0

    @property
    def done(self) -> bool:
        """Whether tuning has ended and the chosen limit is applied."""
        return self.phase == TunerPhase.DONE

    @property
    def finished(self) -> bool:
        """Every limit was profiled (or a complete earlier result reused)."""
        return self.done and self.unfinished_reason is None

    def steps_to_finish(self) -> int:
        """Optimizer steps still needed before every limit is profiled (0 once done)."""
        if self.done:
            return 0
        # Every part of every limit left (the sweep may stop early, a limit need fewer parts; a close one on a
        # coarse counter may take up to twice as many, which this leaves out).
        per_limit = self.warmup_steps + self.profile_steps * self.window_parts
        left = self.sweep_size - self.limit_index
        if self.confirming:  # measuring again: what is left of the round
            left = len(self.queue) - self.limit_index
        if self.phase == TunerPhase.WAIT:
            return self.wait_steps - self.steps_in_phase + left * per_limit
        parts_left = self.window_parts - self.parts
        if self.phase == TunerPhase.WARMUP:
            return self.warmup_steps - self.steps_in_phase + self.profile_steps * parts_left + (left - 1) * per_limit
        return self.profile_steps * parts_left - self.steps_in_phase + (left - 1) * per_limit

    @property
    def confirming(self) -> bool:
        """Every limit is profiled and the undecided ones are being measured again."""
        return not self.done and self.limit_index >= self.sweep_size

    def settle(self) -> None:
        """End a round of measuring again: choose from the windows measured (tuning is finished)."""
        if not self.confirming:
            return
        self.window_open = False
        self.chosen = self._select()
        self._enter(TunerPhase.DONE)

    def at_limit_boundary(self) -> bool:
        """True before the first step of a limit (nothing of it measured yet)."""
        return self.phase == self._limit_start() and self.steps_in_phase == 0 and not self.window_open

    def _limit_start(self) -> TunerPhase:
        """The phase each limit starts in."""
        if self.warmup_steps > 0:
            return TunerPhase.WARMUP
        return TunerPhase.ALIGN if self.align_to_counter else TunerPhase.PROFILE

    @property
    def window_steps(self) -> int:
        """Steps in the open (or last) profile window."""
        return self._window_steps

    @property
    def wants_counter(self) -> bool:
        """Whether the next `on_step_end` needs to know if the energy counter changed during the step."""
        if not self.align_to_counter:
            return False
        if self.phase == TunerPhase.ALIGN:
            return True
        return (
            self.phase == TunerPhase.PROFILE
            and self.window_open
            and self.windows_sized
            and self.steps_in_phase + 1 >= self.profile_steps
        )

    def finish_early(self, reason: str) -> None:
        """Stop profiling: choose the best of the limits measured so far (none: the highest limit)."""
        if self.done:
            return
        self.window_open = False
        self.unfinished_reason = reason
        self.chosen = self._select() if self.profile else None
        if self.unresolved:
            self.unfinished_reason = f"{reason}; {self.unfinished_reason}"
        self._enter(TunerPhase.DONE)

    def give_up(self, reason: str) -> None:
        """Stop tuning without choosing: what was measured cannot rank the limits (`reason` says why).

        The highest limit is in force from the next step (`current_limit_w`); `chosen` stays None and
        `finished` False, so nothing reports a saving.
        """
        self.window_open = False
        self.unfinished_reason = reason
        self.chosen = None
        self._enter(TunerPhase.DONE)

    @property
    def current_limit_w(self) -> float | None:
        """The limit that should be in force now (the one profiled, or the chosen one); None while waiting."""
        if self.phase in (TunerPhase.WARMUP, TunerPhase.PROFILE):
            return self.queue[self.limit_index]
        if self.phase == TunerPhase.DONE:
            return self.chosen.power_limit_w if self.chosen is not None else max(self.limits_w)
        return None

    def on_step_begin(self) -> TunerAction:
        """Before a step: the limit to set, when it differs from the one applied."""
        action = TunerAction()
        target = self.current_limit_w
        if target is not None and target != self._applied:
            action.set_limit_w = target
            self.limit_warmup_steps = self.warmup_steps * self._grid_steps(self._applied, target)
            self._applied = target
        if self.phase == TunerPhase.PROFILE and self.steps_in_phase == 0 and not self.window_open:
            action.begin_window = True
            self.window_open = True
            self._window_steps = 0
        return action

    def on_step_end(self, steps: int = 1, counter_changed: bool | None = None) -> bool:
        """Count `steps` optimizer steps. True: end the profiling window now and `end_window` it.

        Args:
            steps: The optimizer steps made.
            counter_changed: Whether the energy counter changed during these steps, when `wants_counter`
                asked (the same answer in every process); None: not known, taken as changed.

        While `sizing_due`, the driver calls `size_windows` before acting on True.
        """
        if self.phase == TunerPhase.DONE:
            return False
        changed = counter_changed is None or counter_changed
        if self.phase != TunerPhase.WAIT:
            limit_w = self.queue[self.limit_index]
            self.steps_at[limit_w] = self.steps_at.get(limit_w, 0) + steps
        self.steps_in_phase += steps
        if self.window_open:
            self._window_steps += steps
        if self.phase == TunerPhase.WAIT and self.steps_in_phase >= self.wait_steps:
            self._enter(self._limit_start())
        elif self.phase == TunerPhase.WARMUP and self.steps_in_phase >= self.limit_warmup_steps:
            self._enter(TunerPhase.ALIGN if self.align_to_counter else TunerPhase.PROFILE)
        elif self.phase == TunerPhase.ALIGN and changed:
            self._enter(TunerPhase.PROFILE)
        elif self.phase == TunerPhase.PROFILE and self.steps_in_phase >= self.profile_steps:
            return self.sizing_due or not self.align_to_counter or not self.windows_sized or changed
        return False

    def _grid_steps(self, from_w: float | None, to_w: float) -> int:
        """How many steps of the profile grid a change from `from_w` to `to_w` moves (1 where not known).

        A power limit settles as a closed loop does, in a time that grows with how far it moves: its steps
        right after a change still run partly at the old operating point. One step of the downward sweep
        moves a little and settles within `warmup_steps`; a round measuring a limit again starts from the
        sweep's lowest limit, several steps away, and would measure part of the old one in its window
        (on the realistic simulated GPU, 75 W up after two 20 ms steps: +0.25% in cost, half of
        `MIN_SAVING`), so it warms up for as many steps as it moved.
        """
        grid = sorted(self.limits_w)
        if from_w is None or from_w not in grid or to_w not in grid:
            return 1
        return max(1, abs(grid.index(to_w) - grid.index(from_w)))

    @property
    def sizing_due(self) -> bool:
        """The open window holds `profile_steps` steps and the windows are not sized yet."""
        return (
            not self.windows_sized
            and self.phase == TunerPhase.PROFILE
            and self.window_open
            and self.steps_in_phase >= self.profile_steps
        )

    def size_windows(self, window_s: float) -> bool:
        """Size the windows from the open one, which lasted `window_s` seconds so far.

        Args:
            window_s: Wall time of the open window's steps (the same figure on every process).

        Returns:
            True when the open window goes on (it must last longer); False when it ends now.
        """
        self.windows_sized = True
        steps = max(1, self._window_steps)
        part_s = self.min_window_s / self.window_parts
        if window_s >= part_s:
            return False
        per_step_s = max(window_s, 1e-9) / steps
        needed = math.ceil(part_s / per_step_s - 1e-6)  # 199.9999999 steps of clock rounding: 200
        self.profile_steps = max(self.profile_steps, min(MAX_PROFILE_STEPS, needed))
        return self.steps_in_phase < self.profile_steps

    def end_window(
        self, time_s: float, energy_j: float, energy_uncertainty_j: float = 0.0, step_spread: float = 0.0
    ) -> None:
        """The profiling window of the current limit ended: time and energy of its steps.

        Args:
            time_s: The window's time, in seconds.
            energy_j: Its energy, in joules (every GPU of the job).
            energy_uncertainty_j: How far off `energy_j` may be (J; the energy counter's resolution at the
                window's ends); 0: exact.
            step_spread: The standard deviation of one step's time in the window, relative to the mean step
                (0: not measured); a mean over fewer steps is known less well, and ranks so (`Ranking.spread`).
        """
        if self.phase != TunerPhase.PROFILE or not self.window_open:
            raise RuntimeError("end_window() called outside a profiling window")
        self.window_open = False
        limit_w = self.queue[self.limit_index]
        t0, e0, n0, u0 = self._part_totals
        if self.parts:  # the limit's earlier parts: one window from the first part's start to this end
            self.windows.pop()
        # Consecutive windows share their inner ends, so the whole one is known as well as its outer ends are:
        # about as well as one part (each part's uncertainty is the counter's resolution at its two ends).
        steps_now = max(1, self._window_steps)
        self.steps_measured[limit_w] = self.steps_measured.get(limit_w, 0) + steps_now
        if step_spread > 0 and math.isfinite(step_spread):
            total, counted = self.step_spread.get(limit_w, (0.0, 0))
            self.step_spread[limit_w] = (total + steps_now * step_spread**2, counted + steps_now)
        self._part_totals = (t0 + time_s, e0 + energy_j, n0 + steps_now, max(u0, energy_uncertainty_j))
        self.parts += 1
        total_s, total_j, steps, uncertainty_j = self._part_totals
        self.windows.append((limit_w, total_s / steps, total_j / steps, max(0.0, uncertainty_j) / steps, steps))
        self._merge()
        if self._measure_further():
            self._enter(TunerPhase.PROFILE)  # the next window opens on the next step, where this one ended
            return
        self.parts, self._part_totals = 0, (0.0, 0.0, 0, 0.0)
        self._stop_sweep_if_worse(limit_w)
        self.limit_index += 1
        if self.limit_index >= len(self.queue) and self.rounds < self.confirm_rounds:
            again = [w for w in self._ranking().undecided() if w not in self.told_early]
            if len(again) > 1:
                self.rounds += 1
                self.queue += again
        if self.limit_index >= len(self.queue):
            self.chosen = self._select()
            self._enter(TunerPhase.DONE)
        else:
            self._enter(self._limit_start())

    def _measure_further(self) -> bool:
        """Whether the current limit needs another part: its cost is not yet told from the best limit's.

        The highest limit of the sweep is measured in every part (every saving is measured against it). A
        new best is measured in at least two, then until it is told from the best it replaces (every later
        limit is told from it). Another limit until its difference from the best exceeds their combined
        uncertainty (about a 95% bound), or lies clearly within the least saving that counts (`min_saving`),
        or every part is measured: a limit far from the best is told in one part, and not measured again.
        A limit still not told after `window_parts` parts goes on, up to twice as many, while its window
        knows its energy no better than `RESOLUTION`: with steps long beside the counter's period, each end
        of a window is uncertain by about a step's energy, and a longer window is what tells close limits
        apart.
        """
        most = 2 * self.window_parts if self.window_parts > 1 else 1  # a limit measured in parts may take more
        if self.parts >= most or self.selector == Selector.TIME:
            return False
        if self.limit_index == 0 or len(self.profile) < 2:
            return self.parts < self.window_parts
        if self.parts >= self.window_parts and self._resolved():
            return False
        b, values, sigmas = self._ranking()._best()
        i = [e.power_limit_w for e in self.profile].index(self.queue[self.limit_index])
        best = i == b
        if best:  # the new best, which every later limit is told from: told from the one it replaces
            if self.parts < 2:
                return True
            b = min((j for j in range(len(values)) if j != i), key=lambda j: values[j])
        sigma, gap = math.hypot(sigmas[i], sigmas[b]), abs(values[i] - values[b])
        told = gap > sigma or gap + sigma < self.min_saving * min(values[i], values[b])
        if told and not best:
            self.told_early.add(self.queue[self.limit_index])
        return not told

    def _resolved(self) -> bool:
        """Whether the current limit's window (its parts so far) knows its energy to `RESOLUTION`, or finer."""
        _, _, energy_j, uncertainty_j, _ = self.windows[-1]
        return energy_j <= 0 or uncertainty_j <= RESOLUTION * energy_j

    def _stop_sweep_if_worse(self, limit_w: float) -> None:
        """Count the sweep's limits in a row that cost more than the best; stop the sweep at `stop_after_worse`."""
        if self.stop_after_worse == 0 or self.limit_index >= self.sweep_size or len(self.profile) < 2:
            return
        b, values, sigmas = self._ranking()._best()
        i = [e.power_limit_w for e in self.profile].index(limit_w)
        top = max(self.profile, key=lambda e: e.power_limit_w)
        too_slow = self.selector == Selector.SLOWDOWN and self.profile[i].time_s > top.time_s * (1 + self.max_slowdown)
        worse = i != b and (values[i] - values[b] > math.hypot(sigmas[i], sigmas[b]) or too_slow)
        if self.selector == Selector.TIME:
            worse = self.profile[i].time_s > self.profile[b].time_s
        self.worse_in_a_row = self.worse_in_a_row + 1 if worse else 0
        if self.worse_in_a_row >= self.stop_after_worse and self.limit_index + 1 < self.sweep_size:
            skipped = self.queue[self.limit_index + 1 : self.sweep_size]
            self.stopped_early = (
                f"{self.stop_after_worse} limits in a row cost more than {self.profile[b].power_limit_w:g} W by "
                f"more than their uncertainty, so the lower {len(skipped)} "
                f"({', '.join(f'{w:g}' for w in skipped)} W) were not profiled"
            )
            del self.queue[self.limit_index + 1 : self.sweep_size]
            self.sweep_size = self.limit_index + 1

    def _merge(self) -> None:
        """`profile`, `uncertainty_j` and `window_counts` from `windows`: each limit's figures, in sweep order.

        A limit measured in several windows (rounds of measuring again) is known by all their steps together:
        its time and energy per step are their totals over the steps, so a short window counts for as few
        steps as it holds, and the uncertainty is that of the windows' ends, added in quadrature.
        """
        by_limit: dict[float, list[tuple[float, float, float, float, int]]] = {}
        for window in self.windows:
            by_limit.setdefault(window[0], []).append(window)
        self.profile, self.uncertainty_j, self.window_counts = [], [], []
        for limit_w, ws in by_limit.items():
            steps = sum(w[4] for w in ws)
            time_s, energy_j = sum(w[1] * w[4] for w in ws) / steps, sum(w[2] * w[4] for w in ws) / steps
            self.profile.append(ProfileEntry(limit_w, time_s, energy_j))
            self.uncertainty_j.append(math.sqrt(sum((w[3] * w[4]) ** 2 for w in ws)) / steps)
            self.window_counts.append(len(ws))

    def _ranking(self) -> Ranking:
        """The limits profiled so far, as `Ranking` ranks them."""
        if len(self.uncertainty_j) != len(self.profile):
            self.uncertainty_j = [0.0] * len(self.profile)
        return Ranking(
            self.profile,
            self.uncertainty_j,
            self.selector,
            eta=self.eta,
            max_power_w=self.max_power_w,
            max_slowdown=self.max_slowdown,
            run_to_run=self.run_to_run,
            windows=self.window_counts if len(self.window_counts) == len(self.profile) else None,
            min_saving=self.min_saving,
            told=frozenset(self.told_early),
            spread=[self._spread_of(e.power_limit_w) for e in self.profile],
        )

    def _spread_of(self, limit_w: float) -> float:
        """How far the mean step at `limit_w` may be off from its steps' spread, relative (0: not measured)."""
        total, counted = self.step_spread.get(limit_w, (0.0, 0))
        return math.sqrt(total / counted) / math.sqrt(counted) if counted > 0 else 0.0

    def _select(self) -> ProfileEntry | None:
        """The selector's choice among the profiled limits, or None (`unresolved`, with the reason).

        See `Ranking.choice`; the "time" selector measures no energy and chooses as `select_power_limit`.
        """
        chosen, reason = self._ranking().choice()
        if chosen is None:
            self.unresolved, self.unfinished_reason = True, reason
        return chosen

    def _enter(self, phase: TunerPhase) -> None:
        self.phase = phase
        self.steps_in_phase = 0

    def payback(self, steps_at_chosen: int) -> Payback | None:
        """What the choice gained and tuning cost (`payback`), with `steps_at_chosen` run at it; None: no choice."""
        if self.chosen is None:
            return None
        return payback(
            self.profile,
            self.uncertainty_j,
            self.chosen.power_limit_w,
            self.steps_at,
            steps_at_chosen,
            selector=self.selector,
            eta=self.eta,
            max_power_w=self.max_power_w,
            own_time_s=self.own_time_s,
        )

    def finish_with(self, entry: ProfileEntry, profile: Sequence[ProfileEntry]) -> None:
        """Skip profiling: use a limit chosen earlier (a saved result of the same job).

        Args:
            entry: The limit chosen earlier, with its figures.
            profile: The profile it was chosen from, reported as this tuner's.
        """
        self.profile = list(profile)
        self.windows = [(e.power_limit_w, e.time_s, e.energy_j, 0.0, 1) for e in self.profile]
        self.window_counts = [1] * len(self.profile)
        self.chosen = entry
        self.window_open = False
        self._enter(TunerPhase.DONE)

    def state_dict(self) -> dict[str, Any]:
        """The tuner's state for a checkpoint: phase, position, profile, choice and window sizes."""
        return {
            "phase": self.phase.value,  # a plain string: checkpoints load with weights_only
            "limit_index": self.limit_index,
            "steps_in_phase": self.steps_in_phase,
            "profile": [vars(e).copy() for e in self.profile],
            "chosen": vars(self.chosen).copy() if self.chosen else None,
            "unfinished_reason": self.unfinished_reason,
            "profile_steps": self.profile_steps,
            "windows_sized": self.windows_sized,
            "uncertainty_j": list(self.uncertainty_j),
            "queue": list(self.queue),
            "rounds": self.rounds,
            "windows": [list(w) for w in self.windows],
            "sweep_size": self.sweep_size,
            "steps_at": [[w, n] for w, n in self.steps_at.items()],
            "own_time_s": self.own_time_s,
            "stopped_early": self.stopped_early,
            "worse_in_a_row": self.worse_in_a_row,
            "steps_measured": [[w, n] for w, n in self.steps_measured.items()],
            "told_early": sorted(self.told_early),
            "step_spread": [[w, total, n] for w, (total, n) in self.step_spread.items()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: a finished tuner stays finished; an unfinished one redoes the limit it was on."""
        self.profile = [ProfileEntry(**e) for e in state["profile"]]
        uncertainty = state.get("uncertainty_j")
        self.uncertainty_j = [float(u) for u in uncertainty] if isinstance(uncertainty, list) else []
        if len(self.uncertainty_j) != len(self.profile):  # a checkpoint from before: not known
            self.uncertainty_j = [0.0] * len(self.profile)
        windows = state.get("windows")
        if isinstance(windows, list) and windows:  # each window measured, pooled for limits measured again
            # A window's steps (its fifth figure) weigh it in its limit's figures; a checkpoint from before has
            # none: its windows weigh alike, as they did then.
            self.windows = [
                (float(w[0]), float(w[1]), float(w[2]), float(w[3]), int(w[4]) if len(w) > 4 else 1) for w in windows
            ]
            self._merge()
        else:  # a checkpoint from before: one window per limit
            self.windows = [
                (e.power_limit_w, e.time_s, e.energy_j, u, 1)
                for e, u in zip(self.profile, self.uncertainty_j, strict=True)
            ]
            self.window_counts = [1] * len(self.profile)
        queue = state.get("queue")
        sweep_size = state.get("sweep_size", len(self.limits_w))
        if isinstance(sweep_size, int) and not isinstance(sweep_size, bool) and 0 < sweep_size <= len(self.limits_w):
            self.sweep_size = sweep_size
        if isinstance(queue, list) and len(queue) >= self.sweep_size:
            self.queue = [float(w) for w in queue]
        steps_at = state.get("steps_at")
        if isinstance(steps_at, list):
            self.steps_at = {float(w): int(n) for w, n in steps_at}
        own_time_s = state.get("own_time_s")  # a checkpoint from before: not known, none counted
        if is_number(own_time_s) and own_time_s >= 0:
            self.own_time_s = float(own_time_s)
        steps_measured = state.get("steps_measured")
        if isinstance(steps_measured, list):
            self.steps_measured = {float(w): int(n) for w, n in steps_measured}
        told_early = state.get("told_early")
        if isinstance(told_early, list):  # limits told from the best early: a round of measuring again skips them
            self.told_early = {float(w) for w in told_early}
        step_spread = state.get("step_spread")
        if isinstance(step_spread, list):  # the steps' spread at each limit (a checkpoint from before: none)
            self.step_spread = {float(w): (float(total), int(n)) for w, total, n in step_spread}
        stopped = state.get("stopped_early")
        self.stopped_early = stopped if isinstance(stopped, str) else None
        self.worse_in_a_row = int(state.get("worse_in_a_row", 0))
        self.rounds = int(state.get("rounds", 0))
        self.chosen = ProfileEntry(**state["chosen"]) if state.get("chosen") else None
        self.unfinished_reason = state.get("unfinished_reason")
        if state.get("windows_sized"):  # keep the windows' length: every limit measured alike
            self.profile_steps = max(self.profile_steps, int(state.get("profile_steps", self.profile_steps)))
            self.windows_sized = True
        self.limit_index = int(state["limit_index"])
        self.window_open = False
        self._applied = None
        phase = state["phase"]
        if phase == TunerPhase.DONE and self.unfinished_reason is not None and self.limit_index < self.sweep_size:
            # The earlier segment ended before every limit was profiled: go on profiling where it stopped.
            self.unfinished_reason, self.chosen = None, None
            self._enter(self._limit_start())
        elif phase == TunerPhase.DONE:
            self.unresolved = self.chosen is None and self.unfinished_reason is not None
            self._enter(TunerPhase.DONE)
        elif phase == TunerPhase.WAIT:
            self.phase, self.steps_in_phase = TunerPhase.WAIT, int(state["steps_in_phase"])
        else:
            self._enter(self._limit_start())


def payback(
    profile: Sequence[ProfileEntry],
    uncertainty_j: Sequence[float],
    chosen_w: float,
    steps_at: Mapping[float, int],
    steps_at_chosen: int,
    *,
    selector: str,
    eta: float,
    max_power_w: float,
    own_time_s: float = 0.0,
) -> Payback | None:
    """The run's `Payback`, from its profile (per-step figures and their uncertainty) and the steps at each limit.

    None when the profile holds neither the highest limit nor the chosen one. Steps at a limit the profile
    has no figures for (a window cut short) are left out of tuning's cost. `own_time_s`, wattwise's own time
    in the run's hooks while tuning (its counter reads, 2.8 ms each on an H100), is part of tuning's time:
    the profile's figures leave it out, so that it never ranks one limit against another, but the run spent
    it, at every limit alike, because it tuned.
    """
    by_w = {e.power_limit_w: (e, u) for e, u in zip(profile, uncertainty_j, strict=False)}
    if not profile or chosen_w not in by_w:
        return None
    top_w = max(by_w)
    (top, u_top), (chosen, u_chosen) = by_w[top_w], by_w[chosen_w]

    def objective(e: ProfileEntry) -> float:
        if selector == Selector.COST:
            return zeus_cost(e.energy_j, e.time_s, eta=eta, max_power_w=max_power_w)
        return e.time_s if selector == Selector.TIME else e.energy_j

    tuned = {w: n for w, n in steps_at.items() if w in by_w and w != top_w and n > 0}
    tuning_j = sum(n * (by_w[w][0].energy_j - top.energy_j) for w, n in tuned.items())
    own_s = max(0.0, own_time_s)
    tuning_s = sum(n * (by_w[w][0].time_s - top.time_s) for w, n in tuned.items()) + own_s
    tuning_objective = sum(n * (objective(by_w[w][0]) - objective(top)) for w, n in tuned.items())
    if selector == Selector.COST:  # the own time weighed as the objective weighs time; energy: none counted
        tuning_objective += (1.0 - eta) * max_power_w * own_s
    elif selector == Selector.TIME:
        tuning_objective += own_s
    tuning_u = math.sqrt(sum((n * math.hypot(by_w[w][1], u_top)) ** 2 for w, n in tuned.items()))
    per_step_j = top.energy_j - chosen.energy_j
    per_step_u = math.hypot(u_top, u_chosen) if chosen_w != top_w else 0.0
    gain = objective(top) - objective(chosen)
    if tuning_objective <= 0:
        break_even: int | None = 0
    else:
        break_even = math.ceil(tuning_objective / gain - 1e-9) if gain > 0 else None
    return Payback(
        energy_per_step_saved_j=per_step_j,
        energy_per_step_saved_uncertainty_j=per_step_u,
        time_per_step_added_s=chosen.time_s - top.time_s,
        energy_saved_fraction=per_step_j / top.energy_j,
        time_added_fraction=(chosen.time_s - top.time_s) / top.time_s,
        tuning_steps=sum(tuned.values()),
        tuning_energy_j=tuning_j,
        tuning_time_s=tuning_s,
        steps_at_chosen=steps_at_chosen,
        run_energy_saved_j=steps_at_chosen * per_step_j - tuning_j,
        run_energy_saved_uncertainty_j=math.hypot(steps_at_chosen * per_step_u, tuning_u),
        run_time_added_s=steps_at_chosen * (chosen.time_s - top.time_s) + tuning_s,
        objective=str(selector),
        objective_per_step_saved=gain,
        tuning_objective=tuning_objective,
        run_objective_saved=steps_at_chosen * gain - tuning_objective,
        break_even_steps=break_even,
    )


def profile_table(profile: Sequence[ProfileEntry], *, eta: float, max_power_w: float) -> list[dict[str, float]]:
    """Rows of the profile with the Zeus cost of each limit, for reports."""
    check_profile(profile)
    return [
        {
            "power_limit_w": e.power_limit_w,
            "time_s": e.time_s,
            "energy_j": e.energy_j,
            "avg_power_w": e.avg_power_w,
            "cost": zeus_cost(e.energy_j, e.time_s, eta=eta, max_power_w=max_power_w),
        }
        for e in profile
    ]
