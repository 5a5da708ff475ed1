"""`databuild check REF`: one activity on a worker, which has the graph and a Spark session; the CLI has
neither. A workflow, so the request reaches whichever worker serves the task queue and a worker lost
mid-check is retried elsewhere. Deterministic; I/O is in the activity."""

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.checks import CheckActivities
    from databuild.domain.checks import Recheck
    from databuild.temporal import protocol as p

# A check that cannot run is retried a little (a worker lost, Spark restarting), then reported; what the
# request got wrong (no live instance, no checks) is non-retryable (activities.errors).
CHECK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
CHECK_TIMEOUT = timedelta(hours=1)  # of each attempt, for a request that names no timeout


@workflow.defn(name=p.CHECK_WORKFLOW)
class CheckWorkflow:
    @workflow.run
    async def run(self, input: p.CheckInput) -> Recheck:
        workflow.set_current_details(f"re-running the checks of {input.ref}")
        recheck: Recheck = await workflow.execute_activity_method(
            CheckActivities.recheck,
            input,
            start_to_close_timeout=input.timeout or CHECK_TIMEOUT,
            schedule_to_close_timeout=input.timeout,
            heartbeat_timeout=timedelta(seconds=60),
            retry_policy=CHECK_RETRY,
        )
        return recheck
