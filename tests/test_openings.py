"""A want's workflow run serves one opening of the want, and only a retry's reopen replaces it. Found by
the chaos soak, reproduced here on the real stack (the dev server, the BEL, Spark and real workers), with
one activity of the real worker held at the moment the faults struck:

* a workflow task that timed out after its decision committed (the worker died) must not make the run's
  outcome look stale: the want used to stay `building` in the BEL while its workflow completed;
* a cancellation decided before a retry must not reach the reopened want: it used to end it `canceled`
  again, and the retry's new run with it."""

import asyncio
import os
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType

import worker.run
from activities.wants import WantActivities
from databuild.models import WantSource, WantState
from databuild.temporal import protocol as p
from databuild.temporal.wants import want_search_attributes
from tests.conftest import stack_env
from tests.helpers import start_in_own_group
from worker.run import running_worker

pytestmark = pytest.mark.slow


class Held:
    """Where a held activity is: entered, and told to go on."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.go_on = asyncio.Event()


async def history_types(stack: Any, workflow_id: str, run_id: str | None = None) -> list[str]:
    handle = stack.client.get_workflow_handle(workflow_id, run_id=run_id)
    return [EventType.Name(event.event_type) async for event in handle.fetch_history_events()]


async def test_a_want_whose_task_timed_out_after_its_decision_committed_records_its_end(
    make_stack, tmp_path: Path
) -> None:
    """Step 2 of the want commits in the BEL (it queues a run, whose workflow starts, builds and tells the
    want), and its worker is killed before the workflow task that ran the step completes. The want's next
    task hears of its input and of its own partition at once, and ends without deciding again. Its outcome
    is its own: the BEL records it."""
    stack = await make_stack(graph="tests.graphs:chain", worker=False)
    await asyncio.to_thread(stack.parts.spark.session)  # warm: the next worker builds at once
    env = stack_env(stack, DATABUILD_TEST_DIE_AFTER_STEP="2", PYTHONUNBUFFERED="1")
    dying = start_in_own_group("tests.dying_worker", env, tmp_path / "dying.log")
    try:
        # Step 1 queues a run that dep-misses base/d56; its derivative builds it, which wakes step 2. Its
        # workflow tasks may take 20 s (Temporal's default 10): the dying worker builds within that.
        spec = stack.db.spec("derived/d56", source=WantSource.api)
        await stack.client.start_workflow(
            p.WANT_WORKFLOW,
            p.WantInput(spec=spec, version=p.WORKFLOW_VERSION),
            id=spec.workflow_id,
            task_queue=stack.settings.task_queue,
            search_attributes=want_search_attributes(spec),
            task_timeout=timedelta(seconds=20),
        )
        assert await asyncio.to_thread(dying.wait, 240) == -signal.SIGKILL
    finally:
        if dying.poll() is None:
            os.killpg(dying.pid, signal.SIGKILL)
    building = stack.bel.wants.get(spec.want_id)
    assert building.state is WantState.building  # step 2 is in the BEL, and in no history

    async with running_worker(stack.parts, warm_spark=False):
        done = await asyncio.wait_for(stack.db.wait(spec), timeout=120)
    assert done.state is WantState.successful
    assert [e.type for e in stack.bel.events.query(want_id=spec.want_id)][-1] == "WantSucceeded"
    # The path the soak found: the task that ran step 2 timed out, and the next one ended the want with
    # its two news at once, deciding nothing (its local activities: the first step, then the finish).
    types = await history_types(stack, spec.workflow_id)
    assert "EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT" in types
    assert types.count("EVENT_TYPE_MARKER_RECORDED") == 2
    assert types[-1] == "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"


async def test_a_cancel_still_in_flight_never_reaches_the_want_a_retry_reopened(
    make_stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The want is cancelled with its backfill (in the BEL, then its workflow asked to cancel) before any
    worker ran its first task. A slow worker runs that task, and its write of the cancellation is held
    until the want was retried: the retry terminates the run and reopens the want, with a new run. The
    old run's write then lands, and is refused: the reopened want is built."""
    stack = await make_stack(graph="tests.graphs:chain", worker=False)
    spec = await stack.db.want("base/d57", source=WantSource.api)  # its workflow waits for a worker
    stack.bel.wants.cancel([spec.want_id], "its backfill bf-1 was cancelled")
    old = stack.client.get_workflow_handle(spec.workflow_id)
    old_run = (await old.describe()).run_id
    await old.cancel()
    held = Held()

    class SlowToRecordCancels(WantActivities):
        @activity.defn(name="finish_want")
        async def finish_want(self, input: p.FinishInput) -> None:
            if input.state is WantState.canceled and not held.go_on.is_set():
                held.entered.set()
                await held.go_on.wait()
            await super().finish_want(input)

    monkeypatch.setattr(worker.run, "WantActivities", SlowToRecordCancels)
    async with running_worker(stack.parts, warm_spark=False):
        await asyncio.wait_for(held.entered.wait(), timeout=60)  # the old run is writing its cancellation
        retried = await stack.db.retry(spec.want_id)  # it closes within 10 s, or is terminated
        assert retried.state is WantState.new and retried.opening == 1
        held.go_on.set()
        done = await asyncio.wait_for(stack.db.wait(spec), timeout=120)
    assert done.state is WantState.successful
    types = [e.type for e in stack.bel.events.query(want_id=spec.want_id)]
    assert types.count("WantCanceled") == 1 and types.index("WantCanceled") < types.index("WantRetried")
    assert types[-1] == "WantSucceeded"
    assert (await old.describe()).run_id != old_run  # the retry's run built it
    assert "EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED" in await history_types(stack, spec.workflow_id, old_run)
