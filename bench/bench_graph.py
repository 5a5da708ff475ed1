"""A small graph as fast as its work: the want of its top partition from the CLI, against the same Spark
reads and writes done directly on the worker's session, alternating in one run.

    python -m bench.bench_graph [--rounds 5] [--days 7]

The graph (``databuild.testing.graphs:small``): ``--days`` partitions of a raw job, as many of a daily job
that reads them, and a two-output weekly rollup that reads the daily ones; every input declared, every
write one row. With 7 days that is 15 builds. Each round wants the rollup of a new week with
`databuild want weekly/DAY --wait`, a process as a user starts it, on a warm stack (a Temporal dev server,
a worker in this process, Spark warm), and does the same work directly: each raw write, each daily
read and write, and the rollup's read and two writes, one after another on the worker's Spark session.
Each DataBuild round is split where its time goes (from the BEL's timestamps): the CLI's start until the
want is recorded, until its first job run is queued, the job runs, and after the last ends. The last
line printed is JSON.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from bench.common import counting_stalled_tasks, run_and_exit
from databuild.bel import BuildEventLog
from databuild.graph import load_graph
from databuild.jobs.spark import SparkRuntime
from databuild.models import WantSource, WantState
from databuild.process import forward_core_logs
from databuild.testing import make_settings, start_dev_server
from databuild.testing.graphs import WEEK, day_of, days_before, one_row, rollup_of
from worker.run import WorkerParts, running_worker

RATIO_TARGET = 1.3  # the want from the CLI, over the same Spark work done directly
FIRST_DAY = date(2024, 1, 1)
CHECKOUT = Path(__file__).resolve().parents[1]


def graph_ref(days: int) -> str:
    return "databuild.testing.graphs:" + ("small" if days == WEEK else "small_two_days")


def week_end(round_: int, days: int) -> str:
    return (FIRST_DAY + timedelta(days=round_ * days + days - 1)).isoformat()


def direct_round(spark: SparkRuntime, folder: Path, end: str, days: int) -> float:
    """The graph's Spark work for the week ending ``end``, done directly, one step after another."""
    session = spark.session()
    start = time.perf_counter()
    week = days_before(end, days)
    for day in week:
        one_row(session, day).write.parquet(str(folder / "raw" / day))
    for day in week:
        day_of(session.read.parquet(str(folder / "raw" / day))).write.parquet(str(folder / "daily" / day))
    total, latest = rollup_of([session.read.parquet(str(folder / "daily" / day)) for day in week], end)
    total.write.parquet(str(folder / "weekly" / end))
    latest.write.parquet(str(folder / "weekly_latest" / end))
    return time.perf_counter() - start


