"""A backfill's window on the real stack: its wants are recorded in bulk and their workflows started in
the order of its range, never more than `DATABUILD_BACKFILL_WINDOW` open at once; a cancel stops it
within seconds and leaves nothing open, however many wants it has not started."""

import asyncio
import time
from datetime import UTC, datetime, timedelta

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment

from activities.backfills import START_GROUP, BackfillActivities
from databuild.backfill import BackfillRequest
from databuild.client.specs import backfill_specs
from databuild.domain.backfills import backfill_partitions
from databuild.models import WantState
from databuild.temporal import protocol as p
from databuild.temporal.protocol import backfill_window_workflow_id
from tests.conftest import Stack
from tests.helpers import until


def hours(first: datetime, n: int) -> BackfillRequest:
    return BackfillRequest(
        pattern="tick/{n}", start=first, end=first + timedelta(hours=n - 1), step=timedelta(hours=1)
    )


async def window_status(stack: Stack, backfill_id: str) -> WorkflowExecutionStatus | None:
    described = await stack.client.get_workflow_handle(backfill_window_workflow_id(backfill_id)).describe()
    return described.status


async def want_workflows(stack: Stack, status: str | None = None) -> int:
    query = f"WorkflowType = 'Want' AND TaskQueue = '{stack.settings.task_queue}'"
    if status:
        query += f" AND ExecutionStatus = '{status}'"
    return (await stack.client.count_workflows(query)).count


async def started_workflows(stack: Stack, workflow_ids: list[str]) -> int:
    """How many of these workflows exist (asked of each: visibility's counts lag)."""

    async def started(workflow_id: str) -> bool:
        try:
            await stack.client.get_workflow_handle(workflow_id).describe()
        except RPCError as error:
            assert error.status is RPCStatusCode.NOT_FOUND
            return False
        return True

    return sum(await asyncio.gather(*map(started, workflow_ids)))


async def test_a_backfill_keeps_at_most_its_window_open_and_builds_every_partition(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:reach", backfill_window=4)
    request = hours(datetime(2025, 3, 1, tzinfo=UTC), 24)
    progress = await stack.db.backfill(request)
    assert progress.registered == progress.partitions == 24
    most_open = 0
    deadline = time.monotonic() + 120
    while not (progress := stack.bel.backfills.progress(request.backfill_id)).finished:
        assert time.monotonic() < deadline, progress
        most_open = max(most_open, progress.started - progress.done)
        await asyncio.sleep(0.1)
    assert progress.by_state == {WantState.successful: 24} and progress.started == 24
    assert 1 <= most_open <= 4
    # In the order of the range, 4 at a time: the k-th partition's run was queued only once k - 3 runs
    # had ended (each want ends when its run does).
    runs = sorted(stack.bel.job_runs.query(limit=100), key=lambda r: r.outputs[0])
    ended = sorted(r.ended_at for r in runs if r.ended_at is not None)
    assert len(runs) == len(ended) == 24
    assert all(runs[k].created_at >= ended[k - 4] for k in range(4, 24))
    for _ in range(50):
        if await window_status(stack, request.backfill_id) is WorkflowExecutionStatus.COMPLETED:
            break
        await asyncio.sleep(0.1)
    assert await window_status(stack, request.backfill_id) is WorkflowExecutionStatus.COMPLETED


async def test_cancelling_a_big_backfill_stops_new_work_within_seconds_and_leaves_nothing_open(
    make_stack,
) -> None:
    stack = await make_stack(graph="tests.graphs:reach", backfill_window=10)
    request = hours(datetime(2026, 1, 1, tzinfo=UTC), 5_000)
    began = time.monotonic()
    progress = await stack.db.backfill(request)
    recorded_s = time.monotonic() - began
    assert progress.registered == 5_000 and recorded_s < 60, recorded_s
    await until(lambda: stack.bel.backfills.progress(request.backfill_id).done >= 3, seconds=120)

    began = time.monotonic()
    cancelled = await stack.db.cancel_backfill(request.backfill_id)
    cancel_s = time.monotonic() - began
    returned = datetime.now(UTC)
    assert cancel_s < 30 and cancelled >= 4_980, (cancel_s, cancelled)
    progress = stack.bel.backfills.progress(request.backfill_id)
    assert progress.canceled and progress.finished and progress.started <= 3 + 10 + 10
    # The window has stopped, no workflow of its wants is open, and most never had one. (Each cancelled want
    # still records its ending in a few activities, which a loaded machine queues behind the others.)
    deadline = time.monotonic() + 60
    while (
        await want_workflows(stack, "Running")
        or await window_status(stack, request.backfill_id) is WorkflowExecutionStatus.RUNNING
    ):
        if time.monotonic() >= deadline:  # say which is still running, and what the BEL holds of it
            running = await want_workflows(stack, "Running")
            window = await window_status(stack, request.backfill_id)
            pending = stack.bel.backfills.progress(request.backfill_id).by_state
            raise AssertionError(
                f"60 s after the cancel: {running} want workflows running, window {window}, {pending}"
            )
        await asyncio.sleep(0.2)
    assert await want_workflows(stack) <= progress.started
    assert [r for r in stack.bel.job_runs.query(limit=100) if r.created_at >= returned] == []

    # A retry takes the whole backfill back, most of whose wants never had a workflow: it settles their
    # closing runs a few at a time, reopens every one and says so, and the window starts them again.
    began = time.monotonic()
    retried = await stack.db.retry_backfill(request.backfill_id)
    retry_s = time.monotonic() - began
    reopened = stack.bel.backfills.progress(request.backfill_id)
    assert retried.reopened == reopened.registered - reopened.by_state.get(WantState.successful, 0), retried
    assert retried.fail_locked == [] and not reopened.canceled and retry_s < 60, retry_s
    built = reopened.by_state.get(WantState.successful, 0)
    await until(
        lambda: (
            stack.bel.backfills.progress(request.backfill_id).by_state.get(WantState.successful, 0) > built
        ),
        seconds=120,
    )


async def test_a_step_stops_starting_wants_once_its_backfill_is_cancelled_and_records_nothing(
    make_stack,
) -> None:
    stack = await make_stack(graph="tests.graphs:reach", worker=False, backfill_window=100)
    request = hours(datetime(2027, 1, 1, tzinfo=UTC), 100)
    partitions = backfill_partitions(request, stack.graph)
    specs = backfill_specs(stack.graph, request, partitions, {}, None)
    stack.bel.backfills.record(request, 100, specs)

    def cancel_at_the_tenth_start(*details: object) -> None:
        if details == (10,):
            assert stack.bel.backfills.cancel(request.backfill_id)

    env = ActivityEnvironment()
    env.on_heartbeat = cancel_at_the_tenth_start
    activities = BackfillActivities(stack.bel, stack.client, stack.settings)
    window = p.BackfillWindowInput(backfill_id=request.backfill_id)
    step = await env.run(activities.advance_backfill, window)
    # The group it was starting went on; the next did not start, and the window stayed where it was.
    assert step.canceled and step.done and (step.read, step.started) == (0, 0)
    assert await started_workflows(stack, [w.workflow_id for w in specs]) == START_GROUP
    assert stack.bel.backfills.progress(request.backfill_id).started == 0
    # The cancel ends every want the window did not record started, those with a workflow too.
    assert stack.bel.backfills.cancel_unstarted(request.backfill_id) == 100
