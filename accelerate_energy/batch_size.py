"""`recurring_batch_size`.

Run a training function as one run of a recurring job, on the batch size the history chose.

Shaped like Accelerate's `find_executable_batch_size`: the decorator passes the batch size as the
training function's first argument, and a `RecurringRun` as its second, whose `report(metric)` the
function calls after each epoch's evaluation and which says when to stop (target reached, or the run
would cost too much). The energy comes from wattwise's Accelerate adapter, attached to the accelerator by
`accelerate_energy.attach` or, with `ACCELERATE_ENERGY=1` and no such line, by the decorator itself; it
sets its power limit before measurement starts: a cap at the limit remembered for the batch size, else
tuning (the chosen limit is remembered at the end). When the function returns, or raises, the run's
result goes to the store. Only the main process talks to the store; its decisions are broadcast to the
others.

    accelerator = accelerate_energy.attach(Accelerator())

    @accelerate_energy.recurring_batch_size(accelerator, job="nightly", batch_sizes=[32, 64, 128],
                                            default_batch_size=64, target_metric=0.9, mode="max",
                                            max_epochs=20, max_power_w=300.0)
    def train(batch_size: int, run: RecurringRun) -> None:
        model, optimizer, loader = accelerator.prepare(...)   # inside: measurement starts here
        for epoch in range(20):
            ...                                                # train, evaluate
            if run.report(accuracy):
                break

    train()
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Concatenate, ParamSpec, TypeVar

from accelerate import Accelerator

from accelerate_energy.adapter import AccelerateEnergy, attach, energy
from wattwise import flags
from wattwise.errors import UsageError
from wattwise.recurring import StoredRun
from wattwise.recurring.spec import JobSpec, MetricModeName
from wattwise.run.recurring import RecurringJobRun, job_spec
from wattwise.vocabulary import StopReason

P = ParamSpec("P")
T = TypeVar("T")


class RecurringRun:
    """One run of a recurring job, as the training function sees it: its settings and `report`."""

    def __init__(self, job_run: RecurringJobRun, handle: AccelerateEnergy) -> None:
        rec = job_run.recommendation
        assert rec is not None
        self.spec: JobSpec = job_run.spec
        self.run_id = rec.run_id
        self.batch_size = rec.batch_size
        #: The limit remembered for this batch size (the run is capped at it), or None: the run tunes one.
        self.power_limit_w = rec.power_limit_w
        self._job_run = job_run
        self._energy = handle

    @property
    def epochs(self) -> int:
        """Epochs reported so far."""
        return self._job_run.epochs

    @property
    def metric(self) -> float | None:
        """The last metric reported."""
        return self._job_run.metric

    @property
    def stop_reason(self) -> StopReason | None:
        """Why the run should stop ("reached", "max_epochs", "cost") once `report` said so, else None."""
        return self._job_run.stop_reason

    @property
    def result(self) -> StoredRun | None:
        """The run as recorded when the training function ended (main process only)."""
        return self._job_run.result

    def report(self, metric: float) -> bool:
        """After an epoch's evaluation: record `metric` and the energy so far; True when training should stop.

        Call it on every process once per epoch (it combines the energy over processes); the main
        process's `metric` decides, so gather it first (`accelerator.gather_for_metrics`).
        """
        self._job_run.report(metric)
        return self._job_run.epoch_end(self._energy.run) is not None

    def _close_job_run(self, *, failed: bool) -> None:
        """Close the run in the store: reached or not, with the energy and time measured so far."""
        self._job_run.close(self._energy.run, failed=failed)


def recurring_batch_size(
    accelerator: Accelerator,
    *,
    job: str,
    batch_sizes: Sequence[int],
    default_batch_size: int,
    target_metric: float,
    max_epochs: int,
    max_power_w: float,
    mode: MetricModeName = "min",
    eta: float = 0.5,
    beta: float = 2.0,
    store: str | None = None,
) -> Callable[[Callable[Concatenate[int, RecurringRun, P], T]], Callable[P, T]]:
    """Decorate `train(batch_size, run, ...)`; calling `train(...)` runs it as one run of the job `job`.

    The arguments are those of `wattwise.recurring.JobSpec` (checked here); `mode` is "min" (the metric must
    fall to `target_metric`, e.g. a loss) or "max" (rise to it, e.g. accuracy); `max_power_w` is the
    highest power limit summed over the job's GPUs; `store` is a SQLite path or database URL (None:
    `$WATTWISE_STORE`, else the state directory). Prepare the optimizer inside the function, as with
    `find_executable_batch_size`: measurement starts there, after the power limit is set.
    """
    spec = job_spec(
        job=job,
        batch_sizes=list(batch_sizes),
        default_batch_size=default_batch_size,
        target_metric=target_metric,
        max_epochs=max_epochs,
        max_power_w=max_power_w,
        mode=mode,
        eta=eta,
        beta=beta,
    )

    def decorate(function: Callable[Concatenate[int, RecurringRun, P], T]) -> Callable[P, T]:
        def run_once(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                inspect.signature(function).bind(0, None, *args, **kwargs)
            except TypeError as err:
                raise TypeError(
                    f"{function.__name__}() gets its batch size and run from recurring_batch_size; "
                    f"call it with its other arguments only ({err})"
                ) from None
            handle = _energy_handle(accelerator)
            job_run = RecurringJobRun(spec, store=store, collective=handle.run.collective)
            rec = job_run.begin(handle.run)
            run = RecurringRun(job_run, handle)
            try:
                result = function(rec.batch_size, run, *args, **kwargs)
            except BaseException:
                run._close_job_run(failed=True)
                raise
            run._close_job_run(failed=False)
            return result

        return run_once

    return decorate


def _energy_handle(accelerator: Accelerator) -> AccelerateEnergy:
    """The accelerator's energy run; under `ACCELERATE_ENERGY=1` the flag attaches it here if nothing did yet."""
    handle = energy(accelerator)
    if handle is None and flags.enabled(flags.ACCELERATE):
        attach(accelerator)  # the flag alone: no `attach` line needed
        handle = energy(accelerator)
    if handle is None:
        raise UsageError(
            "recurring_batch_size needs wattwise's energy measurement on the accelerator: "
            "accelerate_energy.attach(accelerator) with ACCELERATE_ENERGY=1 set, or "
            "attach(accelerator, EnergyPlugin(enabled=True))"
        )
    if handle.run.started:
        raise UsageError(
            "the energy measurement already started (the optimizer was prepared before the "
            "decorated function ran); prepare it inside the function, so that the run's power "
            "limit is set first"
        )
    return handle
