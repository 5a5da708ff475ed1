"""Projections of the events of partitions and their instances."""

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, delete

from databuild.bel import schema as s
from databuild.bel.engine import insert_rows, upsert_rows
from databuild.bel.projections.common import (
    FACTS,
    MARK_STALE,
    PARTITION,
    SUPERSEDE,
    TAINT_PARTITION,
    UPDATE_INSTANCE,
    inherited_staleness,
    new_partition_row,
    projects,
    projects_together,
    upsert_partition,
)
from databuild.domain import events as ev
from databuild.domain.facts import schema_changed
from databuild.models import (
    InstanceFacts,
    InstanceStatus,
    PartitionStatus,
)


@projects_together(ev.PartitionBuilding)
def _partitions_building(conn: Connection, events: Sequence[ev.PartitionBuilding], at: datetime) -> None:
    """The outputs a run starts building, in one statement."""
    rows = [new_partition_row(e.ref, at, building_job_run_id=e.job_run_id) for e in events]
    upsert_rows(conn, s.partitions, rows, setting=("updated_at", "building_job_run_id"))


@projects(ev.PartitionLive)
def _partition_live(conn: Connection, event: ev.PartitionLive, at: datetime) -> None:
    current = conn.execute(PARTITION, {"ref": event.ref}).first()
    before: InstanceFacts | None = None
    if current is not None and current.instance_id is not None:
        # The instance before this one (live, or tainted since): what a reader of the ref last saw.
        recorded = conn.execute(FACTS, {"pk": current.instance_id}).scalar()
        before = None if recorded is None else InstanceFacts.model_validate(recorded)
        conn.execute(SUPERSEDE, {"previous": current.instance_id, "at": at})
    insert_rows(
        conn,
        s.partition_instances,
        {
            "instance_id": event.instance_id,
            "ref": event.ref,
            "job_run_id": event.job_run_id,
            "external": event.external,
            "created_at": at,
            "status": InstanceStatus.live.value,
            "stale_cause": inherited_staleness(conn, event.job_run_id),
            "reason": None,
            "location": event.location,
            "facts": None if event.facts is None else event.facts.model_dump(mode="json"),
            "schema_changed": schema_changed(before, event.facts),
            "job_version": event.job_version,
        },
    )
    upsert_partition(
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
        UPDATE_INSTANCE,
        {
            "pk": event.instance_id,
            "status": InstanceStatus.tainted.value,
            "reason": event.reason,
            "retired_at": at,
        },
    )
    conn.execute(TAINT_PARTITION, {"pk": event.ref, "reason": event.reason, "updated_at": at})
    ids = [i.instance_id for i in event.stale if i.instance_id]
    for start in range(0, len(ids), 500):
        conn.execute(MARK_STALE, {"stale": ids[start : start + 500], "cause": event.instance_id})


@projects(ev.PartitionResolved)
def _partition_resolved(conn: Connection, event: ev.PartitionResolved, at: datetime) -> None:
    upsert_partition(conn, event.ref, at, status=PartitionStatus.missing.value, reason=None)


@projects(ev.PartitionSkipped)
def _partition_skipped(conn: Connection, event: ev.PartitionSkipped, at: datetime) -> None:
    upsert_partition(conn, event.ref, at, status=PartitionStatus.skipped.value, reason=None)


@projects(ev.PartitionReleased)
def _partition_released(conn: Connection, event: ev.PartitionReleased, at: datetime) -> None:
    upsert_partition(conn, event.ref, at, building_job_run_id=None)


@projects(ev.PartitionFailed)
def _partition_failed(conn: Connection, event: ev.PartitionFailed, at: datetime) -> None:
    current = conn.execute(PARTITION, {"ref": event.ref}).first()
    if current is not None and current.status == PartitionStatus.live.value:
        # A failed rebuild leaves the live instance intact.
        upsert_partition(conn, event.ref, at, building_job_run_id=None, found=True)
    else:
        upsert_partition(
            conn,
            event.ref,
            at,
            status=PartitionStatus.failed.value,
            building_job_run_id=None,
            reason=event.reason
            if event.job_run_id is None
            else f"job run {event.job_run_id} failed: {event.reason}",
            found=current is not None,
        )


@projects(ev.InstancePinned)
def _instance_pinned(conn: Connection, event: ev.InstancePinned, at: datetime) -> None:
    conn.execute(UPDATE_INSTANCE, {"pk": event.instance_id, "pinned": True})


@projects(ev.InstanceUnpinned)
def _instance_unpinned(conn: Connection, event: ev.InstanceUnpinned, at: datetime) -> None:
    conn.execute(UPDATE_INSTANCE, {"pk": event.instance_id, "pinned": False})


@projects(ev.InstanceChecked)
def _instance_checked(conn: Connection, event: ev.InstanceChecked, at: datetime) -> None:
    # The latest result of each check: a re-run replaces what the last one found (the log keeps both).
    conn.execute(
        delete(s.instance_checks).where(
            s.instance_checks.c.instance_id == event.instance_id,
            s.instance_checks.c.name.in_([r.name for r in event.results]),
        )
    )
    insert_rows(
        conn,
        s.instance_checks,
        [
            {
                "instance_id": event.instance_id,
                "name": r.name,
                "ref": event.ref,
                "job_run_id": event.job_run_id,
                "severity": r.severity.value,
                "passed": r.passed,
                "message": r.message,
                "metrics": r.metrics,
                "checked_at": at,
            }
            for r in event.results
        ],
    )
