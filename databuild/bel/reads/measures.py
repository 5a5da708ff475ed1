"""What the build event log measures for the Prometheus metrics (``databuild/operations/metrics.py``): the
cluster's counts, read from the projections when scraped (how long this process's write transactions take
is timed where they run, ``bel.engine.transaction.WRITE_SECONDS``).

Counts are GROUP BYs over indexes that hold their columns: wants by state and job runs by job and state
are index-only scans on PostgreSQL, so they grow with the log but never read its rows; the SLA flags read
the rows of the wants that have an SLA, found by the deadline's index. Durations are bounded: the latest
``recent`` ended runs of each job and outcome, a backward range of ``ix_job_runs_durations`` each. Pools
are the rows of open runs only. Measured on PostgreSQL: 0.11 s for all of it over 500,000 wants (a third
with an SLA) and 500,000 job runs.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import Field
from sqlalchemy import Connection, Float, Select, case, extract, func, select, union_all
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from databuild.bel import schema as s
from databuild.domain import estimates
from databuild.models import CheckSeverity, JobRunState, Model, WantState

# Runs that ended after an attempt started (a skipped run never starts; a cancelled one may not have).
TIMED_STATES = (JobRunState.succeeded, JobRunState.failed, JobRunState.dep_miss, JobRunState.cancelled)
# Pairs of (job, outcome) per statement: SQLite allows 500 terms in a compound SELECT.
PAIRS_PER_STATEMENT = 100


class WantCount(Model):
    state: WantState
    wants: int = 0
    sla_missed: int = Field(default=0, description="of them, flagged as having missed their SLA")
    sla_at_risk: int = Field(default=0, description="of them, flagged as predicted to miss their SLA")


class JobRunCount(Model):
    job_label: str
    state: JobRunState
    runs: int


class Durations(Model):
    """How long the latest runs of one job that ended in one state took (their latest attempt)."""

    job_label: str
    state: JobRunState
    upper_bounds: list[float]
    cumulative: list[int] = Field(description="runs that took at most each upper bound")
    count: int
    sum_seconds: float


class PoolCount(Model):
    pool: str
    waiting: int = Field(default=0, description="runs queued for a slot")
    running: int = Field(default=0, description="slots held")
    slots: int | None = Field(default=None, description="the pool's size, as its runs recorded it")


class CheckFailureCount(Model):
    job_label: str
    check: str
    severity: CheckSeverity
    instances: int = Field(description="instances whose latest result of the check failed")


class TableCount(Model):
    table: str
    format: str
    commits: int
    failures: int


class TaskSeconds(Model):
    job_label: str
    task_seconds: float = Field(description="Spark executor run time of every attempt whose cost is known")


class AvoidedCount(Model):
    job_label: str
    kind: str
    builds: int = Field(description="wants served by a run of the job they did not start (delegations)")


class ClusterCounts(Model):
    wants: list[WantCount]
    job_runs: list[JobRunCount]
    durations: list[Durations]
    pools: list[PoolCount]
    check_failures: list[CheckFailureCount] = []
    task_seconds: list[TaskSeconds] = []
    avoided: list[AvoidedCount] = []
    tables: list[TableCount] = []


def read_counts(conn: Connection, *, recent: int, upper_bounds: Sequence[float]) -> ClusterCounts:
    """The cluster's counts, from the projections on ``conn``."""
    job_runs = _job_run_counts(conn)
    timed = [(c.job_label, c.state) for c in job_runs if c.state in TIMED_STATES]
    return ClusterCounts(
        wants=_want_counts(conn),
        job_runs=job_runs,
        durations=_durations(conn, timed, recent, list(upper_bounds)),
        pools=_pool_counts(conn),
        check_failures=_check_failures(conn),
        task_seconds=_task_seconds(conn),
        avoided=_avoided(conn),
        tables=_table_counts(conn),
    )


