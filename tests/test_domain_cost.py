"""The rules of cost, pure (databuild.domain.cost): spent per attempt, a run shared evenly among its outputs,
a delegation valued at its share of the run it delegated to, unknown never counted as zero."""

from datetime import UTC, datetime

import pytest

from databuild.domain.cost import (
    AttemptCost,
    DelegationFact,
    RunOutputs,
    SparkCost,
    cost_rows,
    costliest_rows,
    run_cost,
    run_totals,
    share,
    total,
)

pytestmark = pytest.mark.unit

DAY1 = datetime(2024, 1, 1, 9, tzinfo=UTC)
DAY2 = datetime(2024, 1, 2, 9, tzinfo=UTC)
RUNS = {
    "r1": RunOutputs(job_label="pair", outputs=["left/1", "right/1"]),
    "r2": RunOutputs(job_label="single", outputs=["one/1"]),
    "r3": RunOutputs(job_label="remote", outputs=["far/1"]),
}


def spark(seconds: float, tasks: int = 4) -> SparkCost:
    return SparkCost(
        task_seconds=seconds, cpu_seconds=seconds / 2, output_bytes=1000, tasks=tasks, spark_jobs=1
    )


def attempt(run: str, n: int, cost: SparkCost | None, at: datetime = DAY1) -> AttemptCost:
    reason = None if cost is not None else "Spark Connect"
    label = RUNS[run].job_label
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


def delegated(want: str, ref: str, run: str, kind: str = "historical", at: datetime = DAY2) -> DelegationFact:
    return DelegationFact.model_validate(
        {"want_id": want, "ref": ref, "delegated_to": run, "kind": kind, "at": at}
    )


def test_a_run_costs_the_sum_of_its_attempts_and_an_unknown_attempt_makes_it_unknown() -> None:
    totals = run_totals(ATTEMPTS)
    assert totals["r1"] == spark(12.0, tasks=8).model_copy(update={"spark_jobs": 2, "output_bytes": 2000})
    assert totals["r3"] is None
    shown = run_cost(ATTEMPTS[:2], RUNS["r1"].outputs)
    assert shown.total is not None and shown.total.task_seconds == 12.0
    assert {ref: c.task_seconds for ref, c in shown.per_partition.items()} == {"left/1": 6.0, "right/1": 6.0}
    unknown = run_cost([ATTEMPTS[3]], ["far/1"])
    assert unknown.total is None and unknown.per_partition == {} and unknown.unknown_reason == "Spark Connect"
    assert run_cost([], ["x/1"]).unknown_reason is not None
    assert share(spark(9.0), 3).task_seconds == 3.0 and share(spark(9.0), 0).task_seconds == 9.0


def test_spent_per_job_day_and_partition_counts_each_build_once_per_row() -> None:
    by_job = {r.key: r for r in cost_rows("job", ATTEMPTS, [], RUNS, {})}
    assert by_job["pair"].builds_run == 1 and by_job["pair"].task_seconds == 12.0
    assert by_job["pair"].tasks == 8 and by_job["pair"].output_bytes == 2000
    assert by_job["remote"].builds_run == 1 and by_job["remote"].task_seconds == 0.0
    assert by_job["remote"].unknown_attempts == 1  # unknown, not zero: said so
    by_day = {r.key: r for r in cost_rows("day", ATTEMPTS, [], RUNS, {})}
    assert by_day["2024-01-01"].task_seconds == 5.0 and by_day["2024-01-02"].task_seconds == 10.0
    assert by_day["2024-01-01"].builds_run == 3 and by_day["2024-01-02"].builds_run == 1
    by_ref = {r.key: r for r in cost_rows("partition", ATTEMPTS, [], RUNS, {})}
    assert by_ref["left/1"].task_seconds == 6.0 and by_ref["right/1"].task_seconds == 6.0
    assert by_ref["left/1"].builds_run == 1
    assert total(by_ref.values()).task_seconds == 15.0


def test_a_want_delegating_to_a_run_avoided_one_build_worth_its_share_of_what_it_delegated() -> None:
    delegations = [
        # one want, both outputs of the pair: one build avoided, worth the whole run
        delegated("w1", "left/1", "r1"),
        delegated("w1", "right/1", "r1"),
        delegated("w2", "one/1", "r2", kind="active", at=DAY1),
        delegated("w3", "far/1", "r3"),  # a run of unknown cost: avoided, unvalued
        delegated("w4", "one/1", "r-gone"),  # a run no longer known: left out
    ]
    costs = run_totals(ATTEMPTS)
    by_job = {r.key: r for r in cost_rows("job", ATTEMPTS, delegations, RUNS, costs)}
    assert (by_job["pair"].builds_avoided, by_job["pair"].task_seconds_saved) == (1, 12.0)
    assert (by_job["single"].avoided_active, by_job["single"].avoided_historical) == (1, 0)
    assert by_job["single"].task_seconds_saved == 3.0
    assert (by_job["remote"].builds_avoided, by_job["remote"].unvalued_avoided) == (1, 1)
    assert by_job["remote"].task_seconds_saved == 0.0
    by_day = {r.key: r for r in cost_rows("day", [], delegations, RUNS, costs)}
    assert by_day["2024-01-02"].builds_avoided == 2 and by_day["2024-01-01"].builds_avoided == 1
    # per partition: the pair's want avoided a build of each of its outputs, each worth its half
    by_ref = {r.key: r for r in cost_rows("partition", [], delegations, RUNS, costs)}
    assert by_ref["left/1"].task_seconds_saved == 6.0 and by_ref["left/1"].builds_avoided == 1
    # a pattern keeps only its partitions' shares
    only_left = cost_rows("job", ATTEMPTS, delegations, RUNS, costs, lambda ref: ref.startswith("left/"))
    assert [(r.key, r.task_seconds, r.task_seconds_saved) for r in only_left] == [("pair", 6.0, 6.0)]


def test_a_run_whose_cost_is_not_recorded_yet_leaves_its_avoided_builds_unvalued() -> None:
    delegations = [delegated("w1", "one/1", "r2", kind="active")]
    (row,) = cost_rows("job", [], delegations, RUNS, {})
    assert (row.builds_avoided, row.unvalued_avoided, row.task_seconds_saved, row.builds_run) == (
        1,
        1,
        0.0,
        0,
    )


def test_a_page_of_the_costliest_rows_keeps_the_total_of_them_all() -> None:
    delegations = [delegated("w1", "left/1", "r1"), delegated("w3", "far/1", "r3")]
    costs = run_totals(ATTEMPTS)
    every = cost_rows("partition", ATTEMPTS, delegations, RUNS, costs)
    assert len(every) > 2
    shown, summed, count = costliest_rows(2, "partition", ATTEMPTS, delegations, RUNS, costs)
    assert count == len(every) and summed == total(every)
    costliest = sorted(every, key=lambda r: (-r.task_seconds, r.key))[:2]
    assert shown == costliest and shown[0].task_seconds >= shown[1].task_seconds
    # No more rows than a page: all of them, by key, as the report has them.
    assert costliest_rows(len(every), "partition", ATTEMPTS, delegations, RUNS, costs) == (
        every,
        total(every),
        len(every),
    )