def cli_want(env: dict[str, str], cwd: Path, ref: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "worker", "want", ref, "--wait", "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"`databuild want {ref} --wait` exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed


def phases(bel: BuildEventLog, ref: str, wall_s: float, days: int) -> dict[str, Any]:
    """Where a DataBuild round's time went, from the BEL's own timestamps and the CLI's wall time."""
    [want] = [w for w in bel.wants.query(ref_prefix=ref) if w.source is not WantSource.derivative]
    if want.state is not WantState.successful:
        raise RuntimeError(f"the want for {ref} ended {want.state.value}: {want.reason}")
    # Rounds run one after another, and the direct side makes no runs: the round's are those since.
    runs = sorted(
        (r for r in bel.job_runs.query(limit=10 * days) if r.created_at >= want.created_at),
        key=lambda r: r.created_at,
    )
    if len(runs) != 2 * days + 1:
        raise RuntimeError(f"{ref}: {len(runs)} job runs, expected {2 * days + 1}")
    registered, first = want.created_at, runs[0].created_at
    last_end = max(r.updated_at for r in runs)
    ended = want.updated_at
    runs_s = (last_end - first).total_seconds()
    before_s = wall_s - (ended - registered).total_seconds()
    return {
        "wall_s": wall_s,
        "cli_and_registration_s": before_s,  # the CLI's start, and its registration, until the BEL has it
        "first_decision_s": (first - registered).total_seconds(),
        "job_runs_s": runs_s,
        "run_busy_s": sum((r.updated_at - r.created_at).total_seconds() for r in runs),
        "after_last_run_s": (ended - last_end).total_seconds(),
        "runs": len(runs),
    }


async def measure(rounds: int, days: int) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="databuild-bench-") as tmp:
        home = Path(tmp)
        env = await start_dev_server()
        spark = SparkRuntime("local[2]", "2g", app_name="databuild-bench")
        try:
            settings = make_settings(home / "databuild", env.client, graph_ref(days))
            bel = BuildEventLog.create(settings.database_url.get_secret_value())
            await asyncio.to_thread(spark.session)
            parts = WorkerParts(settings, env.client, bel, load_graph(settings.graph), spark)
            cli_env = {
                **os.environ,
                **settings.process_env(),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")])),
            }
            with counting_stalled_tasks() as stalled:
                async with running_worker(parts, warm_spark=False):
                    # Round 0 of each is untimed: first uses (code paths, the JVM's JIT, files) pay there.
                    direct: list[float] = []
                    databuild: list[dict[str, Any]] = []
                    for r in range(rounds + 1):
                        ref = f"weekly/{week_end(r, days)}"
                        wall = await asyncio.to_thread(cli_want, cli_env, home, ref)
                        split = await asyncio.to_thread(phases, bel, ref, wall, days)
                        alone = await asyncio.to_thread(
                            direct_round, spark, home / "direct", week_end(r, days), days
                        )
                        if r:
                            databuild.append(split)
                            direct.append(alone)
                await asyncio.sleep(1)  # the SDK's core forwards its log lines a batch at a time
                stalled_tasks = stalled()
            bel.dispose()
        finally:
            spark.stop()
            await env.shutdown()
    want_s = statistics.median(d["wall_s"] for d in databuild)
    direct_s = statistics.median(direct)
    return {
        "rounds": rounds,
        "days": days,
        "builds": 2 * days + 1,
        "want_median_s": want_s,
        "direct_median_s": direct_s,
        "ratio": want_s / direct_s,
        "round_ratios": [d["wall_s"] / s for d, s in zip(databuild, direct, strict=True)],
        "phases_median_s": {
            name: statistics.median(d[name] for d in databuild)
            for name in (
                "cli_and_registration_s",
                "first_decision_s",
                "job_runs_s",
                "run_busy_s",
                "after_last_run_s",
            )
        },
        "stalled_tasks": stalled_tasks,
        "total_s": time.perf_counter() - started,
    }


def verdict(figures: dict[str, Any]) -> dict[str, Any]:
    misses = []
    if figures["ratio"] > RATIO_TARGET:
        misses.append(f"ratio {figures['ratio']:.2f}x > {RATIO_TARGET}x")
    if figures["stalled_tasks"]:
        misses.append(f"{figures['stalled_tasks']} stalled workflow task(s)")
    return {"verdict": "FAIL" if misses else "PASS", "misses": misses}


def report(figures: dict[str, Any]) -> None:
    p = figures["phases_median_s"]
    rows = [
        (f"want from the CLI ({figures['builds']} builds)", f"{figures['want_median_s']:.2f} s"),
        ("  CLI start and registration", f"{p['cli_and_registration_s']:.2f} s"),
        ("  registration -> first job run", f"{p['first_decision_s']:.2f} s"),
        ("  first job run -> last one's end", f"{p['job_runs_s']:.2f} s"),
        ("    (job runs' own spans, summed)", f"{p['run_busy_s']:.2f} s"),
        ("  last job run's end -> want ended", f"{p['after_last_run_s']:.2f} s"),
        ("same Spark work, directly", f"{figures['direct_median_s']:.2f} s"),
        ("ratio", f"{figures['ratio']:.2f} x   target <= {RATIO_TARGET}x"),
        ("ratio per round", ", ".join(f"{r:.2f}" for r in figures["round_ratios"])),
    ]
    print()
    print(f"medians of {figures['rounds']} alternating rounds")
    for name, value in rows:
        print(f"{name:<36}{value}")
    print(
        f"workflow tasks over 5 s: {figures['stalled_tasks']} (target: none); whole run {figures['total_s']:.0f} s"
    )
    print(f"verdict {figures['verdict']}" + "".join(f"\n    {miss}" for miss in figures["misses"]))
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of each side")
    parser.add_argument(
        "--days", type=int, choices=(2, WEEK), default=WEEK, help="days per week (2: the test's size)"
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    def work() -> int:
        forward_core_logs()  # the worker's stalled workflow tasks are counted
        figures = asyncio.run(measure(args.rounds, args.days))
        figures |= verdict(figures)
        report(figures)
        return 1 if figures["stalled_tasks"] else 0

    run_and_exit(work)


if __name__ == "__main__":
    main()
