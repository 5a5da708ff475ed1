"""A job run: one execution of a job for a concrete set of outputs, shared by every want delegated to it."""

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    # Imported once and shared by every run, not again into each run's sandbox (cheaper starts).
    from activities.jobs import JobActivities
    from databuild.domain.events import ABANDONED_REASON, CANCELLED_REASON
    from databuild.limits import policy_problem
    from databuild.models import JobRunCause
    from databuild.temporal import protocol as p
    from workflows.calls import bel, failure_message, fan_out, watch
    from workflows.changes import FANNED_OUT_BY_JOB, patched

# A queued run looks for a free pool slot this often (backing off to ten times that) in case the signal
# of the run that freed one never came.
ADMISSION_WATCH = timedelta(seconds=5)


@workflow.defn(name=p.JOB_RUN_WORKFLOW)
class JobRunWorkflow:
    def __init__(self) -> None:
        self._abandoned = False
        self._nudged = False  # told it was admitted
        self._full = False  # its batch has no room left

    @workflow.signal(name=p.SIGNAL_ABANDON)
    def abandon(self) -> None:
        self._abandoned = True

    @workflow.signal(name=p.SIGNAL_ADMITTED)
    def admitted(self) -> None:
        self._nudged = True

    @workflow.signal(name=p.SIGNAL_BATCH_FULL)
    def batch_full(self) -> None:
        self._full = True

    @workflow.run
    async def run(self, input: p.JobRunInput) -> p.JobOutcome:
        try:
            if input.admission is not None and not await self._admit(input, input.admission):
                outcome = self._ended(input, JobRunCause.abandoned, ABANDONED_REASON)
            else:
                workflow.set_current_details(
                    f"running job **{input.job_label}** for {', '.join(input.outputs)}"
                )
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

    async def _admit(self, input: p.JobRunInput, admission: p.Admission) -> bool:
        """Wait until the run may start: its batch full or its window over, then a slot of each of its
        pools (woken by the run that frees one, or by its own watch). False if it was abandoned first."""
        request = p.AdmissionInput(job_run_id=input.job_run_id, pools=admission.pools)
        # Partitions may have filled the batch before the run started (and before its signal could come).
        if admission.window and not await bel(JobActivities.batch_is_full, request):
            workflow.set_current_details(f"**queued**: job {input.job_label} takes more partitions")
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self._full or self._abandoned, timeout=admission.window)
        while not self._abandoned:
            self._nudged = False
            if await bel(JobActivities.request_admission, request):
                return True
            pools = ", ".join(sorted(admission.pools))
            workflow.set_current_details(f"**queued (pool full)**: waiting for a slot of {pools}")
            watching = watch(JobActivities.await_admission, request, ADMISSION_WATCH)

            def woken(watched: Callable[[], bool] = watching.done) -> bool:
                return self._nudged or self._abandoned or watched()

            await workflow.wait_condition(woken)
            if not watching.done():
                watching.add_done_callback(lambda task: task.cancelled() or task.exception())  # retrieved
                watching.cancel()
        return False

    async def _execute(self, input: p.JobRunInput) -> p.JobOutcome:
        """The job activity, cancelled (and waited for until it has stopped) when the run is canceled
        or abandoned."""
        # A policy outside the ranges Temporal can run (DATABUILD_JOB_ATTEMPTS=-1, a zero timeout) would
        # fail every workflow task here, leaving the run queued and its outputs locked for good; 0
        # attempts would retry forever. Nothing is wrong with the outputs: released, their wants decide
        # again and start a run under the worker's settings.
        problem = policy_problem(input.policy)
        if problem is not None:
            return self._ended(input, JobRunCause.lost, f"lost: its policy cannot run ({problem})")
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
        if outcome.fanned_out and patched(FANNED_OUT_BY_JOB, input.version):
            return  # its job activity told every want and did what follows a run's end
        await fan_out(input.job_run_id, input.version, outcome.told_after_id)
