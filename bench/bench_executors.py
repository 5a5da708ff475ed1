"""The demo want on each job executor, against local mode, measured in one run.

    python -m bench.bench_executors [--skip submit] [--ref daily_summary/2024-01-07]

One Temporal dev server, one Spark standalone cluster on loopback (a master and a 2-core worker from the
pip pyspark package) and, for the last variant, a Spark Connect server on that cluster. Each variant
runs a `databuild worker` process with its own BEL and storage:

    local     the worker's SparkSession in local[2] (the baseline)
    cluster   the worker's SparkSession as a client of the standalone master (executor "session")
    submit    each attempt its own application, spark-submit to the master (executor "submit")
    connect   the job bodies in the worker, their DataFrames on the Spark Connect server ("connect")

A warm-up want (one raw_events job) runs first on each worker, so sessions are started and warm; then
the demo want `daily_summary/2024-01-07` is timed from registration to fulfilment: 15 job runs that
succeed, plus the 8 attempts that dep-miss first (runtime dependency discovery); `--ref` times another
want (a test runs one `raw_events` partition). Per job: the span of each attempt in the BEL (started ->
outcome). Ratios are against local mode in this run. The verdict wants the want fulfilled on every
executor, no workflow task over 5 s in any worker's log (the exit code is 1 otherwise), and a mean
attempt within 2x of local mode for the executors that keep a warm session (`cluster`, `connect`); a
`submit` attempt starts an application of its own, so its ratio is reported, not judged. The last line
printed is JSON.
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client

from bench.common import run_and_exit, stalled_workflow_tasks, wait_ready, while_running
from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.graph import load_graph
from databuild.models import JobRunState, WantState
from databuild.testing import make_settings, start_dev_server
from databuild.testing.cluster import (
    LOOPBACK,
    SUBMIT_ARGS,
    connect_server,
    spark_cluster,
    start_databuild_worker,
    stop_group,
)

GRAPH = "examples.demo:discovering"  # runtime discovery: the dep-miss attempts are part of the workload
DEMO_REF = "daily_summary/2024-01-07"
WARMUP_REF = "raw_events/2023-12-01"
VARIANTS = ("local", "cluster", "submit", "connect")
# The mean attempt against local mode, for the executors whose session stays warm between attempts.
ATTEMPT_RATIO_TARGETS = {"cluster": 2.0, "connect": 2.0}
CORES = 2
TIMEOUT = 1800


def variant_env(variant: str, master: str, connect_url: str | None) -> dict[str, str]:
    if variant == "local":
        return {"DATABUILD_SPARK_MASTER": "local[2]"}
    if variant == "cluster":
        return {"DATABUILD_SPARK_MASTER": master, "SPARK_LOCAL_IP": LOOPBACK}
    if variant == "submit":
        return {
            "DATABUILD_EXECUTOR": "submit",
            "DATABUILD_SPARK_SUBMIT_MASTER": master,
            "DATABUILD_SPARK_SUBMIT_ARGS": SUBMIT_ARGS,
            "DATABUILD_SPARK_DRIVER_MEMORY": "768m",
            "DATABUILD_MAX_CONCURRENT_JOBS": str(CORES),
        }
    assert connect_url is not None
    return {"DATABUILD_EXECUTOR": "connect", "DATABUILD_SPARK_CONNECT_URL": connect_url}


def attempt_spans(bel: BuildEventLog) -> list[float]:
    """Seconds from each attempt's start to its recorded outcome."""
    starts: dict[str, datetime] = {}
    spans: list[float] = []
    events = bel.events.query(
        limit=10_000, types=["JobRunStarted", "JobRunSucceeded", "JobRunDepMiss", "JobRunFailed"]
    )
    for event in events:
        assert event.job_run_id is not None
        if event.type == "JobRunStarted":
            starts[event.job_run_id] = event.at
        elif event.job_run_id in starts:
            spans.append((event.at - starts.pop(event.job_run_id)).total_seconds())
    return spans


