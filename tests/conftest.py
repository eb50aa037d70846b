"""Fixtures for both tiers (tests/unit/, tests/integration/), and how pytest-xdist shares the tests out.

The shared fakes and helpers are in tests/support/; the unit tier's own rule is in tests/unit/conftest.py.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.clock import VirtualClock
from tests.support.paths import REPO_ROOT, shared_data_dir

# The tests train tiny models: intra-op threads only add spin-waits on a machine whose cores the test
# workers already fill. One thread here, and in every process a test starts (they inherit the environment;
# a caller's own setting stays). Measured on the 2-core machine: 1.3-1.8 CPU-seconds less per training process.
# Set before anything imports torch, which reads it then; pytest's controller process of an `-n` run, which runs
# no test, need not import torch at all (about 2 CPU-s).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# LightningCLI calls jsonargparse APIs it deprecated (Lightning's to fix); off at the source, in tests' processes too.
os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")
# The simulated GPU follows the ideal physics in the tests and the processes they start (a caller's own setting
# stays): their plumbing checks count steps, collectives and exact figures that the realistic physics (windows
# of 20 counter updates, about 2 s per tuned limit, reads that take time, noise) changes. The realistic
# physics, the default everywhere else, has its own tests on virtual clocks (tests/unit/devices/
# test_simulated_physics.py, tests/unit/test_power_limit_physics.py, the profiler's), benchmarks/physics.py, and
# end to end the README's demo on it (tests/integration/cli/test_demo.py).
os.environ.setdefault("WATTWISE_SIMULATED_PHYSICS", "ideal")

#: The fixtures that reach the session's one PostgreSQL server.
POSTGRES_FIXTURES = ("postgres_url", "fresh_postgres")


#: Where the last run's test durations are kept (pytest's cache, .pytest_cache/): the next run orders by them.
DURATIONS_KEY = "wattwise/durations_s"
#: The durations of a whole run kept in the repository (`make test-durations`), for a clone with no cache yet
#: (CI's): without them the longest tests may start last and leave one worker running them alone.
DURATIONS_FILE = REPO_ROOT / "tests" / "durations.json"
#: This run's durations so far, by test.
_durations_s: dict[str, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--store-durations`: write this run's test durations to tests/durations.json (`make test-durations`)."""
    parser.addoption(
        "--store-durations",
        action="store_true",
        help="write this run's test durations to tests/durations.json (the order of a run with no cache)",
    )


def _last_durations_s(config: pytest.Config) -> dict[str, float]:
    """Each test's last known duration: pytest's cache over the repository's file."""
    known: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError):  # none yet, or a half-written one: order without it
        known.update(json.loads(DURATIONS_FILE.read_text()))
    cache = getattr(config, "cache", None)
    if cache is not None:
        known.update(cache.get(DURATIONS_KEY, {}))
    return known


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first: integration before unit, then the work units (`work_unit`) that took longest last time.

    Under xdist the long tests start early and the many short ones fill the workers' last minutes. Every
    worker reads the same cache and file, so all collect the same order (xdist requires it).
    """
    last_s = _last_durations_s(config)
    unit_s: dict[str, float] = {}
    for item in items:
        unit = _unit_of(item.nodeid)
        unit_s[unit] = unit_s.get(unit, 0.0) + last_s.get(item.nodeid, 0.0)
    items.sort(
        key=lambda item: (
            not item.nodeid.startswith("tests/integration/"),
            -unit_s[_unit_of(item.nodeid)],
            -last_s.get(item.nodeid, 0.0),
        )
    )


def _unit_of(nodeid: str) -> str:
    """The work unit a test runs in: its module's, or the test alone."""
    return work_unit(nodeid.split("::")[0]) or nodeid


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each test's setup, call and teardown time (in the xdist controller too, from the workers)."""
    _durations_s[report.nodeid] = _durations_s.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Keep this run's durations for the next run's order (not from an xdist worker: its controller does)."""
    if not _durations_s or hasattr(session.config, "workerinput"):
        return
    cache = getattr(session.config, "cache", None)
    if cache is not None:
        cache.set(DURATIONS_KEY, {**cache.get(DURATIONS_KEY, {}), **_durations_s})
    if session.config.getoption("--store-durations"):
        # The tests under half a second change no order worth keeping: they fill the gaps, whatever their order.
        rounded = {nodeid: round(seconds, 1) for nodeid, seconds in sorted(_durations_s.items()) if seconds >= 0.5}
        DURATIONS_FILE.write_text(json.dumps(rounded, indent=0) + "\n")


@functools.cache
def work_unit(module: str) -> str | None:
    """What must run on one xdist worker with the tests of `module` (a path from the repository root).

    "postgresql" for the modules that use the session's PostgreSQL server (it starts once, on one worker);
    the module itself where it holds a module-scoped fixture (an agent, a server of its own, a wheel, a
    two-process training run: set up once); None where its tests may go to any worker, one by one.
    """
    source = (REPO_ROOT / module).read_text() if (REPO_ROOT / module).is_file() else ""
    if any(name in source for name in POSTGRES_FIXTURES):
        return "postgresql"
    return module if 'scope="module"' in source else None


if importlib.util.find_spec("xdist") is not None:
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        """xdist's load scheduling, except that the tests sharing a server or a fixture go to one worker.

        (xdist's own `--dist loadgroup` marks do not reach its scheduler under pytest 9, which no longer
        reads the node id xdist rewrites.)
        """

        def _split_scope(self, nodeid: str) -> str:
            return _unit_of(nodeid)

    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> SharedFixtureScheduling:
        """With `-n`, schedule by `work_unit` (the Makefile's `make test` and `make test-fast`)."""
        return SharedFixtureScheduling(config, log)


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


@pytest.fixture(scope="session", autouse=True)
def _session_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A wattwise state dir for what runs outside a test: module-scoped fixtures never touch the real one.

    Each test then gets its own (`_isolated_state`).
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WATTWISE_HOME", str(tmp_path_factory.mktemp("wattwise_session_home")))
        yield


@pytest.fixture
def real_auto_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backend "auto" as on a user's machine: no `WATTWISE_BACKEND`."""
    monkeypatch.delenv("WATTWISE_BACKEND", raising=False)


@pytest.fixture
def bare_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No NVIDIA driver and no RAPL powercap tree, whatever this machine has."""
    import wattwise.devices.rapl
    from tests.support.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeNvml

    FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND).install(monkeypatch)
    monkeypatch.setattr(
        wattwise.devices.rapl,
        "rapl_domains",
        functools.partial(wattwise.devices.rapl.rapl_domains, tmp_path / "no-powercap"),
    )


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own wattwise state dir (guard journal, simulated GPU settings, stores)."""
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path_factory.mktemp("wattwise_home")))


@pytest.fixture
def simulated_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """`WATTWISE_HOME` at `tmp_path/home`, and no simulated GPU this process opened for another test.

    For the tests of simulated GPUs' persisted settings (the guard, the CLI, discovery): what they find is
    what this test left, in a folder the test can name. Returns the state dir.
    """
    import wattwise.devices

    home = tmp_path / "home"
    monkeypatch.setenv("WATTWISE_HOME", str(home))
    monkeypatch.setattr(wattwise.devices, "_SIMULATED", {})
    return home


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
