"""A DataBuild worker: want and job-run workflows plus their activities, on one task queue."""

import asyncio
import compileall
import contextlib
import logging
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

import workflows
import workflows.backfill
import workflows.calls
import workflows.check
from activities.alerts import AlertActivities
from activities.backfills import BackfillActivities
from activities.checks import CheckActivities
from activities.errors import DataBuildErrors
from activities.fanout import FanOutActivities
from activities.jobs import JobActivities
from activities.upstream import UpstreamActivities
from activities.wants import WantActivities
from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.domain.pools import pools_of
from databuild.errors import InvalidInputError
from databuild.graph import Graph, Job, load_graph
from databuild.jobs.execution import JobExecutor
from databuild.jobs.executors import Executors, check_session
from databuild.jobs.openlineage import LineageEmitter
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.storage import Storage
from databuild.jobs.tables.hive import serve_sql, spark_catalog_conf
from databuild.jobs.tables.publisher import TablePublisher
from databuild.jobs.tables.setup import table_publisher
from databuild.jobs.tables.spec import TableSpec, graph_tables
from databuild.limits import policy_problem
from databuild.operations.alerts import channels
from databuild.operations.garbage import collect_garbage
from databuild.operations.metrics import serving_metrics
from databuild.process import settle_heap, spark_log
from databuild.temporal.connection import connect, ensure_search_attributes
from databuild.temporal.protocol import JobPolicy
from databuild.temporal.wants import repair_wants
from workflows.alert import AlertWorkflow
from workflows.alert_channel import AlertChannelWorkflow
from workflows.backfill import BackfillWindowWorkflow
from workflows.check import CheckWorkflow
from workflows.job_run import JobRunWorkflow
from workflows.scheduled import ScheduledWantWorkflow
from workflows.upstream import UpstreamSyncWorkflow
from workflows.want import WantWorkflow

# Every workflow a worker runs (the replay tests replay exactly these).
WORKFLOWS: list[type] = [
    WantWorkflow,
    JobRunWorkflow,
    UpstreamSyncWorkflow,
    ScheduledWantWorkflow,
    AlertWorkflow,
    AlertChannelWorkflow,
    BackfillWindowWorkflow,
    CheckWorkflow,
]

log = logging.getLogger(__name__)


@dataclass
class WorkerParts:
    settings: Settings
    client: Client
    bel: BuildEventLog
    graph: Graph
    spark: SparkRuntime


@dataclass
class BuiltWorker:
    worker: Worker
    jobs: JobActivities
    upstream: UpstreamActivities
    identity: str

    async def shutdown(self) -> None:
        """Release what the activities hold, once the worker has stopped."""
        self.jobs.shutdown()
        await self.upstream.aclose()


WORKFLOW_MODULES = (
    workflows,
    workflows.calls,
    workflows.want,
    workflows.job_run,
    workflows.upstream,
    workflows.scheduled,
    workflows.alert,
    workflows.alert_channel,
    workflows.backfill,
    workflows.check,
)


def compile_workflow_modules() -> None:
    """Write the bytecode of the workflow modules. The sandbox imports them afresh for every workflow
    run a worker starts, on the worker's event loop; with bytecode writing off (PYTHONDONTWRITEBYTECODE,
    set on many CI machines and images) it compiled their source every time: about half of the 10-40 ms
    each new run held the loop. Bytecode already up to date is left alone (every worker a process builds
    calls this); a folder that cannot be written only costs that time again."""
    if not sys.dont_write_bytecode:
        return  # the first import wrote it
    for module in WORKFLOW_MODULES:
        if not compileall.compile_file(str(module.__file__), quiet=2):
            log.debug("could not write the bytecode of %s", module.__name__)


def check_policy(job: Job, settings: Settings) -> None:
    """Refuse a job whose runs Temporal could not run. The settings and ``@graph.job`` check their own
    ranges; this catches what bypasses them (settings copied with changes, a ``Job`` built by hand)."""
    if (problem := policy_problem(JobPolicy.of(job, settings))) is not None:
        raise InvalidInputError(
            f"job {job.label!r} cannot run: {problem}; see DATABUILD_JOB_ATTEMPTS, DATABUILD_JOB_TIMEOUT, "
            "DATABUILD_JOB_HEARTBEAT_TIMEOUT, DATABUILD_JOB_LEASE and its @graph.job(retries=, timeout=, "
            "heartbeat_timeout=)"
        )