def _table_counts(conn: Connection) -> list[TableCount]:
    """Each table's commits and failed commits (one row a table)."""
    c = s.table_stats.c
    rows = conn.execute(select(c.table_name, c.format, c.commits, c.failures).order_by(c.table_name))
    return [TableCount(table=t, format=f, commits=n, failures=m) for t, f, n, m in rows]


def _task_seconds(conn: Connection) -> list[TaskSeconds]:
    """Task-seconds spent per job: a scan of the attempts' costs (one row an attempt)."""
    c = s.job_run_costs.c
    rows = conn.execute(
        select(c.job_label, func.sum(c.task_seconds)).group_by(c.job_label).order_by(c.job_label)
    )
    return [TaskSeconds(job_label=label, task_seconds=float(total or 0)) for label, total in rows]


def _avoided(conn: Connection) -> list[AvoidedCount]:
    """Builds avoided per job and kind: one per want and run it delegated to (``databuild.domain.cost``),
    a scan of the delegations."""
    d, r = s.delegations.c, s.job_runs.c
    pairs = select(d.want_id, d.delegated_to, d.kind).distinct().subquery()
    rows = conn.execute(
        select(r.job_label, pairs.c.kind, func.count())
        .select_from(pairs.join(s.job_runs, r.job_run_id == pairs.c.delegated_to))
        .group_by(r.job_label, pairs.c.kind)
        .order_by(r.job_label, pairs.c.kind)
    )
    return [AvoidedCount(job_label=label, kind=kind, builds=int(n)) for label, kind, n in rows]


def _check_failures(conn: Connection) -> list[CheckFailureCount]:
    """Failed checks by job (of the run that wrote the instance, published or not) and check: a scan of
    the failures only (ix_instance_checks_failed)."""
    c, a, r = s.instance_checks.c, s.attempt_outputs.c, s.job_runs.c
    rows = conn.execute(
        select(r.job_label, c.name, c.severity, func.count())
        .select_from(
            s.instance_checks.join(s.attempt_outputs, a.instance_id == c.instance_id).join(
                s.job_runs, r.job_run_id == a.job_run_id
            )
        )
        .where(c.passed.is_(False))
        .group_by(r.job_label, c.name, c.severity)
        .order_by(r.job_label, c.name, c.severity)
    )
    return [
        CheckFailureCount(job_label=label, check=name, severity=CheckSeverity(severity), instances=int(n))
        for label, name, severity, n in rows
    ]


def _want_counts(conn: Connection) -> list[WantCount]:
    w = s.wants.c
    totals = {state: int(n) for state, n in conn.execute(select(w.state, func.count()).group_by(w.state))}
    # Only wants with an SLA can be flagged: the deadline's index bounds the scan where few wants have one.
    flags = {
        row.state: row
        for row in conn.execute(
            select(
                w.state,
                func.sum(case((w.sla_missed.is_(True), 1), else_=0)).label("missed"),
                func.sum(case((w.sla_at_risk.is_(True), 1), else_=0)).label("at_risk"),
            )
            .where(w.sla_deadline.is_not(None), w.sla_missed.is_(True) | w.sla_at_risk.is_(True))
            .group_by(w.state)
        )
    }
    counts = []
    for state in WantState:
        flagged = flags.get(state.value)
        counts.append(
            WantCount(
                state=state,
                wants=int(totals.get(state.value, 0)),
                sla_missed=int(flagged.missed) if flagged else 0,
                sla_at_risk=int(flagged.at_risk) if flagged else 0,
            )
        )
    return counts


def _job_run_counts(conn: Connection) -> list[JobRunCount]:
    r = s.job_runs.c
    rows = conn.execute(select(r.job_label, r.state, func.count()).group_by(r.job_label, r.state))
    return [JobRunCount(job_label=label, state=JobRunState(state), runs=n) for label, state, n in rows]


class _RunSeconds(FunctionElement[float]):
    """A run's duration in seconds, as SQL: ended_at - started_at."""

    type = Float()
    inherit_cache = True


@compiles(_RunSeconds)
def _julian_seconds(element: _RunSeconds, compiler: SQLCompiler, **kw: Any) -> str:
    r = s.job_runs.c
    return compiler.process((func.julianday(r.ended_at) - func.julianday(r.started_at)) * 86400.0, **kw)


