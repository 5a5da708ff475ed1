"""Projections of the events of worker processes."""

from datetime import datetime

from sqlalchemy import Connection

from databuild.bel import schema as s
from databuild.bel.engine import upsert_rows
from databuild.bel.projections.common import projects
from databuild.domain import events as ev


@projects(ev.WorkerStarted)
def _worker_started(conn: Connection, event: ev.WorkerStarted, at: datetime) -> None:
    row = {
        "identity": event.identity,
        "task_queue": event.task_queue,
        "graph": event.graph,
        "versions": event.versions,
        "started_at": at,
    }
    upsert_rows(conn, s.workers, [row], setting=("task_queue", "graph", "versions", "started_at"))
