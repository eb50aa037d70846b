"""The run record: what a run writes is what the report reads, and a damaged run directory is one clear error."""

from __future__ import annotations

import builtins
import dataclasses
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wattwise.cli import main as cli
from wattwise.errors import UsageError
from wattwise.monitor import Measurement
from wattwise.profile import Payback, ProfileEntry
from wattwise.record.files import (
    PowerRow,
    WindowRow,
    WindowsLog,
    power_rows,
    read_run_dir,
    read_windows_csv,
    write_run_dir,
)
from wattwise.record.summary import (
    CarbonAwareSummary,
    EpochEnergy,
    NonTrainingTime,
    PowerLimitSummary,
    RunSettings,
    RunSummary,
    SettingEvent,
    TuningSummary,
    format_summary,
    with_saving_uncertainty,
    with_uncertainty,
)

#: The keys of summary.json (`wattwise.run/1`): a contract, extended but never renamed or dropped.
SUMMARY_KEYS = [
    "schema",
    "wattwise_version",
    "status",
    "simulated",
    "backend",
    "framework",
    "job",
    "hostname",
    "world_size",
    "start_time",
    "end_time",
    "time_s",
    "energy_j",
    "energy_per_device_j",
    "cpu_energy_j",
    "avg_power_w",
    "steps",
    "epochs",
    "resumed_energy_j",
    "devices",
    "notes",
    "power_limit",
    "settings",
    "settings_timeline",
    "carbon_aware",
    "non_training",
    "energy_uncertainty_j",
    "simulated_driven_by",
]
TUNE_KEYS = [
    "mode",
    "selector",
    "eta",
    "max_slowdown",
    "reused",
    "chosen_power_limit_w",
    "profile",
    "baseline_energy_j",
    "energy_saved_j",
    "baseline_estimated",
    "tuning",
]
#: The keys a tuned run's power_limit adds after `TUNE_KEYS` once it knows how precisely its saving is known.
SAVING_KEYS = ["energy_saved_uncertainty_j", "baseline_energy_uncertainty_j", "saving_resolved"]


def full_summary(**overrides: Any) -> RunSummary:
    """A summary with every part filled in, as a tuned, carbon-aware two-GPU run writes it."""
    summary = RunSummary(
        status="completed",
        simulated=True,
        backend="simulated",
        framework="lightning",
        job="bert",
        hostname="node1",
        world_size=2,
        start_time="2026-01-01T00:00:00.250000+00:00",
        end_time="2026-01-01T00:01:40.250000+00:00",
        time_s=100.0,
        energy_j=25_000.5,
        energy_per_device_j={"rank0/gpu0": 12_000.25, "rank1/gpu0": 13_000.25},
        cpu_energy_j=800.0,
        steps=400,
        epochs=(EpochEnergy(0, 50.0, 12_500.0), EpochEnergy(1, 50.0, 12_500.5)),
        resumed_energy_j=1_000.0,
        devices=({"key": "gpu0", "name": "NVIDIA A100", "rank": 0}, {"key": "gpu0", "name": "NVIDIA A100", "rank": 1}),
        notes=("simulated GPU",),
        power_limit=PowerLimitSummary(
            mode="tune",
            selector="cost",
            eta=0.5,
            max_slowdown=0.1,
            reused=False,
            chosen_power_limit_w=175.0,
            profile=(ProfileEntry(300.0, 0.05, 14.0), ProfileEntry(175.0, 0.06, 10.2)),
            baseline_energy_j=30_000.0,
            energy_saved_j=4_999.5,
            baseline_estimated=True,
            tuning=TuningSummary(finished=True, profiled=(300.0, 175.0), steps_at_chosen=380),
            energy_saved_uncertainty_j=12.0,
            baseline_energy_uncertainty_j=13.0,
            saving_resolved=True,
        ),
        settings=RunSettings(power_limit_w=175.0, batch_size=64, frequency_plan="plans/stage0.json"),
        settings_timeline=(
            SettingEvent(1_767_225_600.5, "rank0/gpu0", "power_limit_w", 175.0),
            SettingEvent(1_767_225_601.5, "rank0/gpu0", "batch_size", 64),
        ),
        carbon_aware=CarbonAwareSummary(300.0, 900.0, "grid.csv"),
        non_training={"validation": NonTrainingTime(12.5, 2_500.0, 4), "checkpoint": NonTrainingTime(1.0, 150.0, 2)},
        energy_uncertainty_j=5.0,
        simulated_driven_by="emulated",
    )
    return RunSummary(**{**vars(summary), **overrides})


