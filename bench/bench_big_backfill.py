"""A backfill of 100,000 hourly partitions on one machine: recorded in bulk, started in a sliding window,
paused, resumed and cancelled.

    python -m bench.bench_big_backfill [--partitions 100000] [--window 200] [--run-for 20]

One Temporal dev server (file database), one `databuild worker` process for the trivial job of
`bench_scale` (a real job run whose body writes one row with pyarrow, no Spark), and one `databuild web`
process, whose backfill page (the live page a user watches) is fetched beside each look at the view.
`DataBuild.backfill` records every want of `scale/{hour}` over N hours; that is timed against the same
number of rows inserted into a plain table of the same database, with the same columns as the wants'
rows (the database's own bulk rate). Then its window starts their workflows while the benchmark samples
the backfill's progress view and page (latency) and how many of its wants are open (in the BEL; the
running want workflows Temporal's visibility counts are printed too, and run a little over, as a want's
workflow closes a moment after it records its end). ``--run-for`` seconds after the first want ended,
the backfill is paused (and watched for new job runs for a few seconds), resumed (and timed until one of
its wants ends again), then cancelled, and timed until its window and every want workflow have closed.

Targets (the verdict): every want recorded in under 60 s; the first progress report within 1 s of the
call; the progress view's p95 and the backfill page's under 1 s; the worker's and the web's peak memory
at most 600 MiB each (as ``bench_scale``'s worker); never more wants open than the window; the pause
recorded and told within 5 s, and no job run queued while it holds; a want ending within 30 s of the
resume; the window stopped within 5 s of the cancel (and started its last want by then) and every
want workflow it started closed within 120 s (each closes as its cancel reaches it); no job run queued
after the cancel returned; and no workflow task over 5 s (the exit code is 1 on a stalled task). The last
line printed is JSON.
"""

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Column, DateTime, Float, Integer, MetaData, String, Table, Text, insert

from bench.bench_scale import PATTERN, RSS_TARGET_MIB, WORKER_SETTINGS, launch, python_env
from bench.common import run_and_exit, stalled_workflow_tasks, wait_ready
from databuild.backfill import BackfillRequest
from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import ENV_NAMES
from databuild.graph import load_graph
from databuild.temporal.connection import file_database_args
from databuild.temporal.protocol import backfill_window_workflow_id
from databuild.testing import free_port, make_settings, start_dev_server
from databuild.testing.cluster import stop_group
from databuild.testing.page_timing import PAGE_TARGET_MS

GRAPH = "bench.bench_scale:graph"
FIRST_HOUR = datetime(2010, 1, 1, tzinfo=UTC)
RECORD_TARGET_S = 60.0
FIRST_PROGRESS_TARGET_S = 1.0
PROGRESS_P95_TARGET_S = 1.0
WINDOW_STOP_TARGET_S = 5.0  # no more wants started: the cancel's effect
PAUSE_TARGET_S = 5.0  # the pause recorded and every open want of it told
PAUSE_HOLD_S = 5.0  # how long the paused backfill is watched for new job runs
RESUME_TARGET_S = 30.0  # a want of it ends again after the resume
QUIET_TARGET_S = 120.0  # every workflow the window had started closed too


def raw_rows(url: str, n: int) -> float:
    """Seconds to insert ``n`` want-sized rows into a plain table (500 per transaction, as the backfill
    records its wants): the database's own bulk rate, the baseline."""
    from sqlalchemy import create_engine

    engine = create_engine(url)
    table = Table(
        "bench_raw_wants",
        MetaData(),
        Column("want_id", String(64), primary_key=True),
        Column("ref", String(512), nullable=False),
        Column("data_timestamp", DateTime, nullable=False),
        Column("sla_seconds", Float),
        Column("source", String(16), nullable=False),
        Column("state", String(24), nullable=False),
        Column("decision_seq", Integer, nullable=False),
        Column("workflow_id", String(1024), nullable=False),
        Column("reason", Text),
    )
    table.create(engine)
    began = time.perf_counter()
    for first in range(0, n, 500):
        rows = [
            {
                "want_id": f"w-{i:020d}",
                "ref": f"scale/{i}",
                "data_timestamp": FIRST_HOUR + timedelta(hours=i),
                "sla_seconds": None,
                "source": "backfill",
                "state": "new",
                "decision_seq": 0,
                "workflow_id": f"want:scale/{i}:w-{i:020d}",
                "reason": None,
            }
            for i in range(first, min(first + 500, n))
        ]
        with engine.begin() as conn:
            conn.execute(insert(table), rows)
    elapsed = time.perf_counter() - began
    table.drop(engine)
    engine.dispose()
    return elapsed


