"""Runs by project: each run records its project (the `project` setting, else the working directory's git
root's name, else its folder's), in summary.json and the run history, and `wattwise runs list --project`
shows one project's runs (without a name, the working directory's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from wattwise.cli.main import main
from wattwise.config import load_config
from wattwise.devices import Physics, SimulatedGPU
from wattwise.project import default_project, project_of
from wattwise.run import Run


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("WATTWISE_STORE", raising=False)


def run_in(folder: Path, monkeypatch: pytest.MonkeyPatch, *overrides: str) -> dict:
    """Three steps measured from `folder`: the summary."""
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(folder)
    clock = VirtualClock()
    gpu = SimulatedGPU(0, clock=clock, sleep=clock.sleep, physics=Physics.ideal())
    cfg = load_config(overrides=["output_dir=out", "monitor.sample_power=false", *overrides])
    run = Run(cfg, devices=[gpu], wall_clock=clock)
    run.start()
    for _ in range(3):
        run.step_begin()
        clock.sleep(0.1)
        run.step_end()
    run.finish()
    return json.loads((folder / "out" / "summary.json").read_text())


def listed(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    capsys.readouterr()
    assert main(["runs", "list", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)["runs"]


def test_a_run_records_its_project_and_runs_list_shows_one_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "alpha" / ".git").mkdir(parents=True)
    a = run_in(tmp_path / "alpha" / "src" / "train", monkeypatch)  # anywhere inside the repository
    b = run_in(tmp_path / "beta", monkeypatch)  # no repository: the folder's name
    c = run_in(tmp_path / "beta", monkeypatch, "project=vision")  # the setting names it
    assert (a["project"], b["project"], c["project"]) == ("alpha", "beta", "vision")
    assert {r["project"] for r in listed(capsys)} == {"alpha", "beta", "vision"}
    assert [r["project"] for r in listed(capsys, "--project", "alpha")] == ["alpha"]
    monkeypatch.chdir(tmp_path / "beta")
    assert [r["project"] for r in listed(capsys, "--project")] == ["beta"]  # the working directory's
    assert main(["runs", "list", "--project", "vision"]) == 0
    [header, row] = capsys.readouterr().out.splitlines()
    assert header.split()[:2] == ["id", "project"] and row.split()[1] == "vision"


def test_a_project_name_is_kept_printable_and_short() -> None:
    assert project_of("a\tb") == "a?b"
    assert len(project_of("x" * 500)) == 128
    assert default_project("/") == "/"
