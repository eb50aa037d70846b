"""`accelerate_energy.recurring_batch_size` around plain Accelerate loops of the emulated workload.

The simulated GPU runs on a virtual clock, so the energy figures are exact, and the evaluation metric
follows a schedule per batch size (`reach_epoch`), so when a run reaches the target is known in advance.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from torch import nn

import accelerate_energy
from accelerate_energy import EnergyPlugin, RecurringRun
from tests.support.recurring_jobs import MAX_EPOCHS, stored
from tests.support.tuned_gpu import clocked_gpu, tuned_choice
from wattwise.devices import SimulatedGPU
from wattwise.errors import EnergyPluginWarning, UsageError
from wattwise.store import open_store
from wattwise.tools.workload import emulate_step, tiny_dataset, tiny_model

#: 192 samples: 12 optimizer steps an epoch at batch size 16, 24 at 8; tuning takes the first 16 steps.
DATASET = 192
OVERRIDES = [
    "monitor.sample_power=false",
    "monitor.sync_cuda=false",
    "power_limit.wait_steps=1",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.step_w=50",
]


pytestmark = pytest.mark.usefixtures("fresh_accelerate")


def attached(tmp_path: Path, gpu: SimulatedGPU, name: str) -> Accelerator:
    plugin = EnergyPlugin(enabled=True, output_dir=str(tmp_path / name), overrides=OVERRIDES)
    return accelerate_energy.attach(Accelerator(cpu=True), plugin, devices=[gpu])


class Job:
    """A recurring job's training function: an Accelerate loop whose metric follows `reach_epoch`."""

    def __init__(
        self,
        accelerator: Accelerator,
        gpu: SimulatedGPU,
        reach_epoch: dict[int, int],
        *,
        batch_sizes: list[int],
        default: int,
        beta: float = 2.0,
        fail_in_epoch: int | None = None,
    ) -> None:
        self.accelerator, self.gpu = accelerator, gpu
        self.reach_epoch, self.fail_in_epoch = reach_epoch, fail_in_epoch
        self.batch_sizes_seen: set[int] = set()
        self.limits_seen_w: list[float] = []
        self.run: RecurringRun | None = None
        self.train = accelerate_energy.recurring_batch_size(
            accelerator,
            job="nightly",
            batch_sizes=batch_sizes,
            default_batch_size=default,
            target_metric=0.9,
            mode="max",
            max_epochs=MAX_EPOCHS,
            max_power_w=300.0,
            beta=beta,
        )(self._train)

    def _train(self, batch_size: int, run: RecurringRun, lr: float) -> int:
        """Returns the epochs trained."""
        self.run = run
        acc = self.accelerator
        torch.manual_seed(0)
        model = tiny_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        loader = torch.utils.data.DataLoader(tiny_dataset(DATASET), batch_size=batch_size)
        model, optimizer, loader = acc.prepare(model, optimizer, loader)
        for epoch in range(1, MAX_EPOCHS + 1):
            if epoch == self.fail_in_epoch:
                raise RuntimeError("out of memory")
            for x, y in loader:
                self.batch_sizes_seen.add(len(x))
                emulate_step([self.gpu], lambda: acc.backward(nn.functional.mse_loss(model(x), y)))  # noqa: B023
                optimizer.step()
                optimizer.zero_grad()
                self.limits_seen_w.append(self.gpu.power_limit_w())
            reach = self.reach_epoch.get(batch_size)
            if run.report(1.0 if reach is not None and epoch >= reach else 0.0):
                return epoch
        return MAX_EPOCHS


