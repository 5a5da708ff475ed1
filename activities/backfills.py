"""The activity of a backfill's window: one step over the BEL, then the wants it admits started."""

from temporalio import activity
from temporalio.client import Client

from activities.heartbeats import heartbeating
from databuild.backfill import WindowStep
from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.domain.wants import WantStart
from databuild.temporal import protocol as p
from databuild.temporal.wants import start_wants

# A step starts its wants this many at a time, and looks between two groups whether its backfill was
# paused or cancelled meanwhile: a cancel of a big backfill stops new work within one group, not once a
# whole window's worth of starts has gone through (seconds on a busy worker).
START_GROUP = 32


class BackfillActivities:
    def __init__(self, bel: BuildEventLog, client: Client, settings: Settings) -> None:
        self.bel = bel
        self.client = client
        self.settings = settings

    @activity.defn
    @heartbeating  # starting a group of wants, or planning a big backfill's step, takes seconds
    async def advance_backfill(self, input: p.BackfillWindowInput) -> WindowStep:
        """Plan the window's step, start the wants it admits, then record it: an attempt that dies before
        it has recorded leaves the window where it was, and the retry starts the same wants again
        (idempotently), so no want is recorded started without its workflow. A step whose backfill is
        paused or cancelled while it starts stops there, unrecorded, as an attempt that died: a cancel
        ends the wants it did not record started (those it started find theirs ended at their first
        decision), and the step after a resume starts them, attaching to those already started."""
        step = await self.bel.call(
            self.bel.backfills.plan_window_step, input.backfill_id, self.settings.backfill_window, input.low
        )
        halted = step.paused, step.canceled
        for first in range(0, len(step.to_start), START_GROUP):
            if first:
                halted = await self.bel.call(self.bel.backfills.halted, input.backfill_id)
                if any(halted):  # not recorded: the window stays where it was
                    return _halted(step, *halted, started=step.read)
            await start_wants(
                self.client,
                [WantStart.of(want) for want in step.to_start[first : first + START_GROUP]],
                self.settings.task_queue,
                self.bel,
                on_started=activity.heartbeat,
            )
        if step.to_start:  # it moves on, and also ends at once if the backfill was cancelled meanwhile
            halted = await self.bel.call(self.bel.backfills.halted, input.backfill_id)
        moved = await self.bel.call(self.bel.backfills.record_window_step, step)
        return _halted(step, *halted, started=None if moved else step.read)


def _halted(step: WindowStep, paused: bool, canceled: bool, *, started: int | None = None) -> WindowStep:
    """The step as the workflow gets it (no specs), with the backfill's flags as last read, and where the
    window stands (``started``: the planned place unless given)."""
    moved = step.started if started is None else started
    return step.model_copy(update={"to_start": [], "paused": paused, "canceled": canceled, "started": moved})
