"""No import circle in the repository: the module import graph, read from the source, has no cycle.

The graph is built with `ast`, without importing anything. An import is module-level when it runs while
its module is being imported (at the top, in a class body, under `try` or `if`), function-level when it
runs inside a function; one under `if TYPE_CHECKING:` never runs, but ties the modules for the type checker
and the reader all the same, so it counts with the function-level ones where circles are looked for. Importing `a.b.c`
runs the `__init__` of `a` and `a.b` first, so the edge goes to those packages too (except the packages
the importing module is itself inside: they are already being imported).

Module-level circles break imports. A function-level import that only dodges a circle leaves the modules
tied in one all the same (issue 25's `run -> power_control -> limits_memory -> recurring.sql_store ->
recurring/__init__ -> optimizer -> run`, with optimizer's import of `wattwise.run` in a function), so the
graph of both kinds together must have none either. Imports by `importlib` are not seen.

Scripts (benchmarks/, examples/) import their siblings by bare name, as Python does with the script's
folder first on `sys.path`.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import PACKAGE_ROOTS, REPO_ROOT

#: Folders of scripts run directly, whose modules import each other by bare name.
SCRIPT_FOLDERS = ("benchmarks", "examples")


@dataclasses.dataclass(frozen=True)
class SourceModule:
    """One Python file of the repository, under the name it is imported by."""

    name: str
    path: Path
    #: The folder a script's bare-name imports of its siblings resolve in (None: a package module).
    script_folder: str | None = None

    @property
    def package(self) -> str:
        """The package relative imports start from (a package's `__init__` is its own package)."""
        return self.name if self.path.name == "__init__.py" else self.name.rpartition(".")[0]


def find_modules(root: Path, packages: dict[str, str], script_folders: tuple[str, ...]) -> dict[str, SourceModule]:
    """Every module of the packages (source folder -> import name) and of the script folders, by name."""
    modules: dict[str, SourceModule] = {}
    for folder, import_name in packages.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((import_name, *parts))
            modules[name] = SourceModule(name, path)
    for folder in script_folders:
        for path in sorted((root / folder).glob("*.py")):
            name = f"{folder}.{path.stem}"
            modules[name] = SourceModule(name, path, script_folder=folder)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Each import statement, with whether it is deferred: it runs in a function, or only for the type checker."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, in_function
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _imports(node, True)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), in_function)
        else:
            yield from _imports(node, in_function)


def _imported_names(node: ast.Import | ast.ImportFrom, module: SourceModule) -> list[str]:
    """The dotted names an import statement may load: the module, and for `from m import x`, `m.x`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.package.split(".")
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, node.module] if node.module else base)
    else:
        source = node.module or ""
    return [source, *(f"{source}.{alias.name}" for alias in node.names)]


def _resolve(name: str, module: SourceModule, modules: dict[str, SourceModule]) -> str | None:
    """The repository module a dotted name is, or None when it is not ours."""
    if module.script_folder is not None and f"{module.script_folder}.{name}" in modules:
        return f"{module.script_folder}.{name}"
    return name if name in modules else None


Graph = dict[str, set[str]]


def import_graph(modules: dict[str, SourceModule], *, parents: bool = True) -> tuple[Graph, Graph]:
    """(module-level edges, function-level edges): importer -> the repository modules its imports run.

    With `parents` False, an import reaches the module it names only, not the packages above it whose
    `__init__` Python runs first: the code a module depends on, as the layer rules read it.
    """
    eager: Graph = {name: set() for name in modules}
    deferred: Graph = {name: set() for name in modules}
    for module in modules.values():
        tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
        for node, is_deferred in _imports(tree):
            for dotted in _imported_names(node, module):
                parts = dotted.split(".")
                for depth in range(1 if parents else len(parts), len(parts) + 1):
                    target = _resolve(".".join(parts[:depth]), module, modules)
                    if not parents and target is None and depth > 1:  # `from m import name`: m itself
                        target = _resolve(".".join(parts[: depth - 1]), module, modules)
                    inside = target is not None and (module.name + ".").startswith(target + ".")
                    if target is None or inside or target == module.name:
                        continue
                    (deferred if is_deferred else eager)[module.name].add(target)
    return eager, deferred


def find_cycles(graph: Graph) -> list[list[str]]:
    """One circle per strongly connected group of modules, as `[a, b, ..., a]` (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_circle_in(sorted(group), graph) for group in groups]