def power() -> list[PowerRow]:
    return power_rows(
        [
            (1_767_225_600.5, {"rank0/gpu0": 120.0, "rank1/gpu0": 130.0}),
            (1_767_225_601.5, {"rank0/gpu0": 125.5, "rank1/gpu0": 135.25}),
        ]
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run_dir(tmp_path / "run", full_summary(), power())


# -- round trip ---------------------------------------------------------------------------------------


def test_what_is_written_reads_back_equal(run_dir: Path) -> None:
    record = read_run_dir(run_dir)
    assert record.summary == full_summary()
    assert record.summary.settings.frequency_plan == "plans/stage0.json"
    assert record.traces is not None
    assert [t.device for t in record.traces] == ["rank0/gpu0", "rank1/gpu0"]
    np.testing.assert_array_equal(record.traces[0].timestamps_s, [1_767_225_600.5, 1_767_225_601.5])
    np.testing.assert_array_equal(record.traces[1].power_w, [130.0, 135.25])


def test_summary_json_keys_are_the_run_schema(run_dir: Path) -> None:
    data = json.loads((run_dir / "summary.json").read_text())
    assert list(data) == SUMMARY_KEYS
    assert data["schema"] == "wattwise.run/1"
    assert data["avg_power_w"] == pytest.approx(250.005)
    assert list(data["settings"]) == ["power_limit_w", "batch_size", "frequency_plan"]
    assert list(data["power_limit"]) == TUNE_KEYS + SAVING_KEYS
    assert list(data["power_limit"]["profile"][0]) == ["power_limit_w", "time_s", "energy_j"]
    assert list(data["carbon_aware"]) == ["threshold_g_per_kwh", "interval_s", "intensity_source"]
    assert data["settings_timeline"][0] == {
        "timestamp": 1_767_225_600.5,
        "device": "rank0/gpu0",
        "setting": "power_limit_w",
        "value": 175.0,
    }


def test_a_cap_records_only_its_mode_and_limit() -> None:
    cap = PowerLimitSummary(mode="cap", chosen_power_limit_w=200.0)
    assert cap.to_dict() == {"mode": "cap", "chosen_power_limit_w": 200.0}
    untuned = PowerLimitSummary(mode="tune")
    assert list(untuned.to_dict()) == TUNE_KEYS[:-2]  # baseline_estimated only once a limit is chosen


def test_unfinished_tuning_and_a_reused_limit_read_back_with_their_origin(tmp_path: Path) -> None:
    limit = PowerLimitSummary(
        mode="tune",
        selector="energy",
        eta=0.5,
        reused=True,
        chosen_power_limit_w=200.0,
        profile=(ProfileEntry(300.0, 0.05, 14.0),),
        reused_run_id="run-7",
        reused_chosen_at_s=1_767_225_600.0,
        tuning=TuningSummary(finished=False, profiled=(300.0,), reason="the run ended after 20 optimizer steps"),
    )
    write_run_dir(tmp_path, full_summary(power_limit=limit), None)
    data = json.loads((tmp_path / "summary.json").read_text())["power_limit"]
    assert data["tuning"] == {
        "finished": False,
        "profiled": [300.0],
        "steps_at_chosen": None,
        "reason": "the run ended after 20 optimizer steps",
    }
    assert data["reused_from"] == {"run_id": "run-7", "chosen_at": "2026-01-01T00:00:00+00:00"}
    assert read_run_dir(tmp_path).summary.power_limit == limit


def test_no_frequency_plan_is_null(tmp_path: Path) -> None:
    write_run_dir(tmp_path, full_summary(settings=RunSettings()), None)
    assert json.loads((tmp_path / "summary.json").read_text())["settings"]["frequency_plan"] is None
    assert read_run_dir(tmp_path).summary.settings.frequency_plan is None
    assert read_run_dir(tmp_path).traces is None


def test_figures_that_are_not_finite_are_written_as_null_never_as_nan_or_infinity(tmp_path: Path) -> None:
    summary = full_summary(cpu_energy_j=math.nan, devices=({"key": "gpu0", "power_limit_w": math.inf},))
    text = summary.to_json()
    assert "NaN" not in text and "Infinity" not in text

    def reject(constant: str) -> None:
        raise AssertionError(f"{constant} in summary.json")

    data = json.loads(text, parse_constant=reject)
    assert data["cpu_energy_j"] is None
    assert data["devices"][0]["power_limit_w"] is None
    write_run_dir(tmp_path, summary, None)
    assert read_run_dir(tmp_path).summary.cpu_energy_j is None


def test_a_power_sample_that_is_not_a_number_is_left_out(tmp_path: Path) -> None:
    write_run_dir(tmp_path, full_summary(), [PowerRow(1.0, "gpu0", math.nan), PowerRow(2.0, "gpu0", 50.0)])
    assert (tmp_path / "power.csv").read_text() == "timestamp,device,power_w\n2.000,gpu0,50.000\n"


def test_power_rows_keep_each_samples_devices_in_time_order() -> None:
    rows = power_rows([(2.0, {"a": 1.0}), (1.0, {"b": 2.0, "a": 3.0})])
    assert [(r.timestamp_s, r.device) for r in rows] == [(1.0, "b"), (1.0, "a"), (2.0, "a")]


def test_the_window_log_reads_back(tmp_path: Path) -> None:
    rows = [
        WindowRow(1_767_225_600.5, "step", 0.25, 30.5, {"gpu0": 10.25, "gpu1": 20.25}, ("gpu1",), True),
        WindowRow(1_767_225_601.5, "fit", 1.5, 60.0, {"gpu0": 30.0, "gpu1": 30.0}),
    ]
    log = WindowsLog(tmp_path / "logs" / "windows.csv", ["gpu0", "gpu1"])
    for row in rows:
        log.write(row)
    log.close()
    assert list(read_windows_csv(tmp_path / "logs" / "windows.csv")) == rows


def test_windows_csv_says_how_precisely_each_window_was_measured_and_reads_older_files(tmp_path: Path) -> None:
    log = WindowsLog(tmp_path / "windows.csv", ["gpu0"])
    log.write(WindowRow(1.0, "steps", 2.0, 400.0, {"gpu0": 400.0}, energy_uncertainty_j=28.25))
    log.close()
    header, line = (tmp_path / "windows.csv").read_text().splitlines()
    assert header.endswith(",simulated,energy_uncertainty_j,kind")  # the columns added since, last
    assert line.endswith(",28.250000,")  # a window that is not a pause has no kind
    (row,) = read_windows_csv(tmp_path / "windows.csv")
    assert row.energy_uncertainty_j == 28.25
    older = tmp_path / "older.csv"  # written before the column existed
    older.write_text("start_time,window_name,time_s,energy_j,gpu0_energy_j,approximate,simulated\n1,fit,2,3,3,,false\n")
    (row,) = read_windows_csv(older)
    assert (row.energy_j, row.energy_uncertainty_j) == (3.0, None)


def test_a_pause_window_is_logged_with_its_kind_and_any_other_name_as_it_is(tmp_path: Path) -> None:
    log = WindowsLog(tmp_path / "windows.csv", ["gpu0"])
    for name in ("paused:validation", "phase:warmup"):  # a user's own window may hold a colon
        log.window_ended(Measurement(name, 1.0, 2.0, {"gpu0": 40.0}))
    log.close()
    rows = list(read_windows_csv(tmp_path / "windows.csv"))
    assert [(r.window_name, r.kind) for r in rows] == [("paused", "validation"), ("phase:warmup", None)]


def test_the_run_records_windows_are_read_on_demand(run_dir: Path) -> None:
    assert list(read_run_dir(run_dir).windows()) == []
    log = WindowsLog(run_dir / "windows.csv", ["gpu0"])
    log.write(WindowRow(1.0, "fit", 2.0, 3.0, {"gpu0": 3.0}))
    log.close()
    assert [w.window_name for w in read_run_dir(run_dir).windows()] == ["fit"]


# -- the end-of-run text ------------------------------------------------------------------------------


def test_the_end_of_run_text_says_what_the_power_limit_did() -> None:
    text = format_summary(full_summary(), output_dir="out")
    assert "wattwise (SIMULATED GPU: modelled figures, not measurements): lightning run completed" in text
    # Figures rounded to what their uncertainty resolves (25000.5 J known to 5 J, the saving to 12 J).
    assert "time 100.00 s, energy 25000 ± 5 J (0.006945 kWh), average power 250.0 W over 2 GPU(s), 400 steps" in text
    assert "power limit 175 W chosen by cost (eta 0.5; 2 limits profiled)" in text
    assert "estimated saving against the maximum limit: 5000 ± 12 J" in text
    assert text.endswith("summary: out/summary.json")
    cap = format_summary(full_summary(power_limit=PowerLimitSummary(mode="cap", chosen_power_limit_w=200.0)))
    assert "power cap 200 W" in cap


def test_a_saving_within_its_uncertainty_is_not_resolved_and_a_run_driven_by_its_steps_says_so() -> None:
    tuned = full_summary().power_limit
    assert tuned is not None
    limit = dataclasses.replace(tuned, energy_saved_j=8.0, energy_saved_uncertainty_j=12.0, saving_resolved=False)
    text = format_summary(full_summary(power_limit=limit, simulated_driven_by="steps"))
    assert "wattwise (SIMULATED GPU, driven by your steps: modelled figures, not measurements)" in text
    assert "saving against the maximum limit not resolved: 8 ± 12 J, within its measurement uncertainty" in text
    assert "estimated saving" not in text


def test_an_undriven_simulated_gpu_is_named_idle_at_the_end_of_the_run() -> None:
    text = format_summary(full_summary(simulated_driven_by="nothing"))
    assert "SIMULATED GPU, idle power only (nothing drove the simulated GPU)" in text


def test_the_saving_is_as_precise_as_the_two_profile_windows_it_compares() -> None:
    tuned = full_summary().power_limit
    assert tuned is not None
    # Per step, 300 W: 14 J known to 1%, 175 W: 10.2 J known to 2%; 380 steps at 175 W.
    limit = with_saving_uncertainty(tuned, {300.0: 0.01, 175.0: 0.02}, 30.0)
    assert limit is not None
    assert limit.energy_saved_uncertainty_j == pytest.approx(380 * math.hypot(0.14, 0.204))
    assert limit.baseline_energy_uncertainty_j == pytest.approx(math.hypot(limit.energy_saved_uncertainty_j, 30.0))
    assert limit.saving_resolved is True
    small = with_saving_uncertainty(dataclasses.replace(tuned, energy_saved_j=50.0), {300.0: 0.01, 175.0: 0.02}, 0.0)
    assert small is not None and small.saving_resolved is False  # 50 J within 94 J: not resolved
    # A window this run did not measure (a reused limit, a resumed run): unknown, as before.
    assert with_saving_uncertainty(tuned, {300.0: 0.01}, 0.0) == tuned


@pytest.mark.parametrize(
    ("value", "uncertainty", "text"),
    [
        (25_000.5, 5.0, "25000 ± 5 J"),
        (3012.44, 27.0, "3012 ± 27 J"),
        (3012.44, 270.0, "3010 ± 270 J"),
        (0.123456, 0.0042, "0.123 ± 0.004 J"),
        (0.123456, 0.0012, "0.1235 ± 0.0012 J"),
        (112.64, 0.0, "112.6 J"),
        (112.64, None, "112.6 J"),
    ],
)
def test_a_figure_is_rounded_to_what_its_uncertainty_resolves(
    value: float, uncertainty: float | None, text: str
) -> None:
    assert with_uncertainty(value, uncertainty, "J") == text


# -- writing never follows a planted symlink ----------------------------------------------------------


def test_links_planted_at_the_run_files_are_replaced_not_followed(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    victims = {}
    for name in ("summary.json", "summary.json.tmp", "power.csv", "power.csv.tmp"):
        victim = tmp_path / f"victim-{name}"
        victim.write_text("precious\n")
        (out / name).symlink_to(victim)
        victims[name] = victim
    write_run_dir(out, full_summary(), power())
    for victim in victims.values():
        assert victim.read_text() == "precious\n"
    for name in ("summary.json", "power.csv"):
        assert not (out / name).is_symlink()
    assert read_run_dir(out).summary == full_summary()
    # Nothing is left behind but the files and the planted temporaries.
    assert sorted(os.listdir(out)) == ["power.csv", "power.csv.tmp", "summary.json", "summary.json.tmp"]


def test_a_link_planted_at_the_window_log_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "windows.csv").symlink_to(victim)
    WindowsLog(tmp_path / "windows.csv", ["gpu0"]).close()
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "windows.csv").is_symlink()


