"""How the workflows call activities: by method reference (typed arguments and results), with the
timeouts and retry policies each kind of call needs."""

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ActivityHandle

with workflow.unsafe.imports_passed_through():
    from activities.fanout import FanOutActivities
    from databuild.temporal import protocol as p
    from workflows.changes import FAN_OUT_FIRST_LOCAL, patched

A = TypeVar("A")
R = TypeVar("R")
Method = Callable[[Any, A], Awaitable[R]]

# BEL steps are single short transactions and idempotent: run them as local activities (no task
# queue round trip) and retry them until the database answers.
BEL_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=30))
BEL_TIMEOUT = timedelta(seconds=60)
# Steps that also call Temporal (starting derivative wants) run as regular activities. They heartbeat
# (activities.heartbeats), so a worker killed during one delays the want by seconds, not minutes.
REMOTE_TIMEOUT = timedelta(minutes=2)
REMOTE_HEARTBEAT = timedelta(seconds=15)


async def bel(activity: Method[A, R], arg: A) -> R:
    """A BEL step, as a local activity."""
    return await workflow.execute_local_activity_method(
        activity, arg, start_to_close_timeout=BEL_TIMEOUT, retry_policy=BEL_RETRY
    )


async def remote(activity: Method[A, R], arg: A) -> R:
    """A step that also calls Temporal, as a heartbeating activity."""
    return await workflow.execute_activity_method(
        activity,
        arg,
        start_to_close_timeout=REMOTE_TIMEOUT,
        heartbeat_timeout=REMOTE_HEARTBEAT,
        retry_policy=BEL_RETRY,
    )


def watch(activity: Method[A, None], what: A, every: timedelta) -> ActivityHandle[None]:
    """Start a watch activity: each attempt looks once and fails benignly while nothing changed, so
    the server retries it at ``every`` (backing off to ten times that) without adding history."""
    return workflow.start_activity_method(
        activity,
        what,
        start_to_close_timeout=REMOTE_TIMEOUT,
        heartbeat_timeout=REMOTE_HEARTBEAT,
        retry_policy=RetryPolicy(
            initial_interval=every, backoff_coefficient=1.5, maximum_interval=every * 10
        ),
    )


async def fan_out(job_run_id: str, version: int, after_id: int = 0) -> None:
    """Signal the subscribers of a finished run after subscription ``after_id`` (those before it heard from
    the job activity): the first page as a local activity (no task queue round trip; most runs have few
    subscribers), the rest, if any, by an activity that resumes from its heartbeated cursor, so it may
    retry for as long as it takes."""
    if patched(FAN_OUT_FIRST_LOCAL, version):
        try:
            first = await workflow.execute_local_activity_method(
                FanOutActivities.fan_out_first,
                p.FanOutInput(job_run_id=job_run_id, after_id=after_id),
                start_to_close_timeout=BEL_TIMEOUT,
                retry_policy=RetryPolicy(maximum_attempts=3),
            )
        except (ActivityError, ApplicationError) as error:  # a local activity's failure can come unwrapped
            workflow.logger.warning(
                "fan-out of %s: first page failed (%s); the activity does it", job_run_id, error
            )
        else:
            if first.done:
                return
            after_id = first.after_id
    await workflow.execute_activity_method(
        FanOutActivities.fan_out,
        p.FanOutInput(job_run_id=job_run_id, after_id=after_id),
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
