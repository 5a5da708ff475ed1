"""`databuild worker` whose process dies (SIGKILL, with its Spark JVM) while a want's workflow task runs
decision step ``DATABUILD_TEST_DIE_AFTER_STEP``: after that decision committed in the BEL and the job run
it queued has built and told its wants, before the task can complete. A worker killed at that moment
(tests/test_openings.py). Run as `python -m tests.dying_worker worker`."""

import asyncio
import contextlib
import os
import signal

from temporalio import activity

import worker.run
from activities.wants import WantActivities
from databuild.models import job_run_workflow_id
from databuild.temporal import protocol as p
from worker.commands import main

STEP = int(os.environ["DATABUILD_TEST_DIE_AFTER_STEP"])


class DiesAfterDeciding(WantActivities):
    @activity.defn(name="decide")
    async def decide(self, input: p.DecideInput) -> p.Decision:
        decision = await super().decide(input)  # committed, and the run it queues started
        if input.seq == STEP:
            if isinstance(decision, p.ExecuteOrder):  # this worker runs it meanwhile
                run = self.client.get_workflow_handle(
                    job_run_workflow_id(decision.job_label, decision.job_run_id)
                )
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(run.result(), timeout=60)
            os.killpg(os.getpid(), signal.SIGKILL)
        return decision


worker.run.WantActivities = DiesAfterDeciding  # type: ignore[misc]

if __name__ == "__main__":
    main()
