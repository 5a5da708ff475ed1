"""A job run: one execution of a job for a concrete set of outputs, shared by every want delegated to it."""

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    # Imported once and shared by every run, not again into each run's sandbox (cheaper starts).
    from activities.jobs import JobActivities
    from databuild import protocol as p
    from databuild.domain.events import ABANDONED_REASON, CANCELLED_REASON
    from databuild.models import JobRunCause
    from workflows.calls import bel, failure_message, fan_out


@workflow.defn(name=p.JOB_RUN_WORKFLOW)
class JobRunWorkflow:
    def __init__(self) -> None:
        self._abandoned = False

    @workflow.signal(name=p.SIGNAL_ABANDON)
    def abandon(self) -> None:
        self._abandoned = True

    @workflow.run
    async def run(self, input: p.JobRunInput) -> p.JobOutcome:
        workflow.set_current_details(f"running job **{input.job_label}** for {', '.join(input.outputs)}")
        try:
            outcome = await self._execute(input)
        except ActivityError as error:
            if self._abandoned:  # however its stopping ended (a timeout while stopping, say)
                outcome = self._ended(input, JobRunCause.abandoned, ABANDONED_REASON)
            elif isinstance(error.__cause__, CancelledError):
                outcome = self._ended(input, JobRunCause.cancelled, CANCELLED_REASON)
            else:
                outcome = self._ended(input, JobRunCause.error, failure_message(error))
        except asyncio.CancelledError:
            outcome = self._ended(input, JobRunCause.cancelled, CANCELLED_REASON)
        try:
            await self._settle(input, outcome)
        except asyncio.CancelledError:
            await self._settle(input, outcome)  # a cancel must not stop the wants from hearing of it
            raise
        workflow.set_current_details(
            f"**{outcome.state.value}**" + (f": {outcome.reason}" if outcome.reason else "")
        )
        if outcome.cause is JobRunCause.cancelled:
            raise asyncio.CancelledError("job run canceled")
        return outcome

    async def _execute(self, input: p.JobRunInput) -> p.JobOutcome:
        """The job activity, cancelled (and waited for until it has stopped) when the run is canceled
        or abandoned."""
        job = workflow.start_activity_method(
            JobActivities.run_job,
            input,
            start_to_close_timeout=input.policy.start_to_close_timeout,
            heartbeat_timeout=input.policy.heartbeat_timeout,
            # Errors the job cannot recover from by itself are raised non-retryable (activities.errors).
            retry_policy=RetryPolicy(
                maximum_attempts=input.policy.attempts, initial_interval=timedelta(seconds=1)
            ),
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        try:
            await workflow.wait_condition(lambda: job.done() or self._abandoned)
        except asyncio.CancelledError:
            job.cancel()
            await workflow.wait([job])
            raise
        if not job.done():
            job.cancel()
        outcome: p.JobOutcome = await job
        return outcome

    def _ended(self, input: p.JobRunInput, cause: JobRunCause, reason: str) -> p.JobOutcome:
        return p.JobOutcome(job_run_id=input.job_run_id, state=cause.state, reason=reason, cause=cause)

    async def _settle(self, input: p.JobRunInput, outcome: p.JobOutcome) -> None:
        """Record a failure or cancellation (the activity records successes and dep-misses itself),
        then signal every want subscribed to the outputs. Both steps are idempotent."""
        if outcome.cause is not None:
            ended = p.FailJobRunInput(
                job_run_id=input.job_run_id, reason=outcome.reason or "", cause=outcome.cause
            )
            await bel(JobActivities.fail_job_run, ended)
        await fan_out(input.job_run_id)
