"""Applies one event to the projection tables. The only code that writes projections, so replaying
the log through it rebuilds current state exactly."""

from datetime import datetime

from sqlalchemy import Connection, delete, insert, select, update

from databuild.bel import events as ev
from databuild.bel import schema as s
from databuild.models import InstanceRef, InstanceStatus, JobRunState, PartitionStatus, WantState


def apply(conn: Connection, event: ev.Event, at: datetime) -> None:
    match event:
        case ev.WantCreated(want_id=want_id, spec=spec, workflow_id=workflow_id):
            conn.execute(
                insert(s.wants).values(
                    want_id=want_id,
                    ref=spec.ref,
                    data_timestamp=spec.data_timestamp,
                    sla_seconds=None if spec.sla is None else spec.sla.total_seconds(),
                    ttl_seconds=None if spec.ttl is None else spec.ttl.total_seconds(),
                    source=spec.source.value,
                    parent_want_id=spec.parent_want_id,
                    root_want_id=spec.root_want_id or want_id,
                    generation=spec.generation,
                    instance_id=None,
                    state=WantState.new.value,
                    sla_missed=False,
                    sla_deadline=spec.sla_deadline,
                    reason=None,
                    job_run_id=None,
                    decision_seq=0,
                    workflow_id=workflow_id,
                    created_at=at,
                    updated_at=at,
                )
            )
            _subscribe(conn, want_id, [spec.ref, *spec.requires], workflow_id)
        case ev.WantBuilding(want_id=want_id, job_run_id=job_run_id, relation=relation, decision_seq=seq):
            _set_want(conn, want_id, at, state=WantState.building, job_run_id=job_run_id, decision_seq=seq)
            _link(conn, want_id, job_run_id, relation)
        case ev.WantAwaitingRequirements(want_id=want_id):
            _set_want(conn, want_id, at, state=WantState.upstream_building)
        case ev.WantWaitingExternal(want_id=want_id, decision_seq=seq):
            _set_want(conn, want_id, at, state=WantState.upstream_building, decision_seq=seq)
        case ev.WantBlocked(want_id=want_id, refs=refs, reason=reason, decision_seq=seq):
            _set_want(
                conn,
                want_id,
                at,
                state=WantState.upstream_building,
                decision_seq=seq,
                reason=reason,
                job_run_id=None,
            )
            workflow_id = conn.execute(
                select(s.wants.c.workflow_id).where(s.wants.c.want_id == want_id)
            ).scalar_one()
            _subscribe(conn, want_id, refs, workflow_id)
        case ev.WantUpstreamBuilding(
            want_id=want_id, job_run_id=job_run_id, missing=missing, derivative_want_ids=derivative_ids
        ):
            _set_want(conn, want_id, at, state=WantState.upstream_building)
            if missing:
                # By ref, not by position: an input live by then has no derivative want.
                child_of = _derivatives_by_ref(conn, derivative_ids)
                conn.execute(
                    insert(s.derivatives),
                    [
                        {
                            "want_id": want_id,
                            "job_run_id": job_run_id,
                            "ref": ref,
                            "derivative_want_id": child_of.get(ref),
                        }
                        for ref in missing
                    ],
                )
            workflow_id = conn.execute(
                select(s.wants.c.workflow_id).where(s.wants.c.want_id == want_id)
            ).scalar_one()
            _subscribe(conn, want_id, missing, workflow_id)
        case ev.WantFinished(want_id=want_id, state=state, reason=reason, instance_id=instance_id):
            _set_want(conn, want_id, at, state=state, reason=reason, instance_id=instance_id)
            conn.execute(delete(s.subscriptions).where(s.subscriptions.c.want_id == want_id))
        case ev.WantSlaMissed(want_id=want_id):
            conn.execute(update(s.wants).where(s.wants.c.want_id == want_id).values(sla_missed=True))
        case ev.JobRunQueued() | ev.JobRunSkipped():
            skipped = isinstance(event, ev.JobRunSkipped)
            conn.execute(
                insert(s.job_runs).values(
                    job_run_id=event.job_run_id,
                    job_label=event.job_label,
                    state=(JobRunState.skipped if skipped else JobRunState.queued).value,
                    outputs=event.outputs,
                    params=event.params,
                    want_id=event.want_id,
                    attempts=0,
                    lost=False,
                    reason=event.message if isinstance(event, ev.JobRunSkipped) else None,
                    missing=[],
                    workflow_id=event.workflow_id,
                    created_at=at,
                    updated_at=at,
                )
            )
            conn.execute(
                insert(s.job_run_outputs),
                [{"job_run_id": event.job_run_id, "ref": ref} for ref in event.outputs],
            )
            if skipped and event.want_id:
                _link(conn, event.want_id, event.job_run_id, "skipped")
        case ev.JobRunStarted(job_run_id=job_run_id, attempt=attempt):
            _set_job_run(conn, job_run_id, at, state=JobRunState.running.value, attempts=attempt)
        case ev.JobRunSucceeded(job_run_id=job_run_id, reads=reads, writes=writes):
            _set_job_run(conn, job_run_id, at, state=JobRunState.succeeded.value)
            _record_reads(conn, job_run_id, reads)
            edges = [
                {
                    "input_instance_id": r.instance_id,
                    "output_instance_id": w.instance_id,
                    "output_ref": w.ref,
                    "job_run_id": job_run_id,
                }
                for r in reads
                if r.instance_id
                for w in writes
            ]
            if edges:
                conn.execute(insert(s.consumers), edges)
        case ev.JobRunDepMiss(job_run_id=job_run_id, missing=missing, reads=reads):
            _set_job_run(conn, job_run_id, at, state=JobRunState.dep_miss.value, missing=missing)
            _record_reads(conn, job_run_id, reads)
        case ev.JobRunFailed(job_run_id=job_run_id, reason=reason, lost=lost):
            _set_job_run(conn, job_run_id, at, state=JobRunState.failed.value, reason=reason, lost=lost)
        case ev.Delegation():
            conn.execute(
                insert(s.delegations).values(
                    want_id=event.want_id,
                    ref=event.ref,
                    delegated_to=event.delegated_to,
                    kind=event.kind,
                    at=at,
                )
            )
        case ev.PartitionBuilding(ref=ref, job_run_id=job_run_id):
            _upsert_partition(conn, ref, at, building_job_run_id=job_run_id)
        case ev.PartitionLive(ref=ref, instance_id=instance_id, job_run_id=job_run_id, external=external):
            previous = conn.execute(
                select(s.partitions.c.instance_id).where(s.partitions.c.ref == ref)
            ).scalar()
            if previous is not None:
                conn.execute(
                    update(s.partition_instances)
                    .where(
                        s.partition_instances.c.instance_id == previous,
                        s.partition_instances.c.status == InstanceStatus.live.value,
                    )
                    .values(status=InstanceStatus.superseded.value)
                )
            conn.execute(
                insert(s.partition_instances).values(
                    instance_id=instance_id,
                    ref=ref,
                    job_run_id=job_run_id,
                    external=external,
                    created_at=at,
                    status=InstanceStatus.live.value,
                    stale_cause=_inherited_staleness(conn, job_run_id),
                    reason=None,
                )
            )
            _upsert_partition(
                conn,
                ref,
                at,
                status=PartitionStatus.live.value,
                instance_id=instance_id,
                built_by=job_run_id,
                building_job_run_id=None,
                external=external,
                reason=None,
            )
        case ev.PartitionTainted(ref=ref, instance_id=instance_id, reason=reason, stale=stale):
            conn.execute(
                update(s.partition_instances)
                .where(s.partition_instances.c.instance_id == instance_id)
                .values(status=InstanceStatus.tainted.value, reason=reason)
            )
            conn.execute(
                update(s.partitions)
                .where(s.partitions.c.ref == ref)
                .values(
                    status=PartitionStatus.tainted.value,
                    generation=s.partitions.c.generation + 1,
                    reason=reason,
                    updated_at=at,
                )
            )
            ids = [i.instance_id for i in stale if i.instance_id]
            for start in range(0, len(ids), 500):
                conn.execute(
                    update(s.partition_instances)
                    .where(
                        s.partition_instances.c.instance_id.in_(ids[start : start + 500]),
                        s.partition_instances.c.stale_cause.is_(None),
                    )
                    .values(stale_cause=instance_id)
                )
        case ev.PartitionResolved(ref=ref):
            _upsert_partition(conn, ref, at, status=PartitionStatus.missing.value, reason=None)
        case ev.PartitionSkipped(ref=ref):
            _upsert_partition(conn, ref, at, status=PartitionStatus.skipped.value, reason=None)
        case ev.PartitionReleased(ref=ref):
            _upsert_partition(conn, ref, at, building_job_run_id=None)
        case ev.PartitionFailed(ref=ref, job_run_id=job_run_id, reason=reason):
            current = conn.execute(select(s.partitions.c.status).where(s.partitions.c.ref == ref)).scalar()
            if current == PartitionStatus.live.value:  # a failed rebuild leaves the live instance intact
                _upsert_partition(conn, ref, at, building_job_run_id=None)
            else:
                _upsert_partition(
                    conn,
                    ref,
                    at,
                    status=PartitionStatus.failed.value,
                    building_job_run_id=None,
                    reason=f"job run {job_run_id} failed: {reason}",
                )
        case _:
            raise TypeError(f"no projection for event {type(event).__name__}")