async def open_wants(db: DataBuild) -> int:
    client = await db.temporal_client()
    query = (
        f"WorkflowType = 'Want' AND TaskQueue = '{db.settings.task_queue}' AND ExecutionStatus = 'Running'"
    )
    return (await client.count_workflows(query)).count


async def started_since(db: DataBuild, at: datetime) -> tuple[int, float]:
    """How many want workflows started at or after ``at``, and how many seconds after it the last did."""
    client = await db.temporal_client()
    query = (
        f"WorkflowType = 'Want' AND TaskQueue = '{db.settings.task_queue}' "
        f"AND StartTime >= '{at.isoformat().replace('+00:00', 'Z')}'"
    )
    starts = [w.start_time async for w in client.list_workflows(query)]
    return len(starts), max(((t - at).total_seconds() for t in starts), default=0.0)


async def window_running(db: DataBuild, backfill_id: str) -> bool:
    client = await db.temporal_client()
    described = await client.get_workflow_handle(backfill_window_workflow_id(backfill_id)).describe()
    return described.status is not None and described.status.name == "RUNNING"


async def run(partitions: int, window: int, run_for: float) -> dict[str, Any]:
    figures: dict[str, Any] = {"partitions": partitions, "window": window}
    with tempfile.TemporaryDirectory(prefix="databuild-bench-") as tmp:
        home = Path(tmp)
        env = await start_dev_server(*file_database_args(home / "temporal.db"))
        try:
            settings = make_settings(home / "databuild", env.client, GRAPH)
            url = settings.database_url.get_secret_value()
            bel = BuildEventLog.create(url)
            figures["raw_s"] = await asyncio.to_thread(raw_rows, url, partitions)
            # The worker in its own process, as in production: the CLI's recording does not share its
            # interpreter.
            worker_env = {
                **python_env(),
                **settings.process_env(),
                **{ENV_NAMES[name]: value for name, value in WORKER_SETTINGS.items()},
                ENV_NAMES["backfill_window"]: str(window),
                "PYSPARK_PYTHON": sys.executable,
            }
            log = home / "worker.log"
            worker = launch([sys.executable, "-m", "worker", "worker"], worker_env, log)
            port = free_port()
            web_log = home / "web.log"
            web = launch([sys.executable, "-m", "worker", "web", "--port", str(port)], worker_env, web_log)
            try:
                await wait_ready(worker, log, "worker on task queue")
                await wait_ready(web, web_log, "dashboard http://")
                figures |= await drive(
                    DataBuild(env.client, bel, load_graph(GRAPH), settings),
                    partitions,
                    run_for,
                    f"http://127.0.0.1:{port}",
                )
                figures["worker_peak_rss_mib"] = peak_rss_mib(worker.pid)
                figures["web_peak_rss_mib"] = peak_rss_mib(web.pid)
            finally:
                stop_group(web, grace=20)
                stop_group(worker, grace=20)
                bel.dispose()
            figures["stalled_tasks"] = stalled_workflow_tasks(log)
        finally:
            await env.shutdown()
    figures["record_ratio"] = figures["record_s"] / figures["raw_s"]
    figures["client_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return figures


def peak_rss_mib(pid: int) -> float:
    """A process's peak resident memory (VmHWM), read while it still runs."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def fetch_page(http: httpx.AsyncClient, path: str) -> float:
    """Seconds to fetch the page at ``path`` whole; a page that does not answer 200 fails the benchmark."""
    began = time.perf_counter()
    (await http.get(path)).raise_for_status()
    return time.perf_counter() - began


def p95_ms(seconds: list[float]) -> float:
    return 1000 * (statistics.quantiles(seconds, n=20)[-1] if len(seconds) > 1 else seconds[0])


def runs_queued_since(db: DataBuild, at: datetime) -> int:
    return sum(1 for run in db.bel.job_runs.query(limit=1000) if run.created_at >= at)


async def pause_and_resume(db: DataBuild, backfill_id: str) -> dict[str, Any]:
    """Pause the running backfill, watch it queue nothing for a while, then resume it and time until one
    of its wants ends again."""
    began = time.perf_counter()
    await db.pause_backfill(backfill_id)
    pause_s = time.perf_counter() - began
    returned = datetime.now(UTC)
    await asyncio.sleep(PAUSE_HOLD_S)  # runs already going finish meanwhile; nothing new may start
    held = await db.backfill_progress(backfill_id)
    queued = await asyncio.to_thread(runs_queued_since, db, returned)
    began = time.perf_counter()
    await db.pause_backfill(backfill_id, paused=False)
    resume_s = time.perf_counter() - began
    while (await db.backfill_progress(backfill_id)).done <= held.done:
        if time.perf_counter() - began > RESUME_TARGET_S + 30:
            break
        await asyncio.sleep(0.2)
    return {
        "pause_s": pause_s,
        "job_runs_while_paused": queued,
        "resume_s": resume_s,
        "resumed_s": time.perf_counter() - began,
    }


async def drive(db: DataBuild, partitions: int, run_for: float, web: str) -> dict[str, Any]:
    request = BackfillRequest(
        pattern=PATTERN,
        start=FIRST_HOUR,
        end=FIRST_HOUR + timedelta(hours=partitions - 1),
        step=timedelta(hours=1),
    )
    began = time.perf_counter()
    first_report: list[float] = []

    def reported(done: int) -> None:
        if not first_report:
            first_report.append(time.perf_counter() - began)

    progress = await db.backfill(request, on_registered=reported)
    record_s = time.perf_counter() - began
    assert progress.registered == partitions, progress
    print(f"recorded {partitions} wants in {record_s:.1f} s", file=sys.stderr)

    views: list[float] = []
    pages: list[float] = []
    page = f"/backfills/{request.backfill_id}"
    most_open = most_workflows = 0
    async with httpx.AsyncClient(base_url=web, timeout=30) as http:
        # ``run_for`` seconds of work, counted from the first want that ended (a busy machine starts late).
        first_done = time.perf_counter() + 120
        while time.perf_counter() < first_done + run_for and not progress.finished:
            looked = time.perf_counter()
            progress = await db.backfill_progress(request.backfill_id)
            views.append(time.perf_counter() - looked)
            pages.append(await fetch_page(http, page))
            most_open = max(most_open, progress.started - progress.done)
            most_workflows = max(most_workflows, await open_wants(db))
            if progress.done and first_done > time.perf_counter():
                first_done = time.perf_counter()
            await asyncio.sleep(0.2)
    print(f"{progress.done} wants done; pausing", file=sys.stderr)
    paused = await pause_and_resume(db, request.backfill_id)
    progress = await db.backfill_progress(request.backfill_id)
    done_before_cancel = progress.done
    print(f"{done_before_cancel} wants done; cancelling", file=sys.stderr)

    began, cancelled_at = time.perf_counter(), datetime.now(UTC)
    cancelling = asyncio.ensure_future(db.cancel_backfill(request.backfill_id))
    window_stopped_s = None
    while not cancelling.done():  # the window stops while the cancel still records
        if window_stopped_s is None and not await window_running(db, request.backfill_id):
            window_stopped_s = time.perf_counter() - began
        await asyncio.wait({cancelling}, timeout=0.2)
    cancelled = cancelling.result()
    cancel_s = time.perf_counter() - began
    returned = datetime.now(UTC)
    said = began
    while (window := await window_running(db, request.backfill_id)) | bool(running := await open_wants(db)):
        if not window and window_stopped_s is None:
            window_stopped_s = time.perf_counter() - began
        await asyncio.sleep(0.2)
        if time.perf_counter() - said > 10:
            said = time.perf_counter()
            print(f"  still running: window {window}, {running} want workflows", file=sys.stderr)
        if time.perf_counter() - began > QUIET_TARGET_S + 60:
            break
    quiet_s = time.perf_counter() - began
    progress = await db.backfill_progress(request.backfill_id)
    started_after, last_start_s = await started_since(db, cancelled_at)
    return paused | {
        "record_s": record_s,
        "first_progress_s": first_report[0],
        "progress_view_p50_ms": 1000 * statistics.median(views),
        "progress_view_p95_ms": p95_ms(views),
        "progress_views": len(views),
        "page_p50_ms": 1000 * statistics.median(pages),
        "page_p95_ms": p95_ms(pages),
        "most_open_wants": most_open,
        "most_running_want_workflows": most_workflows,
        "done_before_cancel": done_before_cancel,
        "cancelled": cancelled,
        "cancel_s": cancel_s,
        "window_stopped_s": quiet_s if window_stopped_s is None else window_stopped_s,
        "quiet_s": quiet_s,
        "wants_started_after_cancel": started_after,
        "last_start_s": last_start_s,
        "finished": progress.finished,
        "started": progress.started,
        "job_runs_after_cancel": runs_queued_since(db, returned),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument(
        "--run-for",
        type=float,
        default=20.0,
        help="seconds of work after the first want ended, then the cancel",
    )
    args = parser.parse_args()

    def report() -> int:
        f = asyncio.run(run(args.partitions, args.window, args.run_for))
        print(f"\n{f['partitions']} partitions, window {f['window']}")
        print(
            f"recorded in {f['record_s']:.1f} s: {f['record_ratio']:.1f}x inserting as many plain rows "
            f"({f['raw_s']:.1f} s)"
        )
        print(f"first progress report after {f['first_progress_s']:.2f} s")
        print(
            f"peak RSS: worker {f['worker_peak_rss_mib']:.0f} MiB, web {f['web_peak_rss_mib']:.0f} MiB, "
            f"client {f['client_peak_rss_mib']:.0f} MiB"
        )
        print(
            f"progress view: p50 {f['progress_view_p50_ms']:.0f} ms, p95 {f['progress_view_p95_ms']:.0f} ms; "
            f"the backfill's page: p50 {f['page_p50_ms']:.0f} ms, p95 {f['page_p95_ms']:.0f} ms"
        )
        print(
            f"most wants open: {f['most_open_wants']} (running want workflows: {f['most_running_want_workflows']})"
        )
        print(
            f"{f['done_before_cancel']} done before the cancel; cancel of {f['cancelled']} wants returned in "
            f"{f['cancel_s']:.1f} s, nothing running after {f['quiet_s']:.1f} s"
        )
        checks = [
            (
                "record",
                f"recorded in {f['record_s']:.1f} s (target: under {RECORD_TARGET_S:g} s)",
                f["record_s"] < RECORD_TARGET_S,
            ),
            (
                "first progress",
                f"first progress after {f['first_progress_s']:.2f} s (target: within {FIRST_PROGRESS_TARGET_S:g} s)",
                f["first_progress_s"] <= FIRST_PROGRESS_TARGET_S,
            ),
            (
                "progress view",
                f"progress view p95 {f['progress_view_p95_ms']:.0f} ms "
                f"(target: under {1000 * PROGRESS_P95_TARGET_S:g} ms)",
                f["progress_view_p95_ms"] < 1000 * PROGRESS_P95_TARGET_S,
            ),
            (
                "page",
                f"the backfill's page p95 {f['page_p95_ms']:.0f} ms (target: under {PAGE_TARGET_MS:g} ms)",
                f["page_p95_ms"] < PAGE_TARGET_MS,
            ),
            (
                "memory",
                f"peak RSS: worker {f['worker_peak_rss_mib']:.0f} MiB, web {f['web_peak_rss_mib']:.0f} MiB "
                f"(target: at most {RSS_TARGET_MIB} MiB each)",
                max(f["worker_peak_rss_mib"], f["web_peak_rss_mib"]) <= RSS_TARGET_MIB,
            ),
            (
                "window",
                f"wants open at most {f['most_open_wants']} (target: at most the window, {f['window']})",
                f["most_open_wants"] <= f["window"],
            ),
            (
                "pause",
                f"paused in {f['pause_s']:.1f} s (target: within {PAUSE_TARGET_S:g} s), "
                f"{f['job_runs_while_paused']} job runs queued in the {PAUSE_HOLD_S:g} s after (target: none)",
                f["pause_s"] <= PAUSE_TARGET_S and f["job_runs_while_paused"] == 0,
            ),
            (
                "resume",
                f"resumed in {f['resume_s']:.1f} s, a want ended {f['resumed_s']:.1f} s after the resume began "
                f"(target: within {RESUME_TARGET_S:g} s)",
                f["resumed_s"] <= RESUME_TARGET_S,
            ),
            (
                "cancel",
                f"window stopped {f['window_stopped_s']:.1f} s after the cancel began, after starting "
                f"{f['wants_started_after_cancel']} wants, the last {f['last_start_s']:.1f} s after "
                f"(target: within {WINDOW_STOP_TARGET_S:g} s)",
                max(f["window_stopped_s"], f["last_start_s"]) <= WINDOW_STOP_TARGET_S,
            ),
            (
                "nothing open",
                f"no workflow of it running {f['quiet_s']:.1f} s after the cancel began "
                f"(target: within {QUIET_TARGET_S:g} s)",
                f["quiet_s"] <= QUIET_TARGET_S and f["finished"],
            ),
            (
                "after cancel",
                f"job runs queued after the cancel returned: {f['job_runs_after_cancel']} (target: none)",
                f["job_runs_after_cancel"] == 0,
            ),
            (
                "stalls",
                f"workflow tasks over 5 s: {f['stalled_tasks']} (target: none)",
                f["stalled_tasks"] == 0,
            ),
        ]
        for _, line, passed in checks:
            print(f"{line}: {'PASS' if passed else 'FAIL'}")
        f["misses"] = [name for name, _, passed in checks if not passed]
        f["verdict"] = "PASS" if not f["misses"] else "FAIL"
        print(json.dumps(f))
        return 0 if f["stalled_tasks"] == 0 else 1

    run_and_exit(report)


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main()
