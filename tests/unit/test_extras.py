"""Optional dependencies: the base install is lean, and a part used without its extra says which to install.

The modules are made missing in this process (`sys.modules[name] = None` makes `import name` fail), and
the modules that imported them are forgotten for the test, so they import again and meet the gap.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT
from wattwise.cli import main as cli_main
from wattwise.cli.main import EXTRA_OF_COMMAND, main
from wattwise.errors import Unavailable
from wattwise.extras import EXTRA_OF, MissingExtra, require

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before Python 3.11
    import tomli as tomllib

HEAVY = {"torch", "lightning", "accelerate", "ortools", "scipy", "aiohttp", "prometheus-client", "matplotlib"}


def _project() -> dict:
    with open(REPO_ROOT / "pyproject.toml", "rb") as fh:
        return dict(tomllib.load(fh)["project"])


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def _missing(monkeypatch: pytest.MonkeyPatch, module: str, *forget: str) -> None:
    """`import module` (and of any of its submodules, even one an earlier test imported) fails from now on;
    `forget` (and their submodules) are imported afresh."""
    for name in [module, *(n for n in sys.modules if n.startswith(f"{module}."))]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in list(sys.modules):
        if any(name == f or name.startswith(f"{f}.") for f in forget):
            monkeypatch.delitem(sys.modules, name)


def test_the_base_install_has_no_framework_solver_or_agent_server_and_each_extra_brings_them() -> None:
    project = _project()
    assert not _names(project["dependencies"]) & HEAVY
    extras = project["optional-dependencies"]
    assert {"torch", "lightning"} <= _names(extras["lightning"])
    assert {"torch", "accelerate"} <= _names(extras["accelerate"])
    assert {"ortools", "scipy"} <= _names(extras["pipeline"])
    assert {"aiohttp", "prometheus-client"} <= _names(extras["agent"])
    # `all` names every extra but amd (its binding must match the ROCm release) and the tools; `make install`
    # installs `.[dev]`, which includes `all`.
    (everything,) = extras["all"]
    assert set(everything[len("wattwise[") : -1].split(",")) == set(extras) - {"all", "amd", "dev", "docs"}
    assert "wattwise[all]" in extras["dev"]
    # Every extra `wattwise.extras` names exists.
    assert {extra for _, extra in EXTRA_OF.values()} <= set(extras)


def test_a_missing_optional_module_is_one_line_naming_its_extra_and_still_an_import_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _missing(monkeypatch, "ortools")
    with pytest.raises(ImportError) as caught:
        require("ortools.sat.python.cp_model", "the solver")
    assert isinstance(caught.value, MissingExtra) and isinstance(caught.value, Unavailable)
    assert str(caught.value) == (
        "the solver needs ortools, which is not installed: pip install 'wattwise[pipeline]' "
        "(in a clone of wattwise: pip install '.[pipeline]')"
    )
    assert caught.value.__suppress_context__  # no second traceback of the ModuleNotFoundError


def test_a_missing_module_that_no_extra_brings_keeps_its_own_error() -> None:
    with pytest.raises(ModuleNotFoundError) as caught:
        require("wattwise_no_such_module", "the solver")
    assert not isinstance(caught.value, MissingExtra)


def test_agent_serve_without_aiohttp_is_one_line_naming_the_agent_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _missing(monkeypatch, "aiohttp", "wattwise.agent.serve", "wattwise.agent.http")
    code = main(
        [
            "agent",
            "serve",
            "--backend",
            "simulated",
            "--socket",
            str(tmp_path / "a.sock"),
            "--state-dir",
            str(tmp_path / "state"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("wattwise agent: error: `wattwise agent serve` needs aiohttp")
    assert "pip install 'wattwise[agent]'" in err
    assert not (tmp_path / "state").exists()  # refused before anything was made


def test_frontier_without_ortools_is_one_line_naming_the_pipeline_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _missing(
        monkeypatch,
        "ortools",
        "wattwise.cli.frontier",
        "wattwise.pipeline.frontier",
        "wattwise.pipeline.relaxation",
        "wattwise.pipeline.exact",
    )
    assert main(["frontier", "--help"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("wattwise frontier: error: the pipeline frontier solver needs ortools")
    assert "pip install 'wattwise[pipeline]'" in err


@pytest.mark.parametrize(
    ("package", "framework", "name"),
    [
        ("lightning_energy", "lightning", "EnergyCallback"),
        ("accelerate_energy", "accelerate", "AccelerateEnergy"),
    ],
)
def test_an_adapters_names_without_its_framework_name_the_adapters_extra(
    monkeypatch: pytest.MonkeyPatch, package: str, framework: str, name: str
) -> None:
    adapter = __import__(package)
    _missing(monkeypatch, framework, *[m for m in sys.modules if m.startswith(f"{package}.")])
    monkeypatch.delitem(vars(adapter), name, raising=False)
    with pytest.raises(MissingExtra, match=re.escape(f"pip install 'wattwise[{framework}]'")) as caught:
        getattr(adapter, name)
    assert str(caught.value).startswith(f"{package} needs {framework}, which is not installed")


def test_a_missing_extra_is_still_the_import_error_of_the_module_it_names() -> None:
    # Code that catches ImportError and reads `name` (as importlib's callers do) keeps working.
    missing = MissingExtra("`wattwise frontier` needs ortools", name="ortools")
    assert isinstance(missing, ImportError) and isinstance(missing, Unavailable)
    assert (missing.name, str(missing)) == ("ortools", "`wattwise frontier` needs ortools")


@pytest.mark.parametrize(("command", "extra"), [("frontier", "pipeline"), ("plan", "pipeline"), ("runs", "store")])
def test_a_command_without_numpy_names_the_extra_that_makes_the_command_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, extra: str
) -> None:
    # NumPy comes with `store`, but `wattwise frontier` also needs the pipeline planner's solvers: its user is
    # told `pipeline` (which brings `store`); a store command is told `store`. The command's module fails to
    # import as it does where NumPy is not installed (the lean-install integration test runs it for real).
    def no_numpy(name: str) -> object:
        raise ModuleNotFoundError("No module named 'numpy'", name="numpy")

    monkeypatch.setattr(cli_main.importlib, "import_module", no_numpy)
    assert main([command, "--help"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"wattwise {command}: error: `wattwise {command}` needs numpy, which is not installed")
    assert f"pip install 'wattwise[{extra}]'" in err


def test_each_commands_own_extra_exists_and_brings_the_store() -> None:
    extras = _project()["optional-dependencies"]
    for extra in EXTRA_OF_COMMAND.values():
        assert "wattwise[store]" in extras[extra], extra
