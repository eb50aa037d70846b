"""`BatchSizeOptimizer`: the recurring-job optimizer a training integration talks to.

One instance per training process. A run asks for its batch size at the start (`next_batch_size`),
profiles power limits the first time a batch size runs (`remember_power_limit`), asks after each epoch
whether to stop (`should_stop`), and reports its result at the end (`report_result`). All state lives in
the store, so runs on several machines sharing one store learn from each other. The decisions
themselves are the pure functions of `wattwise.recurring.policy`; this class only binds them to a store, a
clock (for heartbeats and stale runs) and a random generator.

A store that stays unreachable (after its own brief retries) does not stop training: a run's result is
spooled to a local file and delivered later (`wattwise.store.spool`), and the stop check goes on
with what this process knows of the run. Starting a run needs the store: it raises `StoreUnavailable`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypedDict

import numpy as np

from wattwise.bounds import RUN_ENERGY_J, RUN_TIME_S
from wattwise.errors import UsageError, plugin_warning
from wattwise.recurring.policy import (
    WATTWISE_POLICY,
    PolicyConfig,
    decide,
    stop_reason,
)
from wattwise.recurring.spec import JobSpec, Phase, Recommendation, StoredRun
from wattwise.store.base import JobStore, check_power_limit
from wattwise.store.spool import SpooledResult, StoreUnavailable, spool_dir, spool_result
from wattwise.vocabulary import StopReason

#: An open run that has not reported an epoch for this long is presumed dead (crashed, killed).
DEFAULT_STALE_AFTER_S = 24 * 3600.0


class _Progress(TypedDict):
    """An open run's figures so far, as the store records them and this process keeps them."""

    epochs: int
    energy_j: float
    time_s: float
    cost: float


class _Result(TypedDict):
    """A run's result, as the store closes the run with it or the spool keeps it.

    `energy_j` and `cost` None: nothing was measured.
    """

    reached: bool
    energy_j: float | None
    time_s: float
    cost: float | None
    now_s: float


def drop_stale(runs: Sequence[StoredRun], now_s: float, stale_after_s: float) -> list[StoredRun]:
    """The runs without the open ones whose last heartbeat is older than `stale_after_s`."""
    return [r for r in runs if r.finished or now_s - r.updated_at_s <= stale_after_s]


