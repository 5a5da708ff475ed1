"""A year's backfill of ``raw_events`` and ``daily_users`` (730 partitions), batched against unbatched,
measured in one run on a Temporal dev server with Spark in local mode.

    python -m bench.bench_backfill [--days 365] [--batch 31]

One backfill of ``daily_users/{date}`` over ``--days`` days; ``daily_users`` declares that it reads
``raw_events/{date}``, so every want starts a derivative want for its day's events first. The same jobs
run one partition per run (``databuild.testing.graphs:year_unbatched``) and ``--batch`` per run
(``databuild.testing.graphs:year_batched``, bodies that read a batch's inputs as one DataFrame and write
its partitions as one partitionBy write).
Each mode starts from nothing (a fresh BEL and storage), unbatched first, on one warm SparkSession.

Orchestration overhead per partition (batched) = (the backfill's wall time - the same batched Spark
work done directly on the same session, batch after batch, without DataBuild) / partitions. The floor
is that direct Spark work plus one bare workflow with one activity per partition (on a dev server of
their own): the verdict wants the batched backfill within 1.5x of it, and no workflow task over 5 s
(the exit code is 1 on a stalled task).
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.worker import Worker

from bench.bench_orchestration import BareWorkflow, bare_batch, noop
from bench.common import counting_stalled_tasks, run_and_exit
from databuild.backfill import BackfillRequest
from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.graph import load_graph
from databuild.jobs.spark import SparkRuntime
from databuild.models import WantState
from databuild.process import forward_core_logs
from databuild.testing import make_settings, start_dev_server
from worker.run import WorkerParts, running_worker

GRAPHS = {
    "unbatched": "databuild.testing.graphs:year_unbatched",
    "batched": "databuild.testing.graphs:year_batched",
}
FIRST = date(2023, 1, 1)
# The batched backfill's wall time against its floor: the same Spark work done directly, plus a bare
# workflow with one activity per partition on the same kind of server.
FLOOR_RATIO_TARGET = 1.5


async def backfill(client: Any, spark: SparkRuntime, home: Path, graph: str, days: int) -> dict[str, Any]:
    settings = make_settings(home, client, graph)
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    parts = WorkerParts(settings, client, bel, load_graph(graph), spark)
    start = datetime.combine(FIRST, datetime.min.time(), tzinfo=UTC)
    request = BackfillRequest(
        pattern="daily_users/{date}",
        start=start,
        end=start + timedelta(days=days - 1),
    )
    try:
        async with running_worker(parts, warm_spark=False):
            db = DataBuild(client, bel, parts.graph, settings)
            began = time.perf_counter()
            progress = await db.backfill(request)
            last = began
            while not progress.finished:
                await asyncio.sleep(0.5)
                progress = await db.backfill_progress(progress.backfill_id)
                if time.perf_counter() - last > 10:
                    last = time.perf_counter()
                    print(f"  {graph}: {progress.done}/{progress.partitions} done", file=sys.stderr)
            wall = time.perf_counter() - began
        assert progress.by_state == {WantState.successful: days}, progress.by_state
        runs = bel.job_runs.query(limit=100_000)
        built = sum(1 for p in bel.partitions.query(limit=100_000) if p.instance_id)
        assert built == 2 * days, f"{built} partitions live, not {2 * days}"
        return {
            "wall_s": wall,
            "job_runs": len(runs),
            "by_state": dict(sorted(Counter(f"{r.job_label}:{r.state.value}" for r in runs).items())),
        }
    finally:
        bel.dispose()


async def bare_workflows(count: int) -> float:
    """How long ``count`` bare workflows with one no-op activity each take on a dev server of their own:
    the part of the floor a want workflow per partition cannot go below."""
    env = await start_dev_server()
    try:
        queue = f"bare-{uuid.uuid4().hex[:8]}"
        async with Worker(env.client, task_queue=queue, workflows=[BareWorkflow], activities=[noop]):
            await bare_batch(env.client, queue, "warm", 5)
            return await bare_batch(env.client, queue, "floor", count)
    finally:
        await env.shutdown()


def direct(spark: SparkRuntime, home: Path, days: int, batch: int) -> float:
    """The batched bodies' Spark work without DataBuild: each batch of raw_events, then of daily_users,
    as one partitionBy write, daily_users reading its batch's events back as one DataFrame."""
    from databuild.testing.graphs import events_of_days, users_of

    session = spark.session()
    root = home / "direct"
    dates = [(FIRST + timedelta(days=n)).isoformat() for n in range(days)]
    started = time.perf_counter()
    for label in ("raw_events", "daily_users"):
        for at in range(0, days, batch):
            where = str(root / label / str(at))
            if label == "raw_events":
                frame = events_of_days(session, dates[at : at + batch])
            else:
                frame = users_of(session.read.parquet(str(root / "raw_events" / str(at))))
            frame.write.mode("error").partitionBy("date").parquet(where)
    return time.perf_counter() - started


