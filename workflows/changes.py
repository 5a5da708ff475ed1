"""The workflow changes since 0.1.0 (docs/development-policy.md), and how a run asks whether to take one.

A change behind ``workflow.patched`` costs every run that asks a marker in its history and an upsert of
Temporal's ``TemporalChangeVersion`` search attribute (a visibility write), per change: 4 of a want's 20
history events. A run's input says which code started it (``WantInput.version``, ``JobRunInput.version``);
runs started at a version take the changes folded into it without asking, and leave neither. Runs started
before (their inputs have no version: 0) ask as they always did, so their histories replay unchanged.
"""

from temporalio import workflow

# A waiting want starts its watch activity only once a lease has passed without the signal.
WATCH_AFTER_TIMER = "watch-after-timer"
# A want that ends as the run it started ends gives that run a moment to end first (``_let_run_end``).
FINISH_AFTER_RUN = "finish-after-run"
# The decision that queues a run starts its workflow too (``DecideInput.start_run``): the run is no child of
# the want, so the want's history has no child events, nor the tasks they woke.
RUN_STARTED_BY_DECISION = "run-started-by-decision"
# A finished run signals its first page of subscribers from a local activity (``calls.fan_out``).
FAN_OUT_FIRST_LOCAL = "fan-out-first-local"
# A new run's first step records the want and decides in one local activity (``WantActivities.first_step``).
FIRST_STEP_REGISTERS = "first-step-registers"
# A run whose job activity told every want and did what follows a run's end (``JobOutcome.fanned_out``) does
# not fan out again.
FANNED_OUT_BY_JOB = "fanned-out-by-job"
# A wake (a retry's) that came during a backfill window's step which found nothing left to start (the
# backfill was cancelled) takes another step: the window used to end anyway, and the wake was lost.
WAKE_AFTER_DONE = "window-wake-after-done"

# The changes each input version takes without asking (the code starts runs at
# ``protocol.WORKFLOW_VERSION``). A change made after the last version is asked for with ``workflow.patched``
# until a new version folds it in.
FOLDED_INTO: dict[str, int] = {
    WATCH_AFTER_TIMER: 1,
    FINISH_AFTER_RUN: 1,
    RUN_STARTED_BY_DECISION: 1,
    FAN_OUT_FIRST_LOCAL: 1,
    FIRST_STEP_REGISTERS: 1,
    FANNED_OUT_BY_JOB: 1,
}


def patched(change: str, version: int) -> bool:
    """Whether a run whose input has ``version`` takes ``change``: always, from the version that folded
    it in; else as ``workflow.patched`` says (a run that passed this point before the change did not)."""
    folded = FOLDED_INTO.get(change)
    if folded is not None and version >= folded:
        return True
    return workflow.patched(change)
