"""What builds cost and what delegation saved, as reports: summed by the BEL (``databuild.bel.reads.cost_sums``)
in the vocabulary of ``databuild.domain.cost``."""

from dataclasses import dataclass
from datetime import datetime

from databuild.bel.queries import BelQueries
from databuild.domain.cost import CostBy, CostReport, CostRow, total


def cost_report(
    bel: BelQueries, by: CostBy = "job", pattern: str | None = None, since: datetime | None = None
) -> CostReport:
    """Builds run and avoided, task-seconds spent and saved, per job, day or partition, of the partitions
    whose refs match the glob ``pattern`` (all when None), from ``since`` on (all when None). A build
    avoided is valued at its run's cost whenever that run ran, before ``since`` or not."""
    rows = bel.costs.rows_by(by, pattern, since)
    return CostReport(by=by, pattern=pattern, since=since, rows=rows, total=total(rows))


@dataclass(frozen=True)
class CostOverview:
    """The dashboard's cost page: the report with its costliest rows only, how many rows it has in all,
    and each job's rows by day for the plot."""

    report: CostReport
    rows_in_all: int
    by_day: dict[str, list[CostRow]]


def cost_overview(
    bel: BelQueries, by: CostBy, pattern: str | None, since: datetime | None, rows: int
) -> CostOverview:
    """``cost_report`` with its ``rows`` costliest rows (and the total of all), and each job's rows by day
    for the plot, in one snapshot of the log (one statement, unless a pattern or rows by partition ask for
    a second)."""
    with bel.snapshot():
        days = bel.costs.days(since)
        if pattern is None and by != "partition":
            # Every partition by job or by day: the plot's statement has those rows already.
            every = days.by_job if by == "job" else days.by_day
            costliest = sorted(every, key=lambda row: (-row.task_seconds, row.key))[:rows]
            shown = every if len(every) <= rows else costliest
            summed, count = total(every), len(every)
        else:
            shown, summed, count = bel.costs.costliest_rows(rows, by, pattern, since)
    report = CostReport(by=by, pattern=pattern, since=since, rows=shown, total=summed)
    return CostOverview(report, count, days.by_job_day)
