"""Alerts: raising one (starting its workflow, once per subject and kind) and the activities that route
it, hand it to each channel's queue and deliver a channel's messages."""

import asyncio
import logging

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from databuild.config import Settings
from databuild.domain.alerts import Alert
from databuild.operations.alerts import DeliveryError, deliver, linked, route
from databuild.temporal import protocol as p

log = logging.getLogger(__name__)


async def raise_alert(client: Client, settings: Settings, alert: Alert) -> bool:
    """Start the alert's workflow unless one was started for it before (its id is the alert's key, and
    an ended one is never started again), or no channel receives it. Returns whether it started one."""
    alert = linked(alert, settings)
    if not await asyncio.to_thread(route, alert, settings):
        return False
    try:
        await client.start_workflow(
            p.ALERT_WORKFLOW,
            p.AlertInput(alert=alert, give_up_after=settings.alert_give_up_after),
            id=f"alert:{alert.key}",
            task_queue=settings.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=alert.title,
        )
    except WorkflowAlreadyStartedError:
        return False  # raised before (by an earlier attempt, or another worker)
    return True


class AlertActivities:
    def __init__(self, settings: Settings, client: Client) -> None:
        self.settings = settings
        self.client = client

    @activity.defn
    async def route_alert(self, alert: Alert) -> list[str]:
        """The channels (ids, not URLs: a URL may hold a token) that receive it."""
        return await asyncio.to_thread(route, alert, self.settings)

    @activity.defn
    async def queue_alert(self, input: p.DeliverInput) -> None:
        """Hand the alert to its channel's queue (the channel's AlertChannel workflow, started if it is not
        running). A retry after the hand-over is counted once there."""
        await self.client.start_workflow(
            p.ALERT_CHANNEL_WORKFLOW,
            p.AlertChannelInput(
                channel=input.channel,
                window=self.settings.alert_group_window,
                give_up_after=self.settings.alert_give_up_after,
            ),
            id=p.alert_channel_workflow_id(self.settings.task_queue, input.channel),
            task_queue=self.settings.task_queue,
            start_signal=p.SIGNAL_ALERT,
            start_signal_args=[input.alert],
            static_summary=f"alerts to channel {input.channel}",
        )

    @activity.defn
    async def deliver_alert(self, input: p.DeliverInput) -> bool:
        try:
            return await asyncio.to_thread(deliver, input.alert, input.channel, self.settings)
        except DeliveryError as error:
            # Retried by the workflow's policy: a channel that is down gets it when it comes back.
            raise ApplicationError(str(error), type="AlertNotDelivered") from None