async def run_variant(
    client: Client, home: Path, variant: str, env: dict[str, str], ref: str, limit_s: float
) -> dict[str, Any]:
    settings = make_settings(home / variant, client, GRAPH)
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    db = DataBuild(client, bel, load_graph(GRAPH), settings)
    worker_env = {**os.environ, **settings.process_env(), **env}
    log = home / f"{variant}-worker.log"
    worker = await asyncio.to_thread(start_databuild_worker, worker_env, log)
    # Want ids derive from ref + data time, and the variants share a namespace: each variant wants at
    # its own data times.
    offset = timedelta(microseconds=uuid.uuid4().int % 1_000_000)

    async def fulfil(ref: str, data_time: datetime) -> float:
        started = time.perf_counter()
        handle = await db.want(ref, data_timestamp=data_time + offset)
        try:
            want = await while_running(
                worker, log, db.wait(handle), limit_s, f"{variant}: the want for {ref}"
            )
        except RuntimeError as error:
            progress = await db.progress(handle)
            raise RuntimeError(
                f"{error}\n--- where the want got to ---\n{progress.model_dump_json()}"
            ) from None
        assert want.state is WantState.successful, want.reason
        return time.perf_counter() - started

    try:
        await wait_ready(worker, log, "worker on task queue")
        warmup_s = await fulfil(WARMUP_REF, datetime(2023, 12, 1, tzinfo=UTC))
        warm_spans = attempt_spans(bel)
        demo_s = await fulfil(ref, datetime(2024, 1, 7, tzinfo=UTC))
    finally:
        await asyncio.to_thread(stop_group, worker)
    runs = [r for r in bel.job_runs.query(limit=1000) if r.outputs != [WARMUP_REF]]
    succeeded = [r for r in runs if r.state is JobRunState.succeeded]
    assert all(r.state in (JobRunState.succeeded, JobRunState.dep_miss) for r in runs), [
        (r.job_label, r.state) for r in runs
    ]
    spans = attempt_spans(bel)[len(warm_spans) :]
    bel.dispose()
    return {
        "variant": variant,
        "warmup_s": warmup_s,
        "demo_s": demo_s,
        "job_runs": len(succeeded),
        "attempts": len(spans),
        "attempt_mean_s": statistics.fmean(spans),
        "attempt_median_s": statistics.median(spans),
        "stalled_tasks": stalled_workflow_tasks(log),
    }


async def run(variants: list[str], ref: str, limit_s: float) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    figures: dict[str, Any] = {}
    with ExitStack() as stack:
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="databuild-bench-exec-")))
        # Local mode alone (a small run) needs no cluster.
        master = "local[2]"
        if set(variants) - {"local"}:
            master = stack.enter_context(
                spark_cluster(home / "spark-cluster", cores=CORES, memory="2g")
            ).master_url
        env = await start_dev_server()
        try:
            for variant in variants:
                connect_url = None
                if variant == "connect":  # last: its application holds the cluster's cores while it lives
                    server = stack.enter_context(connect_server(home / "spark-connect", master))
                    connect_url = server.url
                print(f"{variant}: running the want for {ref} ...", flush=True)
                figures[variant] = await run_variant(
                    env.client, home, variant, variant_env(variant, master, connect_url), ref, limit_s
                )
                print(f"{variant}: {figures[variant]['demo_s']:.1f} s", flush=True)
        finally:
            await env.shutdown()
    return figures


def report(variants: dict[str, Any], ref: str) -> dict[str, Any]:
    base = variants["local"]
    print()
    print(
        f"{'executor':<10}{'demo want':>11}{'ratio':>8}{'per attempt':>14}{'ratio':>8}"
        f"{'overhead/job':>15}{'warm-up want':>15}"
    )
    print("-" * 81)
    for variant, f in variants.items():
        f["demo_ratio"] = f["demo_s"] / base["demo_s"]
        f["attempt_ratio"] = f["attempt_mean_s"] / base["attempt_mean_s"]
        f["overhead_per_attempt_s"] = f["attempt_mean_s"] - base["attempt_mean_s"]
        print(
            f"{variant:<10}{f['demo_s']:>9.1f} s{f['demo_ratio']:>7.2f}x{f['attempt_mean_s']:>12.2f} s"
            f"{f['attempt_ratio']:>7.2f}x{f['overhead_per_attempt_s']:>+13.2f} s{f['warmup_s']:>13.1f} s"
        )
    print("-" * 81)
    print(
        f"want for {ref}: {base['job_runs']} job runs, {base['attempts']} attempts (dep-misses included); "
        "per attempt: mean span in the BEL, start to outcome; ratios against local[2]."
    )
    if "submit" in variants:
        print(f"submit arguments: {SUBMIT_ARGS}")
    checks = {
        f"{variant} attempt ratio: {variants[variant]['attempt_ratio']:.2f}x (target: at most {target}x)": (
            variants[variant]["attempt_ratio"] <= target
        )
        for variant, target in ATTEMPT_RATIO_TARGETS.items()
        if variant in variants
    }
    stalled = sum(f["stalled_tasks"] for f in variants.values())
    checks[f"workflow tasks over 5 s: {stalled} (target: none)"] = stalled == 0
    for line, passed in checks.items():
        print(f"{line}: {'PASS' if passed else 'FAIL'}")
    misses = [line.partition(":")[0] for line, passed in checks.items() if not passed]
    figures = {**variants, "ref": ref, "stalled_tasks": stalled, "misses": misses}
    figures["verdict"] = "PASS" if not misses else "FAIL"
    print(json.dumps(figures))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument(
        "--skip", action="append", default=[], choices=VARIANTS[1:], help="leave out a variant"
    )
    parser.add_argument("--ref", default=DEMO_REF, help="the partition to want on each executor")
    parser.add_argument(
        "--timeout", type=float, default=TIMEOUT, help="seconds a want may take before the run fails"
    )
    args = parser.parse_args()
    variants = [v for v in VARIANTS if v not in args.skip]

    def work() -> int:
        figures = report(asyncio.run(run(variants, args.ref, args.timeout)), args.ref)
        return 0 if figures["stalled_tasks"] == 0 else 1

    run_and_exit(work)


if __name__ == "__main__":
    main()
