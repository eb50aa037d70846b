"""Start-up of the `wattwise` command: only the command being run is imported, and the help stays whole.

`wattwise.cli.main.COMMANDS` holds every command's one-line help and description, so that `wattwise --help`
lists them all without importing them; these tests keep that table in step with what each module registers.
"""

from __future__ import annotations

import argparse
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import wattwise.cli
from tests.support.pipeline import synthetic_profile
from wattwise.cli.main import COMMANDS, build_parser, command_of, main
from wattwise.pipeline.profiles import write_profile

SUBPROCESS_TIMEOUT_S = 120.0
#: Imported by no light command: the solvers' CP-SAT, the store, the frameworks, the configuration.
HEAVY = (
    "ortools",
    "scipy",
    "pandas",
    "sqlalchemy",
    "torch",
    "lightning",
    "accelerate",
    "omegaconf",
    "yaml",
    "wattwise.config",
    "wattwise.devices",
    "wattwise.tools.demo",
)


def sub_commands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_the_command_table_is_what_each_module_registers() -> None:
    modules = {m.name.replace("_", "-") for m in pkgutil.iter_modules(wattwise.cli.__path__)} - {"main"}
    assert set(COMMANDS) == modules
    registered = {a.dest: a.help for a in sub_commands(build_parser())._choices_actions}
    assert registered == {name: command.help for name, command in COMMANDS.items()}
    # Each command's own --help opens with the table's description (acceptance's comes from its check).
    parsers = sub_commands(build_parser()).choices
    for name, command in COMMANDS.items():
        if command.description is not None:
            assert parsers[name].description == command.description
    assert {name for name, command in COMMANDS.items() if command.description is None} == {"acceptance", "devices"}


def test_top_level_help_lists_every_command_without_importing_them() -> None:
    assert build_parser(load=()).format_help() == build_parser().format_help()
    for name in COMMANDS:
        assert name in build_parser(load=()).format_help()


@pytest.mark.parametrize("name", COMMANDS)
def test_a_commands_own_help_is_the_same_loaded_alone(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    full = sub_commands(build_parser()).choices[name].format_help()
    with pytest.raises(SystemExit) as exit_info:
        main([name, "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == full


@pytest.mark.parametrize(
    "argv, command",
    [
        (["plan", "f.json", "--out", "p.json"], "plan"),
        (["--version"], None),
        (["-h", "frontier"], "frontier"),
        (["--", "jobs", "list"], "jobs"),
        (["nope"], None),
        ([], None),
    ],
)
def test_the_command_is_the_first_word_that_is_not_an_option(argv: list[str], command: str | None) -> None:
    assert command_of(argv) == command


def imported_by(argv: list[str]) -> set[str]:
    """The modules loaded by `wattwise ARGV`, run in a fresh interpreter."""
    code = (
        "import json, sys\nfrom wattwise.cli.main import main\n"
        "try:\n    main(json.loads(sys.argv[1]))\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(argv)],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=True,
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def heavy_among(modules: set[str], heavy: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(f"{h}.") for h in heavy))


@pytest.fixture(scope="module")
def frontier_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("startup")
    write_profile(synthetic_profile(2, 3, 0.001, seed=3), tmp / "profile.csv")
    assert (
        main(
            [
                "frontier",
                str(tmp / "profile.csv"),
                "--microbatches",
                "4",
                "--unit-time",
                "0.001",
                "--p-blocking",
                "80",
                "--out",
                str(tmp / "frontier.json"),
                "--quiet",
            ]
        )
        == 0
    )
    return tmp / "frontier.json"


def test_help_imports_no_command(tmp_path: Path) -> None:
    modules = imported_by(["--help"])
    assert heavy_among(modules, HEAVY) == []
    assert not any(m.startswith("wattwise.cli.") and m != "wattwise.cli.main" for m in modules)
    assert "numpy" not in modules


@pytest.mark.parametrize("straggler", [False, True])
def test_plan_imports_neither_the_solvers_nor_the_store(frontier_file: Path, tmp_path: Path, straggler: bool) -> None:
    slowest_s = json.loads(frontier_file.read_text())["points"][-1]["time_s"]
    extra = ["--straggler-time", str(slowest_s)] if straggler else []
    modules = imported_by(["plan", str(frontier_file), *extra, "--out", str(tmp_path / "plan.json")])
    assert (tmp_path / "plan.json").exists()
    assert heavy_among(modules, HEAVY) == []


def test_frontier_help_imports_neither_cp_sat_nor_the_store() -> None:
    modules = imported_by(["frontier", "--help"])  # the fast solver's max flow and scipy: yes
    assert (
        heavy_among(
            modules,
            (
                "ortools.sat",
                "pandas",
                "sqlalchemy",
                "torch",
                "lightning",
                "accelerate",
                "omegaconf",
                "wattwise.config",
                "wattwise.devices",
                "wattwise.tools.demo",
            ),
        )
        == []
    )


def test_a_demo_with_a_bad_power_model_says_so_before_loading_a_framework(tmp_path: Path) -> None:
    (tmp_path / "model.csv").write_text("not,a,power model\n")
    modules = imported_by(["demo", "--power-model", str(tmp_path / "model.csv"), "--output-dir", str(tmp_path)])
    assert heavy_among(modules, ("torch", "lightning", "accelerate")) == []


def test_a_bad_command_is_still_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["plam"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "invalid choice: 'plam'" in err


def blas_threads_after(argv: list[str], env: dict[str, str]) -> str | None:
    """OPENBLAS_NUM_THREADS as `wattwise ARGV` leaves it, in a fresh interpreter started with `env`."""
    code = (
        "import json, os, sys\nfrom wattwise.cli.main import main\n"
        "try:\n    main(json.loads(sys.argv[1]))\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(os.environ.get('OPENBLAS_NUM_THREADS')), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(argv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=True,
    )
    return json.loads(done.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("command", ["frontier", "plan"])
def test_planning_commands_keep_numpys_blas_to_one_thread_unless_the_user_chose(command: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    assert blas_threads_after([command, "--help"], env) == "1"
    assert blas_threads_after([command, "--help"], {**env, "OPENBLAS_NUM_THREADS": "4"}) == "4"


def test_a_caller_that_already_imported_numpy_keeps_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # main() called from Python (a notebook, a test): numpy has read its settings, and children keep ours.
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    import numpy  # noqa: F401

    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "OPENBLAS_NUM_THREADS" not in os.environ


@pytest.mark.parametrize("command", ["run", "measure", "demo", "simulate"])
def test_commands_that_run_user_code_or_training_leave_blas_threads_alone(command: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    assert blas_threads_after([command, "--help"], env) is None
