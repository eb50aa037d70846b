"""The statements' figures read as people read them: emissions in g, kg or t CO2e, a duration in the unit its
size calls for, and simulated figures never said to be "measured through simulated"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.run_records import TUNED, TUNED_PAID, write_tuned_run
from wattwise.cli.main import main
from wattwise.record.summary import TuningSummary, payback_lines


def test_the_eu_ai_act_disclosure_of_a_short_simulated_run_reads_in_minutes_and_grams(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_tuned_run(tmp_path / "run")  # 100 s, 25 kJ on two simulated GPUs
    assert main(["report", str(run), "--intensity", "400", "--statement", "eu-ai-act"]) == 0
    text = capsys.readouterr().out
    assert "1.67 min of training in all" in text and " h of training" not in text  # not 0.0278 h
    assert "**Emissions (for information):** 2.78 g CO2e (constant --intensity 400)" in text  # not 0.00278 kg
    assert "measured through simulated" not in text
    assert "(the simulated GPU's figures, not measurements)." in text


def test_the_papers_statement_gives_emissions_under_a_kilogram_in_grams(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_tuned_run(tmp_path / "run")
    assert main(["report", str(run), "--intensity", "400"]) == 0
    statement = capsys.readouterr().out
    assert "this corresponds to 2.78 g CO2e." in statement and "kg CO2e" not in statement.split("Steps taken")[0]


def test_a_tuned_runs_statement_gives_its_three_figures_in_order_and_this_runs_saving_at_the_facility(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_tuned_run(tmp_path / "run", power_limit=TUNED_PAID)
    assert main(["report", str(run), "--intensity", "400", "--pue", "1.5"]) == 0
    statement = capsys.readouterr().out
    expected = payback_lines(TUNED_PAID)
    assert expected is not None
    at = [statement.index(f"- {line}\n") for line in expected]
    assert at == sorted(at)
    assert "this run: 1430 ± 150 J saved" in statement and "tuning paid back after 25 steps at 175 W" in statement
    # 1432 J, tuning included, times PUE 1.5: 0.000597 kWh at the facility, 0.239 g CO2e at 400 g/kWh; not the
    # 4999.5 J of the steps at the chosen limit alone.
    assert "this run's saving is about 0.0005967 kWh at the facility and 0.239 g CO2e." in statement
    assert "this saved" not in statement


def test_a_statement_of_a_run_whose_tuning_did_not_finish_claims_no_saving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = "the run ended after 12 optimizer steps, 116 before every limit was profiled"
    unfinished = replace(
        TUNED,
        chosen_power_limit_w=300.0,
        profile=TUNED.profile[:1],
        energy_saved_j=0.0,  # as an older wattwise wrote it
        tuning=TuningSummary(finished=False, profiled=(300.0,), reason=reason, steps_at_chosen=0),
    )
    run = write_tuned_run(tmp_path / "run", power_limit=unfinished)
    assert main(["report", str(run), "--intensity", "400"]) == 0
    statement = capsys.readouterr().out
    assert "this saved" not in statement and "0 kWh (0.0%)" not in statement
    assert f"chosen from a profile of 1 power limit; tuning did not finish: {reason}; no saving is claimed" in statement
