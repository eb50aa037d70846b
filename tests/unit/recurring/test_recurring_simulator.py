"""The simulator's accounting on a tiny trace whose answer is worked out by hand, the CLI contract, the
real Zeus traces, and the benchmark's out-of-sample validation (knobs chosen on training traces only)."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.paths import REPO_ROOT
from wattwise.cli.main import main
from wattwise.errors import UsageError
from wattwise.recurring.policy import PolicyConfig
from wattwise.recurring.simulator import job_for_trace, simulate
from wattwise.recurring.trace import load_trace

TRAIN = """dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch
toy,net,4,sgd,0.1,1,0.5,nan
toy,net,8,sgd,0.1,1,0.5,3
toy,net,16,sgd,0.1,1,0.5,4
toy,net,16,sgd,0.1,1,0.7,9
"""
# Cost per epoch with eta 0.5 and MaxPower 200 W: 0.5 * E + 100 * T.
#   bs 4:  100 W: 20 s, 1400 J -> 2700;   200 W: 16 s, 2240 J -> 2720  (100 W is cheaper)
#   bs 8:  100 W: 10 s,  800 J -> 1400;   200 W:  8 s, 1280 J -> 1440  (100 W)
#   bs 16: 100 W:  5 s,  450 J ->  725;   200 W:  4 s,  600 J ->  700  (200 W)
POWER = """dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power
toy,net,4,sgd,100,20,70
toy,net,4,sgd,200,16,140
toy,net,8,sgd,100,10,80
toy,net,8,sgd,200,8,160
toy,net,16,sgd,100,5,90
toy,net,16,sgd,200,4,150
other,net,16,sgd,100,5,90
"""


@pytest.fixture
def toy_trace(tmp_path: Path) -> tuple[Path, Path]:
    train, power = tmp_path / "summary_train.csv", tmp_path / "summary_power_toy.csv"
    train.write_text(TRAIN)
    power.write_text(POWER)
    return train, power


def test_accounting_of_profiling_early_stop_retry_oracle_and_default(toy_trace: tuple[Path, Path]) -> None:
    trace = load_trace(*toy_trace, "toy/net", 0.5)
    spec = job_for_trace(trace, default_batch_size=8, max_epochs=5, eta=0.5, beta=2.0)
    result = simulate(trace, spec, recurrences=3, seed=1)
    runs = [(r.recurrence, r.batch_size, r.power_limit_w, r.energy_j, r.time_s, r.reached) for r in result.history]
    assert runs == [
        # Default 8, profiling: epoch 1 is split between the limits (mean of 800 J/10 s and 1280 J/8 s),
        # then two epochs at the chosen 100 W. Cost 0.5 * 2640 + 100 * 29 = 4220.
        (1, 8, 100.0, 1040 + 2 * 800, 9 + 2 * 10, True),
        # Downward: 4 never reaches the target. Profiling epoch (1820 J, 18 s: cost 2710), then 100 W
        # epochs of cost 2700; after 8110 one more epoch would pass 2 x 4220 = 8440: stopped, failed.
        (2, 4, 100.0, 1820 + 2 * 1400, 18 + 2 * 20, False),
        # Same recurrence: upward to 16, profiling (525 J, 4.5 s), then three epochs at 200 W.
        (2, 16, 200.0, 525 + 3 * 600, 4.5 + 3 * 4, True),
        # Exploration over; the bandit runs 16 (cost 2800 per run against 4200 for 8), no profiling.
        (3, 16, 200.0, 4 * 600, 4 * 4, True),
    ]
    energy_j = 2640 + 4620 + 2325 + 2400
    time_s = 29 + 58 + 16.5 + 16
    assert result.wattwise.energy_j == pytest.approx(energy_j)
    assert result.wattwise.time_s == pytest.approx(time_s)
    assert result.wattwise.cost == pytest.approx(0.5 * energy_j + 200 * 0.5 * time_s)
    # Oracle: 16 at 200 W, 4 epochs each time (4 never reaches, so it is no candidate).
    assert (result.oracle_setting.batch_size, result.oracle_setting.power_limit_w) == (16, 200.0)
    assert (result.oracle.energy_j, result.oracle.time_s, result.oracle.cost) == pytest.approx((7200, 48, 8400))
    # Default: 8 at the highest limit (200 W), 3 epochs each time.
    assert (result.default.energy_j, result.default.time_s) == pytest.approx((3 * 3 * 1280, 3 * 3 * 8))
    assert result.default.cost == pytest.approx(3 * 4320)


def test_oracle_pays_for_the_failed_runs_of_a_batch_size_that_sometimes_fails(tmp_path: Path) -> None:
    train = tmp_path / "train.csv"
    train.write_text(
        "dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch\n"
        "toy,net,8,sgd,0.1,1,0.5,3\n"
        "toy,net,16,sgd,0.1,1,0.5,2\ntoy,net,16,sgd,0.1,2,0.5,nan\n"
    )
    power = tmp_path / "power.csv"
    power.write_text(POWER)
    trace = load_trace(train, power, "toy/net", 0.5)
    spec = job_for_trace(trace, default_batch_size=8, max_epochs=5, eta=0.5, beta=2.0)
    # 16 reaches in 2 epochs half of the time, else fails after 5: 2 + 1 * 5 = 7 epochs of 700 per
    # recurrence (4900), worse than 8's 3 epochs of 1400 (4200).
    result = simulate(trace, spec, recurrences=2, seed=3)
    assert result.oracle_setting.batch_size == 8
    assert result.oracle.cost == pytest.approx(2 * 4200)


def test_same_seed_same_history_and_default_clamped_to_the_largest_traced(toy_trace: tuple[Path, Path]) -> None:
    trace = load_trace(*toy_trace, "toy/net", 0.5)
    spec = job_for_trace(trace, default_batch_size=4096, max_epochs=5, eta=0.5, beta=2.0)
    assert spec.default_batch_size == 16
    assert simulate(trace, spec, 6, seed=5).history == simulate(trace, spec, 6, seed=5).history


def test_bad_trace_input_names_the_flag(toy_trace: tuple[Path, Path], tmp_path: Path) -> None:
    train, power = toy_trace
    with pytest.raises(UsageError, match="--workload"):
        load_trace(train, power, "toy", 0.5)
    with pytest.raises(UsageError, match=r"--target-metric 0\.6"):
        load_trace(train, power, "toy/net", 0.6)
    broken = tmp_path / "broken.csv"
    broken.write_text("dataset,network,batch_size\ntoy,net,8\n")
    with pytest.raises(UsageError, match="missing column"):
        load_trace(broken, power, "toy/net", 0.5)
    trace = load_trace(train, power, "toy/net", 0.7)
    with pytest.raises(UsageError, match="--default-batch-size 12"):
        job_for_trace(trace, default_batch_size=12, max_epochs=5, eta=0.5, beta=2.0)
    with pytest.raises(UsageError, match="--max-epochs"):
        simulate(trace, job_for_trace(trace, default_batch_size=16, max_epochs=5, eta=0.5, beta=2.0), 2, 1)


def test_cli_json_contract(toy_trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    train, power = toy_trace
    argv = ["simulate", "--train", str(train), "--power", str(power), "--workload", "toy/net"]
    argv += ["--default-batch-size", "8", "--target-metric", "0.5", "--max-epochs", "5", "--recurrences", "3"]
    argv += ["--eta", "0.5", "--beta", "2.0", "--seed", "1", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for policy in ("default", "wattwise", "oracle"):
        assert {"energy_j", "time_s", "cost"} <= set(out["policies"][policy])
    assert out["policies"]["oracle"]["cost"] == pytest.approx(8400)
    assert len(out["history"]) == 4
    keys = {"recurrence", "batch_size", "power_limit_w", "energy_j", "time_s", "reached"}
    assert all(keys <= set(entry) for entry in out["history"])
    assert [entry["reached"] for entry in out["history"]] == [True, False, True, True]


def test_cli_bad_input_exits_2_with_one_line(toy_trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    train, power = toy_trace
    argv = ["simulate", "--train", str(train), "--power", str(power), "--workload", "toy/net"]
    argv += ["--default-batch-size", "8", "--target-metric", "0.5", "--max-epochs", "5", "--beta", "0.5"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "beta must be greater than 1" in err and len(err.strip().splitlines()) == 1


def test_real_traces_wattwise_beats_default_and_nears_the_oracle(shared_data: Path) -> None:
    traces = shared_data / "zeus-traces"
    trace = load_trace(
        traces / "summary_train.csv", traces / "summary_power_v100.csv", "sentiment140/bert_base_uncased", 0.84
    )
    spec = job_for_trace(trace, default_batch_size=128, max_epochs=10, eta=0.5, beta=2.0)
    recurrences = 2 * len(trace.batch_sizes) * len(trace.power_limits_w)
    result = simulate(trace, spec, recurrences, seed=1)
    assert result.wattwise.cost < result.default.cost
    assert result.wattwise.cost < 1.1 * result.oracle.cost
    assert sum(r.reached for r in result.history) == recurrences


def validation_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """`benchmarks/recurring_validation.py` (the benchmarks folder is no package)."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    return importlib.import_module("recurring_validation")


