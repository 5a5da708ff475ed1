"""A job run: one execution of a job for a concrete set of outputs, shared by every want delegated to it."""

import asyncio
from datetime import timedelta
from typing import NoReturn

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.workflow import ActivityCancellationType

from workflows.calls import bel_do, fan_out

with workflow.unsafe.imports_passed_through():
    from databuild import protocol as p
    from databuild.models import JobRunState

NOT_RETRYABLE = ["JobContractError", "UnknownJobError", "GraphDefinitionError", "InvalidPartitionRefError"]


def _reason(error: BaseException) -> str:
    cause = error.__cause__ or error
    if isinstance(cause, ApplicationError) and cause.type:
        return f"{cause.type}: {cause.message}"
    return str(cause)


@workflow.defn(name=p.JOB_RUN_WORKFLOW)
class JobRunWorkflow:
    @workflow.run
    async def run(self, input: p.JobRunInput) -> p.JobOutcome:
        workflow.set_current_details(f"running job **{input.job_label}** for {', '.join(input.outputs)}")
        try:
            outcome: p.JobOutcome = await workflow.execute_activity(
                p.ACT_RUN_JOB,
                input,
                result_type=p.JobOutcome,
                start_to_close_timeout=input.policy.start_to_close_timeout,
                heartbeat_timeout=input.policy.heartbeat_timeout,
                retry_policy=RetryPolicy(
                    maximum_attempts=input.policy.attempts,
                    initial_interval=timedelta(seconds=1),
                    non_retryable_error_types=NOT_RETRYABLE,
                ),
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except ActivityError as error:
            if not isinstance(error.__cause__, CancelledError):
                outcome = await self._fail(input, _reason(error))
            else:
                await self._cancel(input)
        except asyncio.CancelledError:
            await self._cancel(input)
        await fan_out(input.job_run_id)
        workflow.set_current_details(
            f"**{outcome.state.value}**" + (f": {outcome.reason}" if outcome.reason else "")
        )
        return outcome

    async def _fail(self, input: p.JobRunInput, reason: str) -> p.JobOutcome:
        await bel_do(p.ACT_FAIL_JOB_RUN, p.FailJobRunInput(job_run_id=input.job_run_id, reason=reason))
        return p.JobOutcome(job_run_id=input.job_run_id, state=JobRunState.failed, reason=reason)

    async def _cancel(self, input: p.JobRunInput) -> NoReturn:
        """Record the cancellation, tell the waiting wants, and end the workflow as cancelled."""
        await self._fail(input, "canceled")
        await fan_out(input.job_run_id)
        workflow.set_current_details("**canceled**")
        raise asyncio.CancelledError("job run canceled")
