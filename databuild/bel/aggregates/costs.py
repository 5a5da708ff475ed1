"""Job run costs (``job_run_costs``) and the delegations they value (``delegations``): each run's attempts,
and the reports the cost views (``databuild.views.cost``) show, summed by the database (``cost_sums``)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import bindparam, select

from databuild.bel import schema as s
from databuild.bel.aggregates.base import WriteBase
from databuild.bel.engine.transaction import WriteTx
from databuild.bel.reads.base import ReadBase
from databuild.bel.reads.cost_sums import FIGURES, ZERO, cost_sums, costliest_sums
from databuild.bel.reads.partition_costs import costliest_kept, kept_rows, kept_totals
from databuild.bel.reads.rows import chunks
from databuild.bel.reads.run_costs import kept_days
from databuild.bel.schema import ONCE_PER_JOB
from databuild.domain import events as ev
from databuild.domain.cost import AttemptCost, CostBy, CostRow, total

# Attempts validated a list at a time (one call into pydantic's core for many rows, not one each).
_ATTEMPTS = TypeAdapter(list[AttemptCost])


def _attempts(rows: Sequence[Any]) -> list[AttemptCost]:
    return _ATTEMPTS.validate_python(
        [
            {
                "job_run_id": row["job_run_id"],
                "attempt": row["attempt"],
                "job_label": row["job_label"],
                "executor": row["executor"],
                "cost": row["cost"],
                "unknown_reason": row["unknown_reason"],
                "at": row["recorded_at"],
            }
            for row in rows
        ]
    )


# Asked in every run's commit, so built once.
COST_RECORDED = select(s.job_run_costs.c.attempt).where(
    s.job_run_costs.c.job_run_id == bindparam("job_run_id"), s.job_run_costs.c.attempt == bindparam("attempt")
)


@dataclass(frozen=True)
class CostDays:
    """Each job's rows by day, and the rows by job and by day they sum to (``CostReads.days``)."""

    by_job_day: dict[str, list[CostRow]]
    by_job: list[CostRow]
    by_day: list[CostRow]


class CostReads(ReadBase):
    def attempts(self, since: datetime | None = None) -> list[AttemptCost]:
        """Every attempt's recorded cost (recorded at or after ``since``), oldest first."""
        query = select(s.job_run_costs).order_by(s.job_run_costs.c.recorded_at)
        if since is not None:
            query = query.where(s.job_run_costs.c.recorded_at >= since)
        return _attempts(self._all(query))

    def attempts_of(self, job_run_ids: Sequence[str]) -> list[AttemptCost]:
        """The recorded costs of these runs' attempts, by run, then attempt."""
        found: list[AttemptCost] = []
        for chunk in chunks(job_run_ids):
            query = select(s.job_run_costs).where(s.job_run_costs.c.job_run_id.in_(chunk))
            found += _attempts(self._all(query))
        return sorted(found, key=lambda a: (a.job_run_id, a.attempt))

    def rows_by(self, by: CostBy, pattern: str | None = None, since: datetime | None = None) -> list[CostRow]:
        """Builds run and avoided, task-seconds spent and saved, per job, day or partition (by key), of
        the partitions whose refs match the glob ``pattern`` (all when None), from ``since`` on."""
        summed = kept_rows() if _kept(by, pattern, since) else cost_sums([by], pattern, since)
        rows = [_row(row, row[f"key_{by}"]) for row in self._all(summed)]
        return sorted(rows, key=lambda row: row.key)

    def costliest_rows(
        self, count: int, by: CostBy, pattern: str | None = None, since: datetime | None = None
    ) -> tuple[list[CostRow], CostRow, int]:
        """The rows of ``rows_by`` (by key) or, when there are more than ``count``, the ``count`` that
        spent most (most first); the total of every row; and how many rows there are."""
        if _kept(by, pattern, since):  # the page by index, the totals in one pass
            with self._log.snapshot():
                totals: Any = self._all(kept_totals())[0]
                found = self._all(costliest_kept(count))
        else:  # every row carries the totals
            found = self._all(costliest_sums(by, pattern, since, count))
            totals = found[0] if found else {"rows_in_all": 0}
        in_all: int = totals["rows_in_all"]
        rows = [_row(row, row[f"key_{by}"]) for row in found]
        summed = _row({name: totals[f"total_{name}"] for name in FIGURES} if in_all else {}, "total")
        return (sorted(rows, key=lambda row: row.key) if in_all <= count else rows), summed, in_all

    def days(self, since: datetime | None = None) -> CostDays:
        """Each job's rows by day (the dashboard's plot over time), and from the same statement the rows
        of ``rows_by`` by job and by day (of every partition, from ``since`` on). Of all time, they are
        summed from the parts the log keeps (``run_costs``)."""
        by_job_day: dict[str, list[CostRow]] = {}
        jobs: dict[str, list[CostRow]] = {}
        days: dict[str, list[CostRow]] = {}
        summed = kept_days() if since is None else cost_sums(["job", "day"], None, since)
        for row in self._all(summed):
            job, day = row["key_job"], row["key_day"]
            of_day = _row(row, day)
            by_job_day.setdefault(job, []).append(of_day)
            days.setdefault(day, []).append(of_day)
            # Counted once per job: a build on two days counts in both days' rows.
            once = {name: row[f"{name}_of_job"] for name in ONCE_PER_JOB}
            jobs.setdefault(job, []).append(_row({**row, **once}, job))
        return CostDays(
            by_job_day={
                job: sorted(rows, key=lambda row: row.key) for job, rows in sorted(by_job_day.items())
            },
            by_job=[total(rows, job) for job, rows in sorted(jobs.items())],
            by_day=[total(rows, day) for day, rows in sorted(days.items())],
        )


def _kept(by: CostBy, pattern: str | None, since: datetime | None) -> bool:
    """Whether the report is the one the log keeps (``partition_costs``): by partition, of all time."""
    return by == "partition" and pattern is None and since is None


def _row(figures: Any, key: str) -> CostRow:
    # Typed by the statement (``cost_sums``): rows are made without validating a million of them again.
    values: dict[str, Any] = {name: figures.get(name) or ZERO[name] for name in FIGURES}
    return CostRow.model_construct(key=key, **values)


class Costs(CostReads, WriteBase):
    def record(self, cost: ev.JobRunCostRecorded) -> bool:
        """Record what an attempt cost, however it ended (once: a second record of it is ignored).
        Returns whether this call recorded it. It holds the locks of the run's outputs too: their kept
        report rows (``partition_costs``) are worked out again in it, as a delegation to them does."""
        with self._write_run(cost.job_run_id, admitting=False) as tx:
            return append_cost(tx, cost)


def append_cost(tx: WriteTx, cost: ev.JobRunCostRecorded) -> bool:
    """Append ``cost`` to a transaction holding its run's and outputs' locks, unless its attempt's cost
    is recorded already. Returns whether it appended it."""
    exists = tx.conn.execute(COST_RECORDED, {"job_run_id": cost.job_run_id, "attempt": cost.attempt}).first()
    if exists is not None:
        return False
    tx.append(cost)
    return True
