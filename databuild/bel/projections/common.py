"""The registry of projections, and the statements and row helpers they share.

Statements are built once, with bound parameters: building one per call (``update(...).values(...)``)
cost several times what executing it does, and a replay or a benchmark's fill runs millions."""

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, bindparam, delete, select, update

from databuild.bel import schema as s
from databuild.bel.engine import insert_rows, updating, upsert_rows
from databuild.domain import events as ev
from databuild.models import (
    InstanceRef,
    InstanceStatus,
    JobRunState,
    PartitionStatus,
)

E = TypeVar("E")
Handler = Callable[[Connection, Any, datetime], None]

HANDLERS: dict[type, Handler] = {}
# Projections of a run of events of one type at once, for the types commands append by the thousand (a
# backfill's wants): the same rows as applying each in turn, in a few statements instead of a few each.
BulkHandler = Callable[[Connection, Sequence[Any], datetime], None]
BULK_HANDLERS: dict[type, BulkHandler] = {}
ManyHandler = Callable[[Connection, Sequence[E], datetime], None]


def projects(
    event_type: type[E],
) -> Callable[[Callable[[Connection, E, datetime], None]], Callable[[Connection, E, datetime], None]]:
    """Registers the decorated function as the projection of ``event_type``; a second one is an error."""

    def register(
        handler: Callable[[Connection, E, datetime], None],
    ) -> Callable[[Connection, E, datetime], None]:
        if event_type in HANDLERS:
            raise RuntimeError(f"{event_type.__name__} already has a projection: {HANDLERS[event_type]}")
        HANDLERS[event_type] = handler
        return handler

    return register


def projects_together(event_type: type[E]) -> Callable[[ManyHandler[E]], ManyHandler[E]]:
    """Registers the decorated function as the projection of ``event_type``, applied to consecutive
    events of that type at once (and to one alone as its ``projects`` handler)."""

    def register(handler: ManyHandler[E]) -> ManyHandler[E]:
        projects(event_type)(lambda conn, event, at: handler(conn, [event], at))
        BULK_HANDLERS[event_type] = handler
        return handler

    return register


# Statements ----------------------------------------------------------------------------------------

# An UPDATE without .values() sets the columns named by the parameters it is executed with; "pk" binds
# the row's primary key.
UPDATE_WANT = updating(s.wants)
UPDATE_JOB_RUN = updating(s.job_runs)
UPDATE_PARTITION = updating(s.partitions)
UPDATE_INSTANCE = updating(s.partition_instances)
WORKFLOW_OF = select(s.wants.c.workflow_id).where(s.wants.c.want_id == bindparam("want_id"))
REFS_OF_WANTS = select(s.wants.c.ref, s.wants.c.want_id).where(s.one_of(s.wants.c.want_id, "want_ids"))
# The subscriptions of the wants ``ids`` (wants that ended).
UNSUBSCRIBE = delete(s.subscriptions).where(s.one_of(s.subscriptions.c.want_id, "ids"))
BATCH_OF = select(s.job_runs.c.outputs, s.job_runs.c.members, s.job_runs.c.attempts).where(
    s.job_runs.c.job_run_id == bindparam("job_run_id")
)
QUEUED_AT = select(s.job_runs.c.created_at).where(s.job_runs.c.job_run_id == bindparam("job_run_id"))
GRANT = update(s.run_pools).where(s.run_pools.c.job_run_id == bindparam("run")).values(granted=True)
RELEASE = delete(s.run_pools).where(s.run_pools.c.job_run_id == bindparam("job_run_id"))
PARTITION = select(s.partitions.c.status, s.partitions.c.instance_id).where(
    s.partitions.c.ref == bindparam("ref")
)
FACTS = select(s.partition_instances.c.facts).where(s.partition_instances.c.instance_id == bindparam("pk"))
SUPERSEDE = (
    update(s.partition_instances)
    .where(
        s.partition_instances.c.instance_id == bindparam("previous"),
        s.partition_instances.c.status == InstanceStatus.live.value,
    )
    .values(status=InstanceStatus.superseded.value, retired_at=bindparam("at"))
)
TAINT_PARTITION = (
    update(s.partitions)
    .where(s.partitions.c.ref == bindparam("pk"))
    .values(status=PartitionStatus.tainted.value, generation=s.partitions.c.generation + 1)
)
MARK_STALE = (
    update(s.partition_instances)
    .where(
        s.one_of(s.partition_instances.c.instance_id, "stale"),
        s.partition_instances.c.stale_cause.is_(None),
    )
    .values(stale_cause=bindparam("cause"))
)
# The taint behind an instance built from a tainted or stale input (a read that raced the taint).
TAINTED_READ = (
    select(
        s.partition_instances.c.instance_id,
        s.partition_instances.c.stale_cause,
    )
    .join(s.read_deps, s.read_deps.c.instance_id == s.partition_instances.c.instance_id)
    .where(
        s.read_deps.c.job_run_id == bindparam("job_run_id"),
        (s.partition_instances.c.status == InstanceStatus.tainted.value)
        | s.partition_instances.c.stale_cause.is_not(None),
    )
    .order_by(s.read_deps.c.id)
    .limit(1)
)


