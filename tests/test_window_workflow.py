"""The backfill window workflow on the time-skipping server, with its one activity a double: a wake that
comes while a step finds nothing left to start (a retry racing the cancelled window's end) is not lost."""

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from temporalio import activity
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from databuild.backfill import WindowStep
from databuild.temporal import protocol as p
from tests.conftest import binary
from workflows.backfill import BackfillWindowWorkflow


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=binary("temporal-test-server"), data_converter=pydantic_data_converter
    )
    yield env
    await env.shutdown()


def step(*, canceled: bool, started: int) -> WindowStep:
    return WindowStep(
        backfill_id="bf-1",
        read=0,
        started=started,
        partitions=3,
        open=0,
        low=started,
        paused=False,
        canceled=canceled,
    )


async def test_a_wake_during_a_step_that_found_the_backfill_cancelled_takes_another_step(
    env: WorkflowEnvironment,
) -> None:
    steps: list[p.BackfillWindowInput] = []
    stepping, woken = asyncio.Event(), asyncio.Event()

    @activity.defn(name="advance_backfill")
    async def advance_backfill(input: p.BackfillWindowInput) -> WindowStep:
        steps.append(input)
        if len(steps) == 1:  # cancelled: nothing left to start; the retry's wake comes meanwhile
            stepping.set()
            await woken.wait()
            return step(canceled=True, started=1)
        return step(canceled=False, started=3)  # the retry reopened the wants: this step started them

    queue = f"window-{uuid.uuid4().hex[:8]}"
    async with Worker(
        env.client, task_queue=queue, workflows=[BackfillWindowWorkflow], activities=[advance_backfill]
    ):
        handle = await env.client.start_workflow(
            BackfillWindowWorkflow.run,
            p.BackfillWindowInput(backfill_id="bf-1", tick=timedelta(seconds=1)),
            id="window:bf-1",
            task_queue=queue,
        )
        await asyncio.wait_for(stepping.wait(), 10)
        await handle.signal(BackfillWindowWorkflow.wake)
        woken.set()
        await asyncio.wait_for(handle.result(), 10)
    assert len(steps) == 2