def build_worker(parts: WorkerParts) -> BuiltWorker:
    settings = parts.settings
    if settings.workflow_sandbox:
        compile_workflow_modules()
    storage = Storage(settings.storage_root)
    storage.probe()  # a root it cannot use is refused now, in one line, not by each job's first output
    # Unique per worker, even for two in one process (tests, `databuild dev`): `databuild envs` tells
    # workers apart by it.
    identity = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    lineage = LineageEmitter.from_settings(
        settings, parts.graph
    )  # None unless DATABUILD_OPENLINEAGE_URL is set
    check_graph_settings(parts.graph, settings)
    executors = Executors.from_settings(
        settings, graph=parts.graph, bel=parts.bel, storage=storage, spark=parts.spark
    )
    tables = worker_tables(parts, storage)
    executor = JobExecutor(
        parts.bel,
        storage,
        executors,
        worker=identity,
        lineage=lineage,
        tables=tables,
        patience=parts.settings.bel_outage_patience,
    )
    fan_out = FanOutActivities(parts.bel, parts.client, settings, graph=parts.graph)
    jobs = JobActivities(
        executor,
        max_concurrent=settings.max_concurrent_jobs,
        attempts=settings.job_attempts,
        tell=fan_out.tell,
    )
    wants = WantActivities(parts.bel, parts.graph, parts.client, settings)
    alerting = AlertActivities(settings, parts.client)
    upstream = UpstreamActivities(wants.db)
    backfills = BackfillActivities(parts.bel, parts.client, settings)
    checks = CheckActivities(
        parts.bel, parts.graph, storage, check_session(executors, parts.spark), parts.client, settings
    )
    worker = Worker(
        parts.client,
        task_queue=settings.task_queue,
        workflows=WORKFLOWS,
        activities=activities_of(wants, jobs, fan_out, alerting, upstream, backfills, checks),
        max_concurrent_activities=settings.max_concurrent_jobs + 16,
        interceptors=[DataBuildErrors()],
        max_cached_workflows=settings.workflow_cache,
        max_concurrent_workflow_tasks=settings.workflow_tasks,
        identity=identity,
        workflow_runner=SandboxedWorkflowRunner()
        if settings.workflow_sandbox
        else UnsandboxedWorkflowRunner(),
    )
    return BuiltWorker(worker, jobs, upstream, identity)


def check_graph_settings(graph: Graph, settings: Settings) -> None:
    """Refuse at start what the settings cannot give the graph's jobs, rather than at a job's turn."""
    for job in graph.jobs:
        pools_of(job, settings.pools)  # a pool the settings do not define
        check_policy(job, settings)
    channels(settings)  # an alert URL apprise cannot use


def worker_tables(parts: WorkerParts, storage: Storage) -> TablePublisher | None:
    """What publishes the worker's outputs to their tables, if any output maps to a table it can publish."""
    settings = parts.settings
    publisher = table_publisher(settings, parts.bel, parts.graph, storage, parts.spark)
    for pattern, table in graph_tables(parts.graph, settings.table_format).items():
        if isinstance(table, TableSpec):
            log.info(
                "tables: %s is %s table %s.%s", pattern, table.format, settings.catalog_database, table.name
            )
        else:
            log.info("tables: %s is no table: %s", pattern, table)
    return publisher


def activities_of(
    wants: WantActivities,
    jobs: JobActivities,
    fan_out: FanOutActivities,
    alerting: AlertActivities,
    upstream: UpstreamActivities,
    backfills: BackfillActivities,
    checks: CheckActivities,
) -> list[Callable[..., Any]]:
    """Every activity a worker runs."""
    return [
        wants.register_want,
        wants.first_step,
        wants.decide,
        wants.await_dependencies,
        wants.await_requirements,
        wants.register_scheduled_want,
        wants.finish_want,
        wants.record_sla_missed,
        wants.assess_sla,
        wants.watch,
        wants.abandon_build,
        jobs.run_job,
        jobs.request_admission,
        jobs.batch_is_full,
        jobs.await_admission,
        jobs.fail_job_run,
        *fan_out.activities(),
        alerting.route_alert,
        alerting.queue_alert,
        alerting.deliver_alert,
        upstream.pull_upstream,
        upstream.apply_announcements,
        backfills.advance_backfill,
        checks.recheck,
    ]