def test_cross_gpu_validation_chooses_the_knobs_without_the_test_gpu(
    toy_trace: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    validation = validation_module(monkeypatch)
    train_only, both = tmp_path / "train_only", tmp_path / "both"
    for folder in (train_only, both):
        folder.mkdir()
        (folder / "summary_train.csv").write_text(toy_trace[0].read_text())
        (folder / "summary_power_train.csv").write_text(POWER)
    # The test GPU: twice as fast per epoch at 1.5x the power.
    test_power = [POWER.splitlines()[0]]
    for line in POWER.splitlines()[1:]:
        *head, seconds, watts = line.split(",")
        test_power.append(",".join([*head, str(float(seconds) / 2), str(float(watts) * 1.5)]))
    (both / "summary_power_test.csv").write_text("\n".join(test_power) + "\n")

    workloads = (validation.Workload("toy/net", 0.5, 5, 8),)
    grid = (PolicyConfig(), PolicyConfig(prune_margin=0.25, prior_weight=3.0), PolicyConfig(prune_margin=1.0))
    train = validation.Split(("train",), workloads, (1, 2))
    test = validation.Split(("test",), workloads, (3, 4))
    # Chosen where the test GPU's trace does not even exist...
    alone, alone_score = validation.choose(validation.Simulations(train_only, 1), grid, train)

    simulations: Any = validation.Simulations

    class Spy(simulations):
        def __init__(self) -> None:
            super().__init__(both, 1)
            self.calls: list[list[Any]] = []

        def run(self, tasks: Iterable[Any]) -> None:
            self.calls.append(list(tasks))
            super().run(self.calls[-1])

    spy = Spy()
    result = validation.cross_gpu(spy, grid, train, test)
    # ...is what the cross-GPU validation chooses with it present: the choice saw the training split only.
    assert (result.chosen, result.in_sample) == (alone, alone_score)
    choosing, *reporting = spy.calls
    assert {(t.gpu, t.seed) for t in choosing} == {("train", 1), ("train", 2)}
    assert {t.config for t in choosing} == set(grid)
    assert {(t.gpu, t.seed) for call in reporting for t in call} == {("test", 3), ("test", 4)}
    assert set(result.out_of_sample.ratios) == {("test", "toy/net")}


def test_the_chooser_takes_the_least_mean_among_settings_whose_worst_workload_meets_the_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validation = validation_module(monkeypatch)
    workloads = (validation.Workload("a/x", 0.5, 5, 8), validation.Workload("b/y", 0.5, 5, 8))
    grid = (PolicyConfig(prune_margin=0.25), PolicyConfig(prune_margin=0.5), PolicyConfig(prune_margin=1.0))
    # Cost / oracle per (margin, workload): 0.5 has the least mean but a workload above 1.06.
    ratios = {(0.25, "a/x"): 1.04, (0.25, "b/y"): 1.04, (0.5, "a/x"): 1.0, (0.5, "b/y"): 1.07}
    ratios |= {(1.0, "a/x"): 1.05, (1.0, "b/y"): 1.02}

    simulations: Any = validation.Simulations

    class Scripted(simulations):
        def run(self, tasks: Iterable[Any]) -> None:
            for t in tasks:
                self.done[t] = (ratios[t.config.prune_margin, t.workload.name], 1.0)

    split = validation.Split(("gpu",), workloads, (1,))
    chosen, score = validation.choose(Scripted(Path("unused"), 1), grid, split)
    assert chosen.prune_margin == 1.0 and score.mean == pytest.approx(1.035)
    # When no setting meets the target on every workload, the least worst workload wins.
    ratios[1.0, "a/x"] = ratios[0.25, "a/x"] = 1.08
    assert validation.choose(Scripted(Path("unused"), 1), grid, split)[0].prune_margin == 0.5
    # The difference of two settings' means is paired by seed: seed 1 ties, seed 2 differs by 0.2.
    better, worse = validation.Score({}, (1.0, 1.0)), validation.Score({}, (1.0, 1.2))
    assert validation.paired_difference(worse, better) == pytest.approx((0.1, 0.1))


def test_noise_varies_what_wattwise_sees_and_pays_reproducibly(toy_trace: tuple[Path, Path]) -> None:
    trace = load_trace(*toy_trace, "toy/net", 0.5)
    spec = job_for_trace(trace, default_batch_size=32, max_epochs=5, eta=0.5, beta=2.0)
    clean = simulate(trace, spec, 6, seed=5)
    noisy = simulate(trace, spec, 6, seed=5, noise=0.03)
    assert simulate(trace, spec, 6, seed=5, noise=0.0).history == clean.history  # no noise: as before
    assert noisy.history == simulate(trace, spec, 6, seed=5, noise=0.03).history  # the seed fixes the noise
    assert [r.energy_j for r in noisy.history] != [r.energy_j for r in clean.history]
    assert noisy.default == clean.default and noisy.oracle == clean.oracle  # they keep the trace's means
    with pytest.raises(UsageError, match=r"noise must be a fraction in \[0, 0\.5\) \(got -0\.1\)"):
        simulate(trace, spec, 6, seed=5, noise=-0.1)
