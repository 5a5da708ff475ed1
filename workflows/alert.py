"""An alert: delivered to each channel that receives it, each retried on its own until it is taken
(or the settings' give-up time passes), so one unreachable channel never holds up the others or the
want that raised it."""

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.alerts import AlertActivities
    from databuild import protocol as p

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
        outcomes = await asyncio.gather(
            *(self._deliver(input, channel) for channel in channels), return_exceptions=False
        )
        return p.AlertResult(
            delivered=[c for c, ok in zip(channels, outcomes, strict=True) if ok],
            failed=[c for c, ok in zip(channels, outcomes, strict=True) if not ok],
        )

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
