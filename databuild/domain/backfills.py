"""The partitions of a backfill: a pure function of its request and the graph's pattern, so the backfill
id and every want id are the same each time the same backfill is asked for."""

from datetime import datetime, timedelta

from databuild.backfill import DAY, BackfillRequest
from databuild.durations import later
from databuild.errors import InvalidInputError
from databuild.graph import Graph, Pattern


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
