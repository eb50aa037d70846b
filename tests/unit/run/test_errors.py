"""Which errors may stop training: a user's mistake, at the start only. A store outage, an unavailable device
and a fault in wattwise's own bookkeeping degrade with one warning, and training goes on."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

import wattwise.cli.jobs
from tests.support.clock import VirtualClock
from wattwise.cli.main import main
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.errors import EnergyPluginWarning, InternalError, Unavailable, UsageError
from wattwise.profile import ProfileEntry
from wattwise.run import EnergyPluginWarning as ReExportedWarning
from wattwise.run import Run
from wattwise.store.limits_memory import LimitsMemory, RememberedLimit, TuningProgress
from wattwise.store.spool import StoreUnavailable
from wattwise.tools.workload import emulate_step

QUIET = ["monitor.sample_power=false", "monitor.sync_cuda=false", "log_every_n_steps=2"]
TUNE = [
    "power_limit.mode=tune",
    "power_limit.wait_steps=0",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.step_w=100",
    "job=bert",
]  # 300, 200, 100 W: 9 steps
OUTAGE = StoreUnavailable(
    "cannot reach the job store sqlite:///jobs.sqlite: database is locked (retried for 5 s)",
    url="sqlite:///jobs.sqlite",
    reason="database is locked",
)


class UnreachableMemory(LimitsMemory):
    """A limits memory whose store is down: every read and write raises `StoreUnavailable`."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def recall(self, key: str) -> RememberedLimit | None:
        self.calls.append("recall")
        raise OUTAGE

    def save(self, key: str, chosen: ProfileEntry, profile: list[ProfileEntry], **kwargs: Any) -> None:
        self.calls.append("save")
        raise OUTAGE

    def recall_progress(self, key: str) -> TuningProgress | None:
        self.calls.append("recall_progress")
        raise OUTAGE


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def make_run(tmp_path: Path, *overrides: str, memory: LimitsMemory | None = None) -> tuple[Run, SimulatedGPU]:
    clock = VirtualClock()
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
    cfg = load_config(overrides=[*QUIET, f"output_dir={tmp_path / 'run'}", *overrides])
    return Run(cfg, devices=[gpu], wall_clock=clock, limits_memory=memory), gpu


def train(run: Run, gpu: SimulatedGPU, steps: int) -> int:
    """Drive `steps` optimizer steps as an adapter does; the number of steps training made."""
    done = 0
    for _ in range(steps):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
        done += 1
    return done


def plugin_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]


def test_the_hierarchy_keeps_a_mistake_apart_from_a_fault_and_an_outage() -> None:
    assert issubclass(StoreUnavailable, Unavailable) and not issubclass(StoreUnavailable, UsageError)
    assert not issubclass(InternalError, UsageError) and not issubclass(Unavailable, UsageError)
    assert ReExportedWarning is EnergyPluginWarning  # `from wattwise.run import EnergyPluginWarning` still works


def test_a_store_outage_when_tuning_remembers_its_choice_is_one_warning_and_training_goes_on(tmp_path: Path) -> None:
    memory = UnreachableMemory()
    run, gpu = make_run(tmp_path, *TUNE, "power_limit.reuse=false", memory=memory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        assert train(run, gpu, 12) == 12
        record = run.finish()
    # The unfinished profile it looked for at the start could not be read either: said once, with the save.
    assert memory.calls == ["recall_progress", "save"]
    [message] = plugin_warnings(caught)
    assert "cannot reach the job store" in message and "measurement only" in message
    assert record is not None and record.steps == 12
    assert (tmp_path / "run" / "summary.json").is_file()
    assert gpu.power_limit_w() == 300.0  # restored


def test_a_store_outage_at_the_start_is_one_warning_and_training_goes_on_measured(tmp_path: Path) -> None:
    run, gpu = make_run(tmp_path, *TUNE, memory=UnreachableMemory())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        assert train(run, gpu, 4) == 4
        record = run.finish()
    [message] = plugin_warnings(caught)
    assert "cannot reach the job store" in message
    assert run.measuring and record is not None and record.steps == 4


def test_a_fault_in_the_window_bookkeeping_during_training_is_one_warning_and_training_goes_on(
    tmp_path: Path,
) -> None:
    run, gpu = make_run(tmp_path)
    run.start()
    assert run.measurement is not None and run.measurement.monitor is not None
    run.measurement.monitor.cancel_window("steps")  # wattwise's own state broken behind its back
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert train(run, gpu, 6) == 6  # the logging point at step 2 finds no steps window: no raise
        run.finish()
    [message] = plugin_warnings(caught)
    assert "'steps' is not open" in message and "training goes on" in message
    assert not run.measuring


def test_a_users_mistake_once_training_started_no_longer_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, gpu = make_run(tmp_path)
    run.start()

    def refuse(steps: int = 1) -> None:
        raise UsageError("eta must be between 0 and 1 (got 2)")

    assert run.measurement is not None
    monkeypatch.setattr(run.measurement, "count_steps", refuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert train(run, gpu, 3) == 3
    assert len(plugin_warnings(caught)) == 1


def test_an_internal_fault_is_raised_when_strict(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path, "strict=true")
    run.start()
    assert run.measurement is not None and run.measurement.monitor is not None
    run.measurement.monitor.cancel_window("steps")
    run.step_begin()
    with pytest.raises(InternalError, match="'steps' is not open"):
        run.step_end(steps=2)


def test_a_users_mistake_at_the_start_is_refused_in_one_line_before_training(tmp_path: Path) -> None:
    cfg = load_config(
        overrides=[
            *QUIET,
            f"output_dir={tmp_path / 'run'}",
            "devices.backend=simulated",
            f"devices.simulated.power_model={tmp_path / 'missing.csv'}",
        ]
    )
    run = Run(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused, not degraded with a warning
        with pytest.raises(UsageError) as refused:
            run.start()
    message = str(refused.value)
    assert "\n" not in message and "missing.csv" in message


def test_the_cli_exits_2_with_one_line_on_a_users_mistake(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a directory" in err


def test_the_cli_exits_2_with_one_line_when_the_store_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unreachable(location: str | None = None) -> Any:
        raise OUTAGE

    monkeypatch.setattr(wattwise.cli.jobs, "open_store", unreachable)
    assert main(["jobs", "list", "--store", "postgresql+psycopg://nobody@/jobs"]) == 2
    err = capsys.readouterr().err
    assert err == f"wattwise jobs: error: {OUTAGE}\n"
