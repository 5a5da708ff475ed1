"""What the demo's checks cost: each demo job's body (its Spark work and its write) against its checks on
the instance it wrote, measured in one Spark session, day after day.

    python -m bench.bench_checks [--days 7]

For each day, ``raw_events`` then ``daily_users`` run as in a build (``examples.demo``), each writing
its instance as ``ctx.write`` does, then the checks the demo declares on it run as the job context runs
them (``databuild.jobs.checks.run_checks``: read back from the instance, the schema and row counts from
the recorded facts, ``unique`` as one aggregation). Prints each job's median body and checks time and
their ratio; the verdict wants the checks to add at most half of the body's time. The last line is the
figures as JSON.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import run_and_exit
from databuild.jobs.checks import run_checks
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.storage import Storage
from databuild.models import Column, InstanceFacts
from examples import demo

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RATIO_TARGET = 0.5  # checks / body
JOBS = {"raw_events": demo.raw_events, "daily_users": demo.daily_users}


class Writing:
    """The job context a demo body needs here: its session, its one input read back from where the day's
    ``raw_events`` was written, and a write into a fresh instance folder with the facts the checks read."""

    def __init__(self, spark: "SparkSession", lake: Path) -> None:
        self.spark = spark
        self.storage = Storage(lake.as_uri())
        self.written: dict[str, tuple[str, InstanceFacts]] = {}

    def read(self, ref: str) -> "DataFrame":
        return self.spark.read.parquet(self.written[ref][0])

    def progress(self, message: str) -> None:
        pass

    def write(self, ref: str, frame: "DataFrame") -> None:
        key = f"{ref}/~{uuid.uuid4()}"
        frame.write.mode("error").parquet(self.storage.uri_of(key))
        rows, size, files = self.storage.parquet_summary(key)  # as ctx.write records them: the footers
        columns = [
            Column(name=f.name, type=f.dataType.simpleString(), nullable=f.nullable) for f in frame.schema
        ]
        self.written[ref] = (
            self.storage.uri_of(key),
            InstanceFacts(rows=rows, bytes=size, files=files, columns=columns),
        )


def measure(days: int) -> dict[str, Any]:
    graph = demo.graph
    times: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label in JOBS}  # body, checks
    with tempfile.TemporaryDirectory(prefix="databuild-bench-checks-") as home:
        spark = SparkRuntime(log_file=Path(home) / "spark.log").session()
        ctx = Writing(spark, Path(home))
        for day in range(days + 1):  # the first day warms the session up and is not counted
            date = f"2024-01-{day + 1:02d}"
            for label, body in JOBS.items():
                ref = f"{label}/{date}"
                started = time.perf_counter()
                body(ctx, date)  # type: ignore[arg-type]  # the part of a job context the demo uses
                wrote = time.perf_counter()
                location, facts = ctx.written[ref]
                checks = graph.job_by_label(label).checks_of(ref)
                params = {"date": date}
                run_checks(
                    spark, checks, ref=ref, instance_id="-", params=params, location=location, facts=facts
                )
                if day:
                    times[label][0].append(wrote - started)
                    times[label][1].append(time.perf_counter() - wrote)
    jobs: dict[str, dict[str, Any]] = {}
    for label, (bodies, checking) in times.items():
        body_s, checks_s = statistics.median(bodies), statistics.median(checking)
        jobs[label] = {
            "checks": [c.name for c in graph.job_by_label(label).checks_of(f"{label}/2024-01-01")],
            "body_ms": round(body_s * 1000, 1),
            "checks_ms": round(checks_s * 1000, 1),
            "ratio": round(checks_s / body_s, 3),
        }
    ratio = round(sum(j["checks_ms"] for j in jobs.values()) / sum(j["body_ms"] for j in jobs.values()), 3)
    return {
        "days": days,
        "jobs": jobs,
        "ratio": ratio,
        "target": RATIO_TARGET,
        "verdict": "PASS" if ratio <= RATIO_TARGET else "FAIL",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--days", type=int, default=7, help="days of the demo measured (after one to warm up)"
    )
    args = parser.parse_args()
    if args.days < 1:
        parser.error("--days: give at least 1")
    figures = measure(args.days)
    print(f"{'job':14} {'body (median)':>14} {'checks (median)':>16} {'checks/body':>12}   checks")
    for label, job in figures["jobs"].items():
        print(
            f"{label:14} {job['body_ms']:>11.1f} ms {job['checks_ms']:>13.1f} ms {job['ratio']:>11.2f}x"
            f"   {', '.join(job['checks'])}"
        )
    print(
        f"the demo's checks add {figures['ratio']:.0%} to its jobs' time over {figures['days']} day(s); "
        f"target at most {RATIO_TARGET:.0%}: {figures['verdict']}"
    )
    print(json.dumps(figures))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    run_and_exit(main)
