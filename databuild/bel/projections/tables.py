"""Projection of the commits DataBuild makes to tables: which instance each table holds per partition."""

from datetime import datetime

from sqlalchemy import Connection, and_, bindparam, update

from databuild.bel import schema as s
from databuild.bel.engine import insert_rows, upsert_rows
from databuild.bel.projections.common import projects
from databuild.domain import events as ev

t = s.table_commits
# What the table held of these refs before the commit is out of it now: replaced, or withdrawn.
REMOVE = (
    update(t)
    .where(and_(s.one_of(t.c.ref, "refs"), t.c.removed_at.is_(None), t.c.table_name == bindparam("table")))
    .values(removed_at=bindparam("at"), removed_snapshot_id=bindparam("snapshot"))
)


st = s.table_stats
COUNT_COMMIT = update(st).where(st.c.table_name == bindparam("table")).values(commits=st.c.commits + 1)
COUNT_FAILURE = (
    update(st)
    .where(st.c.table_name == bindparam("table"))
    .values(failures=st.c.failures + 1, last_failure=bindparam("reason"), last_failure_at=bindparam("at"))
)


def _stats_row(conn: Connection, table: str, format_: str) -> None:
    insert_rows(
        conn,
        st,
        {"table_name": table, "format": format_, "commits": 0, "failures": 0},
        skip_existing=True,
    )


@projects(ev.TableCommitFailed)
def _table_commit_failed(conn: Connection, event: ev.TableCommitFailed, at: datetime) -> None:
    _stats_row(conn, event.table, event.format)
    conn.execute(COUNT_FAILURE, {"table": event.table, "reason": event.reason, "at": at})


@projects(ev.TableCommitted)
def _table_committed(conn: Connection, event: ev.TableCommitted, at: datetime) -> None:
    _stats_row(conn, event.table, event.format)
    conn.execute(COUNT_COMMIT, {"table": event.table})
    refs = [*event.withdrawn, *(i.ref for i in event.instances)]
    conn.execute(
        REMOVE, {"refs": refs, "table": event.table, "at": event.committed_at, "snapshot": event.snapshot_id}
    )
    rows = [
        {
            "instance_id": i.instance_id,
            "ref": i.ref,
            "table_name": event.table,
            "format": event.format,
            "snapshot_id": event.snapshot_id,
            "committed_at": event.committed_at,
            "removed_snapshot_id": None,
            "removed_at": None,
        }
        for i in event.instances
        if i.instance_id
    ]
    upsert_rows(
        conn,
        t,
        rows,
        setting=(
            "ref",
            "table_name",
            "format",
            "snapshot_id",
            "committed_at",
            "removed_snapshot_id",
            "removed_at",
        ),
    )
