"""Checks on the real stack (Temporal, Spark, the BEL): a blocking check that fails keeps its instance from
every reader and fail-locks the partition until a fix and `resolve`; warnings are recorded and go live;
`databuild check` re-runs them on the live instance."""

import asyncio
import json
import threading

import pytest

from databuild.models import JobRunState, PartitionStatus, WantState
from tests import graphs
from tests.conftest import cli
from tests.helpers import instance_dir, until
from tests.test_alerts import Webhook

pytestmark = pytest.mark.slow


async def test_a_failing_blocking_check_keeps_bad_data_from_readers_until_a_fix_and_resolve(
    make_stack,
) -> None:
    stack = await make_stack(graph="tests.graphs:checked", job_attempts=3)
    spec = await stack.db.want("tally/1")
    done = await asyncio.wait_for(stack.db.wait(spec), timeout=180)
    assert done.state is WantState.failed

    # Not retried (3 attempts were allowed), nothing published, the partition fail-locked naming the check.
    (run,) = stack.bel.job_runs.query(job_label="checked_events")
    assert run.state is JobRunState.failed and run.attempts == 1
    # Refused, its work cost all the same: recorded alone, as its outcome was never committed.
    (cost,) = stack.bel.costs.attempts_of([run.job_run_id])
    assert cost.attempt == 1 and cost.cost is not None and cost.cost.tasks > 0
    assert run.reason is not None and run.reason.startswith(
        "CheckFailedError: check not_null(user_id) of events/1 failed: 1 null user_id; "
        "check unique(id) of events/1 failed: 1 values of (id) appear more than once, in 2 rows; "
        "check accepted_values(kind) of events/1 failed: 1 rows have a kind not accepted, e.g. 'oops'"
    )
    events = stack.bel.partitions.get("events/1")
    assert events.status is PartitionStatus.failed and events.instance_id is None
    assert "check not_null(user_id) of events/1 failed" in (events.reason or "")
    assert (
        stack.bel.partitions.instances("events/1") == [] and stack.bel.partitions.instances("tally/1") == []
    )
    assert stack.bel.job_runs.query(job_label="tally") == [] or all(
        r.state is not JobRunState.succeeded for r in stack.bel.job_runs.query(job_label="tally")
    )
    # The bad data was written (its location is there) and its results recorded, but no reader is told of it.
    (bad,) = stack.bel.job_runs.attempt_outputs_of(run.job_run_id)
    assert instance_dir(stack.settings, "events/1", bad.instance_id).exists()
    found = {r.name: r for r in stack.bel.partitions.checks_of([bad.instance_id])[bad.instance_id]}
    assert {name: r.passed for name, r in found.items()} == {
        "schema": True,
        "not_null(user_id)": False,
        "unique(id)": False,
        "accepted_values(kind)": False,
        "row_count(1..10)": True,
        "small": False,
        "has_buys": True,
        "audit": True,
    }
    assert found["unique(id)"].metrics == {"duplicate_keys": 1, "duplicate_rows": 2}
    assert found["row_count(1..10)"].metrics == {"rows": 5}

    # Fixed and resolved, the retried want builds a good instance; a failing warning does not stop it.
    graphs.CLEAN.add("1")
    try:
        await stack.db.resolve("events/1")
        await stack.db.retry(spec.want_id)
        done = await asyncio.wait_for(stack.db.wait(spec), timeout=180)
    finally:
        graphs.CLEAN.discard("1")
    assert done.state is WantState.successful
    live = stack.bel.partitions.get("events/1")
    assert live.status is PartitionStatus.live and live.instance_id != bad.instance_id
    (tally_run,) = [
        r for r in stack.bel.job_runs.query(job_label="tally") if r.state is JobRunState.succeeded
    ]
    assert [r.instance_id for r in tally_run.reads] == [live.instance_id]

    shown = await cli(stack, "partitions", "show", "events/1", "--json")
    assert shown.returncode == 0, shown.stderr
    checks = json.loads(shown.stdout)["index"]["instances"][live.instance_id]["checks"]
    assert {c["name"]: (c["severity"], c["passed"]) for c in checks} == {
        "schema": ("blocking", True),
        "not_null(user_id)": ("blocking", True),
        "unique(id)": ("blocking", True),
        "accepted_values(kind)": ("blocking", True),
        "row_count(1..10)": ("blocking", True),
        "small": ("warning", False),
        "has_buys": ("warning", True),
        "audit": ("blocking", True),
    }
    small = next(c for c in checks if c["name"] == "small")
    assert small["message"] == "4 rows (expected 0 to 3)" and small["metrics"] == {"rows": 4}


