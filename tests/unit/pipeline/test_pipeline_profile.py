"""Loading and validating `stage,instruction,frequency,time,energy` profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.pipeline import GPT3_A100, synthetic_profile
from wattwise.cli.main import main
from wattwise.errors import UsageError
from wattwise.pipeline.profiles import load_profile, write_profile

HEADER = "stage,instruction,frequency,time,energy\n"
GOOD_ROWS = [
    "0,forward,1410,0.050,24.0",
    "0,forward,1200,0.056,19.0",
    "0,backward,1410,0.093,44.0",
    "0,backward,1200,0.103,36.0",
    "1,forward,1410,0.051,24.5",
    "1,forward,1200,0.057,19.5",
    "1,backward,1410,0.094,44.5",
    "1,backward,1200,0.104,36.5",
]


def write(tmp_path: Path, rows: list[str], header: str = HEADER) -> Path:
    path = tmp_path / "profile.csv"
    path.write_text(header + "\n".join(rows) + "\n")
    return path


def test_a_good_profile_loads_sorted_highest_frequency_first(tmp_path):
    profile = load_profile(write(tmp_path, list(reversed(GOOD_ROWS))))
    assert profile.num_stages == 2
    assert [m.frequency_mhz for m in profile.options(1, "backward")] == [1410, 1200]
    assert profile.at_max_frequency(0, "forward").energy_j == 24.0


def test_write_then_load_gives_the_same_profile(tmp_path):
    profile = synthetic_profile(3, 5, 0.001, seed=1)
    write_profile(profile, tmp_path / "p.csv")
    assert load_profile(tmp_path / "p.csv") == profile


@pytest.mark.parametrize(
    "row, message",
    [
        ("0,forward,1000,nan,10", r"line 10: time is nan"),
        ("0,forward,1000,0.06,-3", r"line 10: energy must be positive"),
        ("0,forward,1000,0,3", r"line 10: time must be positive"),
        ("0,sideways,1000,0.06,3", r"line 10: instruction must be forward or backward"),
        ("0,forward,10x0,0.06,3", r"line 10: frequency must be an integer"),
        (",forward,1000,0.06,3", r"line 10: stage must be an integer"),
        ("0,forward,1410,0.06,3", r"line 10: stage 0 forward at 1410 MHz repeats line 2"),
    ],
)
def test_a_bad_row_is_named_with_its_line(tmp_path, row, message):
    with pytest.raises(UsageError, match=message):
        load_profile(write(tmp_path, [*GOOD_ROWS, row]))


def test_a_missing_stage_is_named(tmp_path):
    rows = [r.replace("1,", "2,", 1) if r.startswith("1,") else r for r in GOOD_ROWS]
    with pytest.raises(UsageError, match="stage 1 is missing"):
        load_profile(write(tmp_path, rows))


def test_a_missing_instruction_is_named(tmp_path):
    rows = [r for r in GOOD_ROWS if not r.startswith("1,backward")]
    with pytest.raises(UsageError, match="stage 1 has no backward rows"):
        load_profile(write(tmp_path, rows))


def test_a_single_frequency_is_rejected(tmp_path):
    rows = [r for r in GOOD_ROWS if not r.startswith("0,forward,1200")]
    with pytest.raises(UsageError, match="stage 0 forward has a single frequency"):
        load_profile(write(tmp_path, rows))


def test_a_missing_column_is_named(tmp_path):
    rows = [r.rsplit(",", 1)[0] for r in GOOD_ROWS]
    with pytest.raises(UsageError, match=r"missing column\(s\) energy"):
        load_profile(write(tmp_path, rows, header="stage,instruction,frequency,time\n"))


def test_the_cli_reports_a_bad_profile_in_one_line_and_exits_2(tmp_path, capsys):
    path = write(tmp_path, [*GOOD_ROWS, "0,forward,1000,nan,10"])
    code = main(
        [
            "frontier",
            str(path),
            "--microbatches",
            "2",
            "--unit-time",
            "0.001",
            "--p-blocking",
            "80",
            "--out",
            str(tmp_path / "f.json"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "line 10: time is nan" in err and "Traceback" not in err


def test_the_real_perseus_profiles_load(shared_data):
    profile = load_profile(shared_data / GPT3_A100)
    assert profile.num_stages == 8
    assert len(profile.options(7, "backward")) == 38
    assert profile.at_max_frequency(0, "forward").frequency_mhz == 1410
