"""The run's parts are given what they need and expose methods: the guard is passed in (opened only when a
setting changes), a recurring job's steering leaves the user's configuration as it was, and the power part
hands its notices over once."""

from __future__ import annotations

import signal
import warnings
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.distributed import Collective
from wattwise.errors import EnergyPluginWarning
from wattwise.record.summary import format_summary
from wattwise.run import Run
from wattwise.run.agreement import RankedDevice
from wattwise.run.measurement import EpochState, MeasurementState, RankShare
from wattwise.run.power import PowerLimitControl
from wattwise.settings.guard import SettingsGuard
from wattwise.tools.workload import emulate_step

QUIET = ["monitor.sample_power=false", "monitor.sync_cuda=false"]


class GuardOpener:
    """Opens a guard on the test's own journal folder, without recovery or signal handlers; counts calls."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.opened: list[SettingsGuard] = []

    def __call__(self) -> SettingsGuard:
        guard = SettingsGuard(self.folder, recover=False)
        self.opened.append(guard)
        return guard


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def make_run(
    tmp_path: Path, *overrides: str, opener: GuardOpener | None = None, gpus: int = 1
) -> tuple[Run, list[SimulatedGPU]]:
    clock = VirtualClock()
    devices = [
        SimulatedGPU(i, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep) for i in range(gpus)
    ]
    cfg = load_config(overrides=[*QUIET, f"output_dir={tmp_path / 'run'}", *overrides])
    if opener is None:
        return Run(cfg, devices=devices, wall_clock=clock), devices
    return Run(cfg, devices=devices, wall_clock=clock, settings_guard=opener), devices


def test_a_cap_goes_through_the_guard_the_run_was_given_and_is_restored(tmp_path: Path) -> None:
    opener = GuardOpener(tmp_path / "journal")
    run, [gpu] = make_run(tmp_path, "power_limit.mode=cap", "power_limit.cap_w=200", opener=opener)
    run.start()
    assert len(opener.opened) == 1 and gpu.power_limit_w() == 200.0
    assert list((tmp_path / "journal").glob("*.json"))  # the original limit was journalled first
    run.finish()
    assert gpu.power_limit_w() == 300.0


def test_a_run_that_only_measures_opens_no_guard_and_installs_no_signal_handler(tmp_path: Path) -> None:
    opener = GuardOpener(tmp_path / "journal")
    before = signal.getsignal(signal.SIGTERM)
    run, [gpu] = make_run(tmp_path, opener=opener)
    run.start()
    run.step_begin()
    emulate_step([gpu], lambda: None)
    run.step_end()
    run.finish()
    assert opener.opened == [] and signal.getsignal(signal.SIGTERM) is before


def test_steering_a_recurring_run_leaves_the_users_configuration_as_it_was(tmp_path: Path) -> None:
    opener = GuardOpener(tmp_path / "journal")
    run, [gpu] = make_run(tmp_path, "power_limit.eta=0.9", opener=opener)
    run.steer_recurring("nightly", power_limit_w=150.0, batch_size=64, eta=0.3)
    assert run.job_name == "nightly"  # the recurring job names the run to the node agent
    assert (run.cfg.power_limit.mode, run.cfg.power_limit.cap_w, run.cfg.power_limit.eta) == ("measure", None, 0.9)
    run.start()
    assert gpu.power_limit_w() == 150.0 and run.batch_size == 64
    run.finish()


def test_a_cap_without_a_gpu_turns_into_measuring_with_one_notice_handed_over_once(tmp_path: Path) -> None:
    cfg = load_config(overrides=["power_limit.mode=cap", "power_limit.cap_w=200"])
    opener = GuardOpener(tmp_path / "journal")
    power = PowerLimitControl(cfg.power_limit, wall_clock=VirtualClock())
    power.setup([], Collective(), memory_key=None, label=lambda dev: dev.key, guard=opener)
    assert power.mode == "measure" and opener.opened == []
    [notice] = power.take_notices()
    assert "power-limit capping needs an NVIDIA or AMD GPU" in notice
    assert power.take_notices() == ()
    assert cfg.power_limit.mode == "cap"  # the configuration is as the user gave it


def test_tuning_reports_the_limit_it_chose_through_the_power_part(tmp_path: Path) -> None:
    run, [gpu] = make_run(
        tmp_path,
        "power_limit.mode=tune",
        "power_limit.wait_steps=0",
        "power_limit.warmup_steps=1",
        "power_limit.profile_steps=2",
        "power_limit.step_w=100",
        opener=GuardOpener(tmp_path / "journal"),
    )
    run.start()
    assert run.power.tuned_limit_w is None
    for _ in range(10):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
    assert run.power.tuned_limit_w in (100.0, 200.0, 300.0)
    assert run.power.tuned_limit_w == run.applied_limit_w
    run.finish()


def test_a_checkpoint_saved_after_the_run_ended_carries_the_runs_energy(tmp_path: Path) -> None:
    """`trainer.save_checkpoint()` after fit: the state holds what the run measured, not 0 J."""
    run, gpus = make_run(tmp_path)
    run.start()
    for _ in range(5):
        run.step_begin()
        emulate_step(gpus, lambda: None)
        run.step_end()
    summary = run.finish()
    assert summary is not None and summary.energy_j > 0
    state = run.state_dict()
    assert (state["energy_j"], state["time_s"], state["steps"]) == (summary.energy_j, summary.time_s, 5)
    resumed, _ = make_run(tmp_path / "resumed")
    resumed.load_state_dict(state)
    resumed.start()
    assert resumed.finish().energy_j >= summary.energy_j  # type: ignore[union-attr]


def test_tuning_on_an_undriven_simulated_gpu_says_its_reason_once(tmp_path: Path) -> None:
    run, _ = make_run(
        tmp_path,
        "power_limit.mode=tune",
        "power_limit.wait_steps=0",
        "power_limit.warmup_steps=1",
        "power_limit.profile_steps=2",
        "power_limit.step_w=100",
    )
    with pytest.warns(EnergyPluginWarning) as said:
        run.start()
        for _ in range(12):  # no emulated work drives the GPU
            run.step_begin()
            run.step_end()
        record = run.finish()
    assert len([w for w in said if issubclass(w.category, EnergyPluginWarning)]) == 1
    assert run.summary is not None
    warned = "nothing drove the simulated GPU, so it measured its idle power at every limit"
    assert [n for n in run.summary["notes"] if "drove the simulated GPU" in n] == [
        f"power-limit tuning chose no limit: {warned} (devices.simulated_drive=steps drives it from your training "
        "steps; wattwise.tools.workload.emulate_step drives it too, as the demo does); the GPU stays at 300 W and "
        "no saving is reported"
    ]
    # The run's last lines do not say it a second time: they point at the warning.
    assert record is not None
    [line] = [ln for ln in format_summary(record).splitlines() if "tuning chose no limit" in ln]
    assert warned not in line and "devices.simulated_drive=steps" in line and "see the warning above" in line


def test_a_run_ended_mid_tuning_gives_one_reason_not_a_limit_never_applied(tmp_path: Path) -> None:
    run, gpus = make_run(
        tmp_path,
        "power_limit.mode=tune",
        "power_limit.wait_steps=0",
        "power_limit.warmup_steps=1",
        "power_limit.profile_steps=2",
        "power_limit.step_w=100",
    )
    with pytest.warns(EnergyPluginWarning, match="tuning did not finish"):
        run.start()
        for _ in range(4):  # the 300 W window ends at step 3; the run ends in the 200 W one
            run.step_begin()
            emulate_step(gpus, lambda: None)
            run.step_end()
        run.finish("interrupted")
    assert run.summary is not None
    pl = run.summary["power_limit"]
    assert pl["tuning"]["finished"] is False and pl["tuning"]["reason"].startswith("the run ended after 4 ")
    assert not [n for n in run.summary["notes"] if "never applied" in n]


@pytest.mark.parametrize(
    ("framework", "hint"),
    [
        ("cli", "devices.backend=simulated (or WATTWISE_BACKEND=simulated)"),
        ("accelerate", "ACCELERATE_ENERGY_BACKEND=simulated"),
        ("lightning", "EnergyCallback(backend='simulated') (or LIGHTNING_ENERGY_BACKEND=simulated)"),
    ],
)
def test_nothing_to_measure_is_said_once_in_the_words_of_the_framework(
    real_auto_backend: None,
    bare_machine: None,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    framework: str,
    hint: str,
) -> None:
    cfg = load_config(overrides=[*QUIET, f"output_dir={tmp_path / 'run'}"])
    run = Run(cfg, framework=framework)
    with pytest.warns(EnergyPluginWarning) as said, caplog.at_level("WARNING", logger="wattwise"):
        run.start()
        run.finish()
    told = [str(w.message) for w in said] + [r.getMessage() for r in caplog.records]
    assert [t for t in told if "nothing to measure" in t] == [
        "wattwise: nothing to measure on this machine (no GPU, and the CPU package's energy counter is not "
        f"readable): training goes on unmeasured; {hint} tries wattwise on the simulated GPU"
    ]


def test_under_wattwise_run_nothing_to_measure_is_left_to_its_one_line_at_the_end(
    real_auto_backend: None,
    bare_machine: None,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from wattwise.cli.run import flag_environment

    env = flag_environment({}, {})  # what `wattwise run` gives its command
    monkeypatch.setenv("WATTWISE_RUN_COMMAND", env["WATTWISE_RUN_COMMAND"])
    cfg = load_config(overrides=[*QUIET, f"output_dir={tmp_path / 'run'}"])
    run = Run(cfg, framework="accelerate")
    with warnings.catch_warnings(record=True) as said, caplog.at_level("WARNING", logger="wattwise"):
        warnings.simplefilter("always")
        run.start()
        run.finish()
    told = [str(w.message) for w in said] + [r.getMessage() for r in caplog.records]
    assert not [t for t in told if "nothing to measure" in t]
    assert run.summary is None


def test_the_measurements_checkpoint_state_and_share_hold_the_keys_their_typed_dicts_name(tmp_path: Path) -> None:
    """`MeasurementState` and `RankShare` name every key the measurement writes in a checkpoint and at its end."""
    run, gpus = make_run(tmp_path)
    run.start()
    run.epoch_begin()
    for _ in range(3):
        run.step_begin()
        emulate_step(gpus, lambda: None)
        run.step_end()
    assert run.measurement is not None
    state = run.measurement.state_dict()  # an epoch in progress
    assert set(state) == MeasurementState.__required_keys__ | MeasurementState.__optional_keys__
    epoch = state.get("epoch_in_progress")
    assert epoch is not None and set(epoch) == EpochState.__optional_keys__
    fit = run.measurement.monitor.peek_window("fit")  # type: ignore[union-attr]
    share = run.measurement.rank_figures(fit)
    assert set(share) == RankShare.__required_keys__
    ranked = RankedDevice.__required_keys__ | RankedDevice.__optional_keys__
    assert [RankedDevice.__required_keys__ <= set(d) <= ranked for d in share["devices"]] == [True]
    assert share["devices"][0]["rank"] == 0
    run.finish()
