"""The run history keeps how precisely each saving is known, so `wattwise runs list`, `runs show` and the
dashboard give the saving with its ±, and say when it is not resolved."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.support.run_history import make_row
from tests.support.run_records import TUNED, tuned_summary
from wattwise.cli.main import main
from wattwise.dashboard import pages
from wattwise.record.kept import run_row
from wattwise.store.runs import list_runs, record_run

RESOLVED, UNRESOLVED, OLD = "20261201T100000Z-aaaaaa", "20261201T110000Z-bbbbbb", "20261201T120000Z-cccccc"


@pytest.fixture
def store(tmp_path: Path) -> str:
    location = str(tmp_path / "jobs.sqlite")
    record_run(make_row(RESOLVED, saving_j=4_512.0, saving_uncertainty_j=25.0), location=location)
    record_run(make_row(UNRESOLVED, saving_j=30.0, saving_uncertainty_j=42.0), location=location)
    record_run(make_row(OLD, saving_j=4_500.0), location=location)  # a row that does not say
    return location


def test_a_finished_runs_row_keeps_its_savings_uncertainty() -> None:
    summary = tuned_summary(power_limit=dataclasses.replace(TUNED, energy_saved_uncertainty_j=120.0))
    assert summary.power_limit is not None and summary.power_limit.energy_saved_uncertainty_j == 120.0
    row = run_row(summary, run_id=RESOLVED, folder="/runs/a")
    assert row.saving_uncertainty_j == summary.power_limit.energy_saved_uncertainty_j
    assert row.to_dict()["saving_uncertainty_j"] == row.saving_uncertainty_j


def test_the_store_gives_the_uncertainty_back_and_none_for_a_row_that_did_not_say(store: str) -> None:
    by_id = {r.id: r.saving_uncertainty_j for r in list_runs(location=store)}
    assert by_id == {RESOLVED: 25.0, UNRESOLVED: 42.0, OLD: None}


def test_runs_list_gives_each_saving_with_its_uncertainty(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "list", "--store", store]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    # Rows recorded before the history kept each run's payback: their saving, marked so.
    assert re.search(r" 4512 ± 25\* ", lines[RESOLVED]) and re.search(r" 30 ± 40\* ", lines[UNRESOLVED])
    assert lines[OLD].endswith(" 200          4500* simulated")  # no uncertainty recorded: none shown
    assert main(["runs", "show", UNRESOLVED, "--store", store]) == 0
    (saving,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  saving")]
    assert "30 ± 40 J against the highest limit (within its uncertainty: not resolved)" in saving


def test_the_dashboards_runs_table_gives_the_saving_with_its_uncertainty(store: str) -> None:
    html = pages.runs_page(list_runs(location=store), pages.RunFilter.of({}), source=store)
    row = html.split(f'data-run="{RESOLVED}"')[1].split("</tr>")[0]
    assert '<td class="num">4,512 ± 25 *</td>' in row  # recorded before the history kept its payback: marked
