"""An alert: its workflow id makes it once per subject and kind. It hands the alert to the queue of each
channel that receives it (workflows/alert_channel.py), which groups it with others and delivers."""

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.alerts import AlertActivities
    from databuild.temporal import protocol as p


@workflow.defn(name=p.ALERT_WORKFLOW)
class AlertWorkflow:
    @workflow.run
    async def run(self, input: p.AlertInput) -> p.AlertResult:
        channels = await workflow.execute_activity_method(
            AlertActivities.route_alert, input.alert, start_to_close_timeout=timedelta(seconds=30)
        )
        queued = await asyncio.gather(*(self._queue(input, channel) for channel in channels))
        return p.AlertResult(queued=[c for c, ok in zip(channels, queued, strict=True) if ok])

    async def _queue(self, input: p.AlertInput, channel: str) -> bool:
        try:
            await workflow.execute_activity_method(
                AlertActivities.queue_alert,
                p.DeliverInput(alert=input.alert, channel=channel),
                start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=input.give_up_after,
            )
        except ActivityError as error:
            workflow.logger.warning("alert %s not queued for %s: %s", input.alert.key, channel, error)
            return False
        return True