@compiles(_RunSeconds, "postgresql")
def _epoch_seconds(element: _RunSeconds, compiler: SQLCompiler, **kw: Any) -> str:
    r = s.job_runs.c
    return compiler.process(extract("epoch", r.ended_at - r.started_at), **kw)


def _durations(
    conn: Connection, pairs: list[tuple[str, JobRunState]], recent: int, upper_bounds: list[float]
) -> list[Durations]:
    r = s.job_runs.c
    found = []
    for start in range(0, len(pairs), PAIRS_PER_STATEMENT):
        latest = [
            select(
                select(r.job_label, r.state, _RunSeconds().label("seconds"))
                .where(
                    r.job_label == label,
                    r.state == state.value,
                    r.ended_at.is_not(None),
                    r.started_at.is_not(None),
                )
                .order_by(r.ended_at.desc())
                .limit(recent)
                .subquery()
            )
            for label, state in pairs[start : start + PAIRS_PER_STATEMENT]
        ]
        runs = union_all(*latest).subquery()
        # Buckets are summed in SQL: a row per job and outcome comes back, not a row per run.
        buckets = [
            func.sum(case((runs.c.seconds <= bound, 1), else_=0)).label(f"le{i}")
            for i, bound in enumerate(upper_bounds)
        ]
        query = select(
            runs.c.job_label,
            runs.c.state,
            func.count().label("n"),
            func.sum(runs.c.seconds).label("total"),
            *buckets,
        ).group_by(runs.c.job_label, runs.c.state)
        for row in conn.execute(query).mappings():
            found.append(
                Durations(
                    job_label=row["job_label"],
                    state=JobRunState(row["state"]),
                    upper_bounds=upper_bounds,
                    cumulative=[int(row[f"le{i}"]) for i in range(len(upper_bounds))],
                    count=int(row["n"]),
                    sum_seconds=float(row["total"] or 0),
                )
            )
    return sorted(found, key=lambda d: (d.job_label, d.state.value))


def _pool_counts(conn: Connection) -> list[PoolCount]:
    """Per pool, its waiting runs and held slots; the table holds rows of open runs only."""
    p = s.run_pools.c
    rows = conn.execute(
        select(p.pool, p.granted, func.count().label("n"), func.max(p.slots).label("slots")).group_by(
            p.pool, p.granted
        )
    ).mappings()
    pools: dict[str, dict[str, int]] = {}
    for row in rows:
        pool = pools.setdefault(row["pool"], {"waiting": 0, "running": 0, "slots": 0})
        pool["running" if row["granted"] else "waiting"] += int(row["n"])
        pool["slots"] = max(pool["slots"], int(row["slots"]))
    return [PoolCount(pool=name, **counts) for name, counts in sorted(pools.items())]


def durations_select(label: str, last: int = 50) -> Select[tuple[datetime, datetime]]:
    """When the ``last`` succeeded runs of a job started (their latest attempt) and ended."""
    return (
        select(s.job_runs.c.started_at, s.job_runs.c.ended_at)
        .where(
            s.job_runs.c.job_label == label,
            s.job_runs.c.state == JobRunState.succeeded.value,
            s.job_runs.c.ended_at.is_not(None),
            s.job_runs.c.started_at.is_not(None),
        )
        .order_by(s.job_runs.c.ended_at.desc())
        .limit(last)
    )


def job_durations(
    rows: Callable[[Select[Any]], Sequence[Mapping[Any, Any]]], labels: Iterable[str], last: int = 50
) -> dict[str, estimates.Durations]:
    """Each job's p50 and p90 over its ``last`` succeeded runs (latest attempt's start to the end), read
    through ``rows`` (a reader's connection, or the write transaction's)."""
    return {
        label: estimates.durations_of(
            [(r["ended_at"] - r["started_at"]).total_seconds() for r in rows(durations_select(label, last))]
        )
        for label in dict.fromkeys(labels)
    }