# Row helpers ---------------------------------------------------------------------------------------


def workflow_of(conn: Connection, want_id: str) -> str:
    return str(conn.execute(WORKFLOW_OF, {"want_id": want_id}).scalar_one())


def derivatives_by_ref(conn: Connection, want_ids: list[str]) -> dict[str, str]:
    """The derivative wants (recorded before the event that names them) by the ref each wants."""
    if not want_ids:
        return {}
    return {ref: want_id for ref, want_id in conn.execute(REFS_OF_WANTS, {"want_ids": want_ids})}


def set_backfill(conn: Connection, backfill_id: str, **values: object) -> None:
    conn.execute(update(s.backfills).where(s.backfills.c.backfill_id == backfill_id).values(**values))


def set_want(conn: Connection, want_id: str, at: datetime, **values: object) -> None:
    conn.execute(UPDATE_WANT, {"pk": want_id, "updated_at": at, **values})


def declare_job_runs(
    conn: Connection,
    events: Sequence[ev.JobRunQueued | ev.JobRunSkipped],
    at: datetime,
    state: JobRunState,
    reasons: Sequence[str | None] | None = None,
) -> None:
    """The runs' rows and their outputs' rows, in a statement per table for all of them."""
    insert_rows(
        conn,
        s.job_runs,
        [
            {
                "job_run_id": event.job_run_id,
                "job_label": event.job_label,
                "state": state.value,
                "outputs": event.outputs,
                "params": event.params,
                "want_id": event.want_id,
                "attempts": 0,
                "lost": False,
                "reason": reasons[n] if reasons else None,
                "missing": [],
                "workflow_id": event.workflow_id,
                "created_at": at,
                "updated_at": at,
            }
            for n, event in enumerate(events)
        ],
    )
    insert_rows(
        conn,
        s.job_run_outputs,
        [{"job_run_id": event.job_run_id, "ref": ref} for event in events for ref in event.outputs],
    )


def release_slots(conn: Connection, job_run_id: str) -> None:
    """An ended run holds no pool slot and waits for none."""
    conn.execute(RELEASE, {"job_run_id": job_run_id})


def set_job_run(conn: Connection, job_run_id: str, at: datetime, **values: object) -> None:
    conn.execute(UPDATE_JOB_RUN, {"pk": job_run_id, "updated_at": at, **values})


def link(conn: Connection, links: Sequence[tuple[str, str, str]]) -> None:
    """Link each (want, run, relation), unless the want is already linked to the run (its first relation
    stays), in one statement."""
    rows = [
        {"want_id": want_id, "job_run_id": job_run_id, "relation": relation}
        for want_id, job_run_id, relation in links
    ]
    insert_rows(conn, s.want_job_runs, rows, skip_existing=True)


def subscribe(conn: Connection, want_id: str, refs: list[str], workflow_id: str) -> None:
    rows = [{"ref": r, "want_id": want_id, "workflow_id": workflow_id} for r in dict.fromkeys(refs)]
    insert_rows(conn, s.subscriptions, rows, skip_existing=True)


def record_reads(conn: Connection, job_run_id: str, reads: list[InstanceRef]) -> None:
    rows = [{"job_run_id": job_run_id, "ref": r.ref, "instance_id": r.instance_id} for r in reads]
    insert_rows(conn, s.read_deps, rows)


def inherited_staleness(conn: Connection, job_run_id: str | None) -> str | None:
    """The taint behind an instance built from a tainted or stale input (a read that raced the taint)."""
    if job_run_id is None:
        return None
    row = conn.execute(TAINTED_READ, {"job_run_id": job_run_id}).first()
    if row is None:
        return None
    return str(row.stale_cause or row.instance_id)


def new_partition_row(ref: str, at: datetime, **values: object) -> dict[str, object]:
    """The row of a partition first heard of now, with ``values`` set."""
    row: dict[str, object] = {
        "ref": ref,
        "status": PartitionStatus.missing.value,
        "instance_id": None,
        "built_by": None,
        "building_job_run_id": None,
        "external": False,
        "updated_at": at,
    }
    row.update(values)
    return row


def upsert_partition(
    conn: Connection, ref: str, at: datetime, found: bool | None = None, **values: object
) -> None:
    """Set ``values`` on the partition's row, made if it has none. ``found``: whether it has one, when the
    caller has just read it."""
    if found:
        conn.execute(UPDATE_PARTITION, {"pk": ref, "updated_at": at, **values})
    elif found is False:
        insert_rows(conn, s.partitions, new_partition_row(ref, at, **values))
    else:
        upsert_rows(
            conn,
            s.partitions,
            [new_partition_row(ref, at, **values)],
            setting=("updated_at", *sorted(values)),
        )
