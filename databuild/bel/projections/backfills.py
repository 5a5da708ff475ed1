"""Projections of the events of backfills."""

from datetime import datetime

from sqlalchemy import Connection

from databuild.bel import schema as s
from databuild.bel.engine import insert_rows
from databuild.bel.projections.common import (
    projects,
    set_backfill,
)
from databuild.domain import events as ev


@projects(ev.BackfillRegistered)
def _backfill_registered(conn: Connection, event: ev.BackfillRegistered, at: datetime) -> None:
    insert_rows(
        conn,
        s.backfills,
        {
            "backfill_id": event.backfill_id,
            "request": event.request.model_dump(mode="json"),
            "partitions": event.partitions,
            "created_at": at,
            "started": 0 if event.windowed else event.partitions,
        },
    )


@projects(ev.BackfillWantsAdded)
def _backfill_wants_added(conn: Connection, event: ev.BackfillWantsAdded, at: datetime) -> None:
    seqs: list[int | None] = list(event.seqs) if event.seqs else [None] * len(event.want_ids)
    insert_rows(
        conn,
        s.backfill_wants,
        [
            {"backfill_id": event.backfill_id, "want_id": w, "seq": seq}
            for w, seq in zip(event.want_ids, seqs, strict=True)
        ],
    )


@projects(ev.BackfillPaused)
def _backfill_paused(conn: Connection, event: ev.BackfillPaused, at: datetime) -> None:
    set_backfill(conn, event.backfill_id, paused=True)


@projects(ev.BackfillResumed)
def _backfill_resumed(conn: Connection, event: ev.BackfillResumed, at: datetime) -> None:
    set_backfill(conn, event.backfill_id, paused=False)


@projects(ev.BackfillRetried)
def _backfill_retried(conn: Connection, event: ev.BackfillRetried, at: datetime) -> None:
    if event.rewind:
        rewinds = s.backfills.c.rewinds + 1
        set_backfill(conn, event.backfill_id, canceled=False, started=0, rewinds=rewinds)
    else:
        set_backfill(conn, event.backfill_id, canceled=False)


@projects(ev.BackfillCanceled)
def _backfill_canceled(conn: Connection, event: ev.BackfillCanceled, at: datetime) -> None:
    set_backfill(conn, event.backfill_id, canceled=True)


@projects(ev.BackfillAdvanced)
def _backfill_advanced(conn: Connection, event: ev.BackfillAdvanced, at: datetime) -> None:
    set_backfill(conn, event.backfill_id, started=event.started)
