"""Admission of queued runs to pools, inside the write transaction of a command that holds the
pools' locks: the slots taken, each waiting run's priority, and the runs ``pools.admit`` lets in."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Select, func, select

from databuild.bel import schema as s
from databuild.bel.engine.transaction import WriteTx
from databuild.bel.reads.measures import job_durations
from databuild.domain import pools
from databuild.models import WantSource, WantState


def slots_taken(pools: Iterable[str]) -> Select[tuple[str, int]]:
    """Slots held per pool, of ``pools``."""
    return (
        select(s.run_pools.c.pool, func.count().label("n"))
        .where(s.run_pools.c.pool.in_(list(pools)), s.run_pools.c.granted.is_(True))
        .group_by(s.run_pools.c.pool)
    )


def admit(tx: WriteTx, locked: Sequence[str]) -> list[str]:
    """Admit the runs waiting in the ``locked`` pools that fit now (``pools.admit``); a run that also
    needs a pool not locked here waits for the next admission."""
    conn, locked_set = tx.conn, set(locked)
    waiting_ids = select(s.run_pools.c.job_run_id).where(
        s.run_pools.c.pool.in_(locked_set), s.run_pools.c.granted.is_(False)
    )
    needs: dict[str, dict[str, int]] = {}
    queued_at: dict[str, datetime] = {}
    for row in conn.execute(select(s.run_pools).where(s.run_pools.c.job_run_id.in_(waiting_ids))).mappings():
        needs.setdefault(row["job_run_id"], {})[row["pool"]] = row["slots"]
        queued_at[row["job_run_id"]] = row["queued_at"]
    candidates = [run for run, wants in needs.items() if set(wants) <= locked_set]
    if not candidates:
        return []
    taken = {row.pool: int(row.n) for row in conn.execute(slots_taken(locked_set))}
    urgency = run_urgencies(conn, candidates)
    waiting = [
        pools.Waiting(
            job_run_id=run,
            pools=needs[run],
            priority=urgency[run].priority if run in urgency else pools.BACKGROUND,
            queued_at=queued_at[run],
            latest_start=urgency[run].latest_start if run in urgency else None,
        )
        for run in candidates
    ]
    admitted = pools.admit(waiting, taken)
    tx.extend(pools.admissions(admitted))
    return admitted


@dataclass
class Urgency:
    priority: int
    deadline: datetime | None = None
    latest_start: datetime | None = None


def run_urgencies(conn: Connection, job_run_ids: Sequence[str]) -> dict[str, Urgency]:
    """Each run's priority (that of the most urgent want still waiting on it) and the latest moment it
    can start to meet the earliest SLA deadline among those wants, given its job's usual (p90) duration."""
    want, root = s.wants.alias("want"), s.wants.alias("root")
    open_states = [state.value for state in WantState if not state.is_final]
    rows = conn.execute(
        select(
            s.want_job_runs.c.job_run_id,
            s.job_runs.c.job_label,
            want.c.source,
            want.c.sla_deadline,
            root.c.source.label("root_source"),
        )
        .join(want, want.c.want_id == s.want_job_runs.c.want_id)
        .join(s.job_runs, s.job_runs.c.job_run_id == s.want_job_runs.c.job_run_id)
        .join(root, root.c.want_id == want.c.root_want_id, isouter=True)
        .where(s.want_job_runs.c.job_run_id.in_(job_run_ids), want.c.state.in_(open_states))
    )
    found: dict[str, Urgency] = {}
    labels: dict[str, str] = {}
    for row in rows:
        rank = pools.want_priority(
            WantSource(row.source), WantSource(row.root_source) if row.root_source else None
        )
        urgency = found.setdefault(row.job_run_id, Urgency(rank))
        urgency.priority = min(urgency.priority, rank)
        if row.sla_deadline is not None and (urgency.deadline is None or row.sla_deadline < urgency.deadline):
            urgency.deadline = row.sla_deadline
            labels[row.job_run_id] = row.job_label
    usual = job_durations(lambda query: conn.execute(query).mappings().all(), labels.values())
    for run, label in labels.items():
        found[run].latest_start = pools.latest_start(found[run].deadline, usual[label].p90)
    return found
