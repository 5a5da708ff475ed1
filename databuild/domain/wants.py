"""Which events the commands about a want append (SPEC 3.1): creating it, waiting for its inputs,
flagging its SLA, cancelling it. Its decision steps are ``decisions``; how it ends, ``endings``."""

from databuild.domain import events as ev
from databuild.models import WantState


def canceled(want_id: str, reason: str) -> ev.WantFinished:
    return ev.WantFinished(
        type=ev.FINISH_EVENT_TYPE[WantState.canceled],
        want_id=want_id,
        state=WantState.canceled,
        reason=reason,
    )
