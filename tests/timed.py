"""A double of the job run for tests on the time-skipping server: it takes its ``days`` parameter in
virtual time, then records its outcome as the real job activity would (no Spark job can run for ten
virtual days)."""

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import activity, workflow

from workflows.calls import bel, fan_out

if TYPE_CHECKING:
    from activities.wants import WantActivities

with workflow.unsafe.imports_passed_through():
    from databuild.bel import BuildEventLog
    from databuild.graph import Graph, JobContext
    from databuild.models import InstanceRef, JobRunState
    from databuild.temporal import protocol as p

timed = Graph("timed")
BROKEN: set[str] = set()  # refs whose (double) build fails
UNHEARD: set[str] = set()  # refs whose (double) run ends without telling its wants


@timed.job("timed/{days}")
def timed_job(ctx: JobContext, days: str) -> None:
    raise AssertionError("built by TimedJobRun, the double of the job run")


@timed.job("paced/{days}/{part}")
def paced_job(ctx: JobContext, days: str, part: str) -> None:
    raise AssertionError("built by TimedJobRun, the double of the job run")


# A report on an external feed: its want waits for the feed (declared, so before any run).
timed.external("feed/{days}/{name}")


@timed.job("report/{days}/{name}", inputs=lambda days, name: [f"feed/{days}/{name}"])
def report_job(ctx: JobContext, days: str, name: str) -> None:
    raise AssertionError("built by TimedJobRun, the double of the job run")


@timed.job("daily/{date}")
def daily_job(ctx: JobContext, date: str) -> None:
    raise AssertionError("built by TimedJobRun, the double of the job run (in no time)")


@dataclass
class TimedBuilds:
    bel: BuildEventLog
    pause: float = 0.0  # wall-clock seconds between its start and its end: the job's duration history

    @activity.defn(name="timed_build")
    async def build(self, input: p.JobRunInput) -> p.JobOutcome:
        """Record the attempt and its outcome the way the job activity does."""
        await asyncio.to_thread(self.bel.job_runs.start, input.job_run_id, 1, "test")
        await asyncio.sleep(self.pause)
        if any(ref in BROKEN for ref in input.outputs):
            return p.JobOutcome(job_run_id=input.job_run_id, state=JobRunState.failed, reason="broken")
        writes = [InstanceRef(ref=ref, instance_id=str(uuid.uuid4())) for ref in input.outputs]
        await asyncio.to_thread(self.bel.job_runs.succeed, input.job_run_id, [], writes)
        return p.JobOutcome(job_run_id=input.job_run_id, state=JobRunState.succeeded)


@dataclass
class Failures:
    bel: BuildEventLog

    @activity.defn
    async def fail_job_run(self, input: p.FailJobRunInput) -> None:
        await asyncio.to_thread(self.bel.job_runs.fail, input.job_run_id, input.reason)


@workflow.defn(name=p.JOB_RUN_WORKFLOW)
class TimedJobRun:
    @workflow.run
    async def run(self, input: p.JobRunInput) -> p.JobOutcome:
        await workflow.sleep(timedelta(days=int(input.params.get("days", "0"))))
        outcome: p.JobOutcome = await workflow.execute_activity(
            "timed_build", input, result_type=p.JobOutcome, start_to_close_timeout=timedelta(minutes=1)
        )
        if outcome.state is JobRunState.failed:
            failed = p.FailJobRunInput(job_run_id=input.job_run_id, reason=outcome.reason or "failed")
            await bel(Failures.fail_job_run, failed)
        if not any(ref in UNHEARD for ref in input.outputs):
            await fan_out(input.job_run_id, input.version)
        return outcome


def want_steps(wants: "WantActivities") -> list[Callable[..., Any]]:
    """The activities of the real want workflow, for a worker of these doubles."""
    return [
        wants.register_want,
        wants.first_step,
        wants.decide,
        wants.await_dependencies,
        wants.await_requirements,
        wants.finish_want,
        wants.record_sla_missed,
        wants.assess_sla,
        wants.watch,
        wants.abandon_build,
    ]
