"""The package's layers, kept: its folders name them, each module imports only from its own layer or a
lower one, nothing imports in a circle, and the top-level `workflows/`, `activities/` and `worker/`
stand on `databuild/`, never the other way round."""

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "databuild"
# Lowest first. A module of the package root is vocabulary unless named here; `client` (the SDK, a package:
# the client, the specs it builds, the calls around Temporal) stands on everything below the interfaces.
LAYERS = (
    "vocabulary",  # models, refs, globs, durations, errors, limits, config, backfill, failures, process
    "graph",  # the user's graph and what a job body sees
    "domain",  # pure rules: every choice of events
    "bel",  # the build event log: storage of events and projections
    "temporal",  # the Temporal boundary: protocol, starting and signalling wants, schedules, upstreams
    "jobs",  # execution: contexts, executors, Spark, storage, catalog, logs, OpenLineage
    "operations",  # alerts, SLA, metrics, garbage collection
    "views",  # lineage and detail views
    "client",  # the SDK
    "web",
    "cli",
    "testing",  # what tests and benchmarks share
)
MAX_ROOT_MODULES = 12


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "vocabulary"
    if parts[1] in LAYERS:
        return parts[1]
    assert (PACKAGE / f"{parts[1]}.py").exists(), f"{module} is in no layer"
    return "vocabulary"


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The package's modules a file imports, at the top, deferred or for type checking only."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from databuild.x import y`: y is a module of its own, or a name defined in x
            each = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [n if n in known else node.module for n in each]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] == "databuild")
    return found


def package_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    known = {module_name(p) for p in paths}
    graph: dict[str, set[str]] = defaultdict(set)
    for path in paths:
        name = module_name(path)
        graph[name] = {m for m in imports_of(path, known) if m in known and m != name}
    return graph


def test_the_package_root_holds_at_most_a_dozen_modules() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= MAX_ROOT_MODULES, modules
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(LAYERS) - {"vocabulary"}, folders


def test_no_module_imports_from_a_higher_layer() -> None:
    rank = {layer: n for n, layer in enumerate(LAYERS)}
    upward = {
        f"{module} ({layer_of(module)}) -> {target} ({layer_of(target)})"
        for module, targets in package_graph().items()
        for target in targets
        if rank[layer_of(target)] > rank[layer_of(module)]
    }
    assert not upward, sorted(upward)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# The build event log's own layers, lowest first: the engine (the recorder and its backends), the read
# models, the aggregates (commands, answering with reads), and the façades that compose them.
BEL_LAYERS = ("engine", "reads", "aggregates", "facades")
BEL_FACADES = {"databuild.bel", "databuild.bel.store", "databuild.bel.queries"}


def bel_layer_of(module: str) -> str | None:
    if module in BEL_FACADES:
        return "facades"
    parts = module.split(".")
    return (
        parts[2] if len(parts) > 3 and parts[:2] == ["databuild", "bel"] and parts[2] in BEL_LAYERS else None
    )


def test_the_bels_engine_and_read_models_stand_below_its_aggregates() -> None:
    rank = {layer: n for n, layer in enumerate(BEL_LAYERS)}
    upward = {
        f"{module} -> {target}"
        for module, targets in package_graph().items()
        if (layer := bel_layer_of(module)) is not None
        for target in targets
        if (above := bel_layer_of(target)) is not None and rank[above] > rank[layer]
    }
    assert not upward, sorted(upward)
    assert {bel_layer_of(m) for m in package_graph()} >= set(BEL_LAYERS)


def test_no_import_circles() -> None:
    assert not circles(package_graph())


def test_the_circle_check_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_package_never_imports_the_processes_that_use_it() -> None:
    """Workflows, activities and the worker process stand on the package, as do the examples; only the
    test harness starts a worker from inside it. The `databuild` command itself is the worker package's
    (`worker/commands.py`), so the CLI never reaches up for the code that hosts workflows."""
    offending = {}
    for path in PACKAGE.rglob("*.py"):
        module = module_name(path)
        forbidden = {"workflows", "activities", "examples"} | (
            set() if layer_of(module) == "testing" else {"worker"}
        )
        offending[module] = sorted(_top_imports(path) & forbidden)
    assert not {m: found for m, found in offending.items() if found}


