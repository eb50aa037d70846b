"""The generated reference pages cover what the code has: every configuration key has its meaning, every
environment variable the code reads is documented, every command has its help."""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

import pytest

from tests.support.paths import REPO_ROOT
from wattwise.cli.main import COMMANDS
from wattwise.config import SETTINGS, config_keys

pytest.importorskip("mkdocs_gen_files")


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", REPO_ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_configuration_key_has_a_row_with_its_meaning() -> None:
    page = generator().configuration_page()
    for key in config_keys():
        row = next((line for line in page.splitlines() if line.startswith(f"| `{key}` |")), None)
        assert row is not None, key
        assert row.rstrip(" |").split("|")[-1].strip(), f"{key} has no comment in wattwise.config"


def test_every_setting_has_both_environment_variables_and_its_flag() -> None:
    page = generator().configuration_page()
    for s in SETTINGS:
        assert f"`ACCELERATE_ENERGY_{s.name.upper()}`, `LIGHTNING_ENERGY_{s.name.upper()}`" in page
        assert f"`--{s.name.replace('_', '-')}`" in page


def test_every_wattwise_variable_the_code_reads_is_documented() -> None:
    documented = {name for names in generator().ENVIRONMENT for name in names.split(", ")}
    found = set()
    for path in [*(REPO_ROOT / "core").rglob("*.py"), *(REPO_ROOT / "tests" / "support").rglob("*.py")]:
        found |= set(re.findall(r"\bWATTWISE_[A-Z][A-Z_]*[A-Z]\b", path.read_text()))
    assert found, "no WATTWISE_ variable found: the scan is broken"
    assert found <= documented, f"undocumented: {sorted(found - documented)}"


def test_every_command_is_in_the_cli_reference() -> None:
    page = generator().cli_page()
    for name in COMMANDS:
        assert f"## `wattwise {name}`" in page
    assert "## `wattwise jobs show`" in page  # sub-commands too
