"""Files wattwise writes: never through a planted symlink, lock files never truncated, job names that are
names, and state that only its owner can read.

Each writer runs with a symlink planted at its output name and at the temporary names a writer could
predict (`<name>.tmp`, `.<name>.tmp`), each pointing at a "victim" file (mode 0600, known content): the
victim must come out byte for byte unchanged and the output must be a regular file.
"""

from __future__ import annotations

import csv
import json
import os
import stat
from pathlib import Path

import pytest

from tests.support.fake_pynvml import FakeClock
from tests.support.pipeline import synthetic_profile
from wattwise.carbon.example import sampled_run
from wattwise.cli.main import main
from wattwise.config import load_config
from wattwise.devices.simulated import PowerModel, SimulatedGPU
from wattwise.errors import ConfigError, EnergyPluginWarning, UsageError
from wattwise.monitor import EnergyMonitor, PowerSampler
from wattwise.names import MAX_JOB_NAME, check_job_name
from wattwise.pipeline.profiles import write_profile
from wattwise.record.files import WindowsLog, power_rows, read_power_csv, read_run_dir, write_power_csv, write_run_dir
from wattwise.recurring.spec import JobSpec
from wattwise.safe_files import open_lock, private_dir, replace_file, state_dir, write_text
from wattwise.store import store_url
from wattwise.store.limits_memory import LEGACY_FILE, LimitsMemory
from wattwise.store.sql import SqlJobStore

SECRET = b"root-owned: must survive\n"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
MODEL = PowerModel(
    power_limits_w=(100.0, 200.0, 300.0),
    time_factors=(2.0, 1.2, 1.0),
    busy_power_w=(90.0, 170.0, 280.0),
    idle_power_w=50.0,
)


pytestmark = pytest.mark.usefixtures("simulated_home")


def plant(directory: Path, *names: str) -> list[Path]:
    """A symlink at each name, at `<name>.tmp` and at `.<name>.tmp` in `directory`, each to its own victim."""
    directory.mkdir(parents=True, exist_ok=True)
    victims_dir = directory.parent / f"{directory.name}-victims"
    victims_dir.mkdir(exist_ok=True)
    victims = []
    for name in names:
        for link in (name, f"{name}.tmp", f".{name}.tmp"):
            victim = victims_dir / link.replace("/", "_")
            victim.write_bytes(SECRET)
            victim.chmod(0o600)
            (directory / link).symlink_to(victim)
            victims.append(victim)
    return victims


def assert_untouched(victims: list[Path]) -> None:
    for victim in victims:
        assert victim.read_bytes() == SECRET, victim
        assert stat.S_IMODE(victim.stat().st_mode) == 0o600, victim


def assert_regular(*paths: Path) -> None:
    for path in paths:
        assert stat.S_ISREG(os.lstat(path).st_mode), f"{path} is not a regular file"


def write_two_hour_run(directory: Path) -> Path:
    summary, samples = sampled_run(T0, 7200.0, {"rank0/gpu0": lambda _t: 200.0}, sample_period_s=60.0)
    return write_run_dir(directory, summary, samples)


# -- the run record ------------------------------------------------------------------------------------
def test_run_record_replaces_planted_links_at_summary_and_power(tmp_path: Path) -> None:
    run = tmp_path / "run"
    victims = plant(run, "summary.json", "power.csv")
    write_two_hour_run(run)
    assert_untouched(victims)
    assert_regular(run / "summary.json", run / "power.csv")
    loaded = read_run_dir(run)
    assert loaded.summary.energy_j > 0 and loaded.traces


def test_windows_log_replaces_a_planted_link_and_writes_its_rows_beside_it(tmp_path: Path) -> None:
    clock = FakeClock()
    gpu = SimulatedGPU(0, MODEL, clock=clock, sleep=clock.advance)
    victims = plant(tmp_path / "out", "windows.csv")
    log = tmp_path / "out" / "windows.csv"
    monitor = EnergyMonitor([gpu], sink=WindowsLog(log, [gpu.key]), wall_clock=lambda: T0)
    monitor.begin_window("step")
    clock.advance(1.0)
    monitor.end_window("step")
    monitor.close()
    assert_untouched(victims)
    assert_regular(log)
    with open(log, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][:2] == ["start_time", "window_name"] and [r[1] for r in rows[1:]] == ["step"]