def _derivatives_by_ref(conn: Connection, want_ids: list[str]) -> dict[str, str]:
    """The derivative wants (recorded before the event that names them) by the ref each wants."""
    if not want_ids:
        return {}
    rows = conn.execute(select(s.wants.c.ref, s.wants.c.want_id).where(s.wants.c.want_id.in_(want_ids)))
    return {ref: want_id for ref, want_id in rows}


def _set_want(conn: Connection, want_id: str, at: datetime, **values: object) -> None:
    values = {k: (v.value if isinstance(v, WantState) else v) for k, v in values.items()}
    conn.execute(update(s.wants).where(s.wants.c.want_id == want_id).values(updated_at=at, **values))


def _set_job_run(conn: Connection, job_run_id: str, at: datetime, **values: object) -> None:
    conn.execute(
        update(s.job_runs).where(s.job_runs.c.job_run_id == job_run_id).values(updated_at=at, **values)
    )


def _link(conn: Connection, want_id: str, job_run_id: str, relation: str) -> None:
    exists = conn.execute(
        select(s.want_job_runs.c.relation).where(
            s.want_job_runs.c.want_id == want_id, s.want_job_runs.c.job_run_id == job_run_id
        )
    ).first()
    if exists is None:
        conn.execute(
            insert(s.want_job_runs).values(want_id=want_id, job_run_id=job_run_id, relation=relation)
        )