def _circle_in(group: list[str], graph: Graph) -> list[str]:
    """A shortest circle through the group's first module, staying inside the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ == start:
                    return [*paths[node], start]
                if succ not in paths:
                    paths[succ] = [*paths[node], succ]
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no circle through {start} in {group}")  # a strongly connected group always has one


@pytest.fixture(scope="module")
def repository_graph() -> tuple[Graph, Graph]:
    modules = find_modules(REPO_ROOT, {**PACKAGE_ROOTS, "tests": "tests"}, SCRIPT_FOLDERS)
    return import_graph(modules)


@pytest.fixture(scope="module")
def dependency_graph() -> Graph:
    """What each module's own imports name (package `__init__`s run on the way not counted), all kinds."""
    modules = find_modules(REPO_ROOT, dict(PACKAGE_ROOTS), ())
    return _union(*import_graph(modules, parents=False))


def _named(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_repository_has_no_import_circle(repository_graph: tuple[Graph, Graph]) -> None:
    eager, _ = repository_graph
    cycles = find_cycles(eager)
    assert not cycles, f"import circles through module-level imports:\n{_named(cycles)}"


def test_no_function_level_import_hides_a_circle(repository_graph: tuple[Graph, Graph]) -> None:
    eager, deferred = repository_graph
    cycles = find_cycles(_union(eager, deferred))
    assert not cycles, f"import circles through function-level imports:\n{_named(cycles)}"


def test_no_test_module_imports_another(repository_graph: tuple[Graph, Graph]) -> None:
    """Shared fakes, helpers and set-ups live in tests/support/ (CONTRIBUTING.md), not in a test module."""
    eager, deferred = repository_graph
    graph = _union(eager, deferred)
    test_modules = {name for name in graph if name.startswith(("tests.unit.", "tests.integration."))}
    reaching = sorted(f"{name} imports {target}" for name in graph for target in graph[name] & test_modules)
    assert not reaching, "\n".join(reaching)


def _union(first: Graph, second: Graph) -> Graph:
    return {name: first.get(name, set()) | second.get(name, set()) for name in first.keys() | second.keys()}


def test_the_graph_sees_the_repositorys_imports(
    repository_graph: tuple[Graph, Graph],
) -> None:
    eager, deferred = repository_graph
    assert "wattwise.store.limits_memory" in eager["wattwise.run.run"]
    assert "wattwise.recurring" in eager["wattwise.store.base"]  # through wattwise.recurring.spec
    assert "wattwise.store.sql" in deferred["wattwise.store.factory"]  # open_store imports it when called
    assert "wattwise.store.sql" not in eager["wattwise.store.limits_memory"]  # only under TYPE_CHECKING,
    assert "wattwise.store.sql" in deferred["wattwise.store.limits_memory"]  # which counts as deferred
    assert "wattwise.run" in eager["lightning_energy.callback"]
    assert "benchmarks.recurring_workloads" in eager["benchmarks.recurring_validation"]  # a script's sibling


#: Decision code (pure logic): the record, which writes and reads what a run decided, imports none of it.
DECISIONS = (
    "wattwise.power_limit",
    "wattwise.recurring.bandit",
    "wattwise.recurring.optimizer",
    "wattwise.recurring.policy",
    "wattwise.pipeline",
    "wattwise.carbon.policy",
    "wattwise.carbon.advisor",
)


def _reached(graph: Graph, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for succ in graph.get(todo.pop(), ()):
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return seen


def test_the_record_imports_no_decision_code(dependency_graph: Graph) -> None:
    graph = dependency_graph
    reaching = sorted(
        f"{name} reaches {target}"
        for name in graph
        if name.startswith("wattwise.record")
        for target in _reached(graph, name)
        if target.startswith(DECISIONS)
    )
    assert not reaching, "\n".join(reaching)


def test_measurement_writes_through_a_sink_and_imports_no_record(dependency_graph: Graph) -> None:
    """The monitor and the run's measurement part know no file format: the run gives them `windows.csv`."""
    graph = dependency_graph
    measuring = ("wattwise.monitor", "wattwise.run.measurement", "wattwise.run.agreement")
    reaching = sorted(
        f"{name} reaches {target}"
        for name in measuring
        for target in _reached(graph, name)
        if target.startswith("wattwise.record")
    )
    assert not reaching, "\n".join(reaching)


#: All the JSON codec (`wattwise.codec`) reaches: leaves, so that every layer may read its files and wires
#: through it, the measurement path and the store included, without being tied to the record or to another.
CODEC_LEAVES = {
    "wattwise.errors",
    "wattwise.bounds",
    "wattwise.safe_files",
    "wattwise.carbon.series",  # its timestamps (`parse_timestamp_s`)
    "wattwise.carbon.grid",  # which carbon.series reads a grid code with
}


def test_the_codec_is_a_leaf_every_layer_may_import(dependency_graph: Graph) -> None:
    reached = _reached(dependency_graph, "wattwise.codec")
    assert "wattwise.errors" in reached  # the graph sees the codec's imports
    assert reached <= CODEC_LEAVES, sorted(reached - CODEC_LEAVES)


#: The modules outside `wattwise.cli` that may import it: the entry points (`python -m wattwise`, `python -m
#: wattwise.acceptance` through the acceptance tool's `main`) and the acceptance check that runs `wattwise
#: frontier` and `wattwise plan` on a measured profile as a user types them.
CLI_ENTRY_POINTS = ("wattwise.__main__", "wattwise.tools.acceptance", "wattwise.tools.levers_pipeline")


def test_nothing_outside_the_cli_imports_it_but_the_entry_points(dependency_graph: Graph) -> None:
    """The CLI presents what the library computes; the library, the dashboard and the adapters never need it."""
    graph = dependency_graph
    reaching = sorted(
        f"{name} imports {target}"
        for name in graph
        if not (name == "wattwise.cli" or name.startswith("wattwise.cli.")) and name not in CLI_ENTRY_POINTS
        for target in graph[name]
        if target == "wattwise.cli" or target.startswith("wattwise.cli.")
    )
    assert not reaching, "\n".join(reaching)
    assert "wattwise.cli.main" in graph["wattwise.__main__"]  # the graph sees the entry point's import


def test_the_runs_agreement_is_the_one_place_processes_decide_together() -> None:
    """Outside `wattwise.run.agreement`, no part of the run gathers reasons of its own to decide on."""
    offenders = []
    for path in sorted((REPO_ROOT / "core" / "wattwise" / "run").glob("*.py")):
        if path.name == "agreement.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "any"
                and isinstance(node.value, ast.Attribute)
                and node.value.attr in ("collective", "_collective")
            ):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_circle_through_a_package_init_is_found_and_named(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/run.py": "from pkg.memory import remember\n",
            "pkg/memory.py": "from pkg.jobs.store import Store\n",
            "pkg/jobs/__init__.py": "from pkg.jobs.optimizer import Optimizer\n",
            "pkg/jobs/optimizer.py": "import pkg.run\n",
            "pkg/jobs/store.py": "import os\n",
        },
    )
    eager, _ = import_graph(find_modules(tmp_path, {"pkg": "pkg"}, ()))
    assert find_cycles(eager) == [["pkg.jobs", "pkg.jobs.optimizer", "pkg.run", "pkg.memory", "pkg.jobs"]]


