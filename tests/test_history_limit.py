"""Temporal terminates a workflow whose history passes its limit. On a dev server whose limit is lowered
to 400 events, a want that decides again and again continues as new instead, and a want whose workflow
died anyway (terminated) is repaired: registering it again, or resolving what it waits on, starts a new
run that carries on from the BEL."""

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.graph import load_graph
from databuild.jobs.spark import SparkRuntime
from databuild.models import JobRunState, PartitionStatus, WantSource, WantSpec, WantState
from databuild.temporal import protocol as p
from databuild.temporal.wants import repair_wants
from databuild.testing import make_settings
from tests import graphs
from tests.conftest import start_dev_server
from tests.helpers import until
from worker.run import WorkerParts, running_worker

pytestmark = pytest.mark.slow

DAY = datetime(2024, 3, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def trio_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builds a test breaks or makes flaky (tests.graphs BROKEN, FLAKY) are its own: each test
    starts with none, and its switches are gone after it, even when it fails."""
    monkeypatch.setattr(graphs, "BROKEN", set())
    monkeypatch.setattr(graphs, "FLAKY", {})


@pytest.fixture(scope="module")
async def limited_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await start_dev_server(
        "--dynamic-config-value",
        "limit.historyCount.error=400",
        "--dynamic-config-value",
        "limit.historyCount.suggestContinueAsNew=200",
    )
    yield env
    await env.shutdown()


@pytest.fixture
async def db(
    limited_env: WorkflowEnvironment, spark_runtime: SparkRuntime, tmp_path: Path
) -> AsyncIterator[DataBuild]:
    settings = make_settings(tmp_path, limited_env.client, "tests.graphs:trio", job_attempts=1)
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    graph = load_graph(settings.graph)
    async with running_worker(WorkerParts(settings, limited_env.client, bel, graph, spark_runtime)):
        yield DataBuild(limited_env.client, bel, graph, settings)
    bel.dispose()


def decided(db: DataBuild, want_id: str, steps: int) -> bool:
    return db.bel.wants.decision_seq(want_id) >= steps


async def fail_lock(db: DataBuild, n: str) -> str:
    """Make ``a/<n>`` fail-locked through a failed build; returns the ref."""
    ref = f"a/{n}"
    graphs.BROKEN.add(n)
    failing = await db.want(ref, data_timestamp=DAY, source=WantSource.api)
    assert (await db.wait(failing)).state is WantState.failed
    assert db.bel.partitions.get(ref).status is PartitionStatus.failed
    return ref


async def blocked_want(db: DataBuild, ref: str, source: WantSource) -> WantSpec:
    spec = await db.want(ref, data_timestamp=DAY, source=source)
    await until(lambda: db.bel.wants.get(spec.want_id).state is WantState.upstream_building)
    return spec


async def statuses(client: Client, workflow_id: str) -> list[WorkflowExecutionStatus | None]:
    """The status of every run of the workflow, oldest first."""
    found = [
        (execution.start_time, execution.status)
        async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'")
    ]
    return [status for _, status in sorted(found, key=lambda pair: pair[0])]


async def test_a_want_that_decides_often_continues_as_new_under_a_low_history_limit(db: DataBuild) -> None:
    ref = await fail_lock(db, "often")
    spec = await blocked_want(db, ref, WantSource.cli)
    handle = db.temporal.get_workflow_handle(spec.workflow_id)
    # Each redecide is a decision (and a few dozen of them pass the 400-event limit).
    for round in range(60):
        await handle.signal(p.SIGNAL_REDECIDE, p.RedecideNotice(ref=ref, reason=f"round {round}"))
        await until(partial(decided, db, spec.want_id, round + 2))
    assert [e.type for e in db.bel.events.query(want_id=spec.want_id, limit=1000)].count("WantBlocked") == 61

    graphs.BROKEN.discard("often")
    await db.resolve(ref)
    assert (await db.wait(spec)).state is WantState.successful
    # The BEL records success before the workflow's last task completes, and visibility lags that.
    await handle.result()
    runs = await statuses(db.temporal, spec.workflow_id)
    deadline = asyncio.get_running_loop().time() + 30
    while runs[-1] is not WorkflowExecutionStatus.COMPLETED and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
        runs = await statuses(db.temporal, spec.workflow_id)
    assert len(runs) > 1, "the want never continued as new"
    assert runs[:-1] == [WorkflowExecutionStatus.CONTINUED_AS_NEW] * (len(runs) - 1)
    assert runs[-1] is WorkflowExecutionStatus.COMPLETED


async def test_a_want_whose_workflow_died_is_repaired(db: DataBuild) -> None:
    ref = await fail_lock(db, "dead")
    registered = await blocked_want(db, ref, WantSource.cli)
    resolved = await blocked_want(db, ref, WantSource.dashboard)
    for spec in (registered, resolved):
        await db.temporal.get_workflow_handle(spec.workflow_id).terminate("simulated history limit")
    assert db.bel.wants.get(registered.want_id).state is WantState.upstream_building  # the BEL never heard

    # Registering the want again starts a new run, which carries on from the BEL: still blocked.
    again = await db.want(ref, data_timestamp=DAY, source=WantSource.cli)
    assert again.want_id == registered.want_id
    described = await db.temporal.get_workflow_handle(registered.workflow_id).describe()
    assert described.status is WorkflowExecutionStatus.RUNNING

    # Resolving counts the wants that will decide again: the live one, and the dead one it repairs;
    # not the want that failed (its workflow ended with a final state).
    graphs.BROKEN.discard("dead")
    _, woken = await db.resolve(ref)
    assert woken == 2
    for spec in (registered, resolved):
        assert (await db.wait(spec)).state is WantState.successful
    built = sorted(
        r.state.value for r in db.bel.job_runs.query(ref_prefix=ref) if r.state is not JobRunState.skipped
    )
    assert built == ["failed", "succeeded"]  # the failed build and one rebuild


async def test_workers_find_and_repair_dead_wants(db: DataBuild) -> None:
    ref = await fail_lock(db, "found")
    spec = await blocked_want(db, ref, WantSource.cli)
    await db.temporal.get_workflow_handle(spec.workflow_id).terminate("simulated history limit")
    task_queue = db.settings.task_queue
    for _ in range(100):  # visibility follows the termination within a moment
        repaired = await repair_wants(db.temporal, db.bel, task_queue)
        if repaired:
            break
        await asyncio.sleep(0.1)
    assert repaired == 1
    assert await repair_wants(db.temporal, db.bel, task_queue) == 0  # running again: nothing to do
    graphs.BROKEN.discard("found")
    _, woken = await db.resolve(ref)
    assert woken == 1
    assert (await db.wait(spec)).state is WantState.successful


async def test_workers_start_a_want_recorded_without_a_workflow(db: DataBuild) -> None:
    """A derivative recorded by an attempt that could not start it, whose retry derived another want
    (its input was tainted meanwhile), has no workflow at all: the repair starts it."""
    spec = db.spec("b/orphan", data_timestamp=DAY, source=WantSource.api)
    db.bel.wants.register(spec)  # recorded, never started
    assert await repair_wants(db.temporal, db.bel, db.settings.task_queue, quiet=timedelta(0)) == 1
    assert (await db.wait(spec)).state is WantState.successful
    assert await repair_wants(db.temporal, db.bel, db.settings.task_queue, quiet=timedelta(0)) == 0
