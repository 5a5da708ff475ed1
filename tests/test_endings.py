"""A want's workflow that closes without recording how it ended (under load, a cancellation once left 23
wants of a backfill `building` for good: their final write was cancelled) is reconciled, by the workers'
repair and by a cancel. On the real stack: the dev server, Spark, the BEL and real workers, with a
stand-in run that closes canceled without a word to the BEL."""

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.worker import Worker

from databuild.models import Want, WantSource, WantSpec, WantState
from databuild.temporal import protocol as p
from databuild.temporal.wants import repair_wants, want_search_attributes
from tests.helpers import until, waiting_for_feed
from worker.run import running_worker

pytestmark = pytest.mark.slow


@workflow.defn(name=p.WANT_WORKFLOW, sandboxed=False)
class ClosesUnheard:
    """Stands in for a want's run that closes canceled before its final write (as a run whose write was
    cancelled under load did): it waits to be cancelled, and records nothing."""

    @workflow.run
    async def run(self, _input: p.WantInput) -> p.WantResult:
        await workflow.wait_condition(lambda: False)
        raise AssertionError("unreachable")


async def close_unheard(stack, want: Want) -> None:  # type: ignore[no-untyped-def]
    """Replace the want's run by one that closes canceled without a word to the BEL, its search
    attributes still saying it is open."""
    await stack.client.get_workflow_handle(want.workflow_id).terminate("replaced by a stand-in")
    async with Worker(stack.client, task_queue=stack.settings.task_queue, workflows=[ClosesUnheard]):
        handle = await start_stand_in(stack, want.spec, want.state)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED


async def start_stand_in(stack, spec: WantSpec, state: WantState) -> WorkflowHandle[Any, Any]:  # type: ignore[no-untyped-def]
    """A new run of the want's workflow, for a stand-in worker to run, its search attributes at ``state``."""
    return await stack.client.start_workflow(
        p.WANT_WORKFLOW,
        p.WantInput(spec=spec),
        id=spec.workflow_id,
        task_queue=stack.settings.task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=want_search_attributes(spec, state),
    )


async def waiting_for_its_feed(stack, name: str) -> WantSpec:  # type: ignore[no-untyped-def]
    """report/NAME wanted on a worker until its derivative waits for feed/NAME (external); the worker stops."""
    async with running_worker(stack.parts, warm_spark=False):
        spec: WantSpec = await stack.db.want(f"report/{name}", source=WantSource.api)
        await until(lambda: waiting_for_feed(stack.db, f"feed/{name}"), seconds=120)
    return spec


async def repaired(stack, want_id: str, **options: Any) -> None:  # type: ignore[no-untyped-def]
    """Repair passes until the want has ended in the BEL: visibility follows a close within a moment."""
    for _ in range(100):
        await repair_wants(stack.client, stack.bel, stack.settings.task_queue, **options)
        if stack.bel.wants.get(want_id).state.is_final:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"want {want_id} still open after 100 repair passes")


def derivative(stack, ref: str) -> Want:  # type: ignore[no-untyped-def]
    (found,) = [w for w in stack.bel.wants.query(ref_prefix=ref) if w.source is WantSource.derivative]
    return found


async def closed(stack, workflow_id: str) -> WorkflowExecutionStatus | None:  # type: ignore[no-untyped-def]
    return (await stack.client.get_workflow_handle(workflow_id).describe()).status


async def test_a_derivative_whose_workflow_closed_unheard_is_reconciled_and_its_parent_told(
    make_stack,
) -> None:
    stack = await make_stack(graph="tests.graphs:late", worker=False)
    spec = await waiting_for_its_feed(stack, "unheard")
    feed = derivative(stack, "feed/unheard")
    await close_unheard(stack, feed)
    assert stack.bel.wants.get(feed.want_id).state is WantState.upstream_building  # the BEL never heard
    assert stack.bel.wants.get(spec.want_id).state is WantState.upstream_building  # nor its parent

    async with running_worker(stack.parts, warm_spark=False):
        task_queue = stack.settings.task_queue
        # The worker repairs as it starts, so either it or this call records the close (the count
        # of this call alone is a race); without the repair the feed would stay open for good.
        await repaired(stack, feed.want_id)
        done = await asyncio.wait_for(stack.db.wait(spec), timeout=60)
        assert await repair_wants(stack.client, stack.bel, task_queue) == 0  # nothing left to do
    ended = stack.bel.wants.get(feed.want_id)
    assert (ended.state, ended.reason) == (WantState.canceled, "canceled on request")
    # Recorded as its own run would have: the parent heard, and failed naming it.
    assert done.state is WantState.failed
    assert f"derivative want {feed.want_id} canceled" in (done.reason or "")
    assert [e.type for e in stack.bel.events.query(want_id=feed.want_id)][-1] == "WantCanceled"


async def test_cancelling_a_want_whose_workflow_closed_unheard_records_it(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:late", worker=False)
    spec = await waiting_for_its_feed(stack, "stuck")
    await close_unheard(stack, stack.bel.wants.get(spec.want_id))
    assert stack.bel.wants.get(spec.want_id).state is WantState.upstream_building

    async with running_worker(stack.parts, warm_spark=False):
        # What `databuild cancel` does: it used to print "cancelled" and change nothing.
        await stack.db.cancel(spec.want_id)
        await until(lambda: stack.bel.wants.get(spec.want_id).state.is_final, seconds=30)
        # Its derivative, still waiting for the feed, runs as usual: cancelled the usual way.
        feed = derivative(stack, "feed/stuck")
        await stack.db.cancel(feed.want_id)
        await until(lambda: stack.bel.wants.get(feed.want_id).state.is_final, seconds=30)
    assert stack.bel.wants.get(spec.want_id).state is WantState.canceled
    assert stack.bel.wants.get(feed.want_id).state is WantState.canceled
    assert await closed(stack, spec.workflow_id) is WorkflowExecutionStatus.COMPLETED  # the recording run


@workflow.defn(name=p.WANT_WORKFLOW, sandboxed=False)
class CompletesUnheard:
    """Stands in for a want's run that completed believing its outcome recorded (its search attributes
    say so), as a run whose finish was refused as stale once did, while the BEL holds the want open."""

    @workflow.run
    async def run(self, input: p.WantInput) -> p.WantResult:
        workflow.upsert_search_attributes([p.SA_WANT_STATE.value_set(WantState.canceled.value)])
        return p.WantResult(
            want_id=input.spec.want_id, state=WantState.canceled, sla_missed=False, reason="stood in"
        )


async def test_a_want_whose_workflow_completed_unheard_is_reconciled_by_the_next_repair_pass(
    make_stack,
) -> None:
    stack = await make_stack(graph="tests.graphs:late", worker=False)
    spec = await waiting_for_its_feed(stack, "completed")
    await stack.client.get_workflow_handle(spec.workflow_id).terminate("replaced by a stand-in")
    task_queue = stack.settings.task_queue
    async with Worker(stack.client, task_queue=task_queue, workflows=[CompletesUnheard]):
        await (await start_stand_in(stack, spec, WantState.upstream_building)).result()
    assert stack.bel.wants.get(spec.want_id).state is WantState.upstream_building  # the BEL never heard

    async with running_worker(stack.parts, warm_spark=False):
        # Its search attributes say it ended: only the pass over lately closed workflows finds it.
        await repaired(stack, spec.want_id, closed_within=timedelta(minutes=10))
    ended = stack.bel.wants.get(spec.want_id)
    assert (ended.state, ended.reason) == (WantState.canceled, "stood in")
