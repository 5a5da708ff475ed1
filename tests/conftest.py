"""Shared fixtures: a real Temporal dev server, one real SparkSession, a BEL per test."""

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.graph import Graph, load_graph
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.tables.hive import embedded_catalog_conf
from databuild.models import Want, WantSpec
from databuild.testing import (
    POSTGRES_ADMIN_URL,
    POSTGRES_URL,
    drop_database,
    ensure_database,
    free_port,
    make_settings,
    start_dev_server,
)
from databuild.testing.cluster import QUICK_JVM
from tests import cli_fork as fork_server
from worker.run import WorkerParts, running_worker

# The `unit` marker's guard (a unit test that starts or reaches a server fails), and pytester to test it.
pytest_plugins = ["tests.unit_tier", "pytester"]

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
# The demo's jobs without their input declarations: the tests follow runtime discovery (dep-miss ->
# derivative wants) through it; tests/test_declared_inputs.py runs the declared demo.
DEMO_GRAPH = "examples.demo:discovering"


def binary(name: str) -> str:
    found = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if found is None:
        pytest.fail(f"`{name}` not found; install the project with `make install`")
    return found


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await start_dev_server()
    yield env
    await env.shutdown()


# The Thrift (SQL) server port of the test session's Spark, if a test starts it (tests/test_catalog.py).
SQL_PORT = free_port()


@pytest.fixture(scope="session")
def spark_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkRuntime]:
    # One embedded metastore for the session's JVM; stacks that publish tables use databases of their own.
    catalog = {
        **embedded_catalog_conf(tmp_path_factory.mktemp("catalog")),
        "spark.hive.server2.thrift.port": str(SQL_PORT),
        "spark.hive.server2.thrift.bind.host": "127.0.0.1",
    }
    runtime = SparkRuntime("local[2]", "2g", app_name="databuild-tests", catalog=catalog)
    yield runtime
    runtime.stop()


@dataclass
class Stack:
    settings: Settings
    client: Client
    bel: BuildEventLog
    graph: Graph
    db: DataBuild
    parts: WorkerParts


@contextlib.asynccontextmanager
async def running_stack(
    client: Client,
    spark: SparkRuntime,
    home: Path,
    graph: str = DEMO_GRAPH,
    *,
    worker: bool = True,
    **extra: object,
) -> AsyncIterator[Stack]:
    """A graph's BEL under ``home`` on its own task queue, with a worker serving it unless ``worker``
    is False."""
    settings = make_settings(home, client, graph, **extra)
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    loaded = load_graph(graph)
    parts = WorkerParts(settings, client, bel, loaded, spark)
    stack = Stack(settings, client, bel, loaded, DataBuild(client, bel, loaded, settings), parts)
    try:
        if worker:
            async with running_worker(parts):
                yield stack
        else:
            yield stack
    finally:
        bel.dispose()


@pytest.fixture
def bel(tmp_path: Path) -> Iterator[BuildEventLog]:
    """A build event log on a SQLite file of the test's own (a module may define its own ``bel``)."""
    log = BuildEventLog.create(f"sqlite:///{tmp_path / 'bel.sqlite'}")
    yield log
    log.dispose()


@pytest.fixture
async def make_stack(
    temporal_env: WorkflowEnvironment, spark_runtime: SparkRuntime, tmp_path: Path
) -> AsyncIterator[object]:
    """Factory: ``await make_stack(graph="tests.graphs:flaky")`` starts a worker for that graph."""
    async with contextlib.AsyncExitStack() as stacks:
        count = 0

        async def start(graph: str = DEMO_GRAPH, worker: bool = True, **extra: object) -> Stack:
            nonlocal count
            home = tmp_path / f"s{count}"
            count += 1
            return await stacks.enter_async_context(
                running_stack(temporal_env.client, spark_runtime, home, graph, worker=worker, **extra)
            )

        yield start


@dataclass
class DemoRun:
    stack: Stack
    spec: WantSpec
    want: Want


DEMO_REF = "daily_summary/2024-01-07"


