"""The demo want with declared inputs against the same jobs discovering their inputs at run time,
measured in one run on a Temporal dev server with Spark in local mode.

    python -m bench.bench_declared [--rounds 3] [--ref daily_summary/2024-01-07]

Each round builds ``daily_summary/2024-01-07`` from nothing (a fresh BEL and storage) with
``examples.demo:graph`` (inputs declared: derivative wants start before the first run) and with
``examples.demo:discovering`` (each job dep-misses once, then its derivative wants build), alternating.
Prints the median wall time of each, their ratio, and the job runs each made. The verdict wants the
declared graph to make no dep-miss attempt and to be no slower than discovery (a ratio of at least 1.0),
and no workflow task over 5 s (the exit code is 1 on a stalled task).
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

from bench.common import counting_stalled_tasks, run_and_exit
from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.graph import load_graph
from databuild.jobs.spark import SparkRuntime
from databuild.models import WantState
from databuild.process import forward_core_logs
from databuild.testing import make_settings, start_dev_server
from worker.run import WorkerParts, running_worker

REF = "daily_summary/2024-01-07"
GRAPHS = {"declared": "examples.demo:graph", "discovering": "examples.demo:discovering"}
RATIO_TARGET = 1.0  # discovery / declared: declaring inputs must never cost time


async def one_round(
    client: Any, spark: SparkRuntime, home: Path, graph: str, round_: int, ref: str
) -> dict[str, Any]:
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
            want = await db.wait(await db.want(ref, data_timestamp=at))
            wall = time.perf_counter() - started
        assert want.state is WantState.successful, want.reason
        runs = Counter(f"{r.job_label}:{r.state.value}" for r in bel.job_runs.query(limit=1000))
        return {"wall_s": wall, "job_runs": sum(runs.values()), "by_state": dict(sorted(runs.items()))}
    finally:
        bel.dispose()


async def run(rounds: int, ref: str) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    forward_core_logs()  # the worker's stalled workflow tasks are counted
    env = await start_dev_server()
    spark = SparkRuntime("local[2]", "2g", app_name="databuild-bench-declared")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in GRAPHS}
    try:
        await asyncio.to_thread(spark.session)  # start-up is not part of either measure
        with (
            tempfile.TemporaryDirectory(prefix="databuild-bench-") as tmp,
            counting_stalled_tasks() as stalled,
        ):
            # A first, uncounted build warms the JVM's code and Spark's caches for both.
            await one_round(env.client, spark, Path(tmp) / "warm-up", GRAPHS["discovering"], -1, ref)
            for round_ in range(rounds):
                order = list(GRAPHS) if round_ % 2 == 0 else list(reversed(GRAPHS))
                for name in order:
                    home = Path(tmp) / f"{name}-{round_}"
                    results[name].append(await one_round(env.client, spark, home, GRAPHS[name], round_, ref))
            await asyncio.sleep(1)  # the SDK's core forwards its log lines a batch at a time
            stalled_tasks = stalled()
    finally:
        spark.stop()
        await env.shutdown()
    figures: dict[str, Any] = {
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
    figures["stalled_tasks"] = stalled_tasks
    figures["declared_dep_misses"] = sum(
        count for key, count in figures["declared"]["by_state"].items() if key.endswith(":dep_miss")
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ref", default=REF, help="the partition to want (a test wants one day's users)")
    args = parser.parse_args()

    def report() -> int:
        figures = asyncio.run(run(args.rounds, args.ref))
        for name in GRAPHS:
            f = figures[name]
            print(
                f"{name:<12} {f['median_wall_s']:6.1f} s {f['rounds_s']}  {f['job_runs']} job runs  {f['by_state']}"
            )
        ratio, stalled = figures["ratio_discovering_over_declared"], figures["stalled_tasks"]
        checks = {
            f"ratio discovering / declared: {ratio:.2f}x (target: at least {RATIO_TARGET})": ratio
            >= RATIO_TARGET,
            f"dep-miss attempts of the declared graph: {figures['declared_dep_misses']} (target: none)": figures[
                "declared_dep_misses"
            ]
            == 0,
            f"workflow tasks over 5 s: {stalled} (target: none)": stalled == 0,
        }
        for line, passed in checks.items():
            print(f"{line}: {'PASS' if passed else 'FAIL'}")
        figures["misses"] = [line.partition(":")[0] for line, passed in checks.items() if not passed]
        figures["verdict"] = "PASS" if not figures["misses"] else "FAIL"
        print(json.dumps(figures))
        return 0 if stalled == 0 else 1

    run_and_exit(report)


if __name__ == "__main__":
    main()
