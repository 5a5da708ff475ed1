"""What the SDK client does around its Temporal calls: errors from a worker as the DataBuild errors they
were, workflows cancelled and signalled whether or not they still run, many calls a few at a time."""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TypeVar

from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, TimeoutError
from temporalio.service import RPCError, RPCStatusCode

from databuild.domain.checks import Recheck
from databuild.durations import format_duration
from databuild.errors import ChecksTimedOutError, DataBuildError, error_class
from databuild.temporal.protocol import CHECK_WORKFLOW, CheckInput, check_workflow_id

T = TypeVar("T")


async def recheck(client: Client, task_queue: str, ref: str, within: timedelta) -> Recheck:
    """Run ``ref``'s checks again on a worker, as its ``Check`` workflow (a second request meanwhile
    waits for the first's answer), for at most ``within``."""
    try:
        found: Recheck = await client.execute_workflow(
            CHECK_WORKFLOW,
            CheckInput(ref=ref, timeout=within),
            id=check_workflow_id(ref),
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            result_type=Recheck,
            static_summary=f"databuild check {ref}",
        )
    except WorkflowFailureError as failure:
        if _timed_out(failure):
            raise ChecksTimedOutError(
                f"the checks of {ref} did not finish within {format_duration(within)} on the worker, and "
                "their results are not recorded: one of its checks may hang; "
                "give them longer with DATABUILD_CHECK_TIMEOUT"
            ) from None
        raise worker_error(failure) from None
    return found


def _timed_out(failure: BaseException) -> bool:
    cause: BaseException | None = failure
    while cause is not None:
        if isinstance(cause, TimeoutError):
            return True
        cause = cause.__cause__
    return False


def worker_error(failure: WorkflowFailureError) -> DataBuildError:
    """What the worker's activity raised, as the DataBuild error it was (its class is the failure's type,
    activities.errors), so the CLI and the API answer it as they would have in process."""
    cause: BaseException = failure
    while cause.__cause__ is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    if isinstance(cause, ApplicationError) and cause.type:
        kind = error_class(cause.type)
        if kind is not None:
            with contextlib.suppress(TypeError):  # a class that takes more than a message
                return kind(cause.message)
        return DataBuildError(f"{cause.type}: {cause.message}")
    return DataBuildError(f"the worker could not run it: {cause}")


async def called(callback: Callable[[T], Awaitable[None] | None], value: T) -> None:
    done = callback(value)
    if done is not None:
        await done


async def cancel_workflow(client: Client, workflow_id: str) -> None:
    """Ask the workflow of a want the BEL has recorded cancelled to stop; one that has not started yet
    (it then finds the want ended at its first decision) or has ended needs nothing more."""
    try:
        await client.get_workflow_handle(workflow_id).cancel()
    except RPCError as error:
        if error.status is not RPCStatusCode.NOT_FOUND:
            raise


async def gathered(calls: Sequence[Awaitable[None]], at_once: int = 32) -> None:
    """Await ``calls``, ``at_once`` at a time: a backfill's thousands of wants do not all call at once."""
    gate = asyncio.Semaphore(at_once)

    async def one(call: Awaitable[None]) -> None:
        async with gate:
            await call

    await asyncio.gather(*(one(call) for call in calls))


async def signal_workflow(client: Client, workflow_id: str, signal: str) -> None:
    """Signal a workflow; one that has just ended (or not started yet) needs nothing more."""
    try:
        await client.get_workflow_handle(workflow_id).signal(signal)
    except RPCError as error:
        if error.status is not RPCStatusCode.NOT_FOUND:
            raise