@pytest.fixture(scope="session")
async def demo_run(
    temporal_env: WorkflowEnvironment, spark_runtime: SparkRuntime, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[DemoRun]:
    """The demo want, fulfilled once per session on its own worker; the worker keeps running so tests
    can build more. A test that would change what the demo built works on a copy of it
    (tests/test_lineage.py), so every test that reads the demo passes in any order."""
    home = tmp_path_factory.mktemp("demo")
    async with running_stack(temporal_env.client, spark_runtime, home) as stack:
        spec = await stack.db.want(DEMO_REF)
        want = await stack.db.wait(spec)
        yield DemoRun(stack, spec, want)


# The modules that take longest, longest first (from CI's --durations). `make test` runs pytest-xdist with
# `--dist loadfile --no-loadscope-reorder`: each worker takes the next module in collection order when
# it runs short of work, so these start first and the short modules even out the end. (xdist's own order
# is by number of tests, which put the few-but-long modules last, each a tail run by one worker alone.)
SLOWEST_MODULES = (
    "test_cluster",
    "test_bench_runs",
    "test_dev_stack",
    "test_bench_builds",
    "test_chaos",
    "test_error_surfaces",
    "test_failures",
    "test_executors",
    "test_bel",
    "test_backfill",
    "test_catalog",
    "test_iceberg",
    "test_openings",
    "test_alerts",
    "test_batches",
    "test_delegation",
    "test_declared_inputs",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules in the order above, then the rest by number of tests (as xdist would); each module's tests
    keep their own order."""
    per_module = Counter(item.nodeid.partition("::")[0] for item in items)

    def rank(item: pytest.Item) -> tuple[int, int, str]:
        module = item.nodeid.partition("::")[0]
        name = Path(module).stem
        slow = SLOWEST_MODULES.index(name) if name in SLOWEST_MODULES else len(SLOWEST_MODULES)
        return (slow, -per_module[module], module)

    items.sort(key=rank)


# The modules that read the session's demo run: one pytest worker takes them all (with test_cluster, first
# in line), so the demo is built once per run, not once per worker.
DEMO_MODULES = ("test_cluster", "test_dashboard", "test_demo_e2e", "test_lineage")


class ModuleScheduling(LoadScopeScheduling):
    """`--dist loadfile`, but the modules reading the demo run go to one worker as one unit."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.partition("::")[0]
        return "demo" if Path(module).stem in DEMO_MODULES else module


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> ModuleScheduling | None:
    return ModuleScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


# The JVMs of the tests (each pytest worker's Spark driver, the `databuild worker` and `dev` processes
# they start, spark-submit applications, the Connect server, the standalone cluster's daemons, beeline)
# mostly start, run small jobs and end: the quick JIT tier and the serial collector cut their modules' CPU
# by a sixth to a third (measured), which on 2 cores is wall time. Spark's launcher adds these to the java
# command line silently (JAVA_TOOL_OPTIONS would print a line on every JVM's stderr).
QUICK_JVM_VARIABLES = ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS", "SPARK_BEELINE_OPTS")


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for variable in QUICK_JVM_VARIABLES:
        os.environ.setdefault(variable, QUICK_JVM)
    if POSTGRES_URL != POSTGRES_ADMIN_URL:
        # Unreachable PostgreSQL is reported by require_postgres, in the tests that need it.
        with contextlib.suppress(OperationalError):
            ensure_database(POSTGRES_ADMIN_URL, POSTGRES_URL, durable=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    if POSTGRES_URL != POSTGRES_ADMIN_URL:  # this worker's own database, made in pytest_configure
        with contextlib.suppress(OperationalError):
            drop_database(POSTGRES_ADMIN_URL, POSTGRES_URL)


def stack_env(stack: Stack, **extra: str) -> dict[str, str]:
    """Environment that points a `databuild` subprocess at this test's stack."""
    return {**os.environ, **stack.settings.process_env(), **extra}


async def cli(stack: Stack, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`databuild ARGS` against this test's stack, in a process of its own forked from one that imported the
    CLI once (tests/cli_fork.py); in a thread, so the in-process worker keeps serving while it runs."""
    return await asyncio.to_thread(fork_server.cli, args, stack_env(stack, COLUMNS="200", **env))


async def cli_batch(stack: Stack, *commands: list[str], **env: str) -> list[subprocess.CompletedProcess[str]]:
    """``cli`` for each command, one after another."""
    return await asyncio.to_thread(forked_cli, list(commands), stack_env(stack, COLUMNS="200", **env), ROOT)


def forked_cli(
    commands: Sequence[list[str] | tuple[list[str], dict[str, str]]], env: dict[str, str], cwd: Path
) -> list[subprocess.CompletedProcess[str]]:
    """Each command (its arguments, or its arguments and variables of its own) as `python -m worker`
    in ``cwd`` with ``env``, one after another, each in a process of its own (tests/cli_fork.py)."""
    return [
        fork_server.cli(c[0], {**env, **c[1]}, cwd) if isinstance(c, tuple) else fork_server.cli(c, env, cwd)
        for c in commands
    ]


def postgres_available() -> bool:
    try:
        with create_engine(POSTGRES_URL).connect() as conn:
            conn.execute(text("select 1"))
        return True
    except Exception:
        return False


def require_postgres() -> str:
    """The PostgreSQL URL of the tests; the test is skipped when it is unreachable (CI requires it)."""
    if not postgres_available():
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL at {POSTGRES_URL} is unreachable, and CI requires it")
        pytest.skip(f"PostgreSQL at {POSTGRES_URL} is unreachable; set DATABUILD_TEST_POSTGRES_URL")
    return POSTGRES_URL
