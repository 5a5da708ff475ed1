"""Activity calls shared by the workflows, with the timeouts and retry policies they need."""

from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.workflow import ActivityHandle

with workflow.unsafe.imports_passed_through():
    from databuild import protocol as p
    from databuild.models import Model

T = TypeVar("T")

# BEL steps are single short transactions and idempotent: run them as local activities (no task
# queue round trip) and retry them until the database answers.
BEL_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=30))
BEL_TIMEOUT = timedelta(seconds=60)
# Steps that also call Temporal (starting derivative wants) run as regular activities. They heartbeat
# (activities.heartbeats), so a worker killed during one delays the want by seconds, not minutes.
REMOTE_TIMEOUT = timedelta(minutes=2)
REMOTE_HEARTBEAT = timedelta(seconds=15)


async def bel_call(activity: str, arg: Model, result_type: type[T]) -> T:
    result: T = await workflow.execute_local_activity(
        activity, arg, result_type=result_type, start_to_close_timeout=BEL_TIMEOUT, retry_policy=BEL_RETRY
    )
    return result


async def bel_do(activity: str, arg: Model) -> None:
    await workflow.execute_local_activity(
        activity, arg, start_to_close_timeout=BEL_TIMEOUT, retry_policy=BEL_RETRY
    )


async def remote_call(activity: str, arg: Model, result_type: type[T]) -> T:
    result: T = await workflow.execute_activity(
        activity,
        arg,
        result_type=result_type,
        start_to_close_timeout=REMOTE_TIMEOUT,
        heartbeat_timeout=REMOTE_HEARTBEAT,
        retry_policy=BEL_RETRY,
    )
    return result


def watch(what: p.WatchInput, every: timedelta) -> ActivityHandle[None]:
    """Start the watch activity: each attempt looks once and fails benignly while nothing changed, so
    the server retries it at ``every`` (backing off to ten times that) without adding history."""
    return workflow.start_activity(
        p.ACT_WATCH,
        what,
        start_to_close_timeout=REMOTE_TIMEOUT,
        heartbeat_timeout=REMOTE_HEARTBEAT,
        retry_policy=RetryPolicy(
            initial_interval=every, backoff_coefficient=1.5, maximum_interval=every * 10
        ),
    )


async def fan_out(job_run_id: str) -> None:
    """Signal the subscribers of a finished run. It resumes from its heartbeated cursor, so it may
    retry for as long as it takes."""
    await workflow.execute_activity(
        p.ACT_FAN_OUT,
        p.FanOutInput(job_run_id=job_run_id),
        start_to_close_timeout=timedelta(minutes=30),
        heartbeat_timeout=timedelta(seconds=60),
        retry_policy=RetryPolicy(
            initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)
        ),
    )


def failure_message(error: BaseException) -> str:
    """The innermost application error's type and message: what went wrong, not how it travelled."""
    cause: BaseException = error
    while cause.__cause__ is not None:
        cause = cause.__cause__
    if isinstance(cause, ApplicationError) and cause.type:
        return f"{cause.type}: {cause.message}"
    return str(cause)
