"""The statements' figures read as people read them: emissions in g, kg or t CO2e, a duration in the unit its
size calls for, and simulated figures never said to be "measured through simulated"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.run_records import write_tuned_run
from wattwise.cli.main import main


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
