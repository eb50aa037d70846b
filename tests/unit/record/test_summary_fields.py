"""The run record's fields, each defined once: summary.json is written byte for byte as before the fields
were defined once, and every field of every record reads back as written."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.clock import VirtualClock
from tests.support.paths import DATA_DIR
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.errors import UsageError
from wattwise.profile import Payback, ProfileEntry
from wattwise.record.summary import (
    CarbonAwareSummary,
    EpochEnergy,
    NonTrainingTime,
    PowerLimitSummary,
    RankNote,
    RunSettings,
    RunSummary,
    SettingEvent,
    TuningSummary,
    parse_summary,
)
from wattwise.run import Run
from wattwise.tools.workload import emulate_step
from wattwise.vocabulary import EndedHow, RankNoteKind

#: summary.json of `every_field()`, as wattwise wrote it before the record's fields were defined once (the
#: fields added since, such as the energy uncertainties, at the end of their objects).
GOLDEN = DATA_DIR / "summary_every_field.json"
RECORDS = (
    RunSummary,
    PowerLimitSummary,
    TuningSummary,
    EpochEnergy,
    SettingEvent,
    NonTrainingTime,
    RunSettings,
    CarbonAwareSummary,
    ProfileEntry,
    RankNote,
    Payback,
)


def every_field() -> RunSummary:
    """A summary in which every field of every record holds a value other than its default."""
    return RunSummary(
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
        epochs=(EpochEnergy(0, 50.0, 12_500.0, 12.5), EpochEnergy(1, 50.0, 12_500.5, 12.75)),
        resumed_energy_j=1_000.0,
        devices=({"key": "gpu0", "name": "NVIDIA A100", "rank": 0}, {"key": "gpu0", "name": "NVIDIA A100", "rank": 1}),
        notes=("simulated GPU",),
        power_limit=PowerLimitSummary(
            mode="tune",
            selector="energy",
            eta=0.5,
            max_slowdown=0.1,
            reused=True,
            chosen_power_limit_w=175.0,
            profile=(ProfileEntry(300.0, 0.05, 14.0), ProfileEntry(175.0, 0.06, 10.2)),
            baseline_energy_j=30_000.0,
            energy_saved_j=-4.5,
            baseline_estimated=True,
            reused_run_id="runs/a on node1 at 2025-12-31T00:00:00+00:00",
            reused_chosen_at_s=1_767_139_200.5,
            tuning=TuningSummary(
                finished=False,
                profiled=(300.0, 175.0),
                reason="the run ended",
                steps_at_chosen=380,
                confirm_rounds=1,
                measured_again=(300.0, 175.0),
                not_profiled=(150.0, 125.0),
            ),
            energy_saved_uncertainty_j=6.25,
            baseline_energy_uncertainty_j=19.5,
            saving_resolved=False,
            payback=Payback(
                energy_per_step_saved_j=3.8,
                energy_per_step_saved_uncertainty_j=0.25,
                time_per_step_added_s=0.01,
                energy_saved_fraction=0.27,
                time_added_fraction=0.2,
                tuning_steps=120,
                tuning_energy_j=-60.5,
                tuning_time_s=1.5,
                steps_at_chosen=380,
                run_energy_saved_j=1_504.5,
                run_energy_saved_uncertainty_j=95.0,
                run_time_added_s=5.3,
                objective="energy",
                objective_per_step_saved=3.8,
                tuning_objective=-60.5,
                run_objective_saved=1_504.5,
                break_even_steps=0,
            ),
        ),
        settings=RunSettings(power_limit_w=175.0, batch_size=64, frequency_plan="plans/stage0.json"),
        settings_timeline=(
            SettingEvent(1_767_225_600.5, "rank0/gpu0", "power_limit_w", 175.0),
            SettingEvent(1_767_225_601.5, "rank0/gpu0", "locked", None),
        ),
        carbon_aware=CarbonAwareSummary(300.0, 900.0, "grid.csv"),
        non_training={
            "validation": NonTrainingTime(12.5, 2_500.0, 4, 3.5),
            "checkpoint": NonTrainingTime(1.0, 150.0, 2, 1.25),
        },
        wattwise_version="1.2.3",
        energy_uncertainty_j=18.25,
        simulated_driven_by="steps",
        project="wattwise",
        rank_notes=(
            RankNote(RankNoteKind.ENDED_APART, 0, how=EndedHow.SIGNALLED, detail="SIGTERM"),
            RankNote(RankNoteKind.LATE, 1, detail="interrupted-rank1.json", waited_s=3.0, energy_j=12.5),
        ),
    )


def records_in(value: Any) -> list[Any]:
    """`value` and every record nested in it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [value, *(r for f in dataclasses.fields(value) for r in records_in(getattr(value, f.name)))]
    if isinstance(value, dict):
        return [r for v in value.values() for r in records_in(v)]
    if isinstance(value, tuple):
        return [r for v in value for r in records_in(v)]
    return []


