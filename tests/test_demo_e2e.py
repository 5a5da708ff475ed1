"""The demo want, end to end: real Temporal dev server, real Spark, real SQLite."""

import asyncio
from collections import Counter

import pytest

from databuild.models import JobRunState, PartitionStatus, WantSource, WantState
from tests.conftest import DemoRun
from tests.helpers import instance_dir

pytestmark = pytest.mark.slow

DAYS = [f"2024-01-0{d}" for d in range(1, 8)]


async def test_demo_want_fulfilled_through_derivative_wants(demo_run: DemoRun) -> None:
    stack, spec, want = demo_run.stack, demo_run.spec, demo_run.want

    assert want.state is WantState.successful, want.reason
    bel = stack.bel
    derivatives = bel.wants.query(root_want_id=want.want_id, limit=1000)
    by_ref = {w.ref: w for w in derivatives if w.want_id != want.want_id}
    expected = {f"daily_users/{d}" for d in DAYS} | {f"raw_events/{d}" for d in DAYS}
    assert set(by_ref) == expected
    for w in by_ref.values():
        assert w.source is WantSource.derivative and w.state is WantState.successful
        assert w.root_want_id == want.want_id
    for d in DAYS:
        assert by_ref[f"daily_users/{d}"].parent_want_id == want.want_id
        assert by_ref[f"raw_events/{d}"].parent_want_id == by_ref[f"daily_users/{d}"].want_id

    # Other modules on this test process build on the same demo (taints, more dates): count this
    # want's family only, whatever ran before.
    family = {w.want_id for w in derivatives}
    runs = [r for r in bel.job_runs.query(limit=1000) if r.want_id in family]
    succeeded = Counter(r.job_label for r in runs if r.state is JobRunState.succeeded)
    assert succeeded == {"raw_events": 7, "daily_users": 7, "weekly_rollup": 1}
    dep_missed = Counter(r.job_label for r in runs if r.state is JobRunState.dep_miss)
    assert dep_missed == {"daily_users": 7, "weekly_rollup": 1}
    rollup_miss = next(r for r in runs if r.job_label == "weekly_rollup" and r.state is JobRunState.dep_miss)
    assert rollup_miss.missing == sorted(f"daily_users/{d}" for d in DAYS)

    for ref in expected | {"daily_summary/2024-01-07", "top_spenders/2024-01-07"}:
        partition = bel.partitions.get(ref)
        assert partition.status is PartitionStatus.live
        assert instance_dir(stack.settings, ref, partition.instance_id).is_dir()
        history, _ = bel.partitions.instance_history(ref, limit=100)
        built = [i for i in history if i.job_run_id in {r.job_run_id for r in runs}]
        assert len(built) == 1  # built exactly once
    # The demo's checks passed on its data: a blocking schema contract and unique users, a warning.
    checks = {
        ref: {
            c.name: (c.severity.value, c.passed)
            for c in bel.partitions.instance(bel.partitions.get(ref).instance_id or "").checks
        }
        for ref in ("raw_events/2024-01-03", "daily_users/2024-01-03", "daily_summary/2024-01-07")
    }
    assert checks == {
        "raw_events/2024-01-03": {"schema": ("blocking", True)},
        "daily_users/2024-01-03": {"unique(user_id)": ("blocking", True), "enough_users": ("warning", True)},
        "daily_summary/2024-01-07": {},
    }
    rollup = next(r for r in runs if r.job_label == "weekly_rollup" and r.state is JobRunState.succeeded)
    assert {w.ref for w in rollup.writes} == {"daily_summary/2024-01-07", "top_spenders/2024-01-07"}
    assert sorted(r.ref for r in rollup.reads) == sorted(f"daily_users/{d}" for d in DAYS)

    # Operators find wants in the Temporal UI by partition ref, state, root want and SLA status.
    client = stack.client
    query = 'DataBuildPartitionRef = "daily_summary/2024-01-07" AND DataBuildWantState = "successful"'
    # (Skipped runs have no workflow; other tests on this demo add some.)
    executed = {r.workflow_id for r in runs if r.state is not JobRunState.skipped}
    expected_family = {w.workflow_id for w in derivatives} | executed
    for _ in range(100):  # visibility lags a little behind the workflows
        # (Other tests want the same ref for other data times: look at this want's family only.)
        mine = f' AND DataBuildSlaMissed = false AND DataBuildRootWantId = "{want.want_id}"'
        found = [w.id async for w in client.list_workflows(query + mine)]
        family = {w.id async for w in client.list_workflows(f'DataBuildRootWantId = "{want.want_id}"')}
        if found and family >= expected_family:
            break
        await asyncio.sleep(0.1)
    assert found == [spec.workflow_id]
    assert family >= expected_family
    described = await client.get_workflow_handle(spec.workflow_id).describe()
    assert "daily_summary/2024-01-07" in (await described.static_summary() or "")

    live = stack.bel.partitions.get("daily_summary/2024-01-07").instance_id
    summary = stack.parts.spark.session().read.parquet(
        str(instance_dir(stack.settings, "daily_summary/2024-01-07", live))
    )
    row = summary.collect()[0]
    assert row["events"] == 7 * 100_000


async def test_every_want_of_the_demo_starts_its_runs_by_decision_without_a_failed_workflow_task(
    demo_run: DemoRun,
) -> None:
    """Each want of the demo's tree executed runs, each started by the decision that queued it (patch
    ``run-started-by-decision``): no child workflow, so no run's end can arrive as the want completes
    (which failed a workflow task in every such want, UnhandledCommand, when runs were its children)."""
    from temporalio.api.enums.v1 import EventType

    stack, want = demo_run.stack, demo_run.want
    family = stack.bel.wants.query(root_want_id=want.want_id, limit=1000)
    assert len(family) == 15
    for member in family:
        history = await stack.client.get_workflow_handle(member.workflow_id).fetch_history()
        types = [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events]
        assert "WORKFLOW_TASK_FAILED" not in types, (member.ref, types)
        assert not [t for t in types if "CHILD" in t], (member.ref, types)
        runs = stack.bel.job_runs.of_want(member.want_id)
        assert runs and all(run.state.is_final for _, run in runs), (member.ref, runs)
