"""Delegation under real concurrency, fail-locks and lost builds: real Temporal, Spark and SQLite."""

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from databuild.errors import InvalidTransitionError
from databuild.models import JobRunCause, JobRunState, PartitionStatus, WantSource, WantState
from databuild.testing.cluster import start_databuild_worker, stop_group
from tests import graphs
from tests.conftest import stack_env
from tests.helpers import until

pytestmark = pytest.mark.slow
T0 = datetime(2024, 6, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def trio_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builds a test breaks or makes flaky (tests.graphs BROKEN, FLAKY) are its own: each test
    starts with none, and its switches are gone after it, even when it fails."""
    monkeypatch.setattr(graphs, "BROKEN", set())
    monkeypatch.setattr(graphs, "FLAKY", {})


async def test_hundred_wants_two_workers_one_execution(make_stack, tmp_path) -> None:
    stack = await make_stack(graph="tests.graphs:trio")
    # The second worker is its own process, as in production (one Temporal worker per task queue
    # and process), with its own SparkSession and BEL connections.
    log = tmp_path / "second-worker.log"
    second = start_databuild_worker(stack_env(stack), log)
    try:
        await until(lambda: "worker on task queue" in log.read_text(), seconds=60)
        specs = await asyncio.gather(
            *(stack.db.want("b/hundred", data_timestamp=T0 + timedelta(minutes=i)) for i in range(100))
        )
        assert len({s.want_id for s in specs}) == 100
        done = await asyncio.gather(*(stack.db.wait(s) for s in specs))
    finally:
        await asyncio.to_thread(stop_group, second)

    assert Counter(w.state for w in done) == {WantState.successful: 100}
    runs = stack.bel.job_runs.query(limit=1000)
    executed = [r for r in runs if r.state is JobRunState.succeeded]
    assert len(executed) == 1 and executed[0].outputs == ["a/hundred", "b/hundred", "c/hundred"]
    assert {r.state for r in runs} <= {JobRunState.succeeded, JobRunState.skipped}
    assert len(stack.bel.events.query(types=["JobRunSucceeded"], limit=1000)) == 1
    assert len(stack.bel.partitions.instances("b/hundred")) == 1
    delegations = stack.bel.events.query(types=["Delegation"], limit=1000)
    assert {e.data["delegated_to"] for e in delegations} == {executed[0].job_run_id}
    stats = stack.bel.events.stats()
    assert stats.builds_avoided == 99
    assert stats.jobs[0].success_rate == 1.0
    # The run's job told the wants as it committed; the run's workflow, no child of a want, told nobody again.
    run = stack.client.get_workflow_handle(executed[0].workflow_id)
    assert (await run.describe()).parent_id is None
    result = await run.result()
    assert result["told_after_id"] > 0  # a subscription's id: told up to it
    # All of them in its first page, and what follows a run's end done too: its workflow had nothing left to
    # fan out (no local activity, no fan-out activity).
    assert result["fanned_out"] is True
    events = [event.WhichOneof("attributes") for event in (await run.fetch_history()).events]
    assert "marker_recorded_event_attributes" not in events
    assert events.count("activity_task_scheduled_event_attributes") == 1  # its job


async def test_racing_wants_for_overlapping_outputs_execute_once(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:trio")
    refs = ["a/overlap", "b/overlap", "c/overlap"] * 3
    specs = await asyncio.gather(
        *(stack.db.want(ref, data_timestamp=T0 + timedelta(minutes=i)) for i, ref in enumerate(refs))
    )
    done = await asyncio.gather(*(stack.db.wait(s) for s in specs))
    assert {w.state for w in done} == {WantState.successful}
    assert len([r for r in stack.bel.job_runs.query() if r.state is JobRunState.succeeded]) == 1


async def test_delegated_run_failing_transiently_still_serves_everyone(make_stack) -> None:
    graphs.FLAKY["transient"] = 1
    stack = await make_stack(graph="tests.graphs:trio", job_attempts=3)
    first = await stack.db.want("a/transient")
    await until(lambda: bool(stack.bel.job_runs.query()))
    second = await stack.db.want("c/transient", source=WantSource.api)
    done = await asyncio.gather(stack.db.wait(first), stack.db.wait(second))
    assert {w.state for w in done} == {WantState.successful}
    run = stack.bel.job_runs.query(state=JobRunState.succeeded)[0]
    assert run.attempts == 2
    assert stack.bel.job_runs.of_want(second.want_id)[0] == ("delegated", run)


async def test_fail_lock_refuses_builds_until_resolved(make_stack) -> None:
    graphs.BROKEN.add("locked")
    stack = await make_stack(graph="tests.graphs:trio", job_attempts=1)
    first = await stack.db.want("a/locked")
    await until(lambda: bool(stack.bel.job_runs.query()))
    delegated = await stack.db.want("b/locked", source=WantSource.api)
    failed = await asyncio.gather(stack.db.wait(first), stack.db.wait(delegated))
    assert {w.state for w in failed} == {WantState.failed}
    assert all("bad input data for locked" in (w.reason or "") for w in failed)
    assert stack.bel.partitions.get("c/locked").status is PartitionStatus.failed

    blocked = await stack.db.want("c/locked", source=WantSource.dashboard)
    await until(lambda: stack.bel.wants.get(blocked.want_id).state is WantState.upstream_building)
    reason = stack.bel.wants.get(blocked.want_id).reason or ""
    assert "fail-locked" in reason and "bad input data" in reason and "databuild resolve" in reason
    assert len(stack.bel.job_runs.query()) == 1  # refused a build

    graphs.BROKEN.discard("locked")  # the operator fixes the cause...
    resolved, woken = await stack.db.resolve("a/locked")  # ...and clears the lock of the whole job
    assert [p.ref for p in resolved] == ["a/locked", "b/locked", "c/locked"]
    assert woken >= 1
    done = await stack.db.wait(blocked)
    assert done.state is WantState.successful
    assert len(stack.bel.events.query(types=["PartitionResolved"])) == 3
    with pytest.raises(InvalidTransitionError, match="only a failed"):
        await stack.db.resolve("a/locked")  # live now: nothing to resolve


async def test_skip_retires_a_partition(make_stack) -> None:
    graphs.BROKEN.add("retired")
    stack = await make_stack(graph="tests.graphs:trio", job_attempts=1)
    assert (await stack.db.wait(await stack.db.want("a/retired"))).state is WantState.failed
    waiting = await stack.db.want("a/retired", source=WantSource.api)
    await until(lambda: stack.bel.wants.get(waiting.want_id).state is WantState.upstream_building)
    await stack.db.skip("a/retired")
    done = await stack.db.wait(waiting)
    assert done.state is WantState.failed and "retired" in (done.reason or "")
    later = await stack.db.wait(await stack.db.want("a/retired", source=WantSource.dashboard))
    assert later.state is WantState.failed and "retired" in (later.reason or "")
    assert stack.bel.partitions.get("a/retired").status is PartitionStatus.skipped
    with pytest.raises(InvalidTransitionError, match="already retired"):
        await stack.db.skip("a/retired")
    graphs.BROKEN.discard("retired")


async def test_lock_of_a_gone_build_is_released(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:trio", job_lease=timedelta(seconds=2))
    # A build lock whose job-run workflow never existed (as after losing the Temporal server's data).
    orphan = stack.db.spec("a/orphan")
    stack.bel.wants.register(orphan)
    dead = stack.bel.decisions.decide(
        orphan.want_id, 1, stack.graph.resolve("a/orphan"), timedelta(seconds=1)
    )
    assert stack.bel.partitions.get("a/orphan").building_job_run_id == dead.job_run_id

    spec = await stack.db.want("b/orphan", source=WantSource.api)
    done = await asyncio.wait_for(stack.db.wait(spec), timeout=120)
    assert done.state is WantState.successful
    lost = stack.bel.job_runs.get(dead.job_run_id or "")
    assert (
        lost.state is JobRunState.cancelled
        and lost.cause is JobRunCause.lost
        and lost.lost
        and "no such workflow" in (lost.reason or "")
    )
    assert stack.bel.partitions.get("b/orphan").built_by != dead.job_run_id
