"""The rules of cost, pure (databuild.domain.cost): spent per attempt, a run shared evenly among its outputs,
unknown never counted as zero. (Reports summing them over a log, in SQL: tests/test_cost.py.)"""

from datetime import UTC, datetime

import pytest

from databuild.domain.cost import (
    AttemptCost,
    SparkCost,
    run_cost,
    run_totals,
    share,
)

pytestmark = pytest.mark.unit

DAY1 = datetime(2024, 1, 1, 9, tzinfo=UTC)
DAY2 = datetime(2024, 1, 2, 9, tzinfo=UTC)
# Each run's job and outputs.
RUNS = {"r1": ("pair", ["left/1", "right/1"]), "r2": ("single", ["one/1"]), "r3": ("remote", ["far/1"])}


def spark(seconds: float, tasks: int = 4) -> SparkCost:
    return SparkCost(
        task_seconds=seconds, cpu_seconds=seconds / 2, output_bytes=1000, tasks=tasks, spark_jobs=1
    )


def attempt(run: str, n: int, cost: SparkCost | None, at: datetime = DAY1) -> AttemptCost:
    reason = None if cost is not None else "Spark Connect"
    label = RUNS[run][0]
    return AttemptCost(
        job_run_id=run,
        attempt=n,
        job_label=label,
        executor="session",
        cost=cost,
        unknown_reason=reason,
        at=at,
    )


ATTEMPTS = [
    attempt("r1", 1, spark(2.0)),  # a dep-miss attempt
    attempt("r1", 2, spark(10.0), at=DAY2),
    attempt("r2", 1, spark(3.0)),
    attempt("r3", 1, None),
]


def test_a_run_costs_the_sum_of_its_attempts_and_an_unknown_attempt_makes_it_unknown() -> None:
    totals = run_totals(ATTEMPTS)
    assert totals["r1"] == spark(12.0, tasks=8).model_copy(update={"spark_jobs": 2, "output_bytes": 2000})
    assert totals["r3"] is None
    shown = run_cost(ATTEMPTS[:2], RUNS["r1"][1])
    assert shown.total is not None and shown.total.task_seconds == 12.0
    assert {ref: c.task_seconds for ref, c in shown.per_partition.items()} == {"left/1": 6.0, "right/1": 6.0}
    unknown = run_cost([ATTEMPTS[3]], ["far/1"])
    assert unknown.total is None and unknown.per_partition == {} and unknown.unknown_reason == "Spark Connect"
    assert run_cost([], ["x/1"]).unknown_reason is not None
    assert share(spark(9.0), 3).task_seconds == 3.0 and share(spark(9.0), 0).task_seconds == 9.0
