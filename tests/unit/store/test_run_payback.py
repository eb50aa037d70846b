"""The run history keeps each tuned run's one saving (summary.json's payback for the run, revision 0008), so
the dashboard's runs table and `wattwise runs list` give the figure `runs show`, the run's page, the report
and the statement give; a row recorded before it gives its old figure, marked so."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.support.run_history import T0_S, make_row
from tests.support.run_records import PAYBACK, TUNED, TUNED_PAID, tuned_summary
from wattwise.dashboard import pages
from wattwise.errors import UsageError
from wattwise.record.kept import run_row
from wattwise.record.summary import TuningSummary
from wattwise.store.history import RunPayback
from wattwise.store.runs import RunRow, list_runs, record_run

PAID, OLD = "20261201T100000Z-aaaaaa", "20261201T110000Z-bbbbbb"
#: The payback's run figures, as the history keeps them.
KEPT = RunPayback(
    run_energy_saved_j=PAYBACK.run_energy_saved_j,
    run_energy_saved_uncertainty_j=PAYBACK.run_energy_saved_uncertainty_j,
    run_time_added_s=PAYBACK.run_time_added_s,
    break_even_steps=25,
    paid_back=True,
)


def test_a_tuned_runs_row_keeps_its_payback_through_the_store_and_the_spool(tmp_path: Path) -> None:
    row = run_row(tuned_summary(power_limit=TUNED_PAID), run_id=PAID, folder=tmp_path / PAID)
    assert row.payback == KEPT and row.saving_j == TUNED.energy_saved_j  # saving_j keeps its meaning
    assert RunRow.from_dict(row.to_dict()) == row  # a spool file's row
    location = str(tmp_path / "jobs.sqlite")
    assert record_run(row, location=location) is None
    (stored,) = list_runs(location=location)
    assert stored.payback == KEPT


def test_a_cap_or_tuning_that_did_not_finish_keeps_no_payback() -> None:
    unfinished = dataclasses.replace(TUNED_PAID, tuning=TuningSummary(finished=False, profiled=(300.0,)))
    for limit in (unfinished, dataclasses.replace(TUNED_PAID, mode="cap"), TUNED):
        assert run_row(tuned_summary(power_limit=limit), run_id=PAID, folder="/runs/a").payback is None


def test_a_payback_no_run_has_is_refused_naming_the_field() -> None:
    data = make_row(PAID, payback=KEPT).to_dict()
    with pytest.raises(UsageError, match=r"^spool: payback\.paid_back must be true or false \(got 'yes'\)$"):
        RunRow.from_dict({**data, "payback": {**KEPT.to_dict(), "paid_back": "yes"}}, where="spool")
    with pytest.raises(UsageError, match=r"^spool: payback\.break_even_steps must be null or a whole number"):
        RunRow.from_dict({**data, "payback": {**KEPT.to_dict(), "break_even_steps": -3}}, where="spool")


def test_a_store_at_revision_0007_reads_with_no_payback_and_its_next_writer_keeps_every_row(tmp_path: Path) -> None:
    from alembic import command
    from sqlalchemy import create_engine

    from wattwise.store.history import _values
    from wattwise.store.migrations import alembic_config, current_revision

    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0007")
        values = {k: v for k, v in _values(make_row(OLD)).items() if not k.startswith("payback_")}
        conn.exec_driver_sql(
            f"INSERT INTO wattwise_run_history ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
            tuple(values.values()),
        )
    (old,) = list_runs(location=url)  # a reader: the store is left at 0007
    assert old.payback is None and old.saving_j == 4_500.0
    record_run(make_row(PAID, start_s=T0_S + 7200, payback=KEPT), location=url)  # a writer upgrades it
    with engine.connect() as conn:
        assert current_revision(conn) == "0008"
    assert [(r.id, r.payback) for r in list_runs(location=url)] == [(OLD, None), (PAID, KEPT)]
    engine.dispose()


def test_the_runs_table_gives_this_runs_saving_and_marks_a_row_recorded_before_the_history_kept_it() -> None:
    paid = make_row(PAID, payback=KEPT)  # the row's own saving_j, 4,500 J, leaves tuning's cost out
    old = make_row(OLD, start_s=T0_S + 3600, saving_j=5_000.0, saving_uncertainty_j=40.0)
    html = pages.runs_page([paid, old], pages.RunFilter.of({}), source="test")

    def cells(run_id: str) -> list[str]:
        return re.findall(r"<td[^>]*>([^<]*)</td>", html.split(f'data-run="{run_id}"')[1].split("</tr>")[0])

    assert "1,430 ± 150" in cells(PAID) and f"{PAYBACK.run_time_added_s:,.2f}" in cells(PAID)
    assert not any("4,500" in c for c in cells(PAID))
    assert "5,000 ± 40 *" in cells(OLD) and "* recorded before the history kept each run" in html
    assert "recorded before" not in pages.runs_page([paid], pages.RunFilter.of({}), source="test")
    by_saving = pages.filtered_runs([paid, old], pages.RunFilter.of({"sort": "saving_j", "order": "asc"}))
    assert [r.id for r in by_saving] == [PAID, OLD]  # by the saving shown: 1,432 J before 5,000 J
