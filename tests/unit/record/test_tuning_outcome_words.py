"""What the console and the energy statement say of a tuning outcome: a reused limit is said to be reused
(not "chosen from a profile"), a run ended by a signal is not told to run longer, and a run that chose no
limit records no steps at a chosen one."""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import pytest

from tests.support.run_records import TUNED, write_tuned_run
from tests.support.tuning_runs import SMALL_PROFILE, SMALL_PROFILE_STEPS, tuning_run
from wattwise.record.files import read_run_dir
from wattwise.record.report import FacilityInputs, build_report, energy_statement
from wattwise.record.summary import format_summary
from wattwise.run import Run

TUNE = list(SMALL_PROFILE)
TUNING_STEPS = SMALL_PROFILE_STEPS


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


@pytest.fixture(autouse=True)
def _sigterm_handler() -> object:
    """The guard puts its own SIGTERM handler in place while the run holds settings; restore the test's."""
    found = signal.getsignal(signal.SIGTERM)
    yield found
    signal.signal(signal.SIGTERM, found)


def train(tmp_path: Path, steps: int, *, drive: bool = True, signalled: bool = False) -> tuple[Run, list[str]]:
    """A tuning run of `steps` optimizer steps on one simulated GPU; SIGTERM reaches it before it finishes when
    `signalled` (as the guard records it). Returns the run and the wattwise warnings it gave."""
    done = tuning_run(tmp_path, steps, drive=drive, signalled=signalled)
    return done.run, done.said


def statement(tmp_path: Path) -> str:
    return energy_statement(build_report(read_run_dir(tmp_path / "run"), FacilityInputs()))


def test_a_run_interrupted_as_tuning_finished_is_not_told_to_run_longer(tmp_path: Path) -> None:
    run, said = train(tmp_path, TUNING_STEPS, signalled=True)  # tuning chose at the last step before SIGTERM
    summary = run.final_summary
    assert summary is not None and summary.status == "interrupted"
    assert summary.power_limit is not None and summary.power_limit.chosen_power_limit_w is not None
    console = format_summary(summary)
    everything = [console, statement(tmp_path), *summary.notes, *said]
    assert not [text for text in everything if "more steps" in text]
    assert "the chosen limit was never applied: the run was interrupted as tuning finished" in console
    assert "never applied it (the run was interrupted as tuning finished" in statement(tmp_path)


def test_a_run_interrupted_while_profiling_says_so_and_gives_no_advice_on_its_length(tmp_path: Path) -> None:
    run, said = train(tmp_path, 7, signalled=True)
    summary = run.final_summary
    assert summary is not None and summary.power_limit is not None and summary.power_limit.tuning is not None
    assert summary.power_limit.tuning.reason is not None
    assert summary.power_limit.tuning.reason.startswith("the run was interrupted by a signal after 7 optimizer steps")
    assert not [text for text in [format_summary(summary), *said] if "give it at least" in text or "more steps" in text]


def test_a_run_that_ended_by_itself_as_tuning_finished_is_still_told_to_run_longer(tmp_path: Path) -> None:
    run, _ = train(tmp_path, TUNING_STEPS)
    assert run.final_summary is not None
    assert "(give the run more steps)" in format_summary(run.final_summary)


def test_tuning_that_chose_no_limit_records_no_steps_at_a_chosen_one(tmp_path: Path) -> None:
    train(tmp_path, TUNING_STEPS + 5, drive=False)  # an idle simulated GPU: tuning gives up, chooses none
    limit = json.loads((tmp_path / "run" / "summary.json").read_text())["power_limit"]
    assert limit["chosen_power_limit_w"] is None
    assert limit["tuning"]["steps_at_chosen"] is None


def test_the_statement_of_a_reused_limit_says_where_it_came_from(tmp_path: Path) -> None:
    reused = dataclasses.replace(
        TUNED, reused=True, reused_run_id="20261201-101500-ab12", reused_chosen_at_s=1_764_584_100.0
    )
    write_tuned_run(tmp_path / "run", power_limit=reused)
    text = statement(tmp_path)
    assert "the GPU power limit was set to 175 W" in text
    assert "reused from run 20261201-101500-ab12 of the same job" in text
    assert "chosen from a profile" not in text


def test_the_statement_of_a_limit_profiled_in_the_run_says_it_was_chosen_from_its_profile(tmp_path: Path) -> None:
    write_tuned_run(tmp_path / "run")
    text = statement(tmp_path)
    assert "chosen from a profile of 2 power limits" in text and "reused" not in text
