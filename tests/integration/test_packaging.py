"""Packaging: `core/` is a source root holding `wattwise/`, so a user's own `core` package never shadows
ours; the adapters `lightning_energy` and `accelerate_energy` sit at the top level. Packages are found by
setuptools' discovery, so every folder is named as it is imported.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import PACKAGE_ROOTS, REPO_ROOT
from tests.support.pipeline import can_build_extensions

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before Python 3.11
    import tomli as tomllib

LOGGER_PREFIXES = tuple(f"{name}." for name in PACKAGE_ROOTS.values())


def pyproject() -> dict[str, Any]:
    with open(REPO_ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)


def extension_sources() -> set[Path]:
    """The C sources of `[[tool.setuptools.ext-modules]]`: compiled into the wheel, not shipped as data."""
    modules = pyproject()["tool"]["setuptools"].get("ext-modules", [])
    return {(REPO_ROOT / source).resolve() for module in modules for source in module["sources"]}


def source_files(folder: Path) -> list[Path]:
    """Files of a package folder as a clone has them: no bytecode, no extension built in place, no C source
    of an extension module."""
    compiled = extension_sources()
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and p.suffix not in (".pyc", ".pyo", ".so", ".pyd")
        and p.resolve() not in compiled
    )


def import_name(folder: Path) -> str:
    """`core/wattwise/recurring` -> `wattwise.recurring`: the path below the source root."""
    relative = folder.relative_to(REPO_ROOT)
    if relative.parts[0] == "core":
        relative = relative.relative_to("core")
    return ".".join(relative.parts)


def package_folders() -> dict[str, Path]:
    """Every folder holding an `__init__.py`, by its import name."""
    return {
        import_name(init.parent): init.parent
        for root in PACKAGE_ROOTS
        for init in (REPO_ROOT / root).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }


def our_modules() -> list[str]:
    """Import names of every module of the three packages, read from the source folders."""
    names = []
    for root in PACKAGE_ROOTS:
        for path in (REPO_ROOT / root).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            name = import_name(path.parent)
            names.append(name if path.stem == "__init__" else f"{name}.{path.stem}")
    return sorted(names)


def clean_env() -> dict[str, str]:
    """The environment of a user's shell: nothing that puts this checkout on the import path."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


# -- a user's own `core` -------------------------------------------------------------------------------


USER_SCRIPT = textwrap.dedent("""
    import sys

    import accelerate_energy
    import lightning_energy
    import wattwise
    from wattwise.recurring.optimizer import BatchSizeOptimizer

    assert "core" not in sys.modules, "importing the adapters imported a top-level `core`"
    import core

    assert core.OWNER == "the user", core.__file__
    assert core.helper() == 42
    assert not wattwise.__file__.startswith(sys.path[0]), wattwise.__file__
    print("ok", core.__file__)
""")


def test_a_project_with_its_own_core_package_imports_both_adapters_and_keeps_its_core(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "core").mkdir(parents=True)
    (project / "core" / "__init__.py").write_text('OWNER = "the user"\n\n\ndef helper():\n    return 42\n')
    (project / "train.py").write_text(USER_SCRIPT)

    proc = subprocess.run(
        [sys.executable, "train.py"], cwd=project, env=clean_env(), capture_output=True, text=True, timeout=180
    )

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"ok {project / 'core' / '__init__.py'}"


# -- pyproject ------------------------------------------------------------------------------------------


def test_packages_are_discovered_from_the_source_roots_not_listed_by_hand() -> None:
    setuptools = pyproject()["tool"]["setuptools"]
    assert "package-dir" not in setuptools
    assert setuptools["packages"]["find"]["where"] == ["core", "."]


def test_every_package_folder_is_named_as_it_is_imported() -> None:
    """Each folder with an `__init__.py` is found under the import name its path gives."""
    import setuptools

    found = set(setuptools.find_packages(str(REPO_ROOT / "core"))) | {
        p for p in setuptools.find_packages(str(REPO_ROOT)) if p.split(".")[0] in PACKAGE_ROOTS.values()
    }
    assert found == set(package_folders())
    for name in found:
        assert importlib.import_module(name).__file__ == str(package_folders()[name] / "__init__.py")
    assert not (REPO_ROOT / "core" / "__init__.py").exists(), "core/ is a source root, not a package"


def test_every_data_file_in_the_packages_ships_as_package_data() -> None:
    package_data: dict[str, list[str]] = pyproject()["tool"]["setuptools"].get("package-data", {})
    assert set(package_data) <= set(package_folders()), f"package-data names an unknown package: {package_data}"
    for name, patterns in package_data.items():
        folder = package_folders()[name]
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"package-data {name}: {pattern!r} matches no file in {folder}"
    packages = package_folders()
    for root in PACKAGE_ROOTS:
        for path in source_files(REPO_ROOT / root):
            if path.suffix == ".py":
                continue
            owner = max((n for n, f in packages.items() if path.is_relative_to(f)), key=len)
            inside = path.relative_to(packages[owner]).as_posix()
            assert any(fnmatch.fnmatch(inside, p) for p in package_data.get(owner, [])), (
                f"{path.relative_to(REPO_ROOT)} would not ship: add it to [tool.setuptools.package-data] {owner}"
            )


