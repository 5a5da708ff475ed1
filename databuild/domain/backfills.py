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
@dataclass(frozen=True)
class Registration:
    events: list[ev.Event]
    to_start: list[WantSpec]  # the wants of the backfill that are open (none once it is cancelled)


def register(
    request: BackfillRequest,
    partitions: int,
    specs: Sequence[WantSpec],
    *,
    canceled: bool | None,
    wants: Mapping[str, WantState],
    members: Set[str],
) -> Registration:
    """Record the backfill (``canceled`` None: the first time it is asked for) and ``specs`` as its
    wants, each created unless it exists (``wants``: the state of those that do) and added unless it is
    one of its ``members`` already. A cancelled backfill cancels the open ones at once: so a cancel during
    the registration reaches every want registered after it."""
    backfill_id = request.backfill_id
    events: list[ev.Event] = []
    if canceled is None:
        events.append(ev.BackfillRegistered(backfill_id=backfill_id, request=request, partitions=partitions))
    states = dict(wants)
    for spec in specs:
        events += want_rules.created(spec, known=spec.want_id in states)
        states.setdefault(spec.want_id, WantState.new)
    new = [w for w in dict.fromkeys(spec.want_id for spec in specs) if w not in members]
    if new:
        events.append(ev.BackfillWantsAdded(backfill_id=backfill_id, want_ids=new))
    unfinished = [spec for spec in specs if not states[spec.want_id].is_final]
    if not canceled:
        return Registration(events, unfinished)
    events += [want_rules.canceled(spec.want_id, cancel_reason(backfill_id)) for spec in unfinished]
    return Registration(events, [])


def cancel(backfill_id: str, canceled: bool) -> list[ev.Event]:
    """Cancel the backfill, once. Its wants are cancelled one by one (``wants.cancel``)."""
    return [] if canceled else [ev.BackfillCanceled(backfill_id=backfill_id)]


def pause(backfill_id: str, paused: bool, pausing: bool) -> list[ev.Event]:
    """Pause (``pausing``) or resume the backfill, unless it already is."""
    if paused == pausing:
        return []
    return [
        ev.BackfillPaused(backfill_id=backfill_id) if pausing else ev.BackfillResumed(backfill_id=backfill_id)
    ]


def retry(backfill_id: str) -> list[ev.Event]:
    """A retried backfill is no longer cancelled: the wants it registers from then on start. Its wants
    that ended failed or canceled are reopened by ``endings.reopen``."""
    return [ev.BackfillRetried(backfill_id=backfill_id)]
