"""Cost on the real stack (Temporal, Spark, the BEL): a run's recorded task-seconds are Spark's own
figures for its job group, and a second want for a live partition avoids a build without spending."""

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from databuild.jobs.attempts import attempt_name
from databuild.jobs.spark import SparkRuntime
from databuild.models import WantState
from databuild.views.lineage import job_run_view

pytestmark = pytest.mark.slow

COSTS = "tests.graphs:costs"


def task_seconds_of_tasks(spark: SparkRuntime, group: str) -> float:
    """Spark's figure for ``group``, summed task by task from the driver's task records (the recorded cost
    sums the stages' totals instead), over every stage attempt of every Spark job of the group."""
    context = spark.session().sparkContext
    store = context._jsc.sc().statusStore()
    tracker = context.statusTracker()
    stages = {s for j in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(j).stageIds}
    millis = 0
    for stage in stages:
        attempts = store.stageData(
            stage,
            False,
            getattr(store, "stageData$default$3")(),
            False,
            getattr(store, "stageData$default$5")(),
        )
        for i in range(attempts.size()):
            tasks = store.taskList(stage, attempts.apply(i).attemptId(), 1_000_000)
            for t in range(tasks.size()):
                metrics = tasks.apply(t).taskMetrics()
                millis += metrics.get().executorRunTime() if metrics.isDefined() else 0
    return millis / 1000


def task_seconds_in_event_log(folder: Path, group: str) -> float:
    """Spark's figure for ``group`` from the application's event log (Spark's own record, written by a
    listener of its own): the executor run time of every task of the stages of the group's Spark jobs."""
    # Spark 4 rolls its event log: a folder of numbered files, in order
    files = sorted(folder.rglob("events_*"), key=lambda p: int(p.name.split("_")[1]))
    events = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    stages = {
        stage
        for e in events
        if e["Event"] == "SparkListenerJobStart" and e.get("Properties", {}).get("spark.jobGroup.id") == group
        for stage in e["Stage IDs"]
    }
    return (
        sum(
            e["Task Metrics"]["Executor Run Time"]
            for e in events
            if e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] in stages and e.get("Task Metrics")
        )
        / 1000
    )


async def built(stack: Any, ref: str, day: int = 1) -> None:
    spec = await stack.db.want(ref, data_timestamp=datetime(2024, 1, day, tzinfo=UTC))
    done = await asyncio.wait_for(stack.db.wait(spec), timeout=300)
    assert done.state is WantState.successful, done.reason


async def test_recorded_task_seconds_are_sparks_and_a_second_want_avoids_a_build(
    make_stack, spark_runtime: SparkRuntime
) -> None:
    stack = await make_stack(graph=COSTS, job_attempts=2)
    await built(stack, "sums/1")
    (run,) = stack.bel.job_runs.query(job_label="sums")
    (attempt,) = stack.bel.costs.attempts_of([run.job_run_id])
    assert attempt.executor == "session" and attempt.cost is not None
    spark_figure = task_seconds_of_tasks(spark_runtime, attempt_name(run.job_run_id, 1))
    assert spark_figure > 0.1  # real work: 2M rows scanned and shuffled
    assert attempt.cost.task_seconds == pytest.approx(spark_figure, rel=0.05)
    assert attempt.cost.tasks >= 5 and attempt.cost.shuffle_write_bytes > 0 and attempt.cost.output_bytes > 0
    assert attempt.cost.cpu_seconds > 0

    before = await stack.db.cost()
    (row,) = before.rows
    assert (row.key, row.builds_run, row.builds_avoided) == ("sums", 1, 0)
    assert row.task_seconds == pytest.approx(attempt.cost.task_seconds)

    await built(stack, "sums/1", day=2)  # another want for the live partition: delegated, not built
    assert len(stack.bel.job_runs.query(job_label="sums", state=None)) == 2  # the second is a skipped run
    (after,) = (await stack.db.cost()).rows
    assert (after.builds_run, after.builds_avoided, after.avoided_historical) == (1, 1, 1)
    assert after.task_seconds == row.task_seconds  # nothing spent
    assert after.task_seconds_saved == pytest.approx(attempt.cost.task_seconds)
    (partition,) = (await stack.db.cost("sums/*", by="partition")).rows
    assert (partition.key, partition.builds_avoided) == ("sums/1", 1)
    # A failed attempt's work cost too: each of the two attempts is recorded with what it ran.
    spec = await stack.db.want("broken/1")
    assert (await asyncio.wait_for(stack.db.wait(spec), timeout=300)).state is WantState.failed
    (failed,) = stack.bel.job_runs.query(job_label="broken")
    attempts = stack.bel.costs.attempts_of([failed.job_run_id])
    assert [a.attempt for a in attempts] == [1, 2]
    for a in attempts:
        assert a.cost is not None and a.cost.tasks >= 2 and a.cost.task_seconds > 0
        assert a.cost.task_seconds == pytest.approx(
            task_seconds_of_tasks(spark_runtime, attempt_name(failed.job_run_id, a.attempt)), rel=0.05
        )

    shown = job_run_view(stack.bel, run.job_run_id).data.cost  # the job run's own view carries it
    assert (
        shown is not None and shown.total == attempt.cost and shown.per_partition == {"sums/1": attempt.cost}
    )


async def test_a_submitted_application_reports_its_cost_as_its_event_log_has_it(
    make_stack, tmp_path: Path
) -> None:
    events = tmp_path / "spark-events"
    events.mkdir()
    stack = await make_stack(
        graph=COSTS,
        executor="submit",
        spark_submit_args=[
            *("--conf", "spark.eventLog.enabled=true"),
            *("--conf", f"spark.eventLog.dir={events.as_uri()}"),
            *("--conf", "spark.eventLog.compress=false"),  # JSON lines the test reads as they are
        ],
    )
    await built(stack, "sums/1")
    (run,) = stack.bel.job_runs.query(job_label="sums")
    (attempt,) = stack.bel.costs.attempts_of([run.job_run_id])
    assert attempt.executor == "submit" and attempt.cost is not None
    spark_figure = task_seconds_in_event_log(events, attempt_name(run.job_run_id, 1))
    assert spark_figure > 0.1
    assert attempt.cost.task_seconds == pytest.approx(spark_figure, rel=0.05)
