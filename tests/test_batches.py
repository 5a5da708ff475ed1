"""Backfills at scale on the real stack: batched job runs, a cluster-wide pool, backfills yielding to
interactive wants, and a batch in which one partition's input is missing."""

import threading
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from databuild.backfill import BackfillRequest
from databuild.jobs.context import SparkJobContext
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.storage import Storage
from databuild.models import JobRun, JobRunState, PartitionStatus, WantState
from databuild.operations.garbage import collect_garbage
from tests import graphs
from tests.conftest import Stack
from tests.helpers import backfill_finished, lake, until

pytestmark = pytest.mark.slow

GRAPH = "tests.graphs:batches"
POOLS = {"etl": 2}  # daily/{day} takes slots of it


def days(first: date, count: int) -> list[str]:
    return [(first + timedelta(days=n)).isoformat() for n in range(count)]


def request(pattern: str, first: date, count: int) -> BackfillRequest:
    start = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    return BackfillRequest(pattern=pattern, start=start, end=start + timedelta(days=count - 1))


def runs_of(stack: Stack, job_label: str) -> list[JobRun]:
    return stack.bel.job_runs.query(job_label=job_label, limit=1000)


def most_at_once(stack: Stack, job_runs: set[str]) -> int:
    """The most of ``job_runs`` running at once, read from the BEL's events in commit order."""
    running: set[str] = set()
    most = 0
    for event in stack.bel.events.query(limit=100_000):
        if event.job_run_id not in job_runs:
            continue
        if event.type == "JobRunStarted":
            running.add(event.job_run_id)
        elif event.type in ("JobRunSucceeded", "JobRunDepMiss", "JobRunFailed"):
            running.discard(event.job_run_id)
        most = max(most, len(running))
    return most


FEED = pa.table(
    {"id": pa.array([0, 1, 2], pa.int64())}, schema=pa.schema([pa.field("id", pa.int64(), False)])
)


async def feed(stack: Stack, spark: SparkRuntime, day: str) -> None:
    """An external feed arrives: its data (what `spark.range(3)` writes, written by another tool: no Spark
    job per feed, of which a backfill test publishes 60), then its announcement."""
    folder = lake(stack.settings) / "feed" / day
    folder.mkdir(parents=True)
    pq.write_table(FEED, folder / "part-00000.parquet")
    await stack.db.publish(f"feed/{day}")


async def test_a_backfill_runs_in_full_batches_within_its_pool(make_stack, spark_runtime) -> None:
    # A long window: a batch starts only when full, so 60 partitions make exactly 6 runs.
    stack = await make_stack(graph=GRAPH, pools=POOLS, batch_window=timedelta(seconds=60))
    first = date(2024, 5, 1)
    for day in days(first, 60):
        await feed(stack, spark_runtime, day)
    backfill = request("daily/{day}", first, 60)
    progress = await stack.db.backfill(backfill)
    assert progress.partitions == 60
    await backfill_finished(stack.db, progress.backfill_id)
    assert (await stack.db.backfill_progress(progress.backfill_id)).by_state == {WantState.successful: 60}

    runs = runs_of(stack, "daily_batch")
    assert len(runs) == 6 and all(r.state is JobRunState.succeeded for r in runs), runs
    assert sorted(len(r.partitions or []) for r in runs) == [10] * 6
    assert most_at_once(stack, {r.job_run_id for r in runs}) <= 2

    # Every partition has its own instance, read from its own feed alone.
    instances = set()
    for day in days(first, 60):
        partition = stack.bel.partitions.get(f"daily/{day}")
        assert partition.status is PartitionStatus.live and partition.instance_id
        instances.add(partition.instance_id)
        built_from = {
            ref.ref
            for run_id, ref in stack.bel.partitions.consumers_of(
                stack.bel.partitions.get(f"feed/{day}").instance_id or ""
            )[0]
        }
        assert built_from == {f"daily/{day}"}
    assert len(instances) == 60

    # Asking again registers nothing.
    events = stack.bel.events.last_idx()
    again = await stack.db.backfill(backfill)
    assert again.finished and again.registered == 60
    assert stack.bel.events.last_idx() == events


