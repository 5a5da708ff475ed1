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
        """Move the window (recorded first, so a retry moves on from there) and start the wants it
        admitted. Starting is idempotent; a want recorded started whose start never happened (this
        attempt died) is started by the worker's repair of wants held `new`."""
        step = await self.bel.call(
            self.bel.advance_backfill, input.backfill_id, self.settings.backfill_window, input.low
        )
        await start_wants(
            self.client, step.to_start, self.settings.task_queue, self.bel, on_started=activity.heartbeat
        )
        return step.model_copy(update={"to_start": []})