# -- the wheel ------------------------------------------------------------------------------------------


def build(kind: str, folder: Path) -> Path:
    """`build_meta.build_sdist` or `build_wheel` run in `folder`, as pip and `python -m build` run them."""
    code = f"from setuptools import build_meta; print(build_meta.build_{kind}('dist'))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=clean_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return folder / "dist" / proc.stdout.strip().splitlines()[-1]


def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of what a clean clone has to build from (the checkout's build/ and compiled files untouched)."""
    folder = tmp_path_factory.mktemp("clone")
    for name in ("pyproject.toml", "README.md", "MANIFEST.in", "pth_build.py"):
        shutil.copy2(REPO_ROOT / name, folder / name)
    for root in PACKAGE_ROOTS:
        shutil.copytree(REPO_ROOT / root, folder / root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    return folder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """A wheel built from the sdist of a clean clone, as `python -m build` or pip installing the sdist builds
    it: with only what the sdist carries."""
    unpacked = tmp_path_factory.mktemp("sdist")
    with tarfile.open(build("sdist", clone(tmp_path_factory))) as sdist:
        sdist.extractall(unpacked, filter="data")
    (source,) = unpacked.iterdir()
    return zipfile.ZipFile(build("wheel", source))


def test_the_wheel_installs_wattwise_and_the_adapters_and_no_top_level_core(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == {"wattwise", "lightning_energy", "accelerate_energy", "wattwise-accelerate.pth"}
    expected = {
        f"{import_name(p.parent).replace('.', '/')}/{p.name}"
        for root in PACKAGE_ROOTS
        for p in source_files(REPO_ROOT / root)
    }
    assert "wattwise/py.typed" in expected
    assert "wattwise/__main__.py" in expected
    assert sorted(expected - set(names)) == []


def test_an_editable_install_also_puts_the_accelerate_flags_pth_file_at_the_top_of_site_packages(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """`pip install -e .` (setuptools' default mode): the flag's start-up line beside setuptools' own."""
    names = zipfile.ZipFile(build("editable", clone(tmp_path_factory))).namelist()
    assert "wattwise-accelerate.pth" in names
    assert [n for n in names if n.startswith("__editable__.") and n.endswith(".pth")]


def test_the_wheel_carries_the_compiled_kernels_where_a_compiler_is(wheel: zipfile.ZipFile) -> None:
    """The frontier solver's C extension is optional (an install without a compiler still works), so a
    broken build would pass silently: where a compiler is, the wheel must hold it."""
    if not can_build_extensions():
        pytest.skip("no C compiler or Python headers here: the wheel is pure Python and the numpy code is used")
    names = wheel.namelist()
    assert [n for n in names if n.startswith("wattwise/pipeline/_kernels.") and n.endswith(".so")]
    assert extension_sources() == {(REPO_ROOT / "core/wattwise/pipeline/_kernels.c").resolve()}


def test_the_wheel_declares_the_wattwise_script_and_the_demo_entry_points(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "wattwise = wattwise.cli.main:main" in text
    assert "lightning = lightning_energy.demo:run_demo" in text
    assert "accelerate = accelerate_energy.demo:run_demo" in text


# -- python -m wattwise ---------------------------------------------------------------------------------


def test_python_dash_m_wattwise_runs_the_command_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "wattwise", "--help"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: wattwise ")


# -- loggers --------------------------------------------------------------------------------------------


def test_every_module_imports_under_its_installed_name_and_logs_under_it() -> None:
    loggers: dict[str, str] = {}
    for name in our_modules():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:
                pytest.fail(f"{name} is not importable under its installed name")
            raise
        for attr, value in vars(module).items():
            if isinstance(value, logging.Logger):
                loggers[f"{name}.{attr}"] = value.name
    assert loggers, "no module-level logger found"
    assert {where: logger for where, logger in loggers.items() if not logger.startswith(LOGGER_PREFIXES)} == {}
    assert [n for n in logging.root.manager.loggerDict if n == "core" or n.startswith("core.")] == []


def test_loggers_named_in_the_source_exist() -> None:
    """`logging.getLogger("wattwise.x")` in our code (to quiet or tune it) names a module that logs."""
    modules = set(our_modules())
    for root in PACKAGE_ROOTS:
        for path in (REPO_ROOT / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "attr", None) == "getLogger"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                ):
                    continue
                logger = node.args[0].value
                where = f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
                assert not (logger == "core" or logger.startswith("core.")), where
                if logger.startswith(LOGGER_PREFIXES):
                    assert logger in modules, f"{where}: no module {logger} (did its logging move?)"
                    logs = importlib.import_module(logger)
                    assert any(isinstance(v, logging.Logger) and v.name == logger for v in vars(logs).values()), (
                        f"{where}: {logger} defines no logger"
                    )