async def test_an_interactive_want_starts_before_the_queued_backfill_runs(make_stack) -> None:
    stack = await make_stack(graph=GRAPH, pools=POOLS)
    first = date(2024, 6, 1)
    progress = await stack.db.backfill(request("paced/{day}", first, 4))
    # One backfill run goes at a time (max_running=1): the others wait in line, and say so.
    await until(lambda: sum(bool(r.waiting_for_pools) for r in runs_of(stack, "paced")) == 3)
    waiting = [r for r in runs_of(stack, "paced") if r.waiting_for_pools]
    assert {r.status for r in waiting} == {"queued (pool full: job:paced)"}

    urgent = await stack.db.want("paced/2024-07-01", data_timestamp=datetime(2024, 7, 1, tzinfo=UTC))
    assert (await stack.db.wait(urgent)).state is WantState.successful
    await backfill_finished(stack.db, progress.backfill_id)

    started = [e for e in stack.bel.events.query(limit=100_000) if e.type == "JobRunStarted"]
    order = [stack.bel.job_runs.get(e.job_run_id).outputs[0] for e in started]
    # The backfill's first run was going already; the interactive one was next, ahead of three older runs.
    assert order[1] == "paced/2024-07-01", order
    assert most_at_once(stack, {r.job_run_id for r in runs_of(stack, "paced")}) == 1


async def test_a_want_whose_sla_is_at_risk_goes_first_then_by_slack_and_backfills_last(make_stack) -> None:
    """One slot, held; in line: a backfill's runs, then an interactive want without an SLA, then one whose
    SLA is at risk (due in a minute). The slot goes to the one at risk, then the other, then the backfill."""
    stack = await make_stack(graph=GRAPH, pools=POOLS)
    graphs.GATES["hold"] = gate = threading.Event()
    try:
        await stack.db.want("gated/hold")
        await until(
            lambda: any(r.state is JobRunState.running for r in runs_of(stack, "gated")), "the slot held"
        )
        progress = await stack.db.backfill(request("gated/{day}", date(2024, 6, 1), 2))
        now = datetime.now(UTC)
        relaxed = await stack.db.want("gated/relaxed", data_timestamp=now)
        at_risk = await stack.db.want("gated/at-risk", data_timestamp=now, sla=timedelta(minutes=1))
        await until(
            lambda: sum(bool(r.waiting_for_pools) for r in runs_of(stack, "gated")) == 4, "four in line"
        )
    finally:
        gate.set()
        graphs.GATES.pop("hold", None)
    for spec in (relaxed, at_risk):
        assert (await stack.db.wait(spec)).state is WantState.successful
    await backfill_finished(stack.db, progress.backfill_id)
    started = [e for e in stack.bel.events.query(limit=100_000) if e.type == "JobRunStarted"]
    order = [stack.bel.job_runs.get(e.job_run_id).outputs[0] for e in started]
    assert order[:3] == ["gated/hold", "gated/at-risk", "gated/relaxed"], order
    assert sorted(order[3:]) == ["gated/2024-06-01", "gated/2024-06-02"], order


async def test_a_batch_missing_one_input_waits_for_that_input_only(make_stack, spark_runtime) -> None:
    stack = await make_stack(graph=GRAPH, pools=POOLS, batch_window=timedelta(seconds=60))
    first = date(2024, 8, 1)
    five = days(first, 5)
    late = five[2]
    for day in five:
        if day != late:
            await feed(stack, spark_runtime, day)
    progress = await stack.db.backfill(request("undeclared/{day}", first, 5))

    # The batch of five dep-misses on the one feed that is not there; every member waits for it (the job
    # declares no inputs, so nothing says whose it is) and for nothing else.
    def dep_missed() -> list[JobRun]:
        return [r for r in runs_of(stack, "undeclared_batch") if r.state is JobRunState.dep_miss]

    await until(lambda: bool(dep_missed()))
    (missed,) = dep_missed()
    assert missed.missing == [f"feed/{late}"]
    assert missed.missing_for == {f"undeclared/{day}": [f"feed/{late}"] for day in five}
    assert all(
        stack.bel.partitions.get(f"undeclared/{day}").status is not PartitionStatus.live for day in five
    )

    await feed(stack, spark_runtime, late)
    await backfill_finished(stack.db, progress.backfill_id)
    assert (await stack.db.backfill_progress(progress.backfill_id)).by_state == {WantState.successful: 5}
    built = [r for r in runs_of(stack, "undeclared_batch") if r.state is JobRunState.succeeded]
    assert len(built) == 1 and len(built[0].partitions or []) == 5


@pytest.fixture
def no_dropped_or_stray_days(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graphs, "DROPPED", set())
    monkeypatch.setattr(graphs, "STRAYS", set())


