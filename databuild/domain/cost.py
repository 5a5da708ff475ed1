"""What builds cost and what delegation saved: the vocabulary of cost, and the pure rules that total it.

A job run attempt's cost is what Spark accounted for the work of its job group (``SparkCost``); an
executor that cannot read Spark's accounting (Spark Connect) records it as unknown, never as zero. A run's
cost is shared out among its outputs evenly (a batch of 31 partitions charges each 1/31), the rule every
per-partition figure and every valuation of a delegation uses. A delegation is a build avoided, valued at
the share of the run it delegated to of the partitions it delegated."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Literal

from pydantic import Field

from databuild.models import Model

CostBy = Literal["job", "day", "partition"]
DelegationKind = Literal["active", "historical"]


class SparkCost(Model):
    """Spark's own accounting of some work: the sums over every stage attempt that ran (skipped stages,
    whose output was reused, did no work)."""

    task_seconds: float = Field(description="executor run time of its tasks, in seconds")
    cpu_seconds: float = Field(description="executor CPU time of its tasks, in seconds")
    input_bytes: int = 0
    output_bytes: int = 0
    shuffle_read_bytes: int = 0
    shuffle_write_bytes: int = 0
    tasks: int = Field(default=0, description="task attempts that ran")
    spark_jobs: int = 0

    @property
    def shuffle_bytes(self) -> int:
        return self.shuffle_read_bytes + self.shuffle_write_bytes

    def plus(self, other: "SparkCost") -> "SparkCost":
        return SparkCost(
            task_seconds=self.task_seconds + other.task_seconds,
            cpu_seconds=self.cpu_seconds + other.cpu_seconds,
            input_bytes=self.input_bytes + other.input_bytes,
            output_bytes=self.output_bytes + other.output_bytes,
            shuffle_read_bytes=self.shuffle_read_bytes + other.shuffle_read_bytes,
            shuffle_write_bytes=self.shuffle_write_bytes + other.shuffle_write_bytes,
            tasks=self.tasks + other.tasks,
            spark_jobs=self.spark_jobs + other.spark_jobs,
        )


NO_COST = SparkCost(task_seconds=0.0, cpu_seconds=0.0)


class AttemptCost(Model):
    """The recorded cost of one attempt of a job run (``JobRunCostRecorded``)."""

    job_run_id: str
    attempt: int
    job_label: str
    executor: str = Field(description="the executor kind that ran it: session, submit or connect")
    cost: SparkCost | None = Field(description="None: the executor cannot read Spark's accounting")
    unknown_reason: str | None = None
    at: datetime = Field(description="when it was recorded, as the attempt ended")


class RunOutputs(Model):
    job_label: str
    outputs: list[str]


class DelegationFact(Model):
    want_id: str
    ref: str
    delegated_to: str
    kind: DelegationKind
    at: datetime


class CostRow(Model):
    """Builds run and avoided, and the task-seconds they spent and saved, of one job, day or partition."""

    key: str = Field(description="the job label, the day (YYYY-MM-DD) or the partition ref")
    builds_run: int = Field(default=0, description="job runs that did work (an attempt recorded its cost)")
    builds_avoided: int = Field(default=0, description="delegations: a want served by another run")
    avoided_active: int = 0
    avoided_historical: int = 0
    task_seconds: float = Field(default=0.0, description="spent, of the attempts whose cost is known")
    cpu_seconds: float = 0.0
    input_bytes: int = 0
    output_bytes: int = 0
    shuffle_bytes: int = 0
    tasks: int = 0
    task_seconds_saved: float = Field(default=0.0, description="the value of the builds avoided")
    unknown_attempts: int = Field(default=0, description="attempts whose executor could not report cost")
    unvalued_avoided: int = Field(
        default=0, description="builds avoided whose run's cost is unknown or not recorded yet"
    )


class CostReport(Model):
    by: CostBy
    pattern: str | None = None
    since: datetime | None = None
    rows: list[CostRow]
    total: CostRow


class RunCost(Model):
    """What one job run cost: each attempt's record, their sum, and each output's share of it."""

    attempts: list[AttemptCost]
    total: SparkCost | None = Field(description="None: an attempt's cost is unknown, or none is recorded")
    unknown_reason: str | None = None
    per_partition: dict[str, SparkCost] = Field(
        default_factory=dict, description="each output's share of the total (split evenly)"
    )


def run_cost(attempts: list[AttemptCost], outputs: list[str]) -> RunCost:
    total = run_totals(attempts).get(attempts[0].job_run_id) if attempts else None
    unknown = next((a.unknown_reason for a in attempts if a.cost is None), None)
    if not attempts:
        unknown = "no attempt recorded its cost (it did not run, or ran before costs were recorded)"
    per_partition = {} if total is None else {ref: share(total, len(outputs)) for ref in outputs}
    return RunCost(attempts=attempts, total=total, unknown_reason=unknown, per_partition=per_partition)


def format_bytes(n: int) -> str:
    """Bytes for people: 512 B, 1.5 KiB, 2.0 GiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def share(cost: SparkCost, parts: int) -> SparkCost:
    """One output's share of a run's cost (the even split)."""
    n = max(parts, 1)
    return SparkCost(
        task_seconds=cost.task_seconds / n,
        cpu_seconds=cost.cpu_seconds / n,
        input_bytes=cost.input_bytes // n,
        output_bytes=cost.output_bytes // n,
        shuffle_read_bytes=cost.shuffle_read_bytes // n,
        shuffle_write_bytes=cost.shuffle_write_bytes // n,
        tasks=cost.tasks // n,
        spark_jobs=cost.spark_jobs,
    )


