"""One channel's alerts: a queue that groups them and delivers one message at a time (the rules are
``databuild.domain.alerts.ChannelState``). The first alert of a group goes out at once; the rest of the
group within the window go as one digest at the window's end. A channel that does not take a message is
tried again after a growing delay while its alerts go on queueing, so a channel that is down costs one
connection per try, not one per alert, and other channels, each with a queue of its own, never wait.
The workflow ends when its queue is empty and its windows closed; the next alert starts it again."""

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.alerts import AlertActivities
    from databuild.domain.alerts import Alert, retry_delay
    from databuild.temporal import protocol as p

# A run continues as new past this many history events (Temporal's limit is about 50k), with its queue.
HISTORY_LIMIT = 5_000
ONE_TRY = RetryPolicy(maximum_attempts=1)  # the queue retries, with what came meanwhile folded in


@workflow.defn(name=p.ALERT_CHANNEL_WORKFLOW)
class AlertChannelWorkflow:
    @workflow.init
    def __init__(self, input: p.AlertChannelInput) -> None:
        # Set before the first signal is handled: signal-with-start delivers it with the start.
        self._state = input.state
        self._arrived = False

    @workflow.signal(name=p.SIGNAL_ALERT)
    def queue(self, alert: Alert) -> None:
        self._state = self._state.queued(alert, workflow.now())
        self._arrived = True

    @workflow.run
    async def run(self, input: p.AlertChannelInput) -> None:
        while True:
            if workflow.info().get_current_history_length() > HISTORY_LIMIT:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(input.model_copy(update={"state": self._state}))
            now = workflow.now()
            self._state, given_up = self._state.tidied(now, input.window, input.give_up_after)
            if given_up:
                workflow.logger.warning(
                    "channel %s: %d alert(s) given up after %s", input.channel, given_up, input.give_up_after
                )
            due = self._state.next_due(input.window)
            if due is not None and due[1] <= now:
                if not await self._deliver(input.channel, due[0].key):
                    return  # the settings no longer name the channel
                continue
            wake = self._state.wake_at(input.window)
            if wake is None:
                return  # nothing waits and no window is open
            self._arrived = False
            with contextlib.suppress(asyncio.TimeoutError):
                await workflow.wait_condition(lambda: self._arrived, timeout=wake - now)

    async def _deliver(self, channel: str, key: str) -> bool:
        """Send the group's message; on failure, put it back and wait before the next try (alerts that
        come meanwhile join the queue). False if the channel is gone from the settings."""
        self._state, group = self._state.taken(key)
        message = group.message(follow_up=key in self._state.sent)
        try:
            known: bool = await workflow.execute_activity_method(
                AlertActivities.deliver_alert,
                p.DeliverInput(alert=message, channel=channel),
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=ONE_TRY,
            )
        except ActivityError as error:
            self._state = self._state.not_delivered(group)
            delay = retry_delay(self._state.failures)
            workflow.logger.warning(
                "channel %s did not take %s (try again in %s): %s", channel, key, delay, error
            )
            await workflow.sleep(delay)
            return True
        self._state = self._state.delivered(group, workflow.now())
        return known