def _top_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


# Small modules with one job each: past these a module or function is doing more than one thing.
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def sources() -> list[Path]:
    return sorted(
        p
        for folder in ("databuild", "workflows", "activities", "worker")
        for p in (ROOT / folder).rglob("*.py")
    )


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Its lines, its docstring aside."""
    body = node.body
    docstring = body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    first = body[1].lineno if docstring and len(body) > 1 else node.lineno
    return (node.end_lineno or node.lineno) - first + 1


def test_no_module_is_over_600_lines_and_no_function_over_60() -> None:
    long_modules = {
        str(p.relative_to(ROOT)): n
        for p in sources()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    long_functions = {
        f"{p.relative_to(ROOT)}:{node.name}": code_lines(node)
        for p in sources()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and code_lines(node) > MAX_FUNCTION_LINES
    }
    assert long_modules == {}, f"split these modules (lines): {long_modules}"
    assert long_functions == {}, f"split these functions (lines of code): {long_functions}"


# Each backend's differences live in its module of the BEL's engine (and in the frozen migrations, which
# must stay as they ran): anywhere else, a branch on the dialect is a difference that escaped it.
DIALECT_BRANCH = re.compile(
    r"dialect\.name|get_backend_name|(?<!engine)\.postgres\b|[\"'](postgresql|sqlite)[\"']\s*(==|!=|in\b)"
)
DIALECT_HOMES = ("databuild/bel/engine/", "databuild/bel/migrations/")


def test_no_dialect_branch_outside_the_bels_engine() -> None:
    branches = {
        f"{p.relative_to(ROOT)}:{n}": line.strip()
        for p in sources()
        if not str(p.relative_to(ROOT)).startswith(DIALECT_HOMES)
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if DIALECT_BRANCH.search(line.split("#")[0])
    }
    assert branches == {}, f"move these into databuild/bel/engine/<backend>.py: {branches}"


def test_the_dialect_check_finds_a_branch() -> None:
    for line in ('if conn.dialect.name == "postgresql":', "if self.postgres:", 'x = "sqlite" == name'):
        assert DIALECT_BRANCH.search(line), line
    assert not DIALECT_BRANCH.search('url = "postgresql://127.0.0.1/test"')


def test_no_comment_cites_a_document_the_readers_do_not_have() -> None:
    cited = {
        f"{p.relative_to(ROOT)}:{n}": line.strip()
        for p in [
            *sources(),
            *sorted((ROOT / "bench").rglob("*.py")),
            *sorted((ROOT / "chaos").rglob("*.py")),
        ]
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bSPEC\b", line)
    }
    assert cited == {}, f"say what the reference meant, in the comment itself: {cited}"


def test_the_log_composes_one_service_per_aggregate_on_one_recorder(tmp_path: Path) -> None:
    """Each service is its annotation's class: the log's with commands, the read-only view's without."""
    from databuild.bel import BuildEventLog
    from databuild.bel.aggregates.job_runs import JobRunReads, JobRuns
    from databuild.bel.aggregates.wants import WantReads, Wants
    from databuild.bel.queries import BelQueries

    bel = BuildEventLog(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    try:
        names = [
            "backfills",
            "costs",
            "events",
            "job_runs",
            "lineage",
            "partitions",
            "tables",
            "wants",
            "workers",
        ]
        assert sorted(vars(bel)) == sorted(["_log", *names, "decisions", "pools"])
        assert type(bel.wants) is Wants and type(bel.job_runs) is JobRuns
        assert all(getattr(bel, name)._log is bel._log for name in [*names, "decisions", "pools"])
        view = BelQueries(bel._log)
        assert sorted(vars(view)) == sorted(["_log", *names])
        assert type(view.wants) is WantReads and type(view.job_runs) is JobRunReads
    finally:
        bel.dispose()
