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


def _api_nav() -> list[str]:
    """The pages under Reference > API in mkdocs.yml's navigation, in order."""
    import yaml

    nav = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())["nav"]
    reference = next(item["Reference"] for item in nav if isinstance(item, dict) and "Reference" in item)
    api = next(item["API"] for item in reference if isinstance(item, dict) and "API" in item)
    return [entry if isinstance(entry, str) else next(iter(entry.values())) for entry in api]


def test_the_navigation_lists_every_api_page_in_the_index_order() -> None:
    pages = [path for path, _ in generator().api_pages()]
    index = pages.pop()
    assert _api_nav() == [index, *pages]


def test_each_api_page_opens_with_its_main_class_and_has_a_line_in_the_index() -> None:
    pages = dict(generator().api_pages())
    index = pages.pop("reference/api/index.md")
    first_block = {
        path: next(line for line in text.splitlines() if line.startswith(":::")) for path, text in pages.items()
    }
    assert first_block["reference/api/lightning_energy.md"] == "::: lightning_energy.callback.EnergyCallback"
    assert first_block["reference/api/accelerate_energy.md"] == "::: accelerate_energy.plugin.EnergyPlugin"
    assert first_block["reference/api/wattwise.run.md"] == "::: wattwise.run.run.Run"
    assert list(pages)[:2] == ["reference/api/lightning_energy.md", "reference/api/accelerate_energy.md"]
    for path, text in pages.items():
        name = path.removeprefix("reference/api/")
        row = next(line for line in index.splitlines() if f"]({name})" in line)
        description = row.rstrip(" |").split("|")[-1].strip()
        assert description and "\n" not in description, path
        assert text.splitlines()[2] == description, path  # the page opens with the same line