def _subscribe(conn: Connection, want_id: str, refs: list[str], workflow_id: str) -> None:
    have = set(
        conn.execute(
            select(s.subscriptions.c.ref).where(
                s.subscriptions.c.want_id == want_id, s.subscriptions.c.ref.in_(refs)
            )
        ).scalars()
    )
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
    row = conn.execute(
        select(
            s.partition_instances.c.instance_id,
            s.partition_instances.c.status,
            s.partition_instances.c.stale_cause,
        )
        .join(s.read_deps, s.read_deps.c.instance_id == s.partition_instances.c.instance_id)
        .where(
            s.read_deps.c.job_run_id == job_run_id,
            (s.partition_instances.c.status == InstanceStatus.tainted.value)
            | s.partition_instances.c.stale_cause.is_not(None),
        )
        .order_by(s.read_deps.c.id)
        .limit(1)
    ).first()
    if row is None:
        return None
    return str(row.stale_cause or row.instance_id)


def _upsert_partition(conn: Connection, ref: str, at: datetime, **values: object) -> None:
    found = conn.execute(select(s.partitions.c.ref).where(s.partitions.c.ref == ref)).first()
    if found is None:
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
        conn.execute(insert(s.partitions).values(**row))
    else:
        conn.execute(update(s.partitions).where(s.partitions.c.ref == ref).values(updated_at=at, **values))