def test_summary_json_is_written_byte_for_byte_as_before() -> None:
    assert every_field().to_json() == GOLDEN.read_text()


def test_every_field_of_every_record_reads_back_as_written() -> None:
    summary = every_field()
    read = parse_summary(json.loads(summary.to_json()), where="summary.json")
    assert read == summary
    assert read.to_json() == GOLDEN.read_text()


def test_the_round_trip_covers_every_field_of_every_record() -> None:
    """Every field of every record holds a value (not None, not empty) in `every_field()`, so the round trip
    above exercises each one."""
    found = records_in(every_field())
    assert {type(r) for r in found} == set(RECORDS)
    for cls in RECORDS:
        for f in dataclasses.fields(cls):
            values = [getattr(r, f.name) for r in found if type(r) is cls]
            assert any(v is not None and v != () and v != {} for v in values), f"{cls.__name__}.{f.name} is empty"


def test_keys_a_summary_leaves_out_read_as_their_definition_says() -> None:
    minimal = {
        "start_time": "2026-01-01T00:00:00+00:00",
        "end_time": "2026-01-01T00:00:10+00:00",
        "energy_j": 5,
        "backend": "simulated",
        "epochs": [{"time_s": 1, "energy_j": 2}],
        "power_limit": {"mode": "tune", "reused_from": {"run_id": "r"}, "tuning": {}},
        "non_training": {"validation": {"time_s": 1, "energy_j": 2}, "checkpoint": None},
    }
    read = parse_summary(minimal, where="summary.json")
    assert (read.wattwise_version, read.simulated, read.time_s) == (None, True, 10.0)
    assert read.epochs == (EpochEnergy(0, 1.0, 2.0),)  # an epoch without its number: its position
    assert read.settings == RunSettings()
    assert read.non_training == {"validation": NonTrainingTime(1.0, 2.0, 0)}
    limit = read.power_limit
    assert limit is not None and (limit.reused, limit.reused_run_id, limit.reused_chosen_at_s) == (False, "r", None)
    assert limit.tuning == TuningSummary(finished=False)


def test_a_key_nested_in_a_grouped_field_is_named_in_full_when_damaged() -> None:
    data = json.loads(every_field().to_json())
    data["power_limit"]["reused_from"]["chosen_at"] = "yesterday"
    with pytest.raises(UsageError, match=r"summary\.json: power_limit\.reused_from\.chosen_at"):
        parse_summary(data, where="summary.json")


def test_a_runs_record_holds_every_part_the_measurement_handed_over(tmp_path: Path) -> None:
    clock = VirtualClock()
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
    cfg = load_config(
        overrides=[
            "monitor.sample_power=true",
            "monitor.sync_cuda=false",
            f"output_dir={tmp_path}",
            "power_limit.mode=tune",
            "power_limit.wait_steps=0",
            "power_limit.warmup_steps=1",
            "power_limit.profile_steps=2",
            "power_limit.step_w=100",
        ]
    )
    run = Run(cfg, devices=[gpu], wall_clock=clock, batch_size=32)
    run.start()
    run.epoch_begin()
    for _ in range(10):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
    run.pause("validation")
    clock.sleep(1.0)
    run.epoch_end()
    record = run.finish()
    assert record is not None
    assert (record.steps, len(record.epochs), record.devices[0]["rank"]) == (10, 1, 0)
    assert list(record.energy_per_device_j) == ["rank0/gpu0"] and record.energy_j > 0
    assert record.non_training["validation"].count == 1
    assert record.settings == RunSettings(power_limit_w=record.settings.power_limit_w, batch_size=32)
    assert [e.setting for e in record.settings_timeline] == ["power_limit_w"] * len(record.settings_timeline) != []
    assert record.power_limit is not None and record.power_limit.mode == "tune"
    assert parse_summary(json.loads((tmp_path / "summary.json").read_text()), where="summary.json") == record
