"""The recurring-job part of a run: one run of a recurring job, as both adapters drive it.

    job_run = RecurringJobRun(spec, store=None, collective=run.collective)
    rec = job_run.begin(run)        # the batch size and power limit the history chose; steers the run
    ...                             # each epoch: job_run.report(metric); stop when job_run.epoch_end(run)
    job_run.close(run, failed=False)

Only the main process talks to the store; its decisions are broadcast, so every process stops together.
The decisions are `BatchSizeOptimizer`'s (pure policies bound to the store); this part only feeds them
the run's figures: the energy and time so far from the run's measurement, the metric the training code
reports, the power limit the run's tuning chose.

A store that stays unreachable never fails training once it has started: the stop check goes on with
what the run knows, and the result is spooled and delivered later (`BatchSizeOptimizer`). The start is
different: without the store there is no history to choose from and no run to record into, so `begin`
raises `StoreUnavailable` (one line: the store, the database's reason and what to do) before training.
"""

from __future__ import annotations

from wattwise.distributed import Collective
from wattwise.errors import UsageError
from wattwise.recurring.optimizer import BatchSizeOptimizer
from wattwise.recurring.spec import JobSpec, MetricModeName, Recommendation, StoredRun
from wattwise.run import Run
from wattwise.store.factory import open_store
from wattwise.store.spool import StoreUnavailable
from wattwise.vocabulary import MetricMode, StopReason


def job_spec(
    *,
    job: str,
    batch_sizes: tuple[int, ...] | list[int],
    default_batch_size: int,
    target_metric: float,
    max_epochs: int,
    max_power_w: float,
    mode: MetricModeName,
    eta: float,
    beta: float,
) -> JobSpec:
    """The `JobSpec` of the adapters' arguments (checked; `mode` named as the adapters name it)."""
    if mode not in tuple(MetricMode):
        raise UsageError(f"mode must be 'min' (e.g. a loss) or 'max' (e.g. accuracy), got {mode!r}")
    return JobSpec(
        name=job,
        batch_sizes=tuple(batch_sizes),
        default_batch_size=default_batch_size,
        target_metric=target_metric,
        max_epochs=max_epochs,
        max_power_w=max_power_w,
        metric_mode=MetricMode(mode),
        eta=eta,
        beta=beta,
    )


