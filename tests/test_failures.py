"""Failure paths on the real stack: a killed worker, cancellation, a job that keeps failing."""

import asyncio
import os
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus

from databuild.errors import InvalidTransitionError
from databuild.jobs.storage import Storage
from databuild.models import JobRunCause, JobRunState, PartitionStatus, WantState
from databuild.operations.garbage import collect_garbage
from databuild.testing.cluster import start_databuild_worker
from tests import graphs
from tests.conftest import stack_env
from tests.helpers import instance_dir, until

pytestmark = pytest.mark.slow
SLOW = 6.0


def start_worker(stack, log: Path) -> subprocess.Popen[bytes]:  # type: ignore[no-untyped-def]
    env = stack_env(stack, DATABUILD_JOB_HEARTBEAT_TIMEOUT="4", DATABUILD_TEST_SLOW_SECONDS=str(SLOW))
    return start_databuild_worker(env, log)  # its own process group: the kill takes the Spark JVM too


async def test_worker_killed_mid_job_completes_once(make_stack, tmp_path: Path) -> None:
    stack = await make_stack(graph="tests.graphs:slow", worker=False)
    log = tmp_path / "worker.log"
    first = start_worker(stack, log)
    try:
        spec = await stack.db.want("slow/killed")
        await until(
            lambda: any(r.state is JobRunState.running for r in stack.bel.job_runs.query()), seconds=120
        )
        planned = stack.bel.job_runs.attempt_outputs_of(stack.bel.job_runs.query()[0].job_run_id)[0]
        # Mid-write: the job's Spark tasks are writing into the instance location.
        await until(
            lambda: instance_dir(stack.settings, planned.ref, planned.instance_id).is_dir(), seconds=120
        )
        await asyncio.sleep(1)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()

        assert stack.bel.partitions.get("slow/killed").status is PartitionStatus.building
        orphan = stack.bel.job_runs.attempt_outputs_of(stack.bel.job_runs.query()[0].job_run_id)
        assert [o.attempt for o in orphan] == [1]  # its location was recorded before it was written

        second = start_worker(stack, log)
        try:
            done = await asyncio.wait_for(stack.db.wait(spec), timeout=180)
        finally:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)

    assert done.state is WantState.successful, log.read_text()[-3000:]
    runs = stack.bel.job_runs.query()
    assert len(runs) == 1 and runs[0].state is JobRunState.succeeded and runs[0].attempts == 2
    lives = stack.bel.events.query(pattern="slow/killed", types=["PartitionLive"])
    assert len(lives) == 1  # published exactly once
    partition = stack.bel.partitions.get("slow/killed")
    assert partition.status is PartitionStatus.live
    assert partition.instance_id != orphan[0].instance_id  # the retry wrote a new instance
    assert instance_dir(stack.settings, "slow/killed", partition.instance_id).is_dir()
    # The killed attempt left a location nobody reads; gc keeps it for the retention, then deletes it.
    killed = instance_dir(stack.settings, "slow/killed", orphan[0].instance_id)
    assert killed.is_dir()
    storage = Storage(stack.settings.storage_root)
    kept = collect_garbage(storage, stack.bel, keep=timedelta(hours=1))
    assert kept.deleted == [] and killed.is_dir() and kept.kept == {"live": 1, "within retention": 1}
    collected = collect_garbage(storage, stack.bel, keep=timedelta(0))
    instances = [(c.instance_id, c.kind) for c in collected.deleted if c.kind == "instance"]
    assert instances == [(orphan[0].instance_id, "instance")]
    assert not killed.exists()
    assert instance_dir(stack.settings, "slow/killed", partition.instance_id).is_dir()


async def test_cancelling_a_job_run_stops_its_spark_job(make_stack, monkeypatch) -> None:
    monkeypatch.setattr(graphs, "SLOW_SECONDS", 30.0)  # far longer than a cancellation takes
    stack = await make_stack(graph="tests.graphs:slow")
    spec = await stack.db.want("slow/cancel")
    await until(lambda: any(r.state is JobRunState.running for r in stack.bel.job_runs.query()), seconds=60)
    await asyncio.sleep(1.5)
    run = stack.bel.job_runs.query()[0]
    started = time.monotonic()
    job_run = stack.client.get_workflow_handle(run.workflow_id)
    await job_run.cancel()
    done = await stack.db.wait(spec)
    assert time.monotonic() - started < 20  # the 30 s Spark tasks were interrupted
    assert done.state is WantState.failed and "canceled" in (done.reason or "")
    cancelled = stack.bel.job_runs.get(run.job_run_id)
    assert cancelled.state is JobRunState.cancelled and cancelled.cause is JobRunCause.cancelled
    assert stack.bel.partitions.get("slow/cancel").status is PartitionStatus.failed
    assert stack.bel.partitions.get("slow/cancel").instance_id is None  # nothing it wrote became visible
    # The wants hear of the failure from the run's fan-out, just before its workflow closes.
    for _ in range(50):
        if (await job_run.describe()).status is not WorkflowExecutionStatus.RUNNING:
            break
        await asyncio.sleep(0.1)
    assert (await job_run.describe()).status is WorkflowExecutionStatus.CANCELED
    tracker = stack.parts.spark.session().sparkContext.statusTracker()
    assert tracker.getActiveJobsIds() == []