# -- a damaged run directory is one clear error -------------------------------------------------------


def edit_summary(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        data = json.loads((run / "summary.json").read_text())
        change(data)
        (run / "summary.json").write_text(json.dumps(data))  # NaN and Infinity as Python writes them

    return damage


def set_key(path: str, value: Any) -> Callable[[Path], None]:
    """Set `a.b[0].c` in summary.json (None as the value deletes the key)."""

    def change(data: dict[str, Any]) -> None:
        *parents, last = path.replace("[", ".").replace("]", "").split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is None:
            del node[last]
        else:
            node[last] = value

    return edit_summary(change)


def write(name: str, content: bytes) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        (run / name).write_bytes(content)

    return damage


def replace_with_directory(name: str) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        (run / name).unlink()
        (run / name).mkdir()

    return damage


POWER_HEAD = b"timestamp,device,power_w\n1767225600.500,rank0/gpu0,120.000\n"

DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "summary missing": (lambda run: (run / "summary.json").unlink(), r"summary\.json not found"),
    "summary is a directory": (replace_with_directory("summary.json"), r"summary\.json is a directory"),
    "summary is binary": (write("summary.json", b"\x00\x01\x02{}"), r"summary\.json: holds binary data"),
    "summary not UTF-8": (write("summary.json", b'{"energy_j": "\xff"}'), r"summary\.json: not UTF-8 text"),
    "summary cut short": (
        write("summary.json", b'{"schema": "wattwise.run/1", "energy_j": 1'),
        r"summary\.json: not valid JSON \(Expecting",
    ),
    "summary not an object": (write("summary.json", b"[1, 2]"), r"summary\.json: must hold a JSON object"),
    "other schema": (set_key("schema", "zeus/1"), r"summary\.json: schema 'zeus/1' is not a wattwise run"),
    "energy NaN": (set_key("energy_j", math.nan), r"summary\.json: energy_j must be a finite number >= 0 \(got nan\)"),
    "energy negative": (set_key("energy_j", -1.0), r"summary\.json: energy_j must be a finite number >= 0"),
    "energy a string": (set_key("energy_j", "12"), r"summary\.json: energy_j must be a finite number"),
    "energy missing": (set_key("energy_j", None), r"summary\.json: key 'energy_j' is missing"),
    "time infinite": (set_key("time_s", math.inf), r"summary\.json: time_s must be a finite number"),
    "start without timezone": (set_key("start_time", "2026-01-01T00:00:00"), r"summary\.json: start_time: .*timezone"),
    "end before start": (set_key("end_time", "2025-01-01T00:00:00+00:00"), r"summary\.json: end_time .* before"),
    "device energy negative": (
        set_key("energy_per_device_j.rank0/gpu0", -5.0),
        r"summary\.json: energy_per_device_j\.rank0/gpu0 must be a finite number >= 0",
    ),
    "epoch energy negative": (set_key("epochs[1].energy_j", -2.0), r"summary\.json: epochs\[1\]\.energy_j must be"),
    "steps fractional": (set_key("steps", 1.5), r"summary\.json: steps must be a whole number"),
    "simulated a string": (set_key("simulated", "yes"), r"summary\.json: simulated must be true or false"),
    "profile entry missing time": (
        set_key("power_limit.profile[0].time_s", None),
        r"summary\.json: key 'power_limit\.profile\[0\]\.time_s' is missing",
    ),
    "power limit mode missing": (set_key("power_limit.mode", None), r"key 'power_limit\.mode' is missing"),
    "frequency plan a number": (
        set_key("settings.frequency_plan", 3),
        r"summary\.json: settings\.frequency_plan must be a string",
    ),
    "batch size zero": (set_key("settings.batch_size", 0), r"summary\.json: settings\.batch_size must be a whole"),
    "settings a list": (set_key("settings", [1]), r"summary\.json: settings must be an object"),
    "timeline value a list": (
        set_key("settings_timeline[0].value", [1]),
        r"summary\.json: settings_timeline\[0\]\.value must be a finite number, a string",
    ),
    "carbon threshold missing": (
        set_key("carbon_aware.threshold_g_per_kwh", None),
        r"key 'carbon_aware\.threshold_g_per_kwh' is missing",
    ),
    "notes not strings": (set_key("notes", ["ok", 5]), r"summary\.json: notes\[1\] must be a string"),
    "power is a directory": (replace_with_directory("power.csv"), r"power\.csv is a directory"),
    "power empty": (write("power.csv", b""), r"power\.csv: empty; the header must include timestamp,device,power_w"),
    "power column missing": (
        write("power.csv", b"timestamp,device\n1,gpu0\n"),
        r"power\.csv: the header lacks column\(s\) power_w",
    ),
    "power row cut short": (
        write("power.csv", POWER_HEAD + b"1767225601.5,rank0/gpu0\n"),
        r"power\.csv line 3: 2 fields where the header has 3 \(the row is cut short\)",
    ),
    "power row too long": (
        write("power.csv", POWER_HEAD + b"1767225601.5,rank0/gpu0,1,2\n"),
        r"power\.csv line 3: 4 fields .*too long",
    ),
    "power NaN": (
        write("power.csv", POWER_HEAD + b"1767225601.5,rank0/gpu0,nan\n"),
        r"power\.csv line 3: power_w must be a finite number >= 0 \(got 'nan'\)",
    ),
    "power negative": (
        write("power.csv", POWER_HEAD + b"1767225601.5,rank0/gpu0,-3\n"),
        r"power\.csv line 3: power_w must be a finite number >= 0",
    ),
    "power time not a number": (
        write("power.csv", POWER_HEAD + b"soon,rank0/gpu0,3\n"),
        r"power\.csv line 3: timestamp must be a finite number",
    ),
    "power device empty": (
        write("power.csv", POWER_HEAD + b"1767225601.5,,3\n"),
        r"power\.csv line 3: device is empty",
    ),
    "power binary": (write("power.csv", POWER_HEAD + b"1767225601.5,gpu\x000,3\n"), r"power\.csv line 3: holds binary"),
    "power not UTF-8": (write("power.csv", POWER_HEAD + b"1767225601.5,gpu\xff,3\n"), r"power\.csv: not UTF-8 text"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_run_directory_is_one_usage_error_naming_file_and_field(run_dir: Path, case: str) -> None:
    damage, message = DAMAGE[case]
    damage(run_dir)
    with pytest.raises(UsageError, match=message) as caught:
        read_run_dir(run_dir)
    text = str(caught.value)
    assert "\n" not in text
    assert str(run_dir) in text
    assert any(fix in text for fix in ("re-run", "pass the", "timezone")), text


@pytest.mark.parametrize("case", ["summary is binary", "energy NaN", "power row cut short", "power is a directory"])
def test_report_on_a_damaged_run_directory_exits_2_with_one_line(
    run_dir: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    DAMAGE[case][0](run_dir)
    assert cli.main(["report", str(run_dir), "--out", str(run_dir.parent / "report")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("wattwise report: error: ")
    assert "Traceback" not in err


def test_an_unreadable_summary_is_a_usage_error(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = builtins.open

    def guarded_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).endswith("summary.json"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    with pytest.raises(UsageError, match=r"summary\.json: cannot be read \(Permission denied\); check its permissions"):
        read_run_dir(run_dir)


def test_a_run_directory_that_is_not_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"RUN_DIR: .*nowhere is not a directory"):
        read_run_dir(tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b"start_time,window_name,time_s,energy_j,gpu0_energy_j,approximate,simulated\n1,fit,2,3\n",
            r"windows\.csv line 2: 4 fields where the header has 7",
        ),
        (
            b"start_time,window_name,time_s,energy_j,gpu0_energy_j,approximate,simulated\n1,fit,2,3,-1,,true\n",
            r"windows\.csv line 2: gpu0_energy_j must be a finite number >= 0",
        ),
        (
            b"start_time,window_name,time_s,energy_j,gpu0_energy_j,approximate,simulated\n1,fit,2,3,1,,maybe\n",
            r"windows\.csv line 2: simulated must be true or false",
        ),
        (b"start_time,window_name,energy_j\n", r"windows\.csv: the header lacks column\(s\) time_s,approximate"),
    ],
)
def test_a_damaged_window_log_is_a_usage_error(run_dir: Path, content: bytes, message: str) -> None:
    (run_dir / "windows.csv").write_bytes(content)
    with pytest.raises(UsageError, match=message):
        list(read_run_dir(run_dir).windows())


def _with_payback(**kw: object) -> RunSummary:
    """full_summary() whose tuning chose 175 W (profile: 300 W 0.05 s and 14 J a step, 175 W 0.06 s and 10.2 J)."""
    tuned = full_summary().power_limit
    assert tuned is not None
    profile = (ProfileEntry(300.0, 0.05, 14.0), ProfileEntry(175.0, 0.06, 10.2))
    args: dict[str, object] = {
        "energy_per_step_saved_j": 3.8,
        "energy_per_step_saved_uncertainty_j": 0.07,
        "time_per_step_added_s": 0.01,
        "energy_saved_fraction": 3.8 / 14.0,
        "time_added_fraction": 0.2,
        "tuning_steps": 120,
        "tuning_energy_j": -60.5,
        "tuning_time_s": 1.5,
        "steps_at_chosen": 380,
        "run_energy_saved_j": 1504.5,
        "run_energy_saved_uncertainty_j": 30.0,
        "run_time_added_s": 5.3,
        "objective": "cost",
        "objective_per_step_saved": 0.4,
        "tuning_objective": 40.0,
        "run_objective_saved": 112.0,
        "break_even_steps": 100,
    }
    args.update(kw)
    limit = dataclasses.replace(tuned, profile=profile, payback=Payback(**args))  # type: ignore[arg-type]
    return full_summary(power_limit=limit)


def test_the_end_of_run_text_gives_one_saving_at_the_chosen_limit_then_tuning_s_cost_then_this_run() -> None:
    text = format_summary(_with_payback())
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "at the chosen 175 W" in line)
    assert lines[at].strip() == (
        "at the chosen 175 W: 27.1% ± 0.5% less energy per step (3.80 ± 0.07 J) and 20.0% more time per step "
        "than at the highest limit"
    )
    assert lines[at + 1].strip() == (
        "tuning's cost: 120 steps at other limits took 60.5 J less energy and 1.50 s more time than at the "
        "highest limit"
    )
    assert lines[at + 2].strip().startswith("this run: 1500 ± 30 J saved and 5.30 s more time than its steps at")
    assert lines[at + 2].endswith("tuning paid back after 100 steps at 175 W (by cost, eta 0.5)")
    assert "estimated saving against the maximum limit" not in text  # one saving, not two


def test_a_run_that_ended_before_break_even_says_so_in_one_line() -> None:
    text = format_summary(_with_payback(steps_at_chosen=40, break_even_steps=100))
    said = [line for line in text.splitlines() if "before tuning paid back" in line]
    assert len(said) == 1 and "40 of the 100 steps at 175 W it needs (by cost, eta 0.5)" in said[0]
    never = format_summary(_with_payback(break_even_steps=None))
    assert "tuning never pays back: 175 W is no better than the highest limit (by cost, eta 0.5)" in never


def test_one_limit_profiled_reads_as_one_limit() -> None:
    tuned = full_summary().power_limit
    assert tuned is not None
    one = dataclasses.replace(tuned, profile=(ProfileEntry(300.0, 0.05, 14.0),), chosen_power_limit_w=300.0)
    assert "(eta 0.5; 1 limit profiled)" in format_summary(full_summary(power_limit=one))


def test_a_choice_of_the_highest_limit_says_so_and_that_tuning_never_pays_back() -> None:
    tuned = full_summary().power_limit
    assert tuned is not None
    pb = _with_payback(energy_per_step_saved_j=0.0, energy_saved_fraction=0.0, break_even_steps=None).power_limit
    assert pb is not None
    top = dataclasses.replace(pb, chosen_power_limit_w=300.0)
    text = format_summary(full_summary(power_limit=top))
    assert "at the chosen 300 W, the highest limit: the same energy and time per step" in text
    assert "tuning never pays back: 300 W is no better than the highest limit" in text


def test_a_tuning_whose_own_steps_cost_less_than_the_highest_limit_paid_back_at_once() -> None:
    text = format_summary(_with_payback(break_even_steps=0, tuning_objective=-5.0))
    assert "tuning paid back at once: its steps at other limits already cost less than at the highest" in text
    assert "after 0 steps" not in text