def test_power_samples_csv_replaces_a_planted_link(tmp_path: Path) -> None:
    clock = FakeClock()
    gpu = SimulatedGPU(0, MODEL, clock=clock, sleep=clock.advance)
    sampler = PowerSampler([gpu], clock=lambda: T0 + clock())
    sampler.sample_once()
    clock.advance(1.0)
    sampler.sample_once()
    victims = plant(tmp_path / "out", "power.csv")
    write_power_csv(tmp_path / "out" / "power.csv", power_rows((s.timestamp, s.power_w) for s in sampler.samples()))
    assert_untouched(victims)
    assert_regular(tmp_path / "out" / "power.csv")
    assert len(read_power_csv(tmp_path / "out" / "power.csv")[0].power_w) == 2


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    target.write_text("old\n")

    def fail(_fh: object) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        replace_file(target, fail)
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


# -- the carbon report ---------------------------------------------------------------------------------
def test_report_cli_replaces_planted_links_at_report_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_two_hour_run(tmp_path / "run")
    victims = plant(run, "report.json", "report.csv", "energy_statement.md")
    assert main(["report", str(run), "--pue", "1.2", "--intensity", "300"]) == 0
    capsys.readouterr()
    assert_untouched(victims)
    assert_regular(run / "report.json", run / "report.csv", run / "energy_statement.md")
    assert json.loads((run / "report.json").read_text())["facility_energy_kwh"] > 0
    assert "kWh" in (run / "energy_statement.md").read_text()


