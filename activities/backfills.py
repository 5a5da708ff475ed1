"""The activity of a backfill's window: one step over the BEL, then the wants it admits started."""

from temporalio import activity
from temporalio.client import Client

from databuild.backfill import WindowStep
from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.temporal import protocol as p
from databuild.temporal.wants import start_wants


class BackfillActivities:
    def __init__(self, bel: BuildEventLog, client: Client, settings: Settings) -> None:
        self.bel = bel
        self.client = client
        self.settings = settings

    @activity.defn
    async def advance_backfill(self, input: p.BackfillWindowInput) -> WindowStep:
        """Plan the window's step, start the wants it admits, then record it: an attempt that dies before
        it has recorded leaves the window where it was, and the retry starts the same wants again
        (idempotently), so no want is recorded started without its workflow."""
        step = await self.bel.call(
            self.bel.plan_window_step, input.backfill_id, self.settings.backfill_window, input.low
        )
        await start_wants(
            self.client, step.to_start, self.settings.task_queue, self.bel, on_started=activity.heartbeat
        )
        await self.bel.call(self.bel.record_window_step, step)
        return step.model_copy(update={"to_start": []})
