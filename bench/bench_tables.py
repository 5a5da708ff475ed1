"""What Iceberg tables add to builds: a job run's table commit against the run itself, and a batched
backfill's commits against its Spark writes, measured in one process.

    python -m bench.bench_tables [--runs 20] [--days 365] [--batch 31]

Runs: day after day, a job run as the worker records it (its BEL start, the demo's ``raw_events`` body
writing its instance in a warm Spark session, the BEL commit that makes it live), then what its table adds:
the audit before the BEL commit (the instance's footers, against the table's schema) and the commit after
it (one Iceberg snapshot in the SQL catalog in the BEL's database, recorded in the BEL) through the
worker's publisher. The table grows by a partition a run, as a daily table does.

Backfill: ``--days`` partitions written by runs of ``--batch`` days, each run one ``partitionBy`` write (as
``ctx.write_partitioned`` writes it, the day in the files), each run's partitions audited and committed as
one snapshot. Prints the medians and totals with their ratios; the verdicts want a table commit to add at
most half of a run's time, and a quarter of a backfill's writes. The last line is the figures as JSON.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from datetime import date, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import run_and_exit
from databuild.bel import BuildEventLog
from databuild.domain import events as ev
from databuild.graph import Graph
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.storage import Storage
from databuild.jobs.tables.iceberg import IcebergTables
from databuild.jobs.tables.publisher import TablePublisher
from databuild.jobs.tables.spec import Placed, TableSpec
from databuild.models import InstanceRef
from databuild.testing import record_build
from examples import demo

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RUN_TARGET = 0.5  # a run's table work / the run
# A backfill's table work / its Spark writes: each commit reads every new file's footer twice (the audit,
# then Iceberg's add-files for the files' statistics), about a millisecond a file.
BACKFILL_TARGET = 0.25
graph = Graph("bench_tables")
graph.job("raw_events/{date}")(demo.raw_events)
WIDE = TableSpec("wide", ("date",), "iceberg", "wide/{date}")


class Writing:
    """The part of a job context the demo's body uses: its session, and a write into the instance the run
    planned, with the date in the files (as ctx.write adds it for an Iceberg table)."""

    def __init__(self, spark: "SparkSession", location: str) -> None:
        self.spark, self.location = spark, location

    def write(self, ref: str, frame: "DataFrame") -> None:
        from pyspark.sql import functions as F

        frame.withColumn("date", F.lit(ref.split("/")[1])).write.mode("error").parquet(self.location)


def one_run(bel: BuildEventLog, storage: Storage, spark: "SparkSession", day: str) -> tuple[str, str, float]:
    """A job run of ``raw_events/{day}`` as a worker records it: (ref, location, seconds it took)."""
    ref = f"raw_events/{day}"
    started = time.perf_counter()
    instance = record_build(
        bel,
        graph,
        storage,
        ref,
        lambda location: demo.raw_events(Writing(spark, location), day),  # type: ignore[arg-type]
    )
    location = storage.location(ref, instance.instance_id or "")
    return ref, location, time.perf_counter() - started


def measure_runs(bel: BuildEventLog, storage: Storage, spark: "SparkSession", runs: int) -> dict[str, Any]:
    tables = TablePublisher(bel, graph, {"iceberg": iceberg(bel, storage)}, "iceberg")
    run_s: list[float] = []
    table_s: list[float] = []
    start = date(2024, 1, 1)
    for n in range(runs + 1):  # the first warms the session and creates the table; not counted
        day = (start + timedelta(days=n)).isoformat()
        ref, location, took = one_run(bel, storage, spark, day)
        started = time.perf_counter()
        instance_id = bel.partitions.get(ref).instance_id or ""
        tables.audit({ref: location}, {ref: instance_id})
        assert tables.follow([ref]) == 1
        if n:
            run_s.append(took)
            table_s.append(time.perf_counter() - started)
    run_ms, table_ms = statistics.median(run_s) * 1000, statistics.median(table_s) * 1000
    ratio = table_ms / run_ms
    return {
        "runs": runs,
        "run_ms": round(run_ms, 1),
        "table_ms": round(table_ms, 1),
        "ratio": round(ratio, 3),
        "target": RUN_TARGET,
        "verdict": "PASS" if ratio <= RUN_TARGET else "FAIL",
    }


def measure_backfill(
    bel: BuildEventLog, storage: Storage, spark: "SparkSession", days: int, batch: int
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    tables = iceberg(bel, storage)
    dates = [(date(2023, 1, 1) + timedelta(days=n)).isoformat() for n in range(days)]
    write_s = table_s = 0.0
    snapshots = 0
    for first in range(0, days, batch):
        chunk = dates[first : first + batch]
        started = time.perf_counter()
        key = storage.write_key("wide", f"jr-{uuid.uuid4().hex[:16]}", 1)
        frame = spark.range(2000 * len(chunk)).select(
            F.element_at(
                F.array(*(F.lit(d) for d in chunk)), (F.col("id") % len(chunk) + 1).cast("int")
            ).alias("date"),
            F.col("id").alias("event_id"),
            (F.col("id") % 997).alias("amount"),
        )
        frame.withColumn("date__partition", F.col("date")).write.partitionBy("date__partition").parquet(
            storage.uri_of(key)
        )
        wrote = time.perf_counter()
        placed = [
            Placed(f"wide/{d}", {"date": d}, str(uuid.uuid4()), storage.uri_of(f"{key}/date__partition={d}"))
            for d in chunk
        ]
        tables.audit(WIDE, placed)
        committed = tables.publish(WIDE, placed, {"databuild.refs": ",".join(p.ref for p in placed)})
        bel.tables.record(
            ev.TableCommitted(
                table=tables.qualified(WIDE),
                format="iceberg",
                snapshot_id=committed.snapshot_id,
                committed_at=committed.committed_at,
                instances=[InstanceRef(ref=p.ref, instance_id=p.instance_id) for p in placed],
            )
        )
        write_s += wrote - started
        table_s += time.perf_counter() - wrote
        snapshots += 1
    table = tables.catalog.load_table(tables.qualified(WIDE))
    assert len(table.snapshots()) == snapshots and table.scan().to_arrow().num_rows == 2000 * days
    ratio = table_s / write_s
    return {
        "days": days,
        "batch": batch,
        "snapshots": snapshots,
        "write_s": round(write_s, 2),
        "table_s": round(table_s, 2),
        "table_ms_per_snapshot": round(table_s / snapshots * 1000, 1),
        "ratio": round(ratio, 3),
        "target": BACKFILL_TARGET,
        "verdict": "PASS" if ratio <= BACKFILL_TARGET else "FAIL",
    }


def iceberg(bel: BuildEventLog, storage: Storage) -> IcebergTables:
    return IcebergTables(bel.url, namespace="bench", storage=storage, shown="the BEL's database")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="job runs measured (after one to warm up)")
    parser.add_argument("--days", type=int, default=365, help="days of the batched backfill")
    parser.add_argument("--batch", type=int, default=31, help="days a run of the backfill builds")
    args = parser.parse_args()
    if min(args.runs, args.days, args.batch) < 1:
        parser.error("give --runs, --days and --batch at least 1")
    with tempfile.TemporaryDirectory(prefix="databuild-bench-tables-") as home:
        spark = SparkRuntime(log_file=Path(home) / "spark.log").session()
        bel = BuildEventLog.create(f"sqlite:///{home}/bel.sqlite")
        storage = Storage(Path(home, "lake").as_uri())
        try:
            runs = measure_runs(bel, storage, spark, args.runs)
            backfill = measure_backfill(bel, storage, spark, args.days, args.batch)
        finally:
            bel.dispose()
    print(
        f"a job run: {runs['run_ms']:.0f} ms (median of {runs['runs']}); its table's audit and commit: "
        f"{runs['table_ms']:.0f} ms, {runs['ratio']:.2f}x; target at most {RUN_TARGET}x: {runs['verdict']}"
    )
    print(
        f"a {backfill['days']}-day backfill in runs of {backfill['batch']} days: writes {backfill['write_s']:.1f} s, "
        f"{backfill['snapshots']} snapshots {backfill['table_s']:.1f} s ({backfill['table_ms_per_snapshot']:.0f} ms "
        f"each), {backfill['ratio']:.2f}x; target at most {BACKFILL_TARGET}x: {backfill['verdict']}"
    )
    figures = {"runs": runs, "backfill": backfill}
    print(json.dumps(figures))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    run_and_exit(main)