class RecurringJobRun:
    """One run of the job `spec`: its recommendation, per-epoch stop check and recorded result."""

    def __init__(self, spec: JobSpec, *, store: str | None, collective: Collective) -> None:
        self.spec = spec
        self.store = store
        self.collective = collective
        #: This run's id, batch size and remembered power limit (every process), set by `begin`.
        self.recommendation: Recommendation | None = None
        #: The run as recorded at the end (main process only).
        self.result: StoredRun | None = None
        #: Epochs reported so far, and the last metric reported.
        self.epochs = 0
        self.metric: float | None = None
        #: Why the run should stop, once `epoch_end` said so.
        self.stop_reason: StopReason | None = None
        self._optimizer: BatchSizeOptimizer | None = None
        self._open = False

    @property
    def is_open(self) -> bool:
        """A run was started and is not recorded yet."""
        return self._open

    def begin(self, run: Run) -> Recommendation:
        """Ask the history for this run's batch size and limit; steer `run` (before it starts) to them."""
        self.epochs, self.metric, self.stop_reason, self.result = 0, None, None, None
        first = None
        if self.collective.rank == 0:
            self._optimizer, first = self._start()
        rec = self.collective.broadcast(first)
        assert rec is not None
        self.recommendation, self._open = rec, True
        run.steer_recurring(
            self.spec.name, power_limit_w=rec.power_limit_w, batch_size=rec.batch_size, eta=self.spec.eta
        )
        return rec

    def _start(self) -> tuple[BatchSizeOptimizer, Recommendation]:
        """The optimizer on the store and this run's recommendation (main process)."""
        try:
            store = open_store(self.store)
            try:
                optimizer = BatchSizeOptimizer(self.spec, store)
                return optimizer, optimizer.next_batch_size()
            except BaseException:
                store.close()
                raise
        except StoreUnavailable as err:
            raise StoreUnavailable(
                f"{err}; job {self.spec.name!r} needs its store to choose this run's batch size: start the "
                f"store (or point store=/$WATTWISE_STORE at a reachable one) and run again",
                url=err.url,
                reason=err.reason,
            ) from err

    def describe(self) -> str:
        """The console line that says which batch size and power limit the history chose for this run.

        Called after `begin`, on the process that logs.
        """
        rec = self.recommendation
        assert rec is not None
        limit = f"capped at {rec.power_limit_w:g} W" if rec.power_limit_w is not None else "tuned in this run"
        return (
            f"wattwise: job {self.spec.name!r} run {rec.run_id}: batch size {rec.batch_size} ({rec.phase}), "
            f"power limit {limit}"
        )

    def stop_note(self) -> str:
        """The console line that says why this run stops after this epoch (after `epoch_end` returned a reason)."""
        rec = self.recommendation
        assert rec is not None
        return f"wattwise: run {rec.run_id} stops after {self.epochs} epochs: {self.stop_reason}"

    def report(self, metric: float) -> None:
        """The latest validated metric (the main process's value decides)."""
        self.metric = float(metric)

    def epoch_end(self, run: Run) -> StopReason | None:
        """After an epoch and its evaluation: the reason to stop now, or None. Every process calls it."""
        if not self._open or self.recommendation is None:
            return None
        totals = run.totals()  # a collective: every process calls it
        self.epochs += 1
        reason: StopReason | None = None
        if totals is None:
            # Measurement is off (the run warned): nothing to price the run with, but the target and the
            # most epochs still end it, as they would a measured run.
            reason = (
                StopReason.REACHED
                if self.spec.reached(self.metric)
                else StopReason.MAX_EPOCHS
                if self.epochs >= self.spec.max_epochs
                else None
            )
        elif self._optimizer is not None:
            reason = self._optimizer.stop_reason(
                self.recommendation.run_id, self.epochs, totals.energy_j, totals.time_s, self.metric
            )
        self.stop_reason = self.collective.broadcast(reason)
        return self.stop_reason

    def close(self, run: Run, *, failed: bool) -> StoredRun | None:
        """Close the run in the store: reached or not, with the run's energy and time. Every process calls it.

        With nothing measured the run is recorded all the same, with its time and epochs and no energy.
        """
        rec = self.recommendation
        if not self._open or rec is None:
            return None
        self._open = False
        summary = run.final_summary
        totals = run.totals() if summary is None else None  # every process: a collective
        optimizer, self._optimizer = self._optimizer, None
        if optimizer is None:
            return None
        try:
            # A run that ends before tuning finished settles on the best limit measured; a failed one does not.
            # Only a finished profile's choice is remembered for the batch size: an unfinished one is kept as
            # the tuning's progress, which the next run of the job goes on from.
            chosen = run.tuned_limit_w(settle=not failed)
            tuner = run.power.tuner
            if tuner is not None and not tuner.finished:
                chosen = None
            energy_j: float | None
            if summary is not None:
                energy_j, time_s = summary.energy_j, summary.time_s
            elif totals is not None:
                energy_j, time_s = totals.energy_j, totals.time_s
            else:  # nothing measured (the run said so): recorded with its time, without energy nor cost
                energy_j, time_s = None, run.elapsed_s
            self.result = optimizer.report_result(
                rec.run_id,
                energy_j=energy_j,
                time_s=time_s,
                reached=not failed and self.spec.reached(self.metric),
                epochs=self.epochs,
                power_limit_w=chosen if rec.power_limit_w is None else None,
            )
            return self.result
        finally:
            optimizer.store.close()