def test_the_decorator_passes_the_batch_size_and_stops_when_the_target_is_reached(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    acc = attached(tmp_path, gpu, "run1")
    job = Job(acc, gpu, {16: 2}, batch_sizes=[8, 16, 32], default=16)
    assert job.train(lr=0.01) == 2  # the function's own arguments pass through, its result comes back
    acc.end_training()

    handle = accelerate_energy.energy(acc)
    assert handle is not None and handle.summary is not None
    assert handle.run.job_name == "nightly"  # the node agent names the holder after the recurring job
    assert job.batch_sizes_seen == {16}
    assert job.run is not None and job.run.stop_reason == "reached"
    (run,), limits = stored("nightly")
    assert (run.batch_size, run.state, run.epochs) == (16, "reached", 2)
    # Nothing ran between the end of the function and end_training: the summary has the same figures.
    assert (run.energy_j, run.time_s) == (handle.summary["energy_j"], handle.summary["time_s"])
    assert handle.summary["power_limit"]["mode"] == "tune"
    assert limits == {16: tuned_choice()}
    assert job.run.result == run


def test_a_batch_size_run_again_is_capped_at_its_remembered_limit_without_profiling(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    first = attached(tmp_path, gpu, "run1")
    Job(first, gpu, {16: 2}, batch_sizes=[16], default=16).train(lr=0.01)
    first.end_training()

    second = attached(tmp_path, gpu, "run2")
    job = Job(second, gpu, {16: 2}, batch_sizes=[16], default=16)
    job.train(lr=0.01)
    second.end_training()

    limit_w = tuned_choice()
    assert job.run is not None and job.run.power_limit_w == limit_w < 300.0
    assert job.limits_seen_w == [limit_w] * 24  # two epochs of 12 steps at the limit: nothing profiled
    handle = accelerate_energy.energy(second)
    assert handle is not None and handle.summary is not None
    assert handle.summary["power_limit"] == {"mode": "cap", "chosen_power_limit_w": limit_w}
    runs, _ = stored("nightly")
    assert [(r.phase, r.state, r.power_limit_w) for r in runs] == [
        ("explore", "reached", limit_w),
        ("exploit", "reached", limit_w),
    ]


def test_a_run_that_would_cost_more_than_beta_times_the_best_is_stopped(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    first = attached(tmp_path, gpu, "run1")
    Job(first, gpu, {16: 2}, batch_sizes=[8, 16], default=16, beta=3.5).train(lr=0.01)
    first.end_training()

    second = attached(tmp_path, gpu, "run2")
    job = Job(second, gpu, {16: 2}, batch_sizes=[8, 16], default=16, beta=3.5)  # 8 never reaches the target
    epochs = job.train(lr=0.01)
    second.end_training()

    assert job.batch_sizes_seen == {8}
    assert job.run is not None and job.run.stop_reason == "cost" and epochs < MAX_EPOCHS
    (best, stopped), _ = stored("nightly")
    assert (stopped.batch_size, stopped.state, stopped.epochs) == (8, "failed", epochs)
    assert best.cost is not None and stopped.cost is not None
    assert stopped.cost <= 3.5 * best.cost


def test_a_function_that_raises_records_a_failed_run_and_the_error_propagates(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    acc = attached(tmp_path, gpu, "run1")
    job = Job(acc, gpu, {16: 3}, batch_sizes=[16], default=16, fail_in_epoch=2)
    with pytest.raises(RuntimeError, match="out of memory"):
        job.train(lr=0.01)
    with pytest.warns(EnergyPluginWarning, match="tuning did not finish"):
        acc.end_training()

    (run,), _ = stored("nightly")
    assert (run.state, run.epochs) == ("failed", 1)
    handle = accelerate_energy.energy(acc)
    assert handle is not None and handle.summary is not None
    assert run.energy_j == handle.summary["energy_j"] > 0  # the energy spent until the error


def test_misuse_fails_before_a_run_starts_with_the_fix(tmp_path, virtual_clock):
    gpu = clocked_gpu(virtual_clock)
    plain = Accelerator(cpu=True)
    with pytest.raises(UsageError, match="needs wattwise's energy measurement"):
        Job(plain, gpu, {}, batch_sizes=[16], default=16).train(lr=0.01)
    acc = attached(tmp_path, gpu, "run")
    job = Job(acc, gpu, {}, batch_sizes=[16], default=16)
    with pytest.raises(TypeError, match="gets its batch size and run from recurring_batch_size"):
        job.train(16, lr=0.01)  # type: ignore[misc]  # mypy sees the mistake too
    acc.prepare(torch.optim.SGD(tiny_model().parameters(), lr=0.01))
    with pytest.raises(UsageError, match="prepare it inside the function"):
        job.train(lr=0.01)
    with pytest.raises(UsageError, match="mode must be 'min'"):
        accelerate_energy.recurring_batch_size(
            acc,
            job="j",
            batch_sizes=[8],
            default_batch_size=8,
            target_metric=1.0,
            max_epochs=2,
            max_power_w=300.0,
            mode="up",
        )  # type: ignore[arg-type]
    acc.end_training()
    store = open_store()
    assert store.list_jobs() == []  # no run was started
    store.close()


def test_the_flag_alone_runs_a_recurring_job_without_an_attach_line(tmp_path, monkeypatch, virtual_clock):
    # ACCELERATE_ENERGY=1 and a plain Accelerator: the decorator attaches it (issue 27: it asked for the line).
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv("ACCELERATE_ENERGY_BACKEND", "simulated")
    monkeypatch.setenv("ACCELERATE_ENERGY_OUTPUT_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("ACCELERATE_ENERGY_OVERRIDES", " ".join(OVERRIDES))
    acc = Accelerator(cpu=True)
    # The test's Job drives no emulated work on the simulated GPU: tuning finds nothing to choose from.
    with pytest.warns(EnergyPluginWarning, match="tuning chose no limit"):
        epochs = Job(acc, clocked_gpu(virtual_clock), {16: 2}, batch_sizes=[16], default=16).train(lr=0.01)
    acc.end_training()
    runs, _ = stored("nightly")
    assert epochs == 2 and len(runs) == 1
    assert runs[0].reached and runs[0].epochs == 2 and runs[0].energy_j is not None and runs[0].energy_j > 0
    assert (tmp_path / "run" / "summary.json").is_file()
