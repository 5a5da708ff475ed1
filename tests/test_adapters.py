"""The CLI, the HTTP API and the dashboard are thin adapters over the SDK: every change of state goes
through `DataBuild` (a taint too, which needs only the BEL, so it works while Temporal is down), and
their modules import each other without a cycle."""

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

import databuild
from databuild.bel import BuildEventLog
from databuild.cli.render import progress
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.errors import InvalidTransitionError, TemporalUnavailableError
from databuild.graph import Graph
from databuild.models import JobRunState, PartitionStatus, WantSource, WantSpec
from databuild.testing import free_port
from databuild.views.lineage import family_progress
from databuild.web import create_app, web_context

pytestmark = pytest.mark.unit

PACKAGE = Path(databuild.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports anywhere, also inside functions (a deferred
    import is how a cycle hides). ``from package import submodule`` imports the submodule; any other
    name from a package is its ``__init__``'s."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    return found & modules


def import_graph(folder: Path) -> dict[str, set[str]]:
    """Which modules of the package in ``folder`` import which others of it."""
    paths = sorted(folder.glob("*.py"))
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _imports(p, modules) for p in paths}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in ``graph`` (as a path that ends where it starts), or None."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for following in sorted(graph.get(node, ())):
            if state.get(following) == "open":
                return [*path[path.index(following) :], following]
            if following not in state:
                found = visit(following, [*path, following])
                if found:
                    return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


@pytest.mark.parametrize("folder", ["web", "cli"])
def test_adapter_modules_import_without_a_cycle(folder: str) -> None:
    graph = import_graph(PACKAGE / folder)
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


def test_only_the_package_imports_the_web_app() -> None:
    graph = import_graph(PACKAGE / "web")
    importers = {name for name, imported in graph.items() if "databuild.web.app" in imported}
    assert importers == {"databuild.web"}


def test_the_cycle_check_finds_a_deferred_import() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


# Taints go through the SDK and need only the BEL. ----------------------------------------------------------


@pytest.fixture
def offline(tmp_path: Path) -> Iterator[Settings]:
    """Settings whose Temporal address has nothing listening, over a BEL with one live partition."""
    settings = Settings(home=tmp_path, temporal_address=f"127.0.0.1:{free_port()}")
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    bel.partitions.publish_external("ext/1")
    bel.dispose()
    yield settings


async def test_the_sdk_taints_without_temporal(offline: Settings) -> None:
    db = await DataBuild.connect(offline, lazy=True)
    async with db:
        impact = await db.taint_impact("ext/1")
        live = db.bel.partitions.get("ext/1")
        assert (impact.ref, impact.instance_id, impact.downstream) == ("ext/1", live.instance_id, [])
        with pytest.raises(InvalidTransitionError, match="look at the impact again"):
            await db.taint("ext/1", instance_id="not-the-live-one")
        result = await db.taint("ext/1", reason="bad rows", instance_id=impact.instance_id)
        assert [t.ref for t in result.tainted] == ["ext/1"]
        assert (result.partition.status, result.partition.reason) == (PartitionStatus.tainted, "bad rows")
        with pytest.raises(TemporalUnavailableError, match="not connected"):
            db.temporal  # noqa: B018 - nothing above needed Temporal, so nothing connected
        before = db.bel.events.last_idx()
        with pytest.raises(TemporalUnavailableError, match="cannot reach Temporal"):
            await db.want("daily_users/2024-01-01")  # a want needs it: connects then, and records nothing
        assert db.bel.events.last_idx() == before


def test_the_api_taints_while_temporal_is_down(offline: Settings) -> None:
    bel = BuildEventLog.create(offline.database_url.get_secret_value())
    app = create_app(web_context(offline, bel))
    with TestClient(app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 50000)) as client:
        preview = client.post("/api/partitions/ext/1/taint", json={"dry_run": True})
        assert preview.status_code == 200, preview.text
        assert preview.json()["tainted"] == [] and preview.json()["partition"]["status"] == "live"
        instance = preview.json()["impact"]["instance_id"]
        done = client.post("/api/partitions/ext/1/taint", json={"instance_id": instance, "reason": "late"})
        assert done.status_code == 200, done.text
        assert done.json()["partition"]["status"] == "tainted"
        want = client.post("/api/wants", json={"ref": "daily_users/2024-01-01"})
        assert want.status_code == 503 and "cannot reach Temporal" in want.json()["error"]
    assert bel.partitions.get("ext/1").status is PartitionStatus.tainted
    bel.dispose()


def test_the_cli_taints_while_temporal_is_down(offline: Settings) -> None:
    root = Path(databuild.__file__).parents[1]
    env = {**os.environ, **offline.process_env(), "PYTHONPATH": str(root), "COLUMNS": "200"}
    taint = [sys.executable, "-m", "worker", "taint", "ext/1", "--yes", "--json"]
    done = subprocess.run(taint, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["partition"]["status"] == "tainted"


# Progress views look the whole tree up in one query. ------------------------------------------------------


def test_a_progress_look_is_one_query_however_many_wants(tmp_path: Path) -> None:
    graph = Graph("progress")

    @graph.job("p/{n}")
    def build(ctx: object, n: str) -> None:  # pragma: no cover - never run
        raise AssertionError

    bel = BuildEventLog.create(Settings(home=tmp_path).database_url.get_secret_value())
    at = datetime(2024, 1, 1, tzinfo=UTC)
    root = WantSpec(ref="p/0", data_timestamp=at)
    specs = [root] + [
        WantSpec(
            ref=f"p/{n}",
            data_timestamp=at,
            source=WantSource.derivative,
            parent_want_id=root.want_id,
            root_want_id=root.want_id,
        )
        for n in range(1, 9)
    ]
    for spec in specs:
        bel.wants.register(spec)
        bel.decisions.decide(spec.want_id, 1, graph.resolve(spec.ref))
    statements: list[str] = []
    event.listen(bel.reader, "before_cursor_execute", lambda *args: statements.append(args[2]))
    queries = lambda: [q for q in statements if q.strip() != "BEGIN"]  # noqa: E731 - SQLite's own BEGIN
    awaited = specs[3]
    seen = family_progress(bel, awaited.want_id, awaited.root_want_id)
    assert len(queries()) == 1, queries()
    assert seen.want is not None and seen.want.want_id == awaited.want_id
    assert {w.want_id for w in seen.family} == {s.want_id for s in specs}
    assert len(seen.job_runs) == len(specs) and set(seen.job_runs.values()) == {JobRunState.queued}
    shown = " ".join(str(row) for row in progress(seen).columns[0].cells)
    assert "p/3" in shown
    assert family_progress(bel, "w-unknown").want is None  # not recorded yet: "registering want..."
    bel.dispose()
