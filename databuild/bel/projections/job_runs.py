"""Projections of the events of job runs, delegations included."""

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection

from databuild.bel import schema as s
from databuild.bel.engine import insert_rows
from databuild.bel.projections.common import (
    BATCH_OF,
    GRANT,
    QUEUED_AT,
    declare_job_runs,
    link,
    projects,
    projects_together,
    record_reads,
    release_slots,
    set_job_run,
)
from databuild.bel.reads.partition_costs import add_delegations, refresh_run_outputs
from databuild.bel.reads.run_costs import refresh_pair_costs, refresh_run_costs
from databuild.domain import events as ev
from databuild.models import (
    JobRunCause,
    JobRunState,
)


@projects_together(ev.JobRunQueued)
def _job_runs_queued(conn: Connection, events: Sequence[ev.JobRunQueued], at: datetime) -> None:
    """The runs a group of decisions queues, in a statement per table."""
    declare_job_runs(conn, events, at, JobRunState.queued)
    for event in events:
        if event.batch is not None:
            set_job_run(conn, event.job_run_id, at, batch_limit=event.batch, members=[event.params])


@projects(ev.JobRunJoined)
def _job_run_joined(conn: Connection, event: ev.JobRunJoined, at: datetime) -> None:
    row = conn.execute(BATCH_OF, {"job_run_id": event.job_run_id}).one()
    members = [*row.members, event.params]
    set_job_run(conn, event.job_run_id, at, outputs=[*row.outputs, *event.outputs], members=members)
    insert_rows(
        conn,
        s.job_run_outputs,
        [{"job_run_id": event.job_run_id, "ref": ref} for ref in event.outputs],
    )
    if row.attempts:  # a run that has started may have costs: they are now shared among more outputs
        _costs_changed(conn, event.job_run_id)


@projects(ev.JobRunWaiting)
def _job_run_waiting(conn: Connection, event: ev.JobRunWaiting, at: datetime) -> None:
    queued_at = conn.execute(QUEUED_AT, {"job_run_id": event.job_run_id}).scalar_one()
    insert_rows(
        conn,
        s.run_pools,
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
    set_job_run(conn, event.job_run_id, at, admitted=True)
    conn.execute(GRANT, {"run": event.job_run_id})


@projects(ev.JobRunSkipped)
def _job_run_skipped(conn: Connection, event: ev.JobRunSkipped, at: datetime) -> None:
    declare_job_runs(conn, [event], at, JobRunState.skipped, [event.message])
    if event.want_id:
        link(conn, [(event.want_id, event.job_run_id, "skipped")])


@projects(ev.JobRunStarted)
def _job_run_started(conn: Connection, event: ev.JobRunStarted, at: datetime) -> None:
    set_job_run(
        conn, event.job_run_id, at, state=JobRunState.running.value, attempts=event.attempt, started_at=at
    )
    rows = [
        {
            "instance_id": i.instance_id,
            "ref": i.ref,
            "job_run_id": event.job_run_id,
            "attempt": event.attempt,
        }
        for i in event.instances
    ]
    insert_rows(conn, s.attempt_outputs, rows)


@projects(ev.JobRunSucceeded)
def _job_run_succeeded(conn: Connection, event: ev.JobRunSucceeded, at: datetime) -> None:
    set_job_run(conn, event.job_run_id, at, state=JobRunState.succeeded.value, ended_at=at)
    record_reads(conn, event.job_run_id, event.reads)
    release_slots(conn, event.job_run_id)
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
    insert_rows(conn, s.consumers, edges)


@projects(ev.JobRunDepMiss)
def _job_run_dep_miss(conn: Connection, event: ev.JobRunDepMiss, at: datetime) -> None:
    set_job_run(
        conn,
        event.job_run_id,
        at,
        state=JobRunState.dep_miss.value,
        ended_at=at,
        missing=event.missing,
        missing_for=event.missing_for,
    )
    record_reads(conn, event.job_run_id, event.reads)
    release_slots(conn, event.job_run_id)


@projects(ev.JobRunFailed)
def _job_run_failed(conn: Connection, event: ev.JobRunFailed, at: datetime) -> None:
    set_job_run(
        conn,
        event.job_run_id,
        at,
        state=event.cause.state.value,
        ended_at=at,
        cause=event.cause.value,
        reason=event.reason,
        lost=event.cause is JobRunCause.lost,
    )
    release_slots(conn, event.job_run_id)


@projects_together(ev.Delegation)
def _delegations(conn: Connection, events: Sequence[ev.Delegation], at: datetime) -> None:
    add_delegations(conn, events)  # before they are recorded: it looks up the wants' earlier ones
    rows = [
        {"want_id": e.want_id, "ref": e.ref, "delegated_to": e.delegated_to, "kind": e.kind, "at": at}
        for e in events
    ]
    insert_rows(conn, s.delegations, rows)
    refresh_pair_costs(conn, [(e.want_id, e.delegated_to) for e in events])


@projects(ev.JobRunCostRecorded)
def _job_run_cost_recorded(conn: Connection, event: ev.JobRunCostRecorded, at: datetime) -> None:
    insert_rows(
        conn,
        s.job_run_costs,
        {
            "job_run_id": event.job_run_id,
            "attempt": event.attempt,
            "job_label": event.job_label,
            "executor": event.executor,
            "recorded_at": at,
            "task_seconds": None if event.cost is None else event.cost.task_seconds,
            "cost": None if event.cost is None else event.cost.model_dump(mode="json"),
            "unknown_reason": event.unknown_reason,
        },
    )
    _costs_changed(conn, event.job_run_id)


def _costs_changed(conn: Connection, job_run_id: str) -> None:
    """The kept reports' rows a run's costs count in, worked out again: its outputs' and its own."""
    refresh_run_outputs(conn, job_run_id)
    refresh_run_costs(conn, [job_run_id])
