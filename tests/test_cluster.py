"""The demo through each executor on a real Spark standalone cluster (master + worker on loopback,
from the pip package): the worker's own SparkSession as a client of the cluster and each job as its own
application through spark-submit (a day of the demo each), and Spark Connect (the whole demo want, its
weekly rollup included). Every partition has the same contents as when built in local mode; cancelling a
want stops its Spark application (spark-submit) or its operations (Spark Connect)."""

import asyncio
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from databuild.jobs.attempt_log import APPLICATION_OUTPUT
from databuild.jobs.executors.connect import CONNECT_COST_UNKNOWN
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.storage import Storage
from databuild.models import JobRunCause, JobRunState, PartitionStatus, WantState
from databuild.testing import free_port
from databuild.testing.cluster import (
    LOOPBACK,
    QUICK_JVM,
    SUBMIT_ARGS,
    ConnectServer,
    SparkCluster,
    connect_server,
    partition_checksums,
    spark_cluster,
    start_databuild_worker,
    stop_group,
)
from databuild.views.logs import attempt_log
from tests.conftest import DEMO_REF, DemoRun, Stack, stack_env
from tests.helpers import instance_dir, lake, until

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

WORKER_APP = "databuild"  # SparkRuntime's default app name, used by `databuild worker`
WANT_TIMEOUT = 600
CORES = 4  # offered by the cluster's worker (more than the machine has: applications mostly wait)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    # Its executors start with the quick JIT tier, as the tests' other JVMs do (tests/conftest.py).
    root = tmp_path_factory.mktemp("spark-cluster")
    with spark_cluster(root, cores=CORES, memory="4g", executor_java_options=QUICK_JVM) as started:
        yield started


