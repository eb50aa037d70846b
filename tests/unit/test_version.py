"""The version a user sees (`wattwise --version`, summaries) is the package's, and the changelog agrees."""

from __future__ import annotations

import re

import pytest

import wattwise
from tests.support.paths import REPO_ROOT

tomllib = pytest.importorskip("tomllib")


def test_the_package_the_metadata_and_the_changelog_name_one_version() -> None:
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert wattwise.__version__ == declared
    heading = re.search(r"^## (.+)$", (REPO_ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert heading is not None
    release, dev = re.fullmatch(r"(\d+\.\d+\.\d+)(\.dev\d+)?", declared).groups()  # type: ignore[union-attr]
    # The newest entry is this version: "(unreleased)" while it is a development version, dated once released.
    expected = rf"{re.escape(release)} \(unreleased\)" if dev else rf"{re.escape(release)} \(\d{{4}}-\d\d-\d\d\)"
    assert re.fullmatch(expected, heading.group(1)), heading.group(1)
