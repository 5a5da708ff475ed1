"""How a want ends, and opens again: which events a finish or a retry appends.

A retry reopens a want as a step of its decision sequence, and a finishing run says which step it has
reached. So a run from before the reopen (one whose last workflow task is replayed after the retry, say)
is recognised as stale in the same transaction, and its outcome touches nothing."""

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


def finish(
    want_id: str,
    current: WantState,
    decision_seq: int,
    outcome: WantState,
    *,
    reason: str | None = None,
    instance_id: str | None = None,
    seq: int | None = None,
) -> Ending:
    """End a want in ``outcome``. ``seq`` is the decision step the finishing run has reached (None: an
    outside authority such as the repair of a want whose workflow ended unheard, which is never stale)."""
    if not outcome.is_final:
        raise InvalidTransitionError(f"{outcome.value} is not a final want state")
    if seq is not None and seq < decision_seq:
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
    """Open a want that ended failed or canceled again (``databuild retry``), as its next decision step;
    any other want is left as it is."""
    if current not in (WantState.failed, WantState.canceled):
        return []
    return [ev.WantRetried(want_id=want_id, was=current, decision_seq=decision_seq + 1)]
