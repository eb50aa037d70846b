"""`wattwise frontier` and `wattwise plan`: the file contracts, progress, errors (exit 2, one line)."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.support.pipeline import problem_for, synthetic_profile
from wattwise.cli.main import main
from wattwise.errors import UsageError
from wattwise.pipeline.plan import TIME_TOLERANCE, choice_from_plan, plan_from_json
from wattwise.pipeline.profiles import write_profile

UNIT_S = 0.001


@pytest.fixture
def profile_csv(tmp_path):
    path = tmp_path / "profile.csv"
    write_profile(synthetic_profile(3, 5, UNIT_S, seed=11), path)
    return path


def frontier_args(profile_csv, out, *extra: str) -> list[str]:
    return [
        "frontier",
        str(profile_csv),
        "--microbatches",
        "4",
        "--unit-time",
        str(UNIT_S),
        "--p-blocking",
        "80",
        "--out",
        str(out),
        *extra,
    ]


def test_frontier_writes_the_documented_json_and_csv(tmp_path, profile_csv, capsys):
    out, table = tmp_path / "frontier.json", tmp_path / "frontier.csv"
    assert main(frontier_args(profile_csv, out, "--csv", str(table))) == 0
    data = json.loads(out.read_text())
    assert {"stages", "microbatches", "schedule", "unit_time_s", "p_blocking_w", "points"} <= set(data)
    assert (data["stages"], data["microbatches"], data["schedule"]) == (3, 4, "1f1b")
    assert (data["unit_time_s"], data["p_blocking_w"]) == (UNIT_S, 80.0)
    points = data["points"]
    assert [p["time_s"] for p in points] == sorted(p["time_s"] for p in points)
    planned = [p for p in points if "plan" in p]
    assert 0 < len(planned) < len(points)
    # Every stored plan: per stage, [instruction, microbatch, frequency_mhz] in execution order, and the
    # point's figures are that plan's real time and energy from the profile.
    problem = problem_for(synthetic_profile(3, 5, UNIT_S, seed=11), "1f1b", 4, 80.0)
    for point in planned:
        plan = plan_from_json(point["plan"], "test")
        time_s, energy_j = problem.evaluate(choice_from_plan(problem, plan))
        assert (float(time_s), float(energy_j)) == pytest.approx((point["time_s"], point["energy_j"]), rel=1e-12)
    with open(table) as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(points) and float(rows[0]["time_s"]) == points[0]["time_s"]
    captured = capsys.readouterr()
    assert "less energy" in captured.out and "deadlines solved" in captured.err


def test_plans_all_and_quiet(tmp_path, profile_csv, capsys):
    out = tmp_path / "frontier.json"
    assert main(frontier_args(profile_csv, out, "--plans", "all", "--quiet", "--schedule", "gpipe")) == 0
    data = json.loads(out.read_text())
    assert data["schedule"] == "gpipe" and all("plan" in p for p in data["points"])
    assert capsys.readouterr().err == ""


def test_exact_solver_from_the_cli(tmp_path):
    path = tmp_path / "tiny.csv"
    write_profile(synthetic_profile(2, 3, UNIT_S, seed=4, units=(10, 20)), path)
    out = tmp_path / "exact.json"
    args = [
        "frontier",
        str(path),
        "--microbatches",
        "2",
        "--unit-time",
        str(UNIT_S),
        "--p-blocking",
        "80",
        "--solver",
        "exact",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(args) == 0
    data = json.loads(out.read_text())
    assert data["solver"] == "exact" and len(data["points"]) >= 2


def test_plan_picks_intrinsic_and_straggler_plans(tmp_path, profile_csv):
    frontier = tmp_path / "frontier.json"
    assert main(frontier_args(profile_csv, frontier, "--quiet")) == 0
    data = json.loads(frontier.read_text())
    assert main(["plan", str(frontier), "--out", str(tmp_path / "plan.json")]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["mode"] == "intrinsic"
    assert plan["time_s"] <= data["max_frequency"]["time_s"] * (1 + TIME_TOLERANCE)  # float summation order
    assert plan["energy_j"] < data["max_frequency"]["energy_j"] and len(plan["plan"]) == 3
    straggler_s = 1.2 * data["max_frequency"]["time_s"]
    assert main(["plan", str(frontier), "--straggler-time", str(straggler_s), "--out", str(tmp_path / "s.json")]) == 0
    slow = json.loads((tmp_path / "s.json").read_text())
    assert slow["mode"] == "straggler" and slow["time_s"] <= straggler_s
    assert slow["saving"] > plan["saving"]


def test_plan_errors_exit_2_in_one_line(tmp_path, profile_csv, capsys):
    frontier = tmp_path / "frontier.json"
    assert main(frontier_args(profile_csv, frontier, "--quiet")) == 0
    capsys.readouterr()
    assert main(["plan", str(frontier), "--straggler-time", "0.001", "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no plan finishes by the straggler time" in err
    assert main(["plan", str(tmp_path / "missing.json"), "--out", str(tmp_path / "p.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_frontier_rejects_a_non_positive_unit_time(tmp_path, profile_csv, capsys):
    assert main(frontier_args(profile_csv, tmp_path / "f.json", "--unit-time", "-1")) == 2
    assert "--unit-time must be a positive number" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib (the plots extra) absent")
def test_plot_is_written(tmp_path, profile_csv):
    png = tmp_path / "frontier.png"
    assert main(frontier_args(profile_csv, tmp_path / "f.json", "--quiet", "--plot", str(png))) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    # The title says whose profile it is: the file the frontier was computed from.
    title = Image.open(png).text["Title"]
    assert title.startswith(f"Time-energy frontier of profile {Path(profile_csv).name}: ")
    assert "stages x" in title


def test_missing_matplotlib_is_a_clear_usage_error(monkeypatch):
    from wattwise.pipeline import plot

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UsageError, match=r"plots need matplotlib: pip install matplotlib"):
        plot._pyplot()
