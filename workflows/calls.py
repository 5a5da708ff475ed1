"""Activity calls shared by the workflows, with the timeouts and retry policies they need."""

from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from databuild import protocol as p
    from databuild.models import Model

T = TypeVar("T")

# BEL activities are short and idempotent: retry them until the database answers.
BEL_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=30))
BEL_TIMEOUT = timedelta(seconds=60)


async def bel_call(activity: str, arg: Model, result_type: type[T]) -> T:
    result: T = await workflow.execute_activity(
        activity, arg, result_type=result_type, start_to_close_timeout=BEL_TIMEOUT, retry_policy=BEL_RETRY
    )
    return result


async def bel_do(activity: str, arg: Model) -> None:
    await workflow.execute_activity(activity, arg, start_to_close_timeout=BEL_TIMEOUT, retry_policy=BEL_RETRY)


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