async def test_a_batch_written_as_one_dataframe_gives_each_partition_its_own_instance(
    make_stack, spark_runtime: SparkRuntime, no_dropped_or_stray_days: None
) -> None:
    stack = await make_stack(graph=GRAPH, pools=POOLS, batch_window=timedelta(seconds=60), job_attempts=1)
    first = date(2024, 9, 1)
    for day in days(first, 15):
        await feed(stack, spark_runtime, day)
    storage = Storage(stack.settings.storage_root)

    # Five days in one run, one partitionBy write: each day its own live instance in the run's folder,
    # read alone as written (the day in the folder's name, not in the files), with its own lineage.
    built = await stack.db.backfill(request("partitioned/{day}", first, 5))
    await backfill_finished(stack.db, built.backfill_id)
    assert (await stack.db.backfill_progress(built.backfill_id)).by_state == {WantState.successful: 5}
    (run,) = runs_of(stack, "partitioned_batch")
    assert run.state is JobRunState.succeeded and len(run.partitions or []) == 5
    session = spark_runtime.session()
    for day in days(first, 5):
        instance = stack.bel.partitions.instance(
            stack.bel.partitions.get(f"partitioned/{day}").instance_id or ""
        )
        assert instance.location == storage.uri_of(f"partitioned/~{run.job_run_id}-1/day={day}")
        rows = session.read.parquet(instance.location).orderBy("id").collect()
        assert [(r.id, r.doubled) for r in rows] == [(0, 0), (1, 2), (2, 4)]
        assert instance.facts is not None and instance.facts.rows == 3
        assert [c.name for c in instance.facts.columns] == ["id", "doubled"]
        feed_instance = stack.bel.partitions.get(f"feed/{day}").instance_id or ""
        assert {ref.ref for _, ref in stack.bel.partitions.consumers_of(feed_instance)[0]} == {
            f"partitioned/{day}"
        }

    # Read back as one DataFrame, as a downstream batch would: the five built here and a published feed
    # in one scan; a feed published with its files in sub-folders (any layout) read on its own. Every
    # row has its day, and every read is recorded for lineage.
    nested = lake(stack.settings) / "feed" / "2024-12-01" / "part=1"
    nested.mkdir(parents=True)
    pq.write_table(FEED, nested / "part-00000.parquet")
    await stack.db.publish("feed/2024-12-01")
    reader = SparkJobContext(
        spark=session,
        bel=stack.bel,
        graph=stack.graph,
        storage=storage,
        job_run_id="jr-reader",
        job_label="reader",
        instances={},
        params={},
        cancelled=threading.Event(),
    )
    sixth = days(first, 6)[5]
    refs = [f"partitioned/{day}" for day in days(first, 5)] + [f"feed/{sixth}", "feed/2024-12-01"]
    read = reader.read_partitioned(refs)
    found = sorted((r.day, r.id, r.doubled, r.part) for r in read.collect())
    assert found == sorted(
        [(day, n, 2 * n, None) for day in days(first, 5) for n in range(3)]
        + [(sixth, n, None, None) for n in range(3)]
        + [("2024-12-01", n, None, 1) for n in range(3)]  # its sub-folder's column, as Spark reads it
    )
    assert [r.ref for r in reader.reads] == refs

    # A day the DataFrame has no rows for, or rows for a day the run does not build: the run fails
    # naming it, and none of its partitions is published.
    graphs.DROPPED.add(days(first, 7)[6])
    dropped = await stack.db.backfill(request("partitioned/{day}", date(2024, 9, 6), 5))
    await backfill_finished(stack.db, dropped.backfill_id)
    graphs.DROPPED.clear()
    graphs.STRAYS.add("2031-01-01")
    stray = await stack.db.backfill(request("partitioned/{day}", date(2024, 9, 11), 5))
    await backfill_finished(stack.db, stray.backfill_id)
    failed = {r.reason or "" for r in runs_of(stack, "partitioned_batch") if r.state is JobRunState.failed}
    assert any("wrote no rows for partitioned/2024-09-07:" in reason for reason in failed), failed
    assert any("wrote rows for day=2031-01-01, which this run does not build" in r for r in failed), failed
    for day in days(date(2024, 9, 6), 10):
        assert stack.bel.partitions.get(f"partitioned/{day}").status is not PartitionStatus.live

    # Garbage collection removes the failed runs' folders whole, and keeps the live partitions.
    report = collect_garbage(storage, stack.bel, keep=timedelta(0))
    gone = sorted(c.location for c in report.deleted if c.location.startswith(storage.uri_of("partitioned/")))
    assert len(gone) == 2 and all("/~jr-" in location for location in gone), gone
    assert report.kept.get("live", 0) >= 5
    for day in days(first, 5):
        instance = stack.bel.partitions.instance(
            stack.bel.partitions.get(f"partitioned/{day}").instance_id or ""
        )
        assert storage.exists(storage.key_of(instance) or "")
