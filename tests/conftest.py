"""Fixtures for both tiers (tests/unit/, tests/integration/), and how pytest-xdist shares out their servers.

The shared fakes and helpers are in tests/support/; the unit tier's own rule is in tests/unit/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.support.clock import VirtualClock
from tests.support.paths import shared_data_dir

# The tests train tiny models: intra-op threads only add spin-waits on a shared 2-core machine.
torch.set_num_threads(1)

#: The fixtures that reach the session's one PostgreSQL server.
POSTGRES_FIXTURES = frozenset({"postgres_url", "fresh_postgres"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep the tests that share a server on one xdist worker (`--dist loadgroup`), so each starts once.

    The tests of the session PostgreSQL (by fixture, or parametrized over the store "postgresql") form one
    group; the tests sharing a module-scoped fixture (an agent, a PostgreSQL server of their own, a wheel, a
    two-process training run) form one group per module.
    Without xdist the marks do nothing.
    """
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        callspec = getattr(item, "callspec", None)
        if POSTGRES_FIXTURES & set(info.names_closure) or (callspec and "postgresql" in callspec.params.values()):
            item.add_marker(pytest.mark.xdist_group("postgresql"))
        elif any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs
                 if d.argname in info.names_closure):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture
def shared_data() -> Path:
    """The real measured data (Zeus traces and profiles, Perseus profiles); skips when absent."""
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"real measured data not found at {path} (set WATTWISE_SHARED_DATA to its location)")
    return path


@pytest.fixture
def virtual_clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture(scope="session", autouse=True)
def _simulated_gpu_by_name() -> Iterator[None]:
    """The suite asks for the simulated GPU by name, as a user without a GPU must: `WATTWISE_BACKEND`.

    Session-wide, so that module-scoped fixtures and subprocesses see it too; the tests of discovery
    itself unset it (`real_auto_backend`).
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WATTWISE_BACKEND", "simulated")
        yield


@pytest.fixture
def real_auto_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backend "auto" as on a user's machine: no `WATTWISE_BACKEND`."""
    monkeypatch.delenv("WATTWISE_BACKEND", raising=False)


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own wattwise state dir (guard journal, simulated GPU settings, stores)."""
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path_factory.mktemp("wattwise_home")))


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server for the whole test run (skips when its binaries are absent)."""
    from tests.support.postgres_server import postgres_server

    with postgres_server() as url:
        yield url


@pytest.fixture
def fresh_postgres(postgres_url: str) -> str:
    """The server with every table dropped before the test, as a store URL."""
    from tests.support.postgres_server import empty_database
    from wattwise.store import store_url

    empty_database(store_url(postgres_url))
    return store_url(postgres_url)