async def test_cancelling_a_want(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:late")
    spec = await stack.db.want("report/cancelled")
    await until(lambda: stack.bel.wants.get(spec.want_id).state is WantState.upstream_building, seconds=60)
    handle = stack.client.get_workflow_handle(spec.workflow_id)
    await handle.cancel()
    done = await stack.db.wait(spec)
    assert done.state is WantState.canceled
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    # Retry opens it again: it waits for its feed as before; then one that is open decides again.
    assert not (await stack.db.retry(spec.want_id)).state.is_final  # new, or already deciding
    await until(lambda: stack.bel.wants.get(spec.want_id).state is WantState.upstream_building, seconds=60)
    assert (await stack.db.retry(spec.want_id)).state is WantState.upstream_building
    await stack.db.cancel(spec.want_id)
    assert (await stack.db.wait(spec)).state is WantState.canceled


async def test_job_failing_beyond_retry_policy_fails_the_want(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:flaky", job_attempts=2)
    spec = await stack.db.want("fails/1")
    done = await stack.db.wait(spec)
    assert done.state is WantState.failed
    assert "boom 1" in (done.reason or "")
    run = stack.bel.job_runs.query()[0]
    assert run.state is JobRunState.failed and run.attempts == 2
    assert stack.bel.partitions.get("fails/1").status is PartitionStatus.failed


async def test_a_failure_deep_down_fails_every_want_above_it(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:flaky", job_attempts=1)
    spec = await stack.db.want("top/7")
    done = await asyncio.wait_for(stack.db.wait(spec), timeout=120)
    assert done.state is WantState.failed
    assert "mid/7" in (done.reason or "") and "failed" in (done.reason or "")
    states = {w.ref: w.state for w in stack.bel.wants.query(limit=100)}
    assert states == {"top/7": WantState.failed, "mid/7": WantState.failed, "fails/7": WantState.failed}

    # Retry: refused while fails/7 is fail-locked; once fixed and resolved, the want and the wants it
    # derived open again and the same wants are fulfilled. (Their old runs may still be closing, their
    # last workflow task retried because a failure notice arrived during it: a finish they replay then
    # is stale, and the new runs are new, not those.)
    with pytest.raises(InvalidTransitionError, match="databuild resolve fails/7"):
        await stack.db.retry(spec.want_id)
    graphs.FIXED.add("7")
    try:
        await stack.db.resolve("fails/7")
        # Opened again: new, or already deciding in its new run.
        assert not (await stack.db.retry(spec.want_id)).state.is_final
        done = await asyncio.wait_for(stack.db.wait(spec), timeout=120)
    finally:
        graphs.FIXED.discard("7")
    assert done.state is WantState.successful
    states = {w.ref: w.state for w in stack.bel.wants.query(limit=100)}
    assert set(states.values()) == {WantState.successful} and len(states) == 3
    retried = [e.want_id for e in stack.bel.events.query(limit=1000) if e.type == "WantRetried"]
    assert sorted(retried) == sorted(w.want_id for w in stack.bel.wants.query(limit=100))
    with pytest.raises(InvalidTransitionError, match="succeeded"):
        await stack.db.retry(spec.want_id)


async def test_reading_a_ref_nobody_produces_fails_clearly(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:flaky")
    spec = await stack.db.want("typo/1")
    done = await asyncio.wait_for(stack.db.wait(spec), timeout=120)
    assert done.state is WantState.failed
    assert "reads 'nowhere/1', which the graph cannot provide" in (done.reason or "")
    assert stack.bel.job_runs.query()[0].attempts == 1  # a contract error is not retried


async def test_a_canceled_want_stops_the_build_only_when_no_other_want_waits(make_stack, monkeypatch) -> None:
    stack = await make_stack(graph="tests.graphs:slow")

    def running(ref: str) -> list[str]:
        return [
            r.job_run_id
            for r in stack.bel.job_runs.query()
            if r.outputs == [ref] and r.state is JobRunState.running
        ]

    # Two wants share one build: cancelling one leaves the build to the other.
    monkeypatch.setattr(graphs, "SLOW_SECONDS", 8.0)
    first = await stack.db.want("slow/shared")
    await until(lambda: bool(running("slow/shared")), seconds=60)
    second = await stack.db.want("slow/shared", data_timestamp=first.data_timestamp + timedelta(seconds=1))
    await until(lambda: stack.bel.wants.get(second.want_id).job_run_id is not None, seconds=30)
    await stack.client.get_workflow_handle(first.workflow_id).cancel()
    assert (await stack.db.wait(first)).state is WantState.canceled
    assert running("slow/shared")  # still building, for the second want
    assert (await stack.db.wait(second)).state is WantState.successful
    assert [r.state for r in stack.bel.job_runs.query() if r.outputs == ["slow/shared"]] == [
        JobRunState.succeeded
    ]

    # A want alone on its build: cancelling it abandons the build, which stops its Spark job at once and
    # frees the partition (no fail-lock), so the next want just builds it.
    monkeypatch.setattr(graphs, "SLOW_SECONDS", 30.0)
    alone = await stack.db.want("slow/alone")
    await until(lambda: bool(running("slow/alone")), seconds=60)
    await asyncio.sleep(1.5)  # into the 30 s Spark tasks
    (job_run_id,) = running("slow/alone")
    started = time.monotonic()
    await stack.client.get_workflow_handle(alone.workflow_id).cancel()
    assert (await stack.db.wait(alone)).state is WantState.canceled
    await until(lambda: stack.bel.job_runs.get(job_run_id).state.is_final, seconds=20)
    assert time.monotonic() - started < 20  # the 30 s Spark tasks were interrupted
    run = stack.bel.job_runs.get(job_run_id)
    assert run.state is JobRunState.cancelled and run.cause is JobRunCause.abandoned
    assert stack.bel.partitions.get("slow/alone").status is PartitionStatus.missing
    assert stack.parts.spark.session().sparkContext.statusTracker().getActiveJobsIds() == []
    monkeypatch.setattr(graphs, "SLOW_SECONDS", 0.1)
    again = await stack.db.want("slow/alone", data_timestamp=alone.data_timestamp + timedelta(seconds=1))
    assert (await stack.db.wait(again)).state is WantState.successful