def test_function_level_and_type_checking_imports_are_deferred_and_can_close_a_circle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.a import A\n"
                "def f():\n    from . import a\n"
            ),
            "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n",
        },
    )
    eager, deferred = import_graph(find_modules(tmp_path, {"pkg": "pkg"}, ()))
    assert find_cycles(eager) == []
    assert deferred["pkg.b"] == {"pkg.a"}
    assert eager["pkg.c"] == set() and deferred["pkg.c"] == {"pkg.a"}
    assert find_cycles(_union(eager, deferred)) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_a_circle_closed_only_for_the_type_checker_is_found(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {  # devices/base.py named the simulated GPU for its types; the simulator imports base
            "pkg/__init__.py": "",
            "pkg/base.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.simulated import Sim\n",
            "pkg/simulated.py": "from pkg.base import Device\n",
        },
    )
    eager, deferred = import_graph(find_modules(tmp_path, {"pkg": "pkg"}, ()))
    assert find_cycles(eager) == []
    assert find_cycles(_union(eager, deferred)) == [["pkg.base", "pkg.simulated", "pkg.base"]]


def test_a_package_importing_its_own_modules_is_no_circle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import A\nfrom pkg.b import B\n",
            "pkg/a.py": "A = 1\n",
            "pkg/b.py": "from pkg.a import A\nfrom .a import A as A2\nB = A\n",
        },
    )
    eager, _ = import_graph(find_modules(tmp_path, {"pkg": "pkg"}, ()))
    assert eager["pkg.b"] == {"pkg.a"}
    assert find_cycles(eager) == []


