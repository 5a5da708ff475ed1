"""Applies one event to the projection tables. The only code that writes projections, so replaying
the log through it rebuilds current state exactly.

One small handler per event type, in the module of its aggregate under ``bel.projections``, registered
with ``@projects(EventType)`` in ``HANDLERS``; ``apply`` dispatches through that table (tests check that
every type of ``events.Event`` has exactly one)."""

from collections import deque
from collections.abc import Sequence
from datetime import datetime
from itertools import groupby

from sqlalchemy import Connection

from databuild.bel.projections import backfills, job_runs, partitions, tables, wants, workers
from databuild.bel.projections.common import BULK_HANDLERS, HANDLERS, projects
from databuild.domain import events as ev

# Importing the aggregates' modules registers their handlers.
AGGREGATES = (wants, job_runs, partitions, backfills, workers, tables)

__all__ = ["AGGREGATES", "HANDLERS", "apply", "apply_all", "merged", "projects"]


def apply(conn: Connection, event: ev.Event, at: datetime) -> None:
    handler = HANDLERS.get(type(event))
    if handler is None:
        raise TypeError(f"no projection for event {type(event).__name__}")
    handler(conn, event, at)


def apply_all(conn: Connection, events: Sequence[ev.Event], at: datetime) -> None:
    """``apply`` each event in order; a run of consecutive events of a type with a bulk projection is
    applied at once."""
    for kind, run in groupby(events, key=type):
        bulk = BULK_HANDLERS.get(kind)
        if bulk is None:
            for event in run:
                apply(conn, event, at)
        else:
            bulk(conn, list(run), at)


def merged(commands: Sequence[Sequence[ev.Event]]) -> list[ev.Event]:
    """The events of commands that touch no row in common, in an order that keeps each command's own and
    puts events of one type together where it can: projected through ``apply_all``, N decisions that each
    queue a run cost a statement or two per table, not N. Their state is the same as in the log's order,
    command after command, because no two commands touch the same row."""
    queues = [deque(events) for events in commands if events]
    order: list[ev.Event] = []
    while queues:
        kind = type(queues[0][0])
        for queue in queues:
            while queue and type(queue[0]) is kind:
                order.append(queue.popleft())
        queues = [queue for queue in queues if queue]
    return order
