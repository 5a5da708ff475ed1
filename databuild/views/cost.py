"""What builds cost and what delegation saved, read from the BEL (``databuild.domain.cost`` totals it):
the attempts' recorded costs and the delegations, in one snapshot."""

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


def cost_and_days(
    bel: BelQueries, by: CostBy = "job", pattern: str | None = None, since: datetime | None = None
) -> tuple[CostReport, dict[str, list[CostRow]]]:
    """The dashboard's cost page: the report (``cost_report``) and each job's rows by day for its plot
    (``days_by_job``), from one read of the facts."""
    facts = _facts(bel, since)
    return _report(facts, by, pattern, since), days_by_job(*facts)


def cost_totals(bel: BelQueries) -> list[CostRow]:
    """Every job's totals, ever (``/metrics``)."""
    return cost_report(bel, "job").rows
