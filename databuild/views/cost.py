"""What builds cost and what delegation saved, read from the BEL (``databuild.domain.cost`` totals it):
the attempts' recorded costs and the delegations, in one snapshot."""

from dataclasses import dataclass
from datetime import datetime

from databuild.bel.queries import BelQueries
from databuild.domain.cost import (
    AttemptCost,
    CostBy,
    CostReport,
    CostRow,
    DelegationFact,
    RunOutputs,
    SparkCost,
    cost_rows,
    costliest_rows,
    days_by_job,
    run_totals,
    total,
)
from databuild.globs import compile_glob

Facts = tuple[list[AttemptCost], list[DelegationFact], dict[str, RunOutputs], dict[str, SparkCost | None]]


def _facts(bel: BelQueries, since: datetime | None) -> Facts:
    """The attempts' costs and the delegations from ``since`` on, the outputs of every run they name, and
    the total cost of every run delegated to (whenever it ran), in one snapshot."""
    with bel.snapshot():
        attempts = bel.attempt_costs(since)
        delegations = bel.delegation_facts(since)
        delegated_to = sorted({d.delegated_to for d in delegations})
        runs = bel.run_outputs(sorted({a.job_run_id for a in attempts} | set(delegated_to)))
        run_costs = run_totals(bel.attempt_costs_of(delegated_to))
    return attempts, delegations, runs, run_costs


def cost_report(
    bel: BelQueries, by: CostBy = "job", pattern: str | None = None, since: datetime | None = None
) -> CostReport:
    """Builds run and avoided, task-seconds spent and saved, per job, day or partition, of the partitions
    whose refs match the glob ``pattern`` (all when None), from ``since`` on (all when None). A build
    avoided is valued at its run's cost whenever that run ran, before ``since`` or not."""
    return _report(_facts(bel, since), by, pattern, since)


def _report(facts: Facts, by: CostBy, pattern: str | None, since: datetime | None) -> CostReport:
    rows = cost_rows(by, *facts, compile_glob(pattern).matches if pattern is not None else None)
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
    """``cost_report`` with its ``rows`` costliest rows (and the total of all), and ``days_by_job`` for the
    plot, from one read of the facts."""
    facts = _facts(bel, since)
    shown, summed, count = costliest_rows(
        rows, by, *facts, compile_glob(pattern).matches if pattern is not None else None
    )
    report = CostReport(by=by, pattern=pattern, since=since, rows=shown, total=summed)
    return CostOverview(report, count, days_by_job(*facts))


def cost_totals(bel: BelQueries) -> list[CostRow]:
    """Every job's totals, ever (``/metrics``)."""
    return cost_report(bel, "job").rows
