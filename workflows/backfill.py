"""One workflow per backfill: its window. It starts the workflows of the backfill's wants in the order
of its range, never more than ``DATABUILD_BACKFILL_WINDOW`` open at once (Temporal's sliding-window
pattern for batch work), so a backfill of 100,000 partitions never opens 100,000 workflows. Each step
is one activity over the BEL; between steps it waits a tick, or a wake (more wants registered, a
resume, a retry). Deterministic; I/O is in activities."""

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.backfills import BackfillActivities
    from databuild.backfill import WindowStep
    from databuild.temporal import protocol as p
    from workflows.changes import WAKE_AFTER_DONE

# While the BEL or Temporal is down, steps back off to one try every 30 s, and never give up.
STEP_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2, maximum_interval=timedelta(seconds=30)
)
STEP_TIMEOUT = timedelta(minutes=5)
PAUSED_LOOK = timedelta(minutes=1)  # a resume wakes it; this only bounds a missed wake


@workflow.defn(name=p.BACKFILL_WINDOW_WORKFLOW)
class BackfillWindowWorkflow:
    def __init__(self) -> None:
        self._woken = False

    @workflow.signal(name=p.SIGNAL_WAKE)
    def wake(self) -> None:
        self._woken = True

    @workflow.run
    async def run(self, input: p.BackfillWindowInput) -> None:
        low = input.low
        for _ in range(input.steps_per_run):
            self._woken = False
            step: WindowStep = await workflow.execute_activity_method(
                BackfillActivities.advance_backfill,
                p.BackfillWindowInput(backfill_id=input.backfill_id, low=low),
                start_to_close_timeout=STEP_TIMEOUT,
                # A step lost with its worker is retried this soon (it heartbeats every 5 s).
                heartbeat_timeout=timedelta(seconds=15),
                retry_policy=STEP_RETRY,
            )
            low = step.low
            workflow.set_current_details(_details(step))
            if step.done and not (self._woken and workflow.patched(WAKE_AFTER_DONE)):
                return
            if workflow.info().is_continue_as_new_suggested():
                break
            wait = PAUSED_LOOK if step.paused else input.tick
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self._woken, timeout=wait)
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(input.model_copy(update={"low": low}))


def _details(step: WindowStep) -> str:
    state = "cancelled" if step.canceled else "paused" if step.paused else "running"
    return (
        f"backfill `{step.backfill_id}` ({state}): {step.started} of {step.partitions} wants started, "
        f"{step.open} of them open"
    )
