"""The partitions of a backfill, and the events its commands append. The partitions are a pure
function of its request and the graph's pattern, so the backfill id and every want id are the same
each time the same backfill is asked for."""

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime, timedelta

from databuild.backfill import DAY, BackfillRequest, cancel_reason
from databuild.domain import events as ev
from databuild.domain import wants as want_rules
from databuild.durations import later
from databuild.errors import InvalidInputError
from databuild.graph import Graph, Pattern
from databuild.models import WantSpec, WantState


def backfill_partitions(request: BackfillRequest, graph: Graph) -> list[tuple[str, datetime]]:
    """Each partition of the range with its data time. Raises InvalidInputError naming the problem if
    the pattern is not one the graph builds or announces, or has other than one placeholder."""
    known = {p.text: p for p in graph.patterns}
    pattern: Pattern | None = known.get(request.pattern)
    if pattern is None:
        raise InvalidInputError(
            f"{request.pattern!r} is not an output pattern of graph {graph.name!r} "
            f"(its patterns: {', '.join(sorted(known)) or 'none'})"
        )
    if len(pattern.names) != 1:
        raise InvalidInputError(
            f"{request.pattern!r} has {len(pattern.names)} placeholders; a backfill fills exactly one "
            "(the time), e.g. 'daily_users/{date}'"
        )
    (name,) = pattern.names
    daily = request.step % DAY == timedelta(0)
    found = []
    at: datetime | None = request.start
    while at is not None and at <= request.end:
        value = at.date().isoformat() if daily else at.strftime("%Y-%m-%dT%H")
        found.append((pattern.format({name: value}), at))
        at = later(at, request.step)  # None: the range ran into the calendar's end
    return found


# Which events the backfill commands append. -------------------------------------------------------------
def register(
    request: BackfillRequest,
    partitions: int,
    specs: Sequence[WantSpec],
    *,
    first_seq: int,
    canceled: bool | None,
    wants: Mapping[str, WantState],
    members: Set[str],
) -> list[ev.Event]:
    """Record the backfill (``canceled`` None: the first time it is asked for) and ``specs``, its wants
    at places ``first_seq`` on, each created unless it exists (``wants``: the state of those that do) and
    added unless it is one of its ``members`` already. Their workflows are started by its window
    (``advance``). A cancelled backfill cancels the open ones at once: so a cancel during the
    registration reaches every want registered after it."""
    backfill_id = request.backfill_id
    events: list[ev.Event] = []
    if canceled is None:
        events.append(
            ev.BackfillRegistered(
                backfill_id=backfill_id, request=request, partitions=partitions, windowed=True
            )
        )
    states = dict(wants)
    for spec in specs:
        events += want_rules.created(spec, known=spec.want_id in states)
        states.setdefault(spec.want_id, WantState.new)
    places = {spec.want_id: seq for seq, spec in enumerate(specs, first_seq) if spec.want_id not in members}
    if places:
        events.append(
            ev.BackfillWantsAdded(backfill_id=backfill_id, want_ids=list(places), seqs=list(places.values()))
        )
    if canceled:
        reason = cancel_reason(backfill_id)
        ids = dict.fromkeys(spec.want_id for spec in specs)
        events += [want_rules.canceled(w, reason) for w in ids if not states[w].is_final]
    return events


@dataclass(frozen=True)
class Advance:
    started: int  # the window's place once the step's wants are started
    to_start: list[str]  # the wants whose workflows start now, in the backfill's order


def advance(
    *,
    started: int,
    open_wants: int,
    window: int,
    paused: bool,
    canceled: bool,
    following: Sequence[tuple[int, str, WantState]],
) -> Advance:
    """The backfill's window moves on: while fewer than ``window`` of the wants it started are open
    (``open_wants``), it starts the next, in the order of the range. ``following``: (place, want, state)
    of the wants registered at places from ``started`` on, in order. Wants that ended already (a
    re-registration, or a cancel) are passed over; a place not registered yet stops it. A paused or
    cancelled backfill starts nothing. The move is recorded once the wants are started (``moved``)."""
    if paused or canceled or open_wants >= window:
        return Advance(started, [])
    room = window - open_wants
    to_start: list[str] = []
    place = started
    for seq, want_id, state in following:
        if seq != place or len(to_start) == room:
            break
        place += 1
        if not state.is_final:
            to_start.append(want_id)
    return Advance(place, to_start)


def moved(backfill_id: str, *, current: int, read: int, to: int, rewound: bool = False) -> list[ev.Event]:
    """Record that the window started its wants from place ``read`` up to ``to``, unless it is no longer
    at ``read``, a retry ``rewound`` it since the step was planned (even to where the step read it: the
    wants the step found ended may be open again, with no workflow; its next step reads again), or it did
    not move."""
    if rewound or current != read or to == read:
        return []
    return [ev.BackfillAdvanced(backfill_id=backfill_id, started=to)]


def cancel(backfill_id: str, canceled: bool) -> list[ev.Event]:
    """Cancel the backfill, once. Its wants are cancelled one by one (``wants.cancel``)."""
    return [] if canceled else [ev.BackfillCanceled(backfill_id=backfill_id)]


def cancel_unstarted(backfill_id: str, wants: Mapping[str, WantState]) -> list[ev.Event]:
    """The wants of a cancelled backfill at places its window has not recorded started (``wants``: their
    states) end `canceled` in bulk, with no workflow told, if they never decided (``new``): they queued
    no run and derived nothing, and a workflow of theirs (a step is recorded only once its wants are
    started, so its window may be starting them) finds them ended at its first decision. One that decided
    has a workflow following a run or derivative wants: it is left to ``wants.cancel`` (the cancel's
    reach), which ends the run it queued and tells its workflow."""
    reason = cancel_reason(backfill_id)
    return [
        want_rules.canceled(want_id, reason) for want_id, state in wants.items() if state is WantState.new
    ]


def pause(backfill_id: str, paused: bool, pausing: bool) -> list[ev.Event]:
    """Pause (``pausing``) or resume the backfill, unless it already is."""
    if paused == pausing:
        return []
    return [
        ev.BackfillPaused(backfill_id=backfill_id) if pausing else ev.BackfillResumed(backfill_id=backfill_id)
    ]


def retry(backfill_id: str, *, windowed: bool) -> list[ev.Event]:
    """A retried backfill is no longer cancelled: the wants it registers from then on start. Its wants
    that ended failed or canceled are reopened by ``endings.reopen``; a ``windowed`` backfill's window
    goes back to the start of its range, to start them again in its order (passing over those that
    ended successfully)."""
    return [ev.BackfillRetried(backfill_id=backfill_id, rewind=windowed)]
