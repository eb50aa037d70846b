"""The job store's tests, in both tiers: the job several processes share, and an SQLite store per test.

The fixture `sqlite_url` reaches the tests through the conftest.py of tests/unit/store/ and
tests/integration/store/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from wattwise.recurring.spec import JobSpec
from wattwise.store import store_url

#: A recurring job with four batch sizes to explore, as the store tests register it.
SHARED_JOB = JobSpec(
    name="shared/job",
    batch_sizes=(16, 32, 64, 128),
    default_batch_size=64,
    target_metric=0.8,
    max_epochs=5,
    max_power_w=300.0,
)


def sqlite_store_url(tmp_path: Path) -> str:
    """The URL of an SQLite store in a folder under `tmp_path` that does not exist yet (the store makes it)."""
    return store_url(str(tmp_path / "state" / "jobs.sqlite"))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """`sqlite_store_url` for this test's temporary folder."""
    return sqlite_store_url(tmp_path)
