"""Wants that wait for weeks keep a bounded history (time-skipping server: days in seconds).

The want workflow and its activities are the real ones; the job run is ``tests.timed``'s double.
"""

import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.fanout import FanOutActivities
from activities.wants import WantActivities
from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.models import JobRunState, PartitionStatus, WantSource, WantState
from databuild.temporal.connection import ensure_search_attributes
from databuild.testing import make_settings, skip_time
from tests.helpers import until
from tests.timed import BROKEN, UNHEARD, Failures, TimedBuilds, TimedJobRun, timed, want_steps
from workflows.want import WantWorkflow


@pytest.fixture(autouse=True)
def no_broken_refs() -> Iterator[None]:
    """The refs a test breaks (tests.timed.BROKEN, UNHEARD) do not outlive it, even when it fails."""
    yield
    BROKEN.clear()
    UNHEARD.clear()


@pytest.fixture
async def timed_stack(tmp_path: Path) -> AsyncIterator[tuple[WorkflowEnvironment, DataBuild]]:
    path = shutil.which("temporal-test-server") or str(Path(sys.executable).parent / "temporal-test-server")
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=path, data_converter=pydantic_data_converter
    )
    # A ten-minute lease: the old watchdog woke the want every lease; the watch adds no history.
    settings = make_settings(tmp_path, env.client, "tests.timed:timed", job_lease=timedelta(minutes=10))
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    await ensure_search_attributes(env.client, settings.namespace)
    wants = WantActivities(bel, timed, env.client, settings)
    worker = Worker(
        env.client,
        task_queue=settings.task_queue,
        workflows=[WantWorkflow, TimedJobRun],
        # As workers run them (worker.run); and TimedJobRun reads tests.timed.UNHEARD, not a copy of it.
        workflow_runner=UnsandboxedWorkflowRunner(),
        activities=[
            *want_steps(wants),
            TimedBuilds(bel).build,
            Failures(bel).fail_job_run,
            *FanOutActivities(bel, env.client).activities(),
        ],
    )
    async with worker:
        yield env, DataBuild(env.client, bel, timed, settings)
    bel.dispose()
    await env.shutdown()


async def run_lengths(client: Client, workflow_id: str) -> list[int]:
    """Events in each run of the workflow's continue-as-new chain, oldest first."""
    lengths = []
    run_id: str | None = None
    while True:
        handle: WorkflowHandle[object, object] = client.get_workflow_handle(workflow_id, run_id=run_id)
        history = await handle.fetch_history()
        lengths.append(len(history.events))
        first = history.events[0].workflow_execution_started_event_attributes
        if not first.continued_execution_run_id:
            return lengths[::-1]
        run_id = first.continued_execution_run_id


async def until_state(db: DataBuild, want_id: str, state: WantState) -> None:
    await until(lambda: db.bel.wants.get(want_id).state is state, f"want {want_id} {state.value}")


async def test_want_blocked_for_a_month_keeps_a_short_history(
    timed_stack: tuple[WorkflowEnvironment, DataBuild],
) -> None:
    env, db = timed_stack
    start = await env.get_current_time()
    BROKEN.add("timed/0")
    first = await db.want("timed/0", data_timestamp=start, source=WantSource.api)
    assert (await db.wait(first)).state is WantState.failed
    assert db.bel.partitions.get("timed/0").status is PartitionStatus.failed  # fail-locked

    blocked = await db.want("timed/0", data_timestamp=start, ttl=timedelta(days=60))
    await until_state(db, blocked.want_id, WantState.upstream_building)
    await skip_time(env, timedelta(days=30))
    assert db.bel.wants.get(blocked.want_id).state is WantState.upstream_building
    decisions = [e.type for e in db.bel.events.query(want_id=blocked.want_id, limit=1000)]
    assert decisions.count("WantBlocked") == 1  # one BEL event per decision, not per wake-up

    BROKEN.discard("timed/0")  # the operator fixed the cause
    _, woken = await db.resolve("timed/0")
    assert woken == 1
    done = await db.wait(blocked)
    assert done.state is WantState.successful
    lengths = await run_lengths(env.client, blocked.workflow_id)
    assert max(lengths) < 5_000, lengths


async def test_want_delegated_to_a_ten_day_build_keeps_a_short_history(
    timed_stack: tuple[WorkflowEnvironment, DataBuild],
) -> None:
    env, db = timed_stack
    start = await env.get_current_time()
    builder = await db.want("timed/10", data_timestamp=start, source=WantSource.api)
    await until_state(db, builder.want_id, WantState.building)
    follower = await db.want("timed/10", data_timestamp=start)
    await until_state(db, follower.want_id, WantState.building)
    assert db.bel.wants.get(follower.want_id).job_run_id == db.bel.wants.get(builder.want_id).job_run_id

    await skip_time(env, timedelta(days=11))
    for spec in (builder, follower):
        assert (await db.wait(spec)).state is WantState.successful
        lengths = await run_lengths(env.client, spec.workflow_id)
        assert max(lengths) < 5_000, lengths


async def test_a_want_whose_run_ended_unheard_is_told_by_its_watch_and_decides_once(
    timed_stack: tuple[WorkflowEnvironment, DataBuild],
) -> None:
    """The run ends without telling its want (as when its notice is still on its way): the want's watch
    finds it ended and tells the want how, so the want settles with the one decision it made, and no
    second run (a skipped one) is recorded for it."""
    env, db = timed_stack
    UNHEARD.add("timed/1")
    spec = await db.want("timed/1", data_timestamp=await env.get_current_time(), source=WantSource.api)
    await until_state(db, spec.want_id, WantState.building)

    await skip_time(env, timedelta(days=2))
    assert (await db.wait(spec)).state is WantState.successful
    assert db.bel.partitions.get("timed/1").status is PartitionStatus.live
    runs = db.bel.job_runs.of_want(spec.want_id)
    assert len(runs) == 1 and runs[0][1].state is JobRunState.succeeded, runs
    # One decision: told by the watch, the want did not decide again; and no workflow task failed.
    history = await env.client.get_workflow_handle(spec.workflow_id).fetch_history()
    local = [
        e.marker_recorded_event_attributes.details["data"].payloads[0].data
        for e in history.events
        if e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    # Its first (registered with it, ``first_step``) and only decision.
    decided = [data for data in local if b'"activity_type":"decide"' in data or b'"first_step"' in data]
    assert len(decided) == 1, local
    assert not [e for e in history.events if e.HasField("workflow_task_failed_event_attributes")]
