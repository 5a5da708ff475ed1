"""Idempotent registration and wake-ups that race subscriptions, on the real dev server."""

import asyncio
import random
from datetime import datetime

import pytest

from databuild.backfill import BackfillRequest
from databuild.models import Subscription, WantSource, WantState
from tests.helpers import until

pytestmark = pytest.mark.slow


async def visible_runs(stack, workflow_id: str) -> list[object]:  # type: ignore[no-untyped-def]
    """Runs of a workflow id in visibility, which lags a little behind: wait until one shows."""
    for _ in range(100):
        runs = [w async for w in stack.client.list_workflows(f'WorkflowId = "{workflow_id}"')]
        if runs:
            return runs
        await asyncio.sleep(0.1)
    return []


async def test_concurrent_identical_registrations_make_one_want(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:late")
    specs = await asyncio.gather(*(stack.db.want("feed/2024-03-01") for _ in range(100)))
    assert len({s.want_id for s in specs}) == 1
    spec = specs[0]

    assert len(await visible_runs(stack, spec.workflow_id)) == 1
    await stack.db.publish("feed/2024-03-01")
    done = await stack.db.wait(spec)
    assert done.state is WantState.successful
    created = [e for e in stack.bel.events.query(want_id=spec.want_id, limit=1000) if e.type == "WantCreated"]
    assert len(created) == 1

    # Registering it again after it finished attaches to the same (closed) workflow.
    again = await stack.db.want("feed/2024-03-01")
    assert again.want_id == spec.want_id
    assert len(await visible_runs(stack, spec.workflow_id)) == 1


async def test_publish_racing_registration_never_loses_a_wake_up(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:late")
    refs = [f"feed/race-{i}" for i in range(20)]

    async def race(ref: str) -> WantState:
        spec = await stack.db.want(ref)
        await asyncio.sleep(random.uniform(0, 0.3))  # publish before, during or after the want subscribes
        await stack.db.publish(ref)
        return (await stack.db.wait(spec)).state

    assert await asyncio.gather(*(race(r) for r in refs)) == [WantState.successful] * len(refs)


async def test_partition_live_before_registration_is_seen(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:late")
    stack.bel.partitions.publish_external("feed/early")  # live, but nobody was signalled
    spec = await stack.db.want("feed/early")
    assert (await stack.db.wait(spec)).state is WantState.successful


async def test_duplicate_announcement_changes_nothing(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:late")
    spec = await stack.db.want("feed/twice")
    first = await stack.db.publish("feed/twice")
    second = await stack.db.publish("feed/twice")
    assert first[1] is True and second[1] is False
    assert first[0].instance_id == second[0].instance_id
    assert (await stack.db.wait(spec)).state is WantState.successful
    lives = stack.bel.events.query(pattern="feed/twice", types=["PartitionLive"])
    assert len(lives) == 1


async def test_want_state_is_queryable_while_it_waits(make_stack) -> None:
    from databuild.temporal.protocol import QUERY_PROGRESS, WantProgress

    stack = await make_stack(graph="tests.graphs:late")
    spec = await stack.db.want("feed/query")
    handle = stack.client.get_workflow_handle(spec.workflow_id)
    for _ in range(100):
        progress = await handle.query(QUERY_PROGRESS, result_type=WantProgress)
        if progress.state is WantState.upstream_building:
            break
        await asyncio.sleep(0.1)
    assert progress.waiting_for == ["feed/query"] and not progress.sla_missed
    await stack.db.publish("feed/query")
    assert (await stack.db.wait(spec)).state is WantState.successful


async def test_fan_out_pages_and_resumes_from_its_cursor(make_stack) -> None:
    from databuild.temporal.protocol import SIGNAL_PARTITION_AVAILABLE, PartitionAvailable
    from databuild.temporal.wants import notify_subscribers

    stack = await make_stack(graph="tests.graphs:late")
    specs = [await stack.db.want("feed/fan", source=source) for source in list(WantSource)[:4]]
    waiting = WantState.upstream_building
    await until(lambda: all(stack.bel.wants.get(s.want_id).state is waiting for s in specs))
    partition, _ = stack.bel.partitions.publish_external("feed/fan")  # live, nobody signalled yet
    notice = PartitionAvailable(ref="feed/fan", instance_id=partition.instance_id or "")
    cursors: list[int] = []

    def signal(_subscription: Subscription) -> tuple[str, object]:
        return SIGNAL_PARTITION_AVAILABLE, notice

    class Stopped(Exception):
        """The first attempt's worker dies after its first page."""

    def stop_after_first_page(cursor: int) -> None:
        cursors.append(cursor)
        raise Stopped

    # A first attempt that stops after one page of two: two wants heard, two still wait...
    page = stack.bel.wants.subscriptions(["feed/fan"], 0, 2)
    with pytest.raises(Stopped):
        await notify_subscribers(
            stack.client, stack.bel, ["feed/fan"], signal, page_size=2, on_page=stop_after_first_page
        )
    assert cursors == [page[-1].id]
    unsignalled = [s for s in specs if s.want_id not in {sub.want_id for sub in page}]
    assert all(stack.bel.wants.get(s.want_id).state is waiting for s in unsignalled)
    # ...and a retry that resumes after the first page signals only the rest.
    resumed = await notify_subscribers(
        stack.client, stack.bel, ["feed/fan"], signal, after_id=cursors[0], page_size=2
    )
    assert (resumed.heard, resumed.done) == (2, True)
    states = await asyncio.gather(*(stack.db.wait(s) for s in specs))
    assert {s.state for s in states} == {WantState.successful}


async def first_task_identity(stack, workflow_id: str) -> str:  # type: ignore[no-untyped-def]
    async for event in stack.client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.HasField("workflow_task_started_event_attributes"):
            return str(event.workflow_task_started_event_attributes.identity)
    raise AssertionError(f"{workflow_id} has no workflow task")


async def test_a_want_asked_for_alone_starts_eagerly_and_a_backfills_wants_do_not(make_stack) -> None:
    """In a worker's process, a want asked for alone has its first task handed out with its start (eager
    start: the task shows the starting client's identity, not a poller's); a backfill's wants go through
    the task queue, so that every worker polling it gets a share, not only the one running the window."""
    stack = await make_stack(graph="tests.graphs:late")
    alone = await stack.db.want("feed/2024-05-01")
    progress = await stack.db.backfill(
        BackfillRequest(pattern="feed/{date}", start=datetime(2024, 5, 2), end=datetime(2024, 5, 3))
    )
    assert progress.registered == 2
    # Each has decided (its workflow ran its first task) once its want waits for the feed.
    await until(lambda: not stack.bel.backfills.unstarted(progress.backfill_id), seconds=30)
    members = [stack.bel.wants.get(w) for w in stack.bel.backfills.members(progress.backfill_id)]
    await until(
        lambda: all(stack.bel.wants.get(w.want_id).state is not WantState.new for w in members), seconds=30
    )
    await until(lambda: stack.bel.wants.get(alone.want_id).state is not WantState.new, seconds=30)
    assert await first_task_identity(stack, alone.workflow_id) == stack.client.identity
    for want in members:
        assert await first_task_identity(stack, want.spec.workflow_id) != stack.client.identity