@pytest.fixture(scope="module")
def connect(cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with connect_server(tmp_path_factory.mktemp("spark-connect"), cluster.master_url) as server:
        yield server


@pytest.fixture(scope="module")
async def local_checksums(demo_run: DemoRun, spark_runtime: SparkRuntime) -> dict[str, str]:
    """The day of the demo the executors build, as local mode built it (the session's demo run), once for the
    module."""
    paths = {ref: live_dir(demo_run.stack, ref) for ref in DAY_BUILT}
    return await asyncio.to_thread(lambda: partition_checksums(spark_runtime.session(), paths))


def unique_data_timestamp() -> datetime:
    # Want ids (and so workflow ids) derive from ref + data timestamp, and all stacks of a test session
    # share one Temporal namespace: a distinct data time keeps this want apart from the other demo runs.
    return datetime(2024, 1, 7, tzinfo=UTC) + timedelta(microseconds=uuid.uuid4().int % 86_400_000_000)


# The demo with its inputs declared: the same jobs and partitions as the session's demo run (runtime
# discovery), without its dep-miss attempts and their round trips (dep-miss is the job body's, the same in
# every executor; the submit test below still dep-misses, in an application of its own).
DECLARED_DEMO = "examples.demo:graph"

# One day of the demo: for the executor whose every attempt is its own application (~10 s each), a
# dep-miss and the job it waited for, without the demo's 23 submissions; for the worker's own session on
# the cluster (the job bodies run as in local mode, their tasks on the cluster's executor) and for Spark
# Connect (its DataFrames another implementation: reads, an aggregation, writes), its two jobs. The whole
# demo runs on each executor in `python -m bench.bench_executors` (`make bench`).
DAY_REF = "daily_users/2024-01-07"
DAY_BUILT = ["daily_users/2024-01-07", "raw_events/2024-01-07"]


async def build_demo(stack: Stack, ref: str = DEMO_REF) -> None:
    spec = await stack.db.want(ref, data_timestamp=unique_data_timestamp())
    want = await asyncio.wait_for(stack.db.wait(spec), timeout=WANT_TIMEOUT)
    assert want.state is WantState.successful, want.reason


def checksums(runtime: SparkRuntime, stack: Stack, built: list[str]) -> dict[str, str]:
    live = stack.bel.partitions.query(status=PartitionStatus.live, limit=1000)
    assert sorted(p.ref for p in live) == built
    return partition_checksums(runtime.session(), {ref: live_dir(stack, ref) for ref in built})


def live_dir(stack: Stack, ref: str) -> Path:
    return instance_dir(stack.settings, ref, stack.bel.partitions.get(ref).instance_id)


def assert_built_once(stack: Stack, built: list[str]) -> None:
    runs = stack.bel.job_runs.query(limit=1000)
    succeeded = sorted(r.job_label for r in runs if r.state is JobRunState.succeeded)
    targets = {(t.job.label, tuple(t.outputs)) for ref in built if (t := stack.graph.resolve(ref).target)}
    assert succeeded == sorted(label for label, _ in targets)
    assert all(len(stack.bel.partitions.instances(ref)) == 1 for ref in built)


async def worker_process(stack: Stack, log: Path, **env: str) -> subprocess.Popen[bytes]:
    return await asyncio.to_thread(start_databuild_worker, stack_env(stack, **env), log)


async def wait_for_app(cluster: SparkCluster, prefix: str, seconds: float = 120) -> dict[str, Any]:
    """The first active application on the master whose name starts with ``prefix``, once RUNNING."""
    for _ in range(int(seconds * 5)):
        status = await asyncio.to_thread(cluster.status)
        apps = [a for a in status["activeapps"] if a["name"].startswith(prefix) and a["state"] == "RUNNING"]
        if apps:
            return dict(apps[0])
        await asyncio.sleep(0.2)
    raise AssertionError(f"no running application {prefix}* on the master: {status}")


async def test_session_executor_on_the_cluster_matches_local_mode(
    make_stack, spark_runtime: SparkRuntime, cluster: SparkCluster, local_checksums, tmp_path: Path
) -> None:
    """(a) The worker's own SparkSession, a client of the standalone master."""
    stack = await make_stack(graph=DECLARED_DEMO, worker=False)
    worker = await worker_process(
        stack,
        tmp_path / "worker.log",
        DATABUILD_SPARK_MASTER=cluster.master_url,
        SPARK_LOCAL_IP=LOOPBACK,  # the driver binds and advertises loopback, not the host's address
    )
    try:
        await build_demo(stack, DAY_REF)
        status = await asyncio.to_thread(cluster.status)
    finally:
        await asyncio.to_thread(stop_group, worker)
    assert_built_once(stack, DAY_BUILT)

    # It ran on the cluster: the worker's application held the cluster's executor, which ran the tasks.
    running = [a for a in status["activeapps"] if a["name"] == WORKER_APP]
    assert len(running) == 1 and running[0]["state"] == "RUNNING" and running[0]["cores"] == CORES, status
    app_id = running[0]["id"]
    assert cluster.tasks_finished(app_id) > 0
    # Once the worker is stopped, its driver disconnects and the master lists the application as done.
    await until(lambda: app_id in {a["id"] for a in cluster.status()["completedapps"]}, seconds=20)
    assert await asyncio.to_thread(checksums, spark_runtime, stack, DAY_BUILT) == local_checksums


async def test_submit_executor_on_the_cluster_matches_local_mode(
    make_stack, spark_runtime: SparkRuntime, cluster: SparkCluster, local_checksums
) -> None:
    """(b) Each job run attempt is its own application, submitted to the standalone master."""
    before = {a["id"] for a in (await asyncio.to_thread(cluster.status))["completedapps"]}
    stack = await make_stack(
        executor="submit",
        spark_submit_master=cluster.master_url,
        spark_submit_args=SUBMIT_ARGS,
        spark_driver_memory="768m",
        max_concurrent_jobs=3,
    )
    await build_demo(stack, DAY_REF)
    assert_built_once(stack, DAY_BUILT)

    # One application per attempt (the dep-missed ones included), each done, each with executor tasks.
    runs = stack.bel.job_runs.query(limit=1000)
    status = await asyncio.to_thread(cluster.status)
    apps = [
        a for a in status["completedapps"] if a["id"] not in before and a["name"].startswith("databuild:")
    ]
    assert sorted(a["name"] for a in apps) == sorted(
        f"databuild:{r.job_label}:{r.job_run_id}-{attempt}"
        for r in runs
        for attempt in range(1, r.attempts + 1)
    )
    assert not [a for a in status["activeapps"] if a["name"].startswith("databuild:")]
    assert any(":raw_events:" in a["name"] for a in apps) and any(
        r.state is JobRunState.dep_miss for r in runs
    )
    assert all(cluster.tasks_finished(a["id"]) > 0 for a in apps if ":raw_events:" in a["name"])
    assert await asyncio.to_thread(checksums, spark_runtime, stack, DAY_BUILT) == local_checksums

    # daily_users dep-missed in its own application, raw_events was built, then daily_users read it in
    # another: the lineage, facts and logs each application reported.
    ordered = sorted(runs, key=lambda r: r.created_at)
    assert [(r.job_label, r.state) for r in ordered] == [
        ("daily_users", JobRunState.dep_miss),
        ("raw_events", JobRunState.succeeded),
        ("daily_users", JobRunState.succeeded),
    ]
    raw, users = (stack.bel.partitions.get(ref) for ref in ("raw_events/2024-01-07", DAY_REF))
    assert ordered[0].missing == [raw.ref]
    assert [(r.ref, r.instance_id) for r in ordered[2].reads] == [(raw.ref, raw.instance_id)]
    facts = stack.bel.partitions.instance(users.instance_id or "").facts
    assert (
        facts is not None
        and facts.rows
        and [c.name for c in facts.columns] == ["user_id", "events", "spent", "date"]
    )
    # ... and ran the demo's checks there, whose results travelled back with the facts.
    checked = {
        c.name: (c.passed, c.severity.value)
        for c in stack.bel.partitions.instance(users.instance_id or "").checks
    }
    assert checked == {"unique(user_id)": (True, "blocking"), "enough_users": (True, "warning")}
    storage = Storage(stack.settings.storage_root)
    missed = attempt_log(stack.bel, storage, ordered[0].job_run_id).text
    assert f"dep-miss: not live: {raw.ref}" in missed and APPLICATION_OUTPUT in missed
    built = attempt_log(stack.bel, storage, ordered[2].job_run_id).text
    assert f"wrote {DAY_REF}: {facts.rows:,} rows" in built.split(APPLICATION_OUTPUT)[0]
    # Each application's folder is gone once it reported.
    assert not list((lake(stack.settings) / "_databuild" / "submissions").iterdir())


async def test_cancelling_a_want_kills_its_submitted_application(make_stack, cluster: SparkCluster) -> None:
    stack = await make_stack(
        graph="tests.graphs:spin",
        executor="submit",
        spark_submit_master=cluster.master_url,
        spark_submit_args=SUBMIT_ARGS,
        spark_driver_memory="768m",
    )
    spec = await stack.db.want("spin/submit")
    app = await wait_for_app(cluster, "databuild:spin_job:")
    await until(lambda: cluster.tasks_finished(app["id"]) > 0, seconds=120)  # its executor is computing
    (run,) = stack.bel.job_runs.query()

    await stack.client.get_workflow_handle(spec.workflow_id).cancel()
    assert (await stack.db.wait(spec)).state is WantState.canceled
    # The master lists the application as done within seconds, and the worker's executor is free.
    await until(lambda: app["id"] in {a["id"] for a in cluster.status()["completedapps"]}, seconds=30)
    status = await asyncio.to_thread(cluster.status)
    assert not [a for a in status["activeapps"] if a["name"].startswith("databuild:")], status
    assert all(w["coresused"] == 0 for w in status["workers"]), status["workers"]
    await until(lambda: stack.bel.job_runs.get(run.job_run_id).state.is_final, seconds=30)
    assert stack.bel.job_runs.get(run.job_run_id).cause is JobRunCause.abandoned
    assert stack.bel.partitions.get("spin/submit").status is PartitionStatus.missing
    # No driver (spark-submit's JVM or its Python) is left on this host.
    leftovers = await asyncio.to_thread(
        subprocess.run, ["pgrep", "-af", run.job_run_id], capture_output=True, text=True
    )
    assert leftovers.stdout == "", leftovers.stdout


async def test_connect_executor_matches_local_mode(
    make_stack, spark_runtime: SparkRuntime, connect: ConnectServer, local_checksums, tmp_path: Path
) -> None:
    """(c) Spark Connect: the job body runs in the worker, its DataFrames on the server's application."""
    stack = await make_stack(graph=DECLARED_DEMO, worker=False)
    before = len(await asyncio.to_thread(connect.jobs))
    worker = await worker_process(
        stack, tmp_path / "worker.log", DATABUILD_EXECUTOR="connect", DATABUILD_SPARK_CONNECT_URL=connect.url
    )
    try:
        await build_demo(stack, DAY_REF)
    finally:
        await asyncio.to_thread(stop_group, worker)
    assert_built_once(stack, DAY_BUILT)
    # The work ran as the server's Spark jobs, tagged per attempt (raw_events, then daily_users).
    jobs = (await asyncio.to_thread(connect.jobs))[: -before or None]
    tagged = {t for j in jobs for t in j.get("jobTags", []) if "_Tag_databuild-" in t}
    assert len({t.rsplit("_Tag_", 1)[1] for t in tagged}) >= 2
    assert await asyncio.to_thread(checksums, spark_runtime, stack, DAY_BUILT) == local_checksums
    # Connect cannot read Spark's accounting: each attempt's cost is recorded unknown (with why), not zero.
    costs = stack.bel.costs.attempts()
    assert costs and {(c.executor, c.cost) for c in costs} == {("connect", None)}
    assert {c.unknown_reason for c in costs} == {CONNECT_COST_UNKNOWN}
    assert all(r.task_seconds == 0 and r.unknown_attempts > 0 for r in (await stack.db.cost()).rows)


async def test_cancelling_a_want_interrupts_its_spark_connect_operations(
    make_stack, connect: ConnectServer, tmp_path: Path
) -> None:
    stack = await make_stack(graph="tests.graphs:spin", worker=False)
    worker = await worker_process(
        stack, tmp_path / "worker.log", DATABUILD_EXECUTOR="connect", DATABUILD_SPARK_CONNECT_URL=connect.url
    )
    try:
        spec = await stack.db.want("spin/connect")
        await until(lambda: bool(stack.bel.job_runs.query()), seconds=60)
        (run,) = stack.bel.job_runs.query()
        tag = f"databuild-{run.job_run_id}-1"

        def running() -> list[dict[str, Any]]:
            return [j for j in connect.jobs_tagged(tag) if j["status"] == "RUNNING"]

        await until(lambda: any(j["numCompletedTasks"] > 0 for j in running()), seconds=120)
        await stack.client.get_workflow_handle(spec.workflow_id).cancel()
        assert (await stack.db.wait(spec)).state is WantState.canceled
        await until(lambda: not running(), seconds=30)
        assert [j["status"] for j in await asyncio.to_thread(connect.jobs_tagged, tag)] == ["FAILED"]
        await until(lambda: stack.bel.job_runs.get(run.job_run_id).state.is_final, seconds=30)
    finally:
        await asyncio.to_thread(stop_group, worker)
    assert stack.bel.job_runs.get(run.job_run_id).cause is JobRunCause.abandoned
    assert stack.bel.partitions.get("spin/connect").status is PartitionStatus.missing
    assert connect.proc.poll() is None  # the server (a shared application) keeps serving


async def test_connect_executor_starts_a_new_session_when_the_server_restarts(
    make_stack, tmp_path: Path
) -> None:
    """A restarted Connect server has forgotten the worker's session; the next attempt starts a new
    one instead of failing (and spending a retry)."""
    stack = await make_stack(graph="tests.graphs:chain", worker=False)
    port, n = free_port(), uuid.uuid4().hex[:6]
    env = {"DATABUILD_EXECUTOR": "connect", "DATABUILD_SPARK_CONNECT_URL": f"sc://127.0.0.1:{port}"}
    worker = None
    try:
        for server in ("first", "restarted"):
            with connect_server(tmp_path / server, "local[1]", port=port):
                worker = worker or await worker_process(stack, tmp_path / "worker.log", **env)
                spec = await stack.db.want(f"base/{server}-{n}")
                want = await asyncio.wait_for(stack.db.wait(spec), timeout=WANT_TIMEOUT)
                assert want.state is WantState.successful, want.reason
    finally:
        if worker is not None:
            await asyncio.to_thread(stop_group, worker)
    assert [(r.state, r.attempts) for r in stack.bel.job_runs.query()] == [(JobRunState.succeeded, 1)] * 2


def test_one_scan_of_a_batchs_inputs_reads_the_same_through_spark_connect(
    connect: ConnectServer, spark_runtime: SparkRuntime, tmp_path: Path
) -> None:
    """``read_partitioned``'s one scan (``read_tagged``) uses only DataFrame functions a Connect session
    has (`_metadata`, `url_decode`, `raise_error`): a job body on the Connect executor reads a batch's
    inputs as in local mode."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from databuild.jobs.tagged_read import read_tagged

    written = tmp_path / "raw" / "~jr-1-1"
    spark_runtime.session().range(4).selectExpr("id", "if(id < 2, 'a', 'b') as day").write.partitionBy(
        "day"
    ).parquet(f"file://{written}")
    folders = {f"file://{written}/day={day}": {"day": day} for day in ("a", "b")}
    remote = ConnectSession.builder.remote(connect.url).create()
    try:
        rows = sorted((r.id, r.day) for r in read_tagged(remote, folders).collect())
    finally:
        remote.stop()
    assert rows == [(0, "a"), (1, "a"), (2, "b"), (3, "b")]
