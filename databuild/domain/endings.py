"""How a want ends, and opens again: which events a finish or a retry appends.

A want is open once when it is created, and once more with each retry that reopens it (its *opening*, 0
then 1, 2, ...). A workflow run serves the opening it was started for, and every write it makes says so.
So a run from before a reopen (one whose last workflow task runs after the retry, a cancellation still in
flight) is recognised as replaced in the same transaction, and its writes touch nothing. Only a reopen
replaces a run: a decision the run has not heard of (its workflow task timed out after the decision
committed) is still its own."""

from dataclasses import dataclass
from enum import StrEnum

from databuild.domain import events as ev
from databuild.errors import InvalidTransitionError
from databuild.models import WantState


class Finished(StrEnum):
    recorded = "recorded"  # this call recorded the outcome
    already = "already"  # the want had ended: the finish is a repeat (its side effects are repeated too)
    stale = "stale"  # from a run that a retry has since replaced: nothing is recorded or told


@dataclass(frozen=True)
class Ending:
    finished: Finished
    events: list[ev.Event]


def replaced(opening: int, run_opening: int | None) -> bool:
    """Whether a run that serves ``run_opening`` of a want now at ``opening`` was replaced by a retry
    (None: an outside authority, such as an operator's cancel of the want as it is now, never is)."""
    return run_opening is not None and run_opening < opening


def finish(
    want_id: str,
    current: WantState,
    opening: int,
    outcome: WantState,
    *,
    reason: str | None = None,
    instance_id: str | None = None,
    run_opening: int | None = None,
) -> Ending:
    """End a want, now at ``opening``, in ``outcome``, for a run that serves ``run_opening``."""
    if not outcome.is_final:
        raise InvalidTransitionError(f"{outcome.value} is not a final want state")
    if replaced(opening, run_opening):
        return Ending(Finished.stale, [])
    if current.is_final:
        return Ending(Finished.already, [])
    event = ev.WantFinished(
        type=ev.FINISH_EVENT_TYPE[outcome],
        want_id=want_id,
        state=outcome,
        reason=reason,
        instance_id=instance_id,
    )
    return Ending(Finished.recorded, [event])


def reopen(want_id: str, current: WantState, decision_seq: int) -> list[ev.Event]:
    """Open a want that ended failed or canceled again (``databuild retry``), as its next decision step
    and its next opening; any other want is left as it is."""
    if current not in (WantState.failed, WantState.canceled):
        return []
    return [ev.WantRetried(want_id=want_id, was=current, decision_seq=decision_seq + 1)]
