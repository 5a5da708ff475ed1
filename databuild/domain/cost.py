"""What builds cost and what delegation saved: the vocabulary of cost, and the pure rules that total it.

A job run attempt's cost is what Spark accounted for the work of its job group (``SparkCost``); an
executor that cannot read Spark's accounting (Spark Connect) records it as unknown, never as zero. A run's
cost is shared out among its outputs evenly (``share``: a batch of 31 partitions charges each 1/31), the
rule every per-partition figure and every valuation of a delegation uses. A delegation is a build avoided,
valued at the share of the run it delegated to of the partitions it delegated. Reports (``CostReport``)
sum these rules over a whole log in the database: ``databuild.bel.reads.cost_sums``."""

from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import Field

from databuild.models import Model

CostBy = Literal["job", "day", "partition"]


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


def total(rows: Iterable[CostRow], key: str = "total") -> CostRow:
    """The rows summed (a build counted in two rows, e.g. two days of its attempts, counts in both)."""
    names = [name for name in CostRow.model_fields if name != "key"]
    sums: dict[str, float] = dict.fromkeys(names, 0)
    for r in rows:
        for name in names:
            sums[name] += getattr(r, name)
    return CostRow.model_validate({"key": key, **sums})
