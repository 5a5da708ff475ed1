"""Job execution activity: runs the job on its executor in a thread, heartbeating progress, and stops
its Spark work when Temporal cancels the activity."""

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.heartbeats import heartbeating
from databuild.bel.aggregates.job_runs import RunEnded
from databuild.jobs.attempts import attempt_name
from databuild.jobs.execution import JobExecutor, outcome_of
from databuild.limits import JOB_HEARTBEAT_EVERY
from databuild.models import JobRunState
from databuild.temporal import protocol as p

BENIGN = ApplicationErrorCategory.BENIGN  # retried, and logged at debug level only


class JobActivities:
    def __init__(
        self,
        executor: JobExecutor,
        max_concurrent: int,
        attempts: int,
        heartbeat_every: float = JOB_HEARTBEAT_EVERY.total_seconds(),
        tell: Callable[[RunEnded], Awaitable[p.FanOutResult]] | None = None,
    ) -> None:
        self.executor = executor
        self.tell = tell  # signals the first page of an ended run's wants (FanOutActivities.tell)
        self.attempts = attempts  # DATABUILD_JOB_ATTEMPTS: for a run whose policy set no limit
        self.heartbeat_every = heartbeat_every
        self._pool = ThreadPoolExecutor(max_workers=max_concurrent, thread_name_prefix="databuild-job")

    @activity.defn
    async def run_job(self, input: p.JobRunInput) -> p.JobOutcome:
        attempt = activity.info().attempt
        if input.policy.attempts == 0 and attempt > self.attempts:
            # Temporal's "no limit": scheduled by a run from before DATABUILD_JOB_ATTEMPTS had a range,
            # it would retry for ever and never fail-lock. Ended as the setting says now.
            raise ApplicationError(
                f"gave up after {attempt - 1} attempts (DATABUILD_JOB_ATTEMPTS); the run was started "
                "with no limit on attempts, which is no longer accepted",
                type="AttemptsExhausted",
                non_retryable=True,
            )
        group = attempt_name(input.job_run_id, attempt)
        cancelled = threading.Event()
        last_message = {"message": "starting"}

        def report(message: str) -> None:
            last_message["message"] = message

        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            self._pool,
            lambda: self.executor.execute(
                input.job_run_id, attempt, cancelled=cancelled, report=report, lease=input.policy.lease
            ),
        )
        renewed = loop.time()  # the attempt's start renews the lease (``job_runs.start``)
        try:
            while True:
                if loop.time() - renewed > input.policy.lease.total_seconds() / 4:
                    await self._renew_lease(input)
                    renewed = loop.time()
                done, _ = await asyncio.wait({future}, timeout=self.heartbeat_every)
                if done:
                    break
                progress = await asyncio.to_thread(self.executor.progress, group)
                activity.heartbeat({**progress, **last_message})
            return await self._told(future.result())
        except asyncio.CancelledError:
            cancelled.set()
            # Until the body returns: Spark work it starts just after a cancel must be stopped too.
            while not future.done():
                activity.heartbeat({"message": "stopping"})  # stopping may outlast the heartbeat timeout
                await asyncio.to_thread(self.executor.cancel, group)
                await asyncio.wait({future}, timeout=1.0)
            if not future.cancelled() and future.exception() is None:
                return outcome_of(future.result().run)  # it finished before it could be stopped: its outcome
            raise

    @heartbeating  # telling a page of wants, and what follows a run's end, can take a while
    async def _told(self, ended: RunEnded) -> p.JobOutcome:
        """The outcome of the run (as the attempt left it), its wants told of it when the attempt recorded
        it (a success or a dep-miss): the run's workflow tells the rest, if any. If telling fails, the
        workflow tells them all."""
        outcome = outcome_of(ended.run)
        if self.tell is None or outcome.state not in (JobRunState.succeeded, JobRunState.dep_miss):
            return outcome
        try:
            told = await self.tell(ended)
        except Exception as error:
            activity.logger.warning("wants of %s not told by its job: %s", outcome.job_run_id, error)
            return outcome
        return outcome.model_copy(update={"told_after_id": told.after_id, "fanned_out": told.done})

    async def _renew_lease(self, input: p.JobRunInput) -> None:
        # A missed renewal only risks an early liveness check, which the Temporal check then
        # answers; it must never stop the job.
        try:
            await self.executor.bel.call(
                self.executor.bel.pools.renew_lease, input.job_run_id, input.policy.lease
            )
        except Exception as error:
            activity.logger.warning("could not renew the lease of %s: %s", input.job_run_id, error)

    @activity.defn
    async def request_admission(self, input: p.AdmissionInput) -> bool:
        """May the run start now (its batch closes, its pool slots are held)? Else it waits in line."""
        bel = self.executor.bel
        return await bel.call(bel.pools.request_admission, input.job_run_id, input.pools)

    @activity.defn
    async def batch_is_full(self, input: p.AdmissionInput) -> bool:
        bel = self.executor.bel
        return await bel.call(bel.pools.batch_is_full, input.job_run_id)

    @activity.defn
    @heartbeating
    async def await_admission(self, input: p.AdmissionInput) -> None:
        """Completes once the waiting run holds its slots, in case the signal saying so never came (or a
        slot came free another way, e.g. a larger pool). Each attempt looks once and otherwise fails
        benignly, so Temporal retries it without adding history; the first only schedules the first look."""
        bel = self.executor.bel
        if activity.info().attempt > 1:
            run = await bel.call(bel.job_runs.get, input.job_run_id)
            if run.state is not JobRunState.queued or not run.waiting_for_pools:
                return
            if await bel.call(bel.pools.have_room, input.pools) and await bel.call(
                bel.pools.request_admission, input.job_run_id, input.pools
            ):
                return
        raise ApplicationError("waiting for a pool slot", type="StillWaiting", category=BENIGN)

    @activity.defn
    async def fail_job_run(self, input: p.FailJobRunInput) -> None:
        await self.executor.bel.call(self.executor.fail, input.job_run_id, input.reason, input.cause)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.executor.executors.close()
        if self.executor.lineage is not None:
            self.executor.lineage.close()  # sends the lineage events still queued
        if self.executor.tables is not None:
            self.executor.tables.close()  # finishes the table commits still queued
