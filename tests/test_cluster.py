"""The demo want on a real Spark standalone cluster (master + worker on loopback): the worker's long-lived
SparkSession is a client of the cluster, executors write the partitions, and every partition has the
same contents as when built in local mode."""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from databuild.models import JobRunState, PartitionStatus, WantState
from databuild.spark import SparkRuntime
from tests.cluster import (
    LOOPBACK,
    SparkCluster,
    group_alive,
    partition_checksum,
    spark_cluster,
    start_databuild_worker,
    stop_group,
)
from tests.conftest import DEMO_REF, Stack, stack_env

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

DAYS = [f"2024-01-0{d}" for d in range(1, 8)]
BUILT = sorted(
    [f"raw_events/{d}" for d in DAYS]
    + [f"daily_users/{d}" for d in DAYS]
    + ["daily_summary/2024-01-07", "top_spenders/2024-01-07"]
)
WORKER_APP = "databuild"  # SparkRuntime's default app name, used by `databuild worker`
WANT_TIMEOUT = 600


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[SparkCluster]:
    context = spark_cluster(tmp_path / "spark-cluster")
    started = await asyncio.to_thread(context.__enter__)
    try:
        yield started
    finally:
        await asyncio.to_thread(context.__exit__, None, None, None)
    assert not any(group_alive(p.pid) for p in started.procs), "Spark daemons left behind"


def unique_data_timestamp() -> datetime:
    # Want ids (and so workflow ids) derive from ref + data timestamp, and all stacks of a test session
    # share one Temporal namespace: a distinct data time keeps this want apart from the other demo runs.
    return datetime(2024, 1, 7, tzinfo=UTC) + timedelta(microseconds=uuid.uuid4().int % 86_400_000_000)


async def build_demo(stack: Stack) -> float:
    """Register the demo want, wait until it is fulfilled; returns the wall time."""
    started = time.monotonic()
    spec = await stack.db.want(DEMO_REF, data_timestamp=unique_data_timestamp())
    want = await asyncio.wait_for(stack.db.wait(spec), timeout=WANT_TIMEOUT)
    elapsed = time.monotonic() - started
    assert want.state is WantState.successful, want.reason
    return elapsed


def checksums(runtime: SparkRuntime, stack: Stack) -> dict[str, str]:
    live = stack.bel.partitions(status=PartitionStatus.live, limit=1000)
    assert sorted(p.ref for p in live) == BUILT
    session = runtime.session()
    return {ref: partition_checksum(session, stack.settings.storage_root / ref) for ref in BUILT}


def assert_built_once(stack: Stack) -> None:
    runs = stack.bel.job_runs(limit=1000)
    succeeded = sorted(r.job_label for r in runs if r.state is JobRunState.succeeded)
    assert succeeded == ["daily_users"] * 7 + ["raw_events"] * 7 + ["weekly_rollup"]
    assert all(len(stack.bel.instances(ref)) == 1 for ref in BUILT)


async def test_demo_on_standalone_cluster_matches_local_mode(
    make_stack, spark_runtime: SparkRuntime, cluster: SparkCluster, tmp_path: Path, record_property
) -> None:
    # Baseline: local mode, on the test session's in-process worker (warm session, as on the cluster).
    await asyncio.to_thread(spark_runtime.session)
    local = await make_stack()
    local_seconds = await build_demo(local)
    assert_built_once(local)

    # The same want on a worker process whose SparkSession is a client of the standalone cluster.
    remote = await make_stack(worker=False)
    log = tmp_path / "cluster-worker.log"
    env = stack_env(
        remote,
        DATABUILD_SPARK_MASTER=cluster.master_url,
        SPARK_LOCAL_IP=LOOPBACK,  # the driver binds and advertises loopback, not the host's address
    )
    worker_started = time.monotonic()
    worker = await asyncio.to_thread(start_databuild_worker, env, log)
    try:
        # Ready when its SparkContext (warmed as the worker starts) has registered with the master and
        # got an executor, so the timing below is of a warm cluster session, as the local one is.
        apps: list[dict[str, Any]] = []
        for _ in range(1200):
            apps = await asyncio.to_thread(cluster.apps, WORKER_APP)
            if (apps and cluster.executor_registered(apps[0]["id"])) or worker.poll() is not None:
                break
            await asyncio.sleep(0.1)
        assert apps and cluster.executor_registered(apps[0]["id"]), (
            f"no executor for a {WORKER_APP!r} application on the master\n{log.read_text()[-3000:]}"
        )
        ready_seconds = time.monotonic() - worker_started
        cluster_seconds = await build_demo(remote)
        status = await asyncio.to_thread(cluster.status)
    finally:
        await asyncio.to_thread(stop_group, worker)
    assert_built_once(remote)

    # It ran on the cluster: the worker's application held the cluster's executor, which ran the tasks.
    running = [a for a in status["activeapps"] if a["name"] == WORKER_APP]
    assert len(running) == 1 and running[0]["state"] == "RUNNING" and running[0]["cores"] == 2, status
    app_id = running[0]["id"]
    assert cluster.executor_logs(app_id), f"no executor ran for {app_id}"
    tasks = cluster.tasks_finished(app_id)
    assert tasks > 0
    # Once the worker is stopped, its driver disconnects and the master lists the application as done.
    for _ in range(100):
        status = await asyncio.to_thread(cluster.status)
        if any(a["id"] == app_id for a in status["completedapps"]):
            break
        await asyncio.sleep(0.1)
    assert [a["id"] for a in status["completedapps"]] == [app_id] and not status["activeapps"], status

    # Same contents, partition by partition (read back with the test's own local session).
    local_sums = await asyncio.to_thread(checksums, spark_runtime, local)
    cluster_sums = await asyncio.to_thread(checksums, spark_runtime, remote)
    assert cluster_sums == local_sums

    record_property("demo_local_seconds", round(local_seconds, 1))
    record_property("demo_cluster_seconds", round(cluster_seconds, 1))
    record_property("cluster_worker_ready_seconds", round(ready_seconds, 1))
    record_property("cluster_tasks", tasks)
    print(
        f"\ndemo want: local[2] {local_seconds:.1f}s, cluster {cluster_seconds:.1f}s ({tasks} executor tasks; "
        f"cluster worker ready in {ready_seconds:.1f}s)"
    )
