"""The demo want with declared inputs against the same jobs discovering their inputs at run time,
measured in one run on a Temporal dev server with Spark in local mode.

    python -m bench.bench_declared [--rounds 3]

Each round builds ``daily_summary/2024-01-07`` from nothing (a fresh BEL and storage) with
``examples.demo:graph`` (inputs declared: derivative wants start before the first run) and with
``examples.demo:discovering`` (each job dep-misses once, then its derivative wants build), alternating.
Prints the median wall time of each, their ratio, and the job runs each made.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import run_and_exit
from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.graph import load_graph
from databuild.jobs.spark import SparkRuntime
from databuild.models import WantState
from databuild.testing import make_settings, start_dev_server
from worker.run import WorkerParts, running_worker

REF = "daily_summary/2024-01-07"
GRAPHS = {"declared": "examples.demo:graph", "discovering": "examples.demo:discovering"}


async def one_round(client: Any, spark: SparkRuntime, home: Path, graph: str, round_: int) -> dict[str, Any]:
    settings = make_settings(home, client, graph)
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    parts = WorkerParts(settings, client, bel, load_graph(graph), spark)
    try:
        async with running_worker(parts, warm_spark=False):
            db = DataBuild(client, bel, parts.graph, settings)
            # A data time of its own per round: want ids (and workflow ids) are unique per server.
            at = (
                datetime(2024, 1, 7, tzinfo=UTC)
                + timedelta(seconds=round_)
                + timedelta(microseconds=hash(graph) % 1000)
            )
            started = time.perf_counter()
            want = await db.wait(await db.want(REF, data_timestamp=at))
            wall = time.perf_counter() - started
        assert want.state is WantState.successful, want.reason
        runs = Counter(f"{r.job_label}:{r.state.value}" for r in bel.job_runs(limit=1000))
        return {"wall_s": wall, "job_runs": sum(runs.values()), "by_state": dict(sorted(runs.items()))}
    finally:
        bel.dispose()


async def run(rounds: int) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    env = await start_dev_server()
    spark = SparkRuntime("local[2]", "2g", app_name="databuild-bench-declared")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in GRAPHS}
    try:
        await asyncio.to_thread(spark.session)  # start-up is not part of either measure
        with tempfile.TemporaryDirectory(prefix="databuild-bench-") as tmp:
            # A first, uncounted build warms the JVM's code and Spark's caches for both.
            await one_round(env.client, spark, Path(tmp) / "warm-up", GRAPHS["discovering"], -1)
            for round_ in range(rounds):
                order = list(GRAPHS) if round_ % 2 == 0 else list(reversed(GRAPHS))
                for name in order:
                    home = Path(tmp) / f"{name}-{round_}"
                    results[name].append(await one_round(env.client, spark, home, GRAPHS[name], round_))
    finally:
        spark.stop()
        await env.shutdown()
    figures = {
        name: {
            "median_wall_s": statistics.median(r["wall_s"] for r in found),
            "rounds_s": [round(r["wall_s"], 2) for r in found],
            "job_runs": found[-1]["job_runs"],
            "by_state": found[-1]["by_state"],
        }
        for name, found in results.items()
    }
    figures["ratio_discovering_over_declared"] = (
        figures["discovering"]["median_wall_s"] / figures["declared"]["median_wall_s"]
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    def report() -> int:
        figures = asyncio.run(run(args.rounds))
        for name in GRAPHS:
            f = figures[name]
            print(
                f"{name:<12} {f['median_wall_s']:6.1f} s {f['rounds_s']}  {f['job_runs']} job runs  {f['by_state']}"
            )
        print(f"ratio discovering / declared: {figures['ratio_discovering_over_declared']:.2f}x")
        print(json.dumps(figures))
        return 0

    run_and_exit(report)


if __name__ == "__main__":
    main()
