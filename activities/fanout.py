"""Fan-out: when a job run ends, signal every want subscribed to its outputs. Pages through the
subscriptions and heartbeats its cursor, so a retry resumes where the last attempt stopped."""

from temporalio import activity
from temporalio.client import Client

from databuild import protocol as p
from databuild.bel import BuildEventLog
from databuild.temporal import notify_subscribers, signal_for_run


class FanOutActivities:
    def __init__(self, bel: BuildEventLog, client: Client, page_size: int = 200) -> None:
        self.bel = bel
        self.client = client
        self.page_size = page_size

    @activity.defn
    async def fan_out(self, input: p.FanOutInput) -> int:
        run = await self.bel.call(self.bel.job_run, input.job_run_id)
        details = activity.info().heartbeat_details
        cursor = int(details[0]) if details else 0
        return await notify_subscribers(
            self.client,
            self.bel,
            run.outputs,
            signal_for_run(run),
            after_id=cursor,
            page_size=self.page_size,
            on_page=activity.heartbeat,
        )