async def test_a_failing_warning_goes_live_and_alerts_and_databuild_check_reruns_the_checks(
    make_stack,
) -> None:
    hook = Webhook()
    hook.up()
    stack = await make_stack(graph="tests.graphs:checked", alert_urls=f"json://127.0.0.1:{hook.port}/hook")
    graphs.CLEAN.add("2")
    try:
        spec = await stack.db.want("tally/2")
        assert (await asyncio.wait_for(stack.db.wait(spec), timeout=180)).state is WantState.successful
    finally:
        graphs.CLEAN.discard("2")
    live = stack.bel.partitions.get("events/2")
    assert live.status is PartitionStatus.live and live.instance_id is not None
    await until(lambda: "check_warning" in hook.kinds(), "the warning's alert")
    warned = next(r for r in hook.received if r["kind"] == "check_warning")
    assert "check small of events/2: 4 rows (expected 0 to 3)" in warned["message"]

    # Re-run on the live instance: the blocking checks pass again, and it stays live.
    passed = await cli(stack, "check", "events/2", "--json")
    assert passed.returncode == 0, passed.stderr
    found = json.loads(passed.stdout)
    assert found["fail_locked"] is False and found["instance_id"] == live.instance_id
    assert {r["name"]: r["passed"] for r in found["results"]}["small"] is False
    assert stack.bel.partitions.get("events/2").status is PartitionStatus.live
    assert len(stack.bel.events.query(types=["InstanceChecked"], limit=100)) == 2  # at build, and now

    # A check that hangs: the request gives up within DATABUILD_CHECK_TIMEOUT and says so, and the
    # results the check ends with later are not recorded.
    release = graphs.AUDIT_HANGS["events/2"] = threading.Event()
    try:
        hung = await cli(stack, "check", "events/2", DATABUILD_CHECK_TIMEOUT="3s")
    finally:
        release.set()
        del graphs.AUDIT_HANGS["events/2"]
    assert hung.returncode == 1, hung.stderr
    assert "did not finish within 3s" in hung.stderr and "DATABUILD_CHECK_TIMEOUT" in hung.stderr

    # An audit that now fails takes the instance out of service: fail-locked, its readers' data stale.
    graphs.AUDIT_FAILS.add("events/2")
    try:
        failed = await cli(stack, "check", "events/2")
    finally:
        graphs.AUDIT_FAILS.discard("events/2")
    assert failed.returncode == 1, failed.stderr
    assert "FAILED audit (blocking)" in failed.stdout and "events/2 is fail-locked" in failed.stdout
    locked = stack.bel.partitions.get("events/2")
    assert locked.status is PartitionStatus.failed and "check audit of events/2 failed" in (
        locked.reason or ""
    )
    retired = stack.bel.partitions.instance(live.instance_id)
    assert retired.status.value == "tainted"
    assert {c.name: c.passed for c in retired.checks}["audit"] is False
    tally = stack.bel.partitions.get("tally/2")
    assert stack.bel.partitions.instance(tally.instance_id or "").stale_cause == live.instance_id
    await until(lambda: "partition_fail_locked" in hook.kinds(), "the fail-lock's alert")
    lock_alert = next(r for r in hook.received if r["kind"] == "partition_fail_locked")
    assert lock_alert["subject"] == f"check:{live.instance_id}"

    # Nothing live to check now: refused, nothing recorded.
    refused = await cli(stack, "check", "events/2")
    assert refused.returncode != 0 and "checks re-run on a live instance only" in refused.stderr
    assert len(stack.bel.events.query(types=["InstanceChecked"], limit=100)) == 3
    hook.down()
