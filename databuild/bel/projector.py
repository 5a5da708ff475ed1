"""Applies one event to the projection tables. The only code that writes projections, so replaying
the log through it rebuilds current state exactly.

One small handler per event type, registered with ``@projects(EventType)`` in ``HANDLERS``; ``apply``
dispatches through that table (tests check that every type of ``events.Event`` has exactly one).

Statements are built once, with bound parameters: building one per call (``update(...).values(...)``)
cost several times what executing it does, and a replay or a benchmark's fill runs millions."""

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, bindparam, delete, insert, select, update

from databuild.bel import schema as s
from databuild.domain import events as ev
from databuild.domain.facts import schema_changed
from databuild.models import (
    InstanceFacts,
    InstanceRef,
    InstanceStatus,
    JobRunCause,
    JobRunState,
    PartitionStatus,
    WantState,
)

E = TypeVar("E")
Handler = Callable[[Connection, Any, datetime], None]

HANDLERS: dict[type, Handler] = {}


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


def apply(conn: Connection, event: ev.Event, at: datetime) -> None:
    handler = HANDLERS.get(type(event))
    if handler is None:
        raise TypeError(f"no projection for event {type(event).__name__}")
    handler(conn, event, at)


# Statements ----------------------------------------------------------------------------------------

# An UPDATE without .values() sets the columns named by the parameters it is executed with; "pk" binds
# the row's primary key.
_UPDATE_WANT = update(s.wants).where(s.wants.c.want_id == bindparam("pk"))
_UPDATE_JOB_RUN = update(s.job_runs).where(s.job_runs.c.job_run_id == bindparam("pk"))
_UPDATE_PARTITION = update(s.partitions).where(s.partitions.c.ref == bindparam("pk"))
_UPDATE_INSTANCE = update(s.partition_instances).where(s.partition_instances.c.instance_id == bindparam("pk"))
_WORKFLOW_OF = select(s.wants.c.workflow_id).where(s.wants.c.want_id == bindparam("want_id"))
_REFS_OF_WANTS = select(s.wants.c.ref, s.wants.c.want_id).where(
    s.wants.c.want_id.in_(bindparam("want_ids", expanding=True))
)
_UNSUBSCRIBE = delete(s.subscriptions).where(s.subscriptions.c.want_id == bindparam("want_id"))
_SUBSCRIBED = select(s.subscriptions.c.ref).where(
    s.subscriptions.c.want_id == bindparam("want_id"),
    s.subscriptions.c.ref.in_(bindparam("refs", expanding=True)),
)
_LINKED = select(s.want_job_runs.c.relation).where(
    s.want_job_runs.c.want_id == bindparam("want_id"), s.want_job_runs.c.job_run_id == bindparam("job_run_id")
)
_BATCH_OF = select(s.job_runs.c.outputs, s.job_runs.c.members).where(
    s.job_runs.c.job_run_id == bindparam("job_run_id")
)
_QUEUED_AT = select(s.job_runs.c.created_at).where(s.job_runs.c.job_run_id == bindparam("job_run_id"))
_GRANT = update(s.run_pools).where(s.run_pools.c.job_run_id == bindparam("run")).values(granted=True)
_RELEASE = delete(s.run_pools).where(s.run_pools.c.job_run_id == bindparam("job_run_id"))
_PARTITION = select(s.partitions.c.status, s.partitions.c.instance_id).where(
    s.partitions.c.ref == bindparam("ref")
)
_FACTS = select(s.partition_instances.c.facts).where(s.partition_instances.c.instance_id == bindparam("pk"))
_SUPERSEDE = (
    update(s.partition_instances)
    .where(
        s.partition_instances.c.instance_id == bindparam("previous"),
        s.partition_instances.c.status == InstanceStatus.live.value,
    )
    .values(status=InstanceStatus.superseded.value, retired_at=bindparam("at"))
)
_TAINT_PARTITION = (
    update(s.partitions)
    .where(s.partitions.c.ref == bindparam("pk"))
    .values(status=PartitionStatus.tainted.value, generation=s.partitions.c.generation + 1)
)
_MARK_STALE = (
    update(s.partition_instances)
    .where(
        s.partition_instances.c.instance_id.in_(bindparam("stale", expanding=True)),
        s.partition_instances.c.stale_cause.is_(None),
    )
    .values(stale_cause=bindparam("cause"))
)
# The taint behind an instance built from a tainted or stale input (a read that raced the taint).
_TAINTED_READ = (
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


# Wants ---------------------------------------------------------------------------------------------


@projects(ev.WantCreated)
def _want_created(conn: Connection, event: ev.WantCreated, at: datetime) -> None:
    spec = event.spec
    conn.execute(
        insert(s.wants),
        {
            "want_id": event.want_id,
            "ref": spec.ref,
            "data_timestamp": spec.data_timestamp,
            "sla_seconds": None if spec.sla is None else spec.sla.total_seconds(),
            "ttl_seconds": None if spec.ttl is None else spec.ttl.total_seconds(),
            "source": spec.source.value,
            "parent_want_id": spec.parent_want_id,
            "root_want_id": spec.root_want_id or event.want_id,
            "generation": spec.generation,
            "instance_id": None,
            "state": WantState.new.value,
            "sla_missed": False,
            "sla_deadline": spec.sla_deadline,
            "reason": None,
            "job_run_id": None,
            "decision_seq": 0,
            "workflow_id": event.workflow_id,
            "created_at": at,
            "updated_at": at,
        },
    )
    _subscribe(conn, event.want_id, [spec.ref, *spec.requires], event.workflow_id)


@projects(ev.WantBuilding)
def _want_building(conn: Connection, event: ev.WantBuilding, at: datetime) -> None:
    _set_want(
        conn,
        event.want_id,
        at,
        state=WantState.building.value,
        job_run_id=event.job_run_id,
        decision_seq=event.decision_seq,
    )
    _link(conn, event.want_id, event.job_run_id, event.relation)


@projects(ev.WantAwaitingRequirements)
def _want_awaiting_requirements(conn: Connection, event: ev.WantAwaitingRequirements, at: datetime) -> None:
    _set_want(conn, event.want_id, at, state=WantState.upstream_building.value)


@projects(ev.WantWaitingExternal)
def _want_waiting_external(conn: Connection, event: ev.WantWaitingExternal, at: datetime) -> None:
    _set_want(
        conn, event.want_id, at, state=WantState.upstream_building.value, decision_seq=event.decision_seq
    )


@projects(ev.WantBlocked)
def _want_blocked(conn: Connection, event: ev.WantBlocked, at: datetime) -> None:
    _set_want(
        conn,
        event.want_id,
        at,
        state=WantState.upstream_building.value,
        decision_seq=event.decision_seq,
        reason=event.reason,
        job_run_id=None,
    )
    _subscribe(conn, event.want_id, event.refs, _workflow_of(conn, event.want_id))


@projects(ev.WantUpstreamBuilding)
def _want_upstream_building(conn: Connection, event: ev.WantUpstreamBuilding, at: datetime) -> None:
    _set_want(conn, event.want_id, at, state=WantState.upstream_building.value)
    if event.missing:
        # By ref, not by position: an input live by then has no derivative want.
        child_of = _derivatives_by_ref(conn, event.derivative_want_ids)
        conn.execute(
            insert(s.derivatives),
            [
                {
                    "want_id": event.want_id,
                    "job_run_id": event.job_run_id,
                    "ref": ref,
                    "derivative_want_id": child_of.get(ref),
                }
                for ref in event.missing
            ],
        )
    _subscribe(conn, event.want_id, event.missing, _workflow_of(conn, event.want_id))


@projects(ev.WantFinished)
def _want_finished(conn: Connection, event: ev.WantFinished, at: datetime) -> None:
    _set_want(
        conn,
        event.want_id,
        at,
        state=event.state.value,
        reason=event.reason,
        instance_id=event.instance_id,
    )
    conn.execute(_UNSUBSCRIBE, {"want_id": event.want_id})


@projects(ev.WantRetried)
def _want_retried(conn: Connection, event: ev.WantRetried, at: datetime) -> None:
    steps = {} if event.decision_seq is None else {"decision_seq": event.decision_seq}
    _set_want(
        conn,
        event.want_id,
        at,
        state=WantState.new.value,
        reason=None,
        instance_id=None,
        job_run_id=None,
        **steps,
    )
    want = conn.execute(
        select(s.wants.c.ref, s.wants.c.workflow_id).where(s.wants.c.want_id == event.want_id)
    ).one()
    _subscribe(conn, event.want_id, [want.ref], want.workflow_id)  # it ended unsubscribed


@projects(ev.WantSlaMissed)
def _want_sla_missed(conn: Connection, event: ev.WantSlaMissed, at: datetime) -> None:
    conn.execute(_UPDATE_WANT, {"pk": event.want_id, "sla_missed": True})


@projects(ev.WantSlaAtRisk)
def _want_sla_at_risk(conn: Connection, event: ev.WantSlaAtRisk, at: datetime) -> None:
    conn.execute(_UPDATE_WANT, {"pk": event.want_id, "sla_at_risk": True})


# Job runs ------------------------------------------------------------------------------------------


@projects(ev.JobRunQueued)
def _job_run_queued(conn: Connection, event: ev.JobRunQueued, at: datetime) -> None:
    _declare_job_run(conn, event, at, JobRunState.queued, reason=None)
    if event.batch is not None:
        _set_job_run(conn, event.job_run_id, at, batch_limit=event.batch, members=[event.params])


@projects(ev.JobRunJoined)
def _job_run_joined(conn: Connection, event: ev.JobRunJoined, at: datetime) -> None:
    row = conn.execute(_BATCH_OF, {"job_run_id": event.job_run_id}).one()
    members = [*row.members, event.params]
    _set_job_run(conn, event.job_run_id, at, outputs=[*row.outputs, *event.outputs], members=members)
    conn.execute(
        insert(s.job_run_outputs), [{"job_run_id": event.job_run_id, "ref": ref} for ref in event.outputs]
    )


@projects(ev.JobRunWaiting)
def _job_run_waiting(conn: Connection, event: ev.JobRunWaiting, at: datetime) -> None:
    queued_at = conn.execute(_QUEUED_AT, {"job_run_id": event.job_run_id}).scalar_one()
    conn.execute(
        insert(s.run_pools),
        [
            {
                "job_run_id": event.job_run_id,
                "pool": pool,
                "slots": slots,
                "granted": False,
                "queued_at": queued_at,
            }
            for pool, slots in event.pools.items()
        ],
    )


@projects(ev.JobRunAdmitted)
def _job_run_admitted(conn: Connection, event: ev.JobRunAdmitted, at: datetime) -> None:
    _set_job_run(conn, event.job_run_id, at, admitted=True)
    conn.execute(_GRANT, {"run": event.job_run_id})


@projects(ev.JobRunSkipped)
def _job_run_skipped(conn: Connection, event: ev.JobRunSkipped, at: datetime) -> None:
    _declare_job_run(conn, event, at, JobRunState.skipped, reason=event.message)
    if event.want_id:
        _link(conn, event.want_id, event.job_run_id, "skipped")


@projects(ev.JobRunStarted)
def _job_run_started(conn: Connection, event: ev.JobRunStarted, at: datetime) -> None:
    _set_job_run(
        conn, event.job_run_id, at, state=JobRunState.running.value, attempts=event.attempt, started_at=at
    )
    if event.instances:
        rows = [
            {
                "instance_id": i.instance_id,
                "ref": i.ref,
                "job_run_id": event.job_run_id,
                "attempt": event.attempt,
            }
            for i in event.instances
        ]
        conn.execute(insert(s.attempt_outputs), rows)


@projects(ev.InstancePinned)
def _instance_pinned(conn: Connection, event: ev.InstancePinned, at: datetime) -> None:
    conn.execute(_UPDATE_INSTANCE, {"pk": event.instance_id, "pinned": True})


@projects(ev.InstanceUnpinned)
def _instance_unpinned(conn: Connection, event: ev.InstanceUnpinned, at: datetime) -> None:
    conn.execute(_UPDATE_INSTANCE, {"pk": event.instance_id, "pinned": False})


@projects(ev.JobRunSucceeded)
def _job_run_succeeded(conn: Connection, event: ev.JobRunSucceeded, at: datetime) -> None:
    _set_job_run(conn, event.job_run_id, at, state=JobRunState.succeeded.value, ended_at=at)
    _record_reads(conn, event.job_run_id, event.reads)
    _release_slots(conn, event.job_run_id)
    inputs_of = event.inputs_of
    edges = [
        {
            "input_instance_id": r.instance_id,
            "output_instance_id": w.instance_id,
            "output_ref": w.ref,
            "job_run_id": event.job_run_id,
        }
        for r in event.reads
        if r.instance_id
        for w in event.writes
        if inputs_of is None or r.ref in inputs_of.get(w.ref, ())
    ]
    if edges:
        conn.execute(insert(s.consumers), edges)


@projects(ev.JobRunDepMiss)
def _job_run_dep_miss(conn: Connection, event: ev.JobRunDepMiss, at: datetime) -> None:
    _set_job_run(
        conn,
        event.job_run_id,
        at,
        state=JobRunState.dep_miss.value,
        ended_at=at,
        missing=event.missing,
        missing_for=event.missing_for,
    )
    _record_reads(conn, event.job_run_id, event.reads)
    _release_slots(conn, event.job_run_id)


@projects(ev.JobRunFailed)
def _job_run_failed(conn: Connection, event: ev.JobRunFailed, at: datetime) -> None:
    _set_job_run(
        conn,
        event.job_run_id,
        at,
        state=event.cause.state.value,
        ended_at=at,
        cause=event.cause.value,
        reason=event.reason,
        lost=event.cause is JobRunCause.lost,
    )
    _release_slots(conn, event.job_run_id)


@projects(ev.Delegation)
def _delegation(conn: Connection, event: ev.Delegation, at: datetime) -> None:
    conn.execute(
        insert(s.delegations),
        {
            "want_id": event.want_id,
            "ref": event.ref,
            "delegated_to": event.delegated_to,
            "kind": event.kind,
            "at": at,
        },
    )


# Partitions ----------------------------------------------------------------------------------------


@projects(ev.PartitionBuilding)
def _partition_building(conn: Connection, event: ev.PartitionBuilding, at: datetime) -> None:
    _upsert_partition(conn, event.ref, at, building_job_run_id=event.job_run_id)


@projects(ev.PartitionLive)
def _partition_live(conn: Connection, event: ev.PartitionLive, at: datetime) -> None:
    current = conn.execute(_PARTITION, {"ref": event.ref}).first()
    before: InstanceFacts | None = None
    if current is not None and current.instance_id is not None:
        # The instance before this one (live, or tainted since): what a reader of the ref last saw.
        recorded = conn.execute(_FACTS, {"pk": current.instance_id}).scalar()
        before = None if recorded is None else InstanceFacts.model_validate(recorded)
        conn.execute(_SUPERSEDE, {"previous": current.instance_id, "at": at})
    conn.execute(
        insert(s.partition_instances),
        {
            "instance_id": event.instance_id,
            "ref": event.ref,
            "job_run_id": event.job_run_id,
            "external": event.external,
            "created_at": at,
            "status": InstanceStatus.live.value,
            "stale_cause": _inherited_staleness(conn, event.job_run_id),
            "reason": None,
            "location": event.location,
            "facts": None if event.facts is None else event.facts.model_dump(mode="json"),
            "schema_changed": schema_changed(before, event.facts),
        },
    )
    _upsert_partition(
        conn,
        event.ref,
        at,
        status=PartitionStatus.live.value,
        instance_id=event.instance_id,
        built_by=event.job_run_id,
        building_job_run_id=None,
        external=event.external,
        reason=None,
        found=current is not None,
    )


@projects(ev.PartitionTainted)
def _partition_tainted(conn: Connection, event: ev.PartitionTainted, at: datetime) -> None:
    conn.execute(
        _UPDATE_INSTANCE,
        {
            "pk": event.instance_id,
            "status": InstanceStatus.tainted.value,
            "reason": event.reason,
            "retired_at": at,
        },
    )
    conn.execute(_TAINT_PARTITION, {"pk": event.ref, "reason": event.reason, "updated_at": at})
    ids = [i.instance_id for i in event.stale if i.instance_id]
    for start in range(0, len(ids), 500):
        conn.execute(_MARK_STALE, {"stale": ids[start : start + 500], "cause": event.instance_id})


@projects(ev.PartitionResolved)
def _partition_resolved(conn: Connection, event: ev.PartitionResolved, at: datetime) -> None:
    _upsert_partition(conn, event.ref, at, status=PartitionStatus.missing.value, reason=None)


@projects(ev.PartitionSkipped)
def _partition_skipped(conn: Connection, event: ev.PartitionSkipped, at: datetime) -> None:
    _upsert_partition(conn, event.ref, at, status=PartitionStatus.skipped.value, reason=None)


@projects(ev.PartitionReleased)
def _partition_released(conn: Connection, event: ev.PartitionReleased, at: datetime) -> None:
    _upsert_partition(conn, event.ref, at, building_job_run_id=None)


@projects(ev.PartitionFailed)
def _partition_failed(conn: Connection, event: ev.PartitionFailed, at: datetime) -> None:
    current = conn.execute(_PARTITION, {"ref": event.ref}).first()
    if current is not None and current.status == PartitionStatus.live.value:
        # A failed rebuild leaves the live instance intact.
        _upsert_partition(conn, event.ref, at, building_job_run_id=None, found=True)
    else:
        _upsert_partition(
            conn,
            event.ref,
            at,
            status=PartitionStatus.failed.value,
            building_job_run_id=None,
            reason=f"job run {event.job_run_id} failed: {event.reason}",
            found=current is not None,
        )


# Row helpers ---------------------------------------------------------------------------------------


def _workflow_of(conn: Connection, want_id: str) -> str:
    return str(conn.execute(_WORKFLOW_OF, {"want_id": want_id}).scalar_one())


def _derivatives_by_ref(conn: Connection, want_ids: list[str]) -> dict[str, str]:
    """The derivative wants (recorded before the event that names them) by the ref each wants."""
    if not want_ids:
        return {}
    return {ref: want_id for ref, want_id in conn.execute(_REFS_OF_WANTS, {"want_ids": want_ids})}


def _set_backfill(conn: Connection, backfill_id: str, **values: object) -> None:
    conn.execute(update(s.backfills).where(s.backfills.c.backfill_id == backfill_id).values(**values))


def _set_want(conn: Connection, want_id: str, at: datetime, **values: object) -> None:
    conn.execute(_UPDATE_WANT, {"pk": want_id, "updated_at": at, **values})


def _declare_job_run(
    conn: Connection,
    event: ev.JobRunQueued | ev.JobRunSkipped,
    at: datetime,
    state: JobRunState,
    reason: str | None,
) -> None:
    conn.execute(
        insert(s.job_runs),
        {
            "job_run_id": event.job_run_id,
            "job_label": event.job_label,
            "state": state.value,
            "outputs": event.outputs,
            "params": event.params,
            "want_id": event.want_id,
            "attempts": 0,
            "lost": False,
            "reason": reason,
            "missing": [],
            "workflow_id": event.workflow_id,
            "created_at": at,
            "updated_at": at,
        },
    )
    conn.execute(
        insert(s.job_run_outputs),
        [{"job_run_id": event.job_run_id, "ref": ref} for ref in event.outputs],
    )


def _release_slots(conn: Connection, job_run_id: str) -> None:
    """An ended run holds no pool slot and waits for none."""
    conn.execute(_RELEASE, {"job_run_id": job_run_id})


def _set_job_run(conn: Connection, job_run_id: str, at: datetime, **values: object) -> None:
    conn.execute(_UPDATE_JOB_RUN, {"pk": job_run_id, "updated_at": at, **values})


def _link(conn: Connection, want_id: str, job_run_id: str, relation: str) -> None:
    if conn.execute(_LINKED, {"want_id": want_id, "job_run_id": job_run_id}).first() is None:
        conn.execute(
            insert(s.want_job_runs), {"want_id": want_id, "job_run_id": job_run_id, "relation": relation}
        )


def _subscribe(conn: Connection, want_id: str, refs: list[str], workflow_id: str) -> None:
    if not refs:
        return
    have = set(conn.execute(_SUBSCRIBED, {"want_id": want_id, "refs": refs}).scalars())
    rows = [
        {"ref": r, "want_id": want_id, "workflow_id": workflow_id}
        for r in dict.fromkeys(refs)
        if r not in have
    ]
    if rows:
        conn.execute(insert(s.subscriptions), rows)


def _record_reads(conn: Connection, job_run_id: str, reads: list[InstanceRef]) -> None:
    rows = [{"job_run_id": job_run_id, "ref": r.ref, "instance_id": r.instance_id} for r in reads]
    if rows:
        conn.execute(insert(s.read_deps), rows)


def _inherited_staleness(conn: Connection, job_run_id: str | None) -> str | None:
    """The taint behind an instance built from a tainted or stale input (a read that raced the taint)."""
    if job_run_id is None:
        return None
    row = conn.execute(_TAINTED_READ, {"job_run_id": job_run_id}).first()
    if row is None:
        return None
    return str(row.stale_cause or row.instance_id)


def _upsert_partition(
    conn: Connection, ref: str, at: datetime, found: bool | None = None, **values: object
) -> None:
    """``found``: whether the partition has a row, when the caller has just read it."""
    if found is None:
        found = conn.execute(_PARTITION, {"ref": ref}).first() is not None
    if found:
        conn.execute(_UPDATE_PARTITION, {"pk": ref, "updated_at": at, **values})
        return
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
    conn.execute(insert(s.partitions), row)


# Backfills -----------------------------------------------------------------------------------------


@projects(ev.BackfillRegistered)
def _backfill_registered(conn: Connection, event: ev.BackfillRegistered, at: datetime) -> None:
    conn.execute(
        insert(s.backfills),
        {
            "backfill_id": event.backfill_id,
            "request": event.request.model_dump(mode="json"),
            "partitions": event.partitions,
            "created_at": at,
        },
    )


@projects(ev.BackfillWantsAdded)
def _backfill_wants_added(conn: Connection, event: ev.BackfillWantsAdded, at: datetime) -> None:
    if event.want_ids:
        conn.execute(
            insert(s.backfill_wants),
            [{"backfill_id": event.backfill_id, "want_id": w} for w in event.want_ids],
        )


@projects(ev.BackfillPaused)
def _backfill_paused(conn: Connection, event: ev.BackfillPaused, at: datetime) -> None:
    _set_backfill(conn, event.backfill_id, paused=True)


@projects(ev.BackfillResumed)
def _backfill_resumed(conn: Connection, event: ev.BackfillResumed, at: datetime) -> None:
    _set_backfill(conn, event.backfill_id, paused=False)


@projects(ev.BackfillRetried)
def _backfill_retried(conn: Connection, event: ev.BackfillRetried, at: datetime) -> None:
    _set_backfill(conn, event.backfill_id, canceled=False)


@projects(ev.BackfillCanceled)
def _backfill_canceled(conn: Connection, event: ev.BackfillCanceled, at: datetime) -> None:
    _set_backfill(conn, event.backfill_id, canceled=True)