async def run(days: int, batch: int) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    forward_core_logs()  # the worker's stalled workflow tasks are counted
    spark = SparkRuntime("local[2]", "2g", app_name="databuild-bench-backfill")
    figures: dict[str, Any] = {"days": days, "partitions": 2 * days, "batch": batch}
    try:
        await asyncio.to_thread(spark.session)  # start-up is not part of any measure
        with tempfile.TemporaryDirectory(prefix="databuild-bench-") as tmp:
            await asyncio.to_thread(direct, spark, Path(tmp) / "warm-up", min(days, batch), batch)
            figures["direct_s"] = await asyncio.to_thread(direct, spark, Path(tmp), days, batch)
            figures["bare_s"] = await bare_workflows(2 * days)
            figures["floor_s"] = figures["direct_s"] + figures["bare_s"]
            for name, graph in GRAPHS.items():
                # A dev server per mode: both register the same wants (same ids, same workflow ids).
                env = await start_dev_server()
                try:
                    print(f"{name}: backfilling {2 * days} partitions", file=sys.stderr)
                    with counting_stalled_tasks() as stalled:
                        figures[name] = await backfill(env.client, spark, Path(tmp) / name, graph, days)
                        await asyncio.sleep(1)  # the SDK's core forwards its log lines a batch at a time
                        figures[name]["stalled_tasks"] = stalled()
                finally:
                    await env.shutdown()
    finally:
        spark.stop()
    unbatched, batched = figures["unbatched"]["wall_s"], figures["batched"]["wall_s"]
    figures["speedup"] = unbatched / batched
    figures["floor_ratio"] = batched / figures["floor_s"]
    figures["overhead_per_partition_ms"] = {
        "batched": 1000 * (batched - figures["direct_s"]) / figures["partitions"],
        "unbatched": 1000 * (unbatched - figures["direct_s"]) / figures["partitions"],
    }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument(
        "--batch", type=int, default=31, help="must match databuild.testing.graphs:year_batched"
    )
    args = parser.parse_args()

    def report() -> int:
        figures = asyncio.run(run(args.days, args.batch))
        print(f"\n{figures['partitions']} partitions ({figures['days']} days of raw_events and daily_users)")
        print(f"{'mode':<12}{'wall s':>9}{'job runs':>10}{'overhead/partition':>21}")
        print("-" * 52)
        for name in GRAPHS:
            f = figures[name]
            overhead = figures["overhead_per_partition_ms"][name]
            print(f"{name:<12}{f['wall_s']:>9.1f}{f['job_runs']:>10}{overhead:>18.1f} ms")
        print(f"{'direct':<12}{figures['direct_s']:>9.1f}{'-':>10}{'(Spark work alone)':>21}")
        print(f"{'floor':<12}{figures['floor_s']:>9.1f}{'-':>10}{'(direct + bare workflows)':>26}")
        print(f"batched is {figures['speedup']:.1f}x faster than unbatched")
        stalled = sum(figures[name]["stalled_tasks"] for name in GRAPHS)
        near = figures["floor_ratio"] <= FLOOR_RATIO_TARGET
        print(
            f"batched / floor: {figures['floor_ratio']:.2f} (target: at most {FLOOR_RATIO_TARGET}): "
            f"{'PASS' if near else 'FAIL'}"
        )
        print(f"workflow tasks over 5 s: {stalled} (target: none): {'PASS' if stalled == 0 else 'FAIL'}")
        figures["verdict"] = "PASS" if stalled == 0 and near else "FAIL"
        print(json.dumps(figures))
        return 0 if stalled == 0 else 1

    run_and_exit(report)


if __name__ == "__main__":
    main()
