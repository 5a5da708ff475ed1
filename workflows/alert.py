"""An alert: its workflow id makes it once per subject and kind. It hands the alert to the queue of each
channel that receives it (workflows/alert_channel.py), which groups it with others and delivers.
Alerts raised before those queues existed deliver to each channel themselves, each retried on its own
until it is taken or the give-up time passes."""

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.alerts import AlertActivities
    from databuild import protocol as p

CHANNEL_QUEUES = "alert-channel-queues"  # patch: hand alerts to the channels' queues
DELIVERY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0, maximum_interval=timedelta(minutes=5)
)


@workflow.defn(name=p.ALERT_WORKFLOW)
class AlertWorkflow:
    @workflow.run
    async def run(self, input: p.AlertInput) -> p.AlertResult:
        channels = await workflow.execute_activity_method(
            AlertActivities.route_alert, input.alert, start_to_close_timeout=timedelta(seconds=30)
        )
        if workflow.patched(CHANNEL_QUEUES):
            queued = await asyncio.gather(*(self._queue(input, channel) for channel in channels))
            return p.AlertResult(
                delivered=[], failed=[], queued=[c for c, ok in zip(channels, queued, strict=True) if ok]
            )
        outcomes = await asyncio.gather(
            *(self._deliver(input, channel) for channel in channels), return_exceptions=False
        )
        return p.AlertResult(
            delivered=[c for c, ok in zip(channels, outcomes, strict=True) if ok],
            failed=[c for c, ok in zip(channels, outcomes, strict=True) if not ok],
        )

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

    async def _deliver(self, input: p.AlertInput, channel: str) -> bool:
        try:
            return await workflow.execute_activity_method(
                AlertActivities.deliver_alert,
                p.DeliverInput(alert=input.alert, channel=channel),
                start_to_close_timeout=timedelta(seconds=60),
                schedule_to_close_timeout=input.give_up_after,
                retry_policy=DELIVERY_RETRY,
            )
        except ActivityError as error:
            workflow.logger.warning("alert %s not delivered to %s: %s", input.alert.key, channel, error)
            return False