def test_a_circle_between_scripts_is_found(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "bench/one.py": "import two\n",
            "bench/two.py": "from one import helper\n",
        },
    )
    eager, _ = import_graph(find_modules(tmp_path, {}, ("bench",)))
    assert find_cycles(eager) == [["bench.one", "bench.two", "bench.one"]]


def every_import(module: SourceModule) -> set[str]:
    """Every dotted name `module` imports anywhere: at module level, in a function, under `if TYPE_CHECKING:`."""
    tree = ast.parse(module.path.read_text(encoding="utf-8"), filename=str(module.path))
    return {
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in _imported_names(node, module)
    }


#: The node agent's layers (serve -> http -> agent -> processes, metrics on agent): what each never imports.
AGENT_LAYER_RULES = {
    "wattwise.agent.processes": (
        "aiohttp",
        "wattwise.agent.agent",
        "wattwise.agent.http",
        "wattwise.agent.serve",
        "wattwise.agent.metrics",
    ),
    "wattwise.agent.agent": ("aiohttp", "wattwise.agent.http", "wattwise.agent.serve", "wattwise.agent.metrics"),
    "wattwise.agent.metrics": ("aiohttp", "wattwise.agent.http", "wattwise.agent.serve"),
    "wattwise.agent.http": ("wattwise.agent.serve", "wattwise.agent.metrics"),
}


@pytest.fixture(scope="module")
def agent_modules() -> dict[str, SourceModule]:
    modules = find_modules(REPO_ROOT, PACKAGE_ROOTS, ())
    return {name: module for name, module in modules.items() if name.split(".")[:2] == ["wattwise", "agent"]}


def test_the_agents_modules_have_no_circle_even_through_type_checking_imports(
    agent_modules: dict[str, SourceModule],
) -> None:
    graph = {
        name: {
            target
            for dotted in every_import(module)
            if (target := _resolve(dotted, module, agent_modules)) and target not in (name, "wattwise.agent")
        }
        for name, module in agent_modules.items()
    }
    assert "wattwise.agent.agent" in graph["wattwise.agent.metrics"]  # under TYPE_CHECKING: seen
    cycles = find_cycles(graph)
    assert not cycles, f"import circles among the agent's modules:\n{_named(cycles)}"


def test_no_agent_layer_imports_one_above_it_and_its_logic_knows_no_aiohttp(
    agent_modules: dict[str, SourceModule],
) -> None:
    upward = [
        f"{name} imports {dotted}"
        for name, forbidden in AGENT_LAYER_RULES.items()
        for dotted in sorted(every_import(agent_modules[name]))
        if any(dotted == other or dotted.startswith(f"{other}.") for other in forbidden)
    ]
    assert not upward, "\n".join(upward)
    assert "aiohttp" in every_import(agent_modules["wattwise.agent.http"])  # the rule reads real imports


#: The simulated GPU's concerns, one module each: what each never imports (the device sits on all of them).
SIMULATED_LAYER_RULES = {
    "wattwise.devices.simulated.models": (
        "wattwise.devices.simulated.presets",
        "wattwise.devices.simulated.physics",
        "wattwise.devices.simulated.state",
        "wattwise.devices.simulated.load",
        "wattwise.devices.simulated.device",
    ),
    "wattwise.devices.simulated.presets": (
        "wattwise.devices.simulated.physics",
        "wattwise.devices.simulated.state",
        "wattwise.devices.simulated.load",
        "wattwise.devices.simulated.device",
    ),
    "wattwise.devices.simulated.physics": (
        "wattwise.devices.simulated.state",
        "wattwise.devices.simulated.load",
        "wattwise.devices.simulated.device",
    ),
    "wattwise.devices.simulated.state": ("wattwise.devices.simulated.load", "wattwise.devices.simulated.device"),
    "wattwise.devices.simulated.load": (
        "wattwise.devices.simulated.models",
        "wattwise.devices.simulated.state",
        "wattwise.devices.simulated.device",
    ),
}


def test_the_simulated_gpus_concerns_import_only_those_below_them() -> None:
    modules = find_modules(REPO_ROOT, PACKAGE_ROOTS, ())
    upward = [
        f"{name} imports {dotted}"
        for name, forbidden in SIMULATED_LAYER_RULES.items()
        for dotted in sorted(every_import(modules[name]))
        if any(dotted == other or dotted.startswith(f"{other}.") for other in forbidden)
    ]
    assert not upward, "\n".join(upward)
    assert "wattwise.devices.simulated.models" in every_import(modules["wattwise.devices.simulated.device"])