# -- pipeline frontier, plan and profile ---------------------------------------------------------------
def test_frontier_and_plan_cli_replace_planted_links(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "profile.csv"
    write_profile(synthetic_profile(2, 3, 0.001, seed=3), profile)
    out = tmp_path / "out"
    victims = plant(out, "frontier.json", "frontier.csv", "plan.json")
    assert (
        main(
            [
                "frontier",
                str(profile),
                "--microbatches",
                "3",
                "--unit-time",
                "0.001",
                "--p-blocking",
                "80",
                "--out",
                str(out / "frontier.json"),
                "--csv",
                str(out / "frontier.csv"),
                "--quiet",
            ]
        )
        == 0
    )
    assert main(["plan", str(out / "frontier.json"), "--out", str(out / "plan.json")]) == 0
    capsys.readouterr()
    assert_untouched(victims)
    assert_regular(out / "frontier.json", out / "frontier.csv", out / "plan.json")
    assert json.loads((out / "plan.json").read_text())["plan"]


def test_profile_writer_replaces_a_planted_link(tmp_path: Path) -> None:
    victims = plant(tmp_path / "out", "profile.csv")
    write_profile(synthetic_profile(2, 3, 0.001, seed=3), tmp_path / "out" / "profile.csv")
    assert_untouched(victims)
    assert_regular(tmp_path / "out" / "profile.csv")


# -- state: simulated GPU settings, lock files ---------------------------------------------------------
def test_simulated_gpu_state_file_replaces_a_planted_link(tmp_path: Path) -> None:
    victims = plant(tmp_path / "sim", "gpu0.json", "gpu0.tmp")
    with pytest.warns(EnergyPluginWarning, match="gpu0.json is a symbolic link"):
        gpu = SimulatedGPU(0, MODEL, state_file=tmp_path / "sim" / "gpu0.json")
    gpu.set_power_limit_w(200.0)
    assert_untouched(victims)
    assert_regular(tmp_path / "sim" / "gpu0.json")
    assert json.loads((tmp_path / "sim" / "gpu0.json").read_text())["power_limit_w"] == 200.0


def test_a_lock_file_is_never_truncated_and_never_opened_through_a_link(tmp_path: Path) -> None:
    lock = tmp_path / "kept.lock"
    lock.write_bytes(SECRET)
    os.close(open_lock(lock))
    assert lock.read_bytes() == SECRET
    victims = plant(tmp_path / "locks", "x.lock")
    with pytest.raises(UsageError, match="symbolic link"):
        open_lock(tmp_path / "locks" / "x.lock")
    assert_untouched(victims)


def test_legacy_limits_lock_through_a_planted_link_is_refused_and_its_target_kept() -> None:
    home = private_dir(state_dir())
    (home / LEGACY_FILE).write_text("{}")
    victims = plant(home, "power_limits.lock")
    with pytest.raises(UsageError, match="symbolic link"):
        LimitsMemory().recall("any")
    assert_untouched(victims)


# -- job names ------------------------------------------------------------------------------------------
BAD_NAMES = [
    "",
    "ok\n",
    "a\tb",
    "a\x00b",
    "\x1b[31mred",
    "../etc",
    "a/../b",
    "..",
    "a..b",
    "/abs",
    "a/",
    "a//b",
    "a\\b",
    " lead",
    "trail ",
    "a /b",
    "tab\tin",
    "-dash-first",
    "x" * (MAX_JOB_NAME + 1),
    "ünïcode",
]
GOOD_NAMES = [
    "bert-nightly",
    "bert/squad",
    "cifar10/resnet-50",
    "llama_3.1:8b@a100+fp8",
    "bert nightly",
    "x" * MAX_JOB_NAME,
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_job_names_are_refused_wherever_they_enter(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UsageError, match=r"^job: .* is not a valid name; use 1-128 characters"):
        check_job_name(name)
    with pytest.raises(ConfigError, match=r"^job: "):
        load_config(values={"job": name})
    with pytest.raises(UsageError, match=r"^job: "):
        JobSpec(name=name, batch_sizes=(32,), default_batch_size=32, target_metric=0.9, max_epochs=3, max_power_w=300.0)
    if name and "\x00" not in name and not name.startswith("-"):  # argparse reads "-..." as an option
        assert main(["jobs", "show", name]) == 2
        err = capsys.readouterr().err
        assert "NAME: " in err and "is not a valid name" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_job_names_pass(name: str) -> None:
    assert check_job_name(name) == name
    assert load_config(values={"job": name}).job == name


def test_a_bad_job_name_names_the_setting_of_each_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_energy import EnergyCallback

    with pytest.raises(ConfigError, match=r"^job: 'ok\\n' is not a valid name"):
        EnergyCallback(job="ok\n")

    from accelerate_energy.plugin import EnergyPlugin

    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv("ACCELERATE_ENERGY_JOB", "../../etc/passwd")
    with pytest.raises(ConfigError, match=r"ACCELERATE_ENERGY_JOB: '\.\./\.\./etc/passwd' is not a valid name"):
        EnergyPlugin().to_config()


# -- permissions ------------------------------------------------------------------------------------------
def test_a_fresh_state_dir_and_store_are_their_owners_only(tmp_path: Path) -> None:
    fresh = tmp_path / "new" / "nested" / "state"
    assert private_dir(fresh) == fresh
    for folder in (fresh, fresh.parent, fresh.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    store_file = tmp_path / "other" / "wattwise" / "jobs.sqlite"
    SqlJobStore(store_url(str(store_file))).close()
    assert stat.S_IMODE(store_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(store_file.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(store_file.parent.parent.stat().st_mode) == 0o700


def test_the_default_store_lands_in_a_private_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "fresh-home"))
    LimitsMemory().recall("any")
    assert stat.S_IMODE((tmp_path / "fresh-home").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "fresh-home" / "jobs.sqlite").stat().st_mode) == 0o600


def test_simulated_gpu_state_dir_is_private(tmp_path: Path) -> None:
    SimulatedGPU(0, MODEL, state_file=tmp_path / "sim" / "gpus" / "gpu0.json").set_power_limit_w(200.0)
    assert stat.S_IMODE((tmp_path / "sim").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "sim" / "gpus").stat().st_mode) == 0o700


def test_write_text_creates_a_new_file_with_the_requested_mode(tmp_path: Path) -> None:
    write_text(tmp_path / "secret.json", "{}", mode=0o600)
    assert stat.S_IMODE((tmp_path / "secret.json").stat().st_mode) == 0o600


def test_plots_replace_planted_links(tmp_path: Path) -> None:
    from wattwise.record.files import read_run_dir
    from wattwise.record.plot import POWER_PNG, plot_run

    run = write_two_hour_run(tmp_path / "run")
    out = tmp_path / "plots"
    victims = plant(out, POWER_PNG)
    written = plot_run(read_run_dir(run), out)
    assert out / POWER_PNG in written
    assert_untouched(victims)
    assert_regular(*written)
    assert (out / POWER_PNG).read_bytes().startswith(b"\x89PNG")


def test_cli_json_never_holds_infinity_or_nan() -> None:
    from wattwise.safe_files import json_text

    text = json_text({"ratio": float("inf"), "rows": [float("nan"), 1.5]})
    assert json.loads(text) == {"ratio": None, "rows": [None, 1.5]}
    assert "Infinity" not in text and "NaN" not in text