@contextlib.asynccontextmanager
async def running_worker(parts: WorkerParts, *, warm_spark: bool = True) -> AsyncIterator[Worker]:
    """Run a worker for the duration of the block (used by tests, `databuild dev` and `worker`)."""
    await ensure_search_attributes(parts.client, parts.settings.namespace)
    built = build_worker(parts)
    # Which versions of its jobs it runs, before it takes any work (`databuild envs`; a fresh rebuild the
    # workers disagree on is refused).
    versions = {job.label: job.version for job in parts.graph.jobs}
    bel = parts.bel
    await bel.call(bel.workers.record, built.identity, parts.settings.task_queue, parts.graph.name, versions)
    if warm_spark:
        # Start the sessions now, so the first job does not pay the JVM start-up.
        asyncio.get_running_loop().run_in_executor(None, built.jobs.executor.executors.warm)
    stop = asyncio.Event()
    tables = built.jobs.executor.tables
    serving = bool(parts.settings.sql_port) and parts.spark.catalog is not None  # its session has that port
    if tables is not None or serving:  # after a crash between a BEL commit and its table commit
        asyncio.get_running_loop().run_in_executor(
            None, start_tables, tables, parts.spark if serving else None
        )
    chores = [
        asyncio.create_task(
            periodically(parts.settings.gc_every, stop, collect_storage_garbage, parts, built)
        ),
        asyncio.create_task(periodically(parts.settings.repair_every, stop, repair, parts, built)),
    ]
    if tables is not None:
        chores.append(asyncio.create_task(periodically(FOLLOW_EVERY, stop, follow_tables, parts, built)))
    try:
        with serving_metrics(parts.settings.metrics_port, parts.bel, parts.settings.pools):
            async with built.worker:
                yield built.worker
    finally:
        stop.set()
        await asyncio.gather(*chores)  # a chore in progress ends before the BEL it reads is closed
    await built.shutdown()


Chore = Callable[[WorkerParts, BuiltWorker], Awaitable[None]]
# How soon a table stops showing an instance taken out of service elsewhere (a read of the log's tail).
FOLLOW_EVERY = timedelta(seconds=1)


async def periodically(every: timedelta, stop: asyncio.Event, chore: Chore, *args: Any) -> None:
    """Do ``chore`` now and every ``every`` (never when it is 0) until ``stop`` is set. Every worker
    does: chores may overlap, and each is safe when they do."""
    if every <= timedelta(0):
        return
    while not stop.is_set():
        try:
            await chore(*args)
        except Exception:
            log.exception("%s failed; the next one is in %s", chore.__name__, every)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every.total_seconds())


async def collect_storage_garbage(parts: WorkerParts, built: BuiltWorker) -> None:
    storage = built.jobs.executor.storage
    report = await asyncio.to_thread(
        collect_garbage, storage, parts.bel, keep=parts.settings.gc_keep, tables=built.jobs.executor.tables
    )
    for item in report.deleted:
        log.info("garbage-collected %s (%s)", item.location, item.reason)


def start_tables(tables: TablePublisher | None, sql: SparkRuntime | None) -> None:
    """Serve SQL over the Hive catalog when configured (DATABUILD_SQL_PORT); catch the tables up with the
    BEL."""
    try:
        if sql is not None:
            serve_sql(sql)
        changed = 0 if tables is None else tables.repair()
    except Exception:
        log.exception("could not catch the tables up with the BEL; the next start tries again")
    else:
        log.info("tables: %d partition(s) caught up with the BEL", changed)


async def follow_tables(_parts: WorkerParts, built: BuiltWorker) -> None:
    """Withdraw the partitions whose live instance a taint, a skip or a failed re-check took out of
    service, wherever it was done."""
    tables = built.jobs.executor.tables
    if tables is not None:
        await asyncio.to_thread(tables.follow_log)


async def repair(parts: WorkerParts, _built: BuiltWorker) -> None:
    """Reconcile the wants whose workflows closed while the BEL holds them open (see ``repair_wants``):
    every pass looks at the want workflows closed since the pass before (twice the period, for overlap)."""
    try:
        settings = parts.settings
        repaired = await repair_wants(
            parts.client, parts.bel, settings.task_queue, closed_within=2 * settings.repair_every
        )
    except RPCError as error:
        if error.status is RPCStatusCode.UNIMPLEMENTED:  # no list visibility (the time-skipping server)
            return
        raise
    if repaired:
        log.warning("reconciled %d want(s) whose workflows had closed while the BEL held them open", repaired)


async def open_parts(settings: Settings, spark: SparkRuntime | None = None) -> WorkerParts:
    graph = load_graph(settings.graph)  # a graph that does not load is the first thing to say
    client = await connect(settings)
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    catalog = spark_catalog_conf(settings)
    if catalog is not None and settings.sql_port:
        catalog |= {"spark.hive.server2.thrift.port": str(settings.sql_port)}
        catalog |= {"spark.hive.server2.thrift.bind.host": "127.0.0.1"}
    spark = spark or SparkRuntime(
        settings.spark_master,
        settings.spark_driver_memory,
        catalog=catalog,
        log_file=spark_log(settings.home),
    )
    return WorkerParts(settings, client, bel, graph, spark)


async def serve(settings: Settings) -> None:
    """`databuild worker`: run until interrupted."""
    parts = await open_parts(settings)
    try:
        async with running_worker(parts):
            settle_heap()
            await asyncio.Event().wait()
    finally:
        parts.spark.stop()
        parts.bel.dispose()