class BatchSizeOptimizer:
    """Chooses the batch size of each run of a recurring job, and stops runs that cost too much."""

    def __init__(
        self,
        job: JobSpec,
        store: JobStore,
        *,
        policy: PolicyConfig = WATTWISE_POLICY,
        rng: np.random.Generator | None = None,
        clock: Callable[[], float] = time.time,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
    ) -> None:
        if not stale_after_s > 0:
            raise UsageError(f"stale_after_s must be a positive number of seconds (got {stale_after_s})")
        self.job = job
        self.store = store
        self.policy = policy
        self._rng = rng if rng is not None else np.random.default_rng()
        self._clock = clock
        self._stale_after_s = stale_after_s
        #: The runs this process started or reported on, as last seen: the stop check while the store is away.
        self._known: dict[int, StoredRun] = {}
        self._warned: set[int] = set()
        store.register_job(job, clock())

    def _choose(self, runs: Sequence[StoredRun], limits: Mapping[int, float]) -> tuple[int, Phase, float]:
        live = drop_stale(runs, self._clock(), self._stale_after_s)
        decision = decide(self.job, self.policy, live, self._rng)
        return decision.batch_size, decision.phase, decision.cost_limit

    def next_batch_size(self) -> Recommendation:
        """Start a run: its id, batch size, remembered power limit (None: profile it) and cost limit."""
        run = self.store.start_run(self.job.name, self._choose, self._clock())
        self._known[run.run_id] = run
        return run.recommendation()

    def cost_limit(self, run: StoredRun) -> float:
        """`run` stops before its cost exceeds this (joules).

        Its limit from the start, or beta times the least cost seen now if that is less (another run may have
        finished cheaper meanwhile).
        """
        return min(run.cost_limit, self.job.beta * self.store.least_reached_cost(self.job.name))

    def remember_power_limit(self, batch_size: int, power_limit_w: float) -> None:
        """Remember the power limit profiled for `batch_size`, so later runs skip profiling."""
        if batch_size not in self.job.batch_sizes:
            raise UsageError(
                f"batch_size {batch_size} is not one of job {self.job.name!r}'s batch sizes "
                f"{list(self.job.batch_sizes)}"
            )
        check_power_limit(power_limit_w)
        self.store.set_power_limit(self.job.name, batch_size, power_limit_w)

    def stop_reason(
        self, run_id: int, epoch: int, energy_j: float, time_s: float, metric: float | None = None
    ) -> StopReason | None:
        """After `epoch` epochs that used `energy_j` and `time_s` in all: why to stop, or None.

        `metric` is the latest validation metric (None when not measured this epoch). Records the
        progress, which also tells other processes that the run is alive.
        """
        if epoch < 1:
            raise UsageError(f"epoch must be at least 1, the number of epochs done (got {epoch})")
        _check_totals(energy_j, time_s)
        try:
            run, offline = self.store.get_run(self.job.name, run_id), False
        except StoreUnavailable as err:
            run, offline = self._offline(run_id, err), True
        if epoch <= run.epochs:
            raise UsageError(f"epoch must grow from one call to the next (got {epoch} after {run.epochs})")
        cost = self.job.cost(energy_j, time_s)
        last_epoch_cost = (cost - (run.cost or 0.0)) / (epoch - run.epochs)
        reason = stop_reason(
            self.job,
            epoch=epoch,
            cost=cost,
            last_epoch_cost=last_epoch_cost,
            metric=metric,
            limit=run.cost_limit if offline else self.cost_limit(run),
        )
        progress = _Progress(epochs=epoch, energy_j=energy_j, time_s=time_s, cost=cost)
        self._known[run_id] = dataclasses.replace(run, **progress)
        if not offline:
            try:
                self.store.progress_run(self.job.name, run_id, **progress, now_s=self._clock())
            except StoreUnavailable as err:
                self._offline(run_id, err)
        return reason

    def _offline(self, run_id: int, err: StoreUnavailable) -> StoredRun:
        """The run as this process last saw it, when the store is away (one warning per run)."""
        run = self._known.get(run_id)
        if run is None:
            raise err
        if run_id not in self._warned:
            self._warned.add(run_id)
            _warn(
                f"wattwise: {err}; run {run_id} of job {self.job.name!r} goes on without it, stopping at the "
                f"target, the maximum epochs or its cost limit from the start",
                stacklevel=5,
            )
        return run

    def should_stop(self, run_id: int, epoch: int, energy_j: float, time_s: float, metric: float | None = None) -> bool:
        """True when the run should end now: target reached, maximum epochs, or cost over the limit."""
        return self.stop_reason(run_id, epoch, energy_j, time_s, metric) is not None

    def report_result(
        self,
        run_id: int,
        *,
        energy_j: float | None,
        time_s: float,
        reached: bool,
        epochs: int | None = None,
        power_limit_w: float | None = None,
    ) -> StoredRun | None:
        """Close the run: whether it reached the target, and its whole energy, time and epochs.

        `energy_j` None: nothing was measured. The run is recorded with what is known (time, epochs,
        whether it reached the target) and no energy nor cost, and the batch-size policy, which learns
        from costs, leaves it out rather than count it as free.

        `epochs` defaults to the last epoch given to `should_stop`. A run that reached the target
        must have done at least one epoch: the bandit learns from epochs to target. `power_limit_w`,
        when given, is the limit this run's tuning chose: remembered for its batch size with the result
        (as `remember_power_limit` would).

        Returns the recorded run; None when the store stayed unreachable: the result was then spooled
        to a local file (one warning names it) and is delivered at the next contact with the store, or
        by `wattwise jobs sync`.
        """
        _check_totals(energy_j, time_s)
        if epochs is not None:
            _check_epochs(epochs, reached)
        if power_limit_w is not None:
            check_power_limit(power_limit_w)
        cost = self.job.cost(energy_j, time_s) if energy_j is not None else None
        result = _Result(reached=reached, energy_j=energy_j, time_s=time_s, cost=cost, now_s=self._clock())
        try:
            run = self.store.get_run(self.job.name, run_id)
            epochs_done = run.epochs if epochs is None else epochs
            _check_epochs(epochs_done, reached)
            if power_limit_w is not None:
                self.store.set_power_limit(self.job.name, run.batch_size, power_limit_w)
            return self.store.finish_run(self.job.name, run_id, epochs=epochs_done, **result)
        except StoreUnavailable as err:
            if epochs is None and run_id in self._known:
                epochs = self._known[run_id].epochs
            spooled = SpooledResult(
                job=self.job.name, run_id=run_id, epochs=epochs, power_limit_w=power_limit_w, **result
            )
            try:
                path = spool_result(err.url, spooled)
            except OSError as spool_err:  # e.g. a spool folder another user made in a shared WATTWISE_HOME
                _warn(
                    f"wattwise: {err}; the result of run {run_id} of job {self.job.name!r} could not be spooled "
                    f"either ({spool_err.strerror or spool_err}: {spool_dir(err.url)}), so it is lost and the run "
                    f"stays open; check that folder is yours",
                    stacklevel=3,
                )
                return None
            _warn(
                f"wattwise: {err}; the result of run {run_id} of job {self.job.name!r} was spooled to {path} and "
                f"will be delivered at the next contact with the store, or by `wattwise jobs sync` (with the same "
                f"--store)",
                stacklevel=3,
            )
            return None


def _warn(message: str, *, stacklevel: int) -> None:
    """An `EnergyPluginWarning`: wattwise went on without the store instead of breaking training."""
    plugin_warning(message, stacklevel=stacklevel)


def _check_epochs(epochs: int, reached: bool) -> None:
    if epochs < (1 if reached else 0):
        raise UsageError(
            f"epochs must be at least 1 for a run that reached the target (got {epochs}); "
            f"pass epochs= or call should_stop after each epoch"
        )


def _check_totals(energy_j: float | None, time_s: float) -> None:
    """The run's totals so far, within the bounds every store accepts (`wattwise.store.base.check_run_figures`).

    `energy_j` None: nothing was measured.
    """
    if energy_j is not None:
        RUN_ENERGY_J.check_number(energy_j, "energy_j")
    RUN_TIME_S.check_number(time_s, "time_s")