def run_totals(attempts: Iterable[AttemptCost]) -> dict[str, SparkCost | None]:
    """Each run's cost over all its attempts; None when any attempt's cost is unknown."""
    totals: dict[str, SparkCost | None] = {}
    for a in attempts:
        before = totals.get(a.job_run_id, NO_COST)
        totals[a.job_run_id] = None if before is None or a.cost is None else before.plus(a.cost)
    return totals


def _key(by: CostBy, job_label: str, at: datetime, ref: str) -> str:
    if by == "job":
        return job_label
    if by == "day":
        return date.isoformat(at.date())
    return ref


@dataclass
class _Sum:
    """Shares of runs' costs being summed: plain numbers, as a report sums one share per output (a
    million outputs make a million additions, not a million models)."""

    task_seconds: float = 0.0
    cpu_seconds: float = 0.0
    input_bytes: int = 0
    output_bytes: int = 0
    shuffle_bytes: int = 0
    tasks: int = 0

    def add_shares(self, cost: SparkCost, parts: int, count: int = 1) -> None:
        """``count`` outputs' shares of a run of ``parts`` outputs: ``share`` of each, summed."""
        n = max(parts, 1)
        self.task_seconds += cost.task_seconds / n * count
        self.cpu_seconds += cost.cpu_seconds / n * count
        self.input_bytes += cost.input_bytes // n * count
        self.output_bytes += cost.output_bytes // n * count
        self.shuffle_bytes += (cost.shuffle_read_bytes // n + cost.shuffle_write_bytes // n) * count
        self.tasks += cost.tasks // n * count


@dataclass
class _Row:
    """A row being summed (rows are frozen models)."""

    spent: _Sum = field(default_factory=_Sum)
    runs: set[str] = field(default_factory=set)
    unknown: set[tuple[str, int]] = field(default_factory=set)
    avoided: dict[tuple[str, str], DelegationKind] = field(default_factory=dict)  # (want, run) -> kind
    unvalued: set[tuple[str, str]] = field(default_factory=set)
    saved: float = 0.0

    def add_attempt(self, attempt: AttemptCost, parts: int, count: int) -> None:
        self.runs.add(attempt.job_run_id)
        if attempt.cost is None:
            self.unknown.add((attempt.job_run_id, attempt.attempt))
        else:
            self.spent.add_shares(attempt.cost, parts, count)

    def row(self, key: str) -> CostRow:
        kinds = list(self.avoided.values())
        return CostRow(
            key=key,
            builds_run=len(self.runs),
            builds_avoided=len(kinds),
            avoided_active=kinds.count("active"),
            avoided_historical=kinds.count("historical"),
            task_seconds=self.spent.task_seconds,
            cpu_seconds=self.spent.cpu_seconds,
            input_bytes=self.spent.input_bytes,
            output_bytes=self.spent.output_bytes,
            shuffle_bytes=self.spent.shuffle_bytes,
            tasks=self.spent.tasks,
            task_seconds_saved=self.saved,
            unknown_attempts=len(self.unknown),
            unvalued_avoided=len(self.unvalued),
        )


def cost_rows(
    by: CostBy,
    attempts: Iterable[AttemptCost],
    delegations: Iterable[DelegationFact],
    runs: dict[str, RunOutputs],
    run_costs: dict[str, SparkCost | None],
    matches: Callable[[str], bool] | None = None,
) -> list[CostRow]:
    """The rows of a report, by key. ``runs`` holds the outputs of every run named (attempted or delegated
    to), ``run_costs`` the total cost of every run delegated to (``run_totals``; a run missing from it has
    recorded no cost yet). Only the partitions ``matches`` accepts (all when None) count, each with its
    share: a build is counted once per row however many of its outputs fall in it."""
    rows = _summed(by, attempts, delegations, runs, run_costs, matches)
    return [rows[key].row(key) for key in sorted(rows)]


def costliest_rows(
    count: int,
    by: CostBy,
    attempts: Iterable[AttemptCost],
    delegations: Iterable[DelegationFact],
    runs: dict[str, RunOutputs],
    run_costs: dict[str, SparkCost | None],
    matches: Callable[[str], bool] | None = None,
) -> tuple[list[CostRow], CostRow, int]:
    """The rows of ``cost_rows`` (by key) or, when there are more than ``count``, the ``count`` that spent
    most (most first); the total of every row; and how many rows there are: a page's share of a report of
    a million partitions, without a model per row."""
    rows = _summed(by, attempts, delegations, runs, run_costs, matches)
    top = (
        sorted(rows, key=lambda key: (-rows[key].spent.task_seconds, key))[:count]
        if len(rows) > count
        else sorted(rows)
    )
    return [rows[key].row(key) for key in top], _total_of(rows.values()), len(rows)


def _total_of(rows: Iterable[_Row]) -> CostRow:
    """``total`` of the rows these sums make, summed as they stand."""
    sums = _Row()
    counts = {"builds_run": 0, "builds_avoided": 0, "avoided_active": 0, "avoided_historical": 0}
    unknown = unvalued = 0
    for r in rows:
        kinds = list(r.avoided.values())
        counts["builds_run"] += len(r.runs)
        counts["builds_avoided"] += len(kinds)
        counts["avoided_active"] += kinds.count("active")
        counts["avoided_historical"] += kinds.count("historical")
        unknown, unvalued = unknown + len(r.unknown), unvalued + len(r.unvalued)
        for name in ("task_seconds", "cpu_seconds", "input_bytes", "output_bytes", "shuffle_bytes", "tasks"):
            setattr(sums.spent, name, getattr(sums.spent, name) + getattr(r.spent, name))
        sums.saved += r.saved
    return sums.row("total").model_copy(
        update={**counts, "unknown_attempts": unknown, "unvalued_avoided": unvalued}
    )


def _summed(
    by: CostBy,
    attempts: Iterable[AttemptCost],
    delegations: Iterable[DelegationFact],
    runs: dict[str, RunOutputs],
    run_costs: dict[str, SparkCost | None],
    matches: Callable[[str], bool] | None,
) -> dict[str, _Row]:
    rows: dict[str, _Row] = {}
    for a in attempts:
        run = runs[a.job_run_id]
        if by == "partition":
            for ref in run.outputs if matches is None else filter(matches, run.outputs):
                rows.setdefault(ref, _Row()).add_attempt(a, len(run.outputs), 1)
        elif count := len(run.outputs) if matches is None else sum(map(matches, run.outputs)):
            # Every output of an attempt falls in one row.
            rows.setdefault(_key(by, a.job_label, a.at, ""), _Row()).add_attempt(a, len(run.outputs), count)
    # One want delegating to one run avoided one build (whatever number of outputs it delegated), worth
    # the shares of those outputs.
    for d in delegations:
        if (matches is not None and not matches(d.ref)) or d.delegated_to not in runs:
            continue
        run = runs[d.delegated_to]
        row = rows.setdefault(_key(by, run.job_label, d.at, d.ref), _Row())
        row.avoided[(d.want_id, d.delegated_to)] = d.kind
        cost = run_costs.get(d.delegated_to)
        if cost is None:
            row.unvalued.add((d.want_id, d.delegated_to))
        else:
            row.saved += cost.task_seconds / max(len(run.outputs), 1)  # its share (``share``)
    return rows


def days_by_job(
    attempts: list[AttemptCost],
    delegations: list[DelegationFact],
    runs: dict[str, RunOutputs],
    run_costs: dict[str, SparkCost | None],
) -> dict[str, list[CostRow]]:
    """Each job's rows by day (the dashboard's plot over time): ``cost_rows`` of its runs alone."""
    labels = sorted(
        {a.job_label for a in attempts}
        | {runs[d.delegated_to].job_label for d in delegations if d.delegated_to in runs}
    )
    return {
        label: cost_rows(
            "day",
            [a for a in attempts if a.job_label == label],
            [d for d in delegations if d.delegated_to in runs and runs[d.delegated_to].job_label == label],
            runs,
            run_costs,
        )
        for label in labels
    }


def total(rows: Iterable[CostRow], key: str = "total") -> CostRow:
    """The rows summed (a build counted in two rows, e.g. two days of its attempts, counts in both)."""
    names = [name for name in CostRow.model_fields if name != "key"]
    sums: dict[str, float] = dict.fromkeys(names, 0)
    for r in rows:
        for name in names:
            sums[name] += getattr(r, name)
    return CostRow.model_validate({"key": key, **sums})
