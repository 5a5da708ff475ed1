"""Backfills: one want per partition of a range, idempotently, through the CLI, the SDK and the API,
with progress by state; bad ranges are refused before anything is recorded. (A range's partitions on
their own: tests/test_backfill_range.py.)"""

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

import databuild.client as client_module
from databuild.backfill import BackfillProgress, BackfillRequest
from databuild.errors import NotFoundError
from databuild.models import JobRun, JobRunState, PartitionStatus, WantSource, WantState
from databuild.web import create_app, web_context
from tests import graphs
from tests.conftest import Stack, cli, cli_batch
from tests.helpers import lake, until, until_held_by_pause, waiting_for_feed

pytestmark = pytest.mark.slow


async def test_a_backfill_builds_every_partition_once_and_asking_again_registers_nothing(make_stack) -> None:
    stack = await make_stack(graph="examples.demo:graph")
    args = ["backfill", "raw_events/{date}", "--from", "2024-02-01", "--to", "2024-02-03"]
    first = await cli(stack, *args, "--wait", "--json")
    assert first.returncode == 0, first.stderr
    progress = BackfillProgress.model_validate(json.loads(first.stdout))
    assert (progress.partitions, progress.registered, progress.finished) == (3, 3, True)
    assert progress.by_state == {WantState.successful: 3}
    wants = stack.bel.wants.query(limit=100)
    assert sorted(w.ref for w in wants) == [f"raw_events/2024-02-0{d}" for d in (1, 2, 3)]
    assert {w.source for w in wants} == {WantSource.backfill}

    events = len(stack.bel.events.query(limit=10_000))
    again = await cli(stack, *args, "--json")
    assert again.returncode == 0, again.stderr
    assert BackfillProgress.model_validate(json.loads(again.stdout)).finished
    assert len(stack.bel.events.query(limit=10_000)) == events  # nothing new recorded
    assert len(stack.bel.wants.query(limit=100)) == 3
    human = await cli(stack, *args)
    assert f"backfill {progress.backfill_id}" in human.stdout and "3/3 wants registered" in human.stdout

    # The API: the same backfill is found by id; a bad range is refused and records nothing.
    api = TestClient(
        create_app(web_context(stack.settings, stack.bel)),
        base_url="http://127.0.0.1:8000",
        client=("127.0.0.1", 1),
    )
    found = api.get(f"/api/backfills/{progress.backfill_id}")
    assert found.status_code == 200 and found.json()["done"] == 3
    assert api.get("/api/backfills/bf-nothing").status_code == 404
    page = api.get(f"/backfills/{progress.backfill_id}")
    assert page.status_code == 200 and "3 / 3 wants" in page.text and "raw_events/{date}" in page.text
    assert 'http-equiv="refresh"' not in page.text  # finished: the page stops reloading
    bad = api.post(
        "/api/backfills", json={"pattern": "raw_events/{date}", "start": "2024-03-02", "end": "2024-03-01"}
    )
    assert bad.status_code in (400, 422) and "before it starts" in bad.text
    assert len(stack.bel.events.query(limit=10_000)) == events


async def test_bad_backfills_are_refused_before_anything_is_recorded(make_stack) -> None:
    stack = await make_stack(graph="examples.demo:graph", worker=False)
    cases = (
        (["raw_events/{date}", "--from", "2024-02-03", "--to", "2024-02-01"], "before it starts"),
        (
            ["raw_events/{date}", "--from", "2024-02-01", "--to", "2024-02-03", "--step", "90m"],
            "whole number",
        ),
        (["nope/{date}", "--from", "2024-02-01", "--to", "2024-02-03"], "not an output pattern"),
        (["raw_events/{date}", "--from", "soon", "--to", "2024-02-03"], "soon"),
    )
    # Each command in a process of its own, forked from one that imported the CLI once.
    results = await cli_batch(stack, *(["backfill", *args] for args, _ in cases))
    for (args, reason), refused in zip(cases, results, strict=True):
        assert refused.returncode == 2 and reason in refused.stderr, (args, refused.stderr)
    assert stack.bel.events.query(limit=10) == []


async def test_cancelling_a_backfill_cancels_its_wants_and_stops_their_builds(
    make_stack, monkeypatch
) -> None:
    monkeypatch.setattr(graphs, "SLOW_SECONDS", 60.0)  # far longer than the cancellation takes
    stack = await make_stack(graph="tests.graphs:slow")
    request = BackfillRequest(pattern="slow/{n}", start=datetime(2024, 2, 1), end=datetime(2024, 2, 3))
    progress = await stack.db.backfill(request)
    assert progress.registered == 3
    await until(lambda: any(r.state is JobRunState.running for r in stack.bel.job_runs.query()), seconds=60)

    cancelled = await cli(stack, "cancel", progress.backfill_id, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["wants_cancelled"] == 3
    await until(lambda: stack.bel.backfills.progress(progress.backfill_id).finished, seconds=60)
    after = stack.bel.backfills.progress(progress.backfill_id)
    assert after.by_state == {WantState.canceled: 3}
    # Nobody else needed their builds: each stopped (abandoned), and nothing became live.
    await until(lambda: all(r.state.is_final for r in stack.bel.job_runs.query()), seconds=60)
    assert all(r.state is JobRunState.cancelled for r in stack.bel.job_runs.query())
    assert stack.bel.partitions.query(status=PartitionStatus.live) == []

    want_id = stack.bel.wants.query(limit=1)[0].want_id
    again, unknown = await cli_batch(stack, ["cancel", want_id], ["cancel", "w-nothing"])
    assert again.returncode == 0 and "had already ended (canceled)" in again.stdout
    assert unknown.returncode == 2 and "no want" in unknown.stderr


async def test_a_paused_backfill_decides_nothing_new_until_resumed(make_stack, spark_runtime) -> None:
    stack = await make_stack(graph="tests.graphs:late")
    request = BackfillRequest(pattern="report/{date}", start=datetime(2024, 3, 1), end=datetime(2024, 3, 2))
    progress = await stack.db.backfill(request)
    days = ["2024-03-01", "2024-03-02"]
    for day in days:  # each report dep-missed on its feed; a derivative want waits for the feed
        await until(lambda day=day: waiting_for_feed(stack.db, f"feed/{day}"))

    paused = await cli(stack, "pause", progress.backfill_id, "--json")
    assert paused.returncode == 0 and BackfillProgress.model_validate(json.loads(paused.stdout)).paused
    for day in days:  # the feeds arrive: the reports could run now, but their backfill is paused
        spark_runtime.session().range(2).write.parquet(str(lake(stack.settings) / "feed" / day))
        await stack.db.publish(f"feed/{day}")
    # Each report heard its feed is live, came to its next step, and holds there.
    await until_held_by_pause(stack.db, stack.bel.wants.query(ref_prefix="report/"))
    reports = [r for r in stack.bel.job_runs.query(limit=100) if r.job_label == "report"]
    assert {r.state for r in reports} == {JobRunState.dep_miss}  # no new run while paused
    assert stack.bel.backfills.progress(progress.backfill_id).done == 0

    resumed = await cli(stack, "resume", progress.backfill_id, "--json")
    assert resumed.returncode == 0 and not BackfillProgress.model_validate(json.loads(resumed.stdout)).paused
    await until(lambda: stack.bel.backfills.progress(progress.backfill_id).finished, seconds=60)
    assert stack.bel.backfills.progress(progress.backfill_id).by_state == {WantState.successful: 2}


FEED = pa.table({"id": pa.array([0, 1, 2], pa.int64())})


async def publish_feed(stack: Stack, day: str) -> None:
    """An external feed arrives: its data (written by another tool, no Spark job), then its announcement."""
    folder = lake(stack.settings) / "feed" / day
    folder.mkdir(parents=True)
    pq.write_table(FEED, folder / "part-00000.parquet")
    await stack.db.publish(f"feed/{day}")


async def reports_waiting_for_feeds(stack: Stack, first: datetime, days: int) -> BackfillProgress:
    """A backfill of report/{day}: each report derives a want for its daily/{day}, which derives one for
    its feed, which waits for the feed."""
    request = BackfillRequest(pattern="report/{day}", start=first, end=first + timedelta(days=days - 1))
    progress = await stack.db.backfill(request)
    for day in range(days):
        ref = f"feed/{first + timedelta(days=day):%Y-%m-%d}"
        await until(lambda ref=ref: waiting_for_feed(stack.db, ref))
    return progress


def started_after(runs: list[JobRun], moment: datetime) -> list[JobRun]:
    return [r for r in runs if r.started_at is not None and r.started_at >= moment]


async def test_a_cancel_reaches_the_derivative_wants_and_no_run_of_theirs_starts_after_it(make_stack) -> None:
    # A long batch window: the cancel lands while the daily runs wait for members, before they start.
    stack = await make_stack(graph="tests.graphs:reach", batch_window=timedelta(seconds=8))
    progress = await reports_waiting_for_feeds(stack, datetime(2024, 5, 1), 6)
    published = {f"feed/2024-05-0{day}" for day in range(1, 5)}
    for ref in sorted(published):  # four feeds arrive (their daily wants queue a batch run); two never do
        await publish_feed(stack, ref.removeprefix("feed/"))
    await until(
        lambda: sum(w.state is WantState.successful for w in stack.bel.wants.query(ref_prefix="feed/")) == 4
    )
    await until(lambda: any(r.job_label == "reach_daily" for r in stack.bel.job_runs.query(limit=100)))

    await stack.db.cancel_backfill(progress.backfill_id)
    returned = datetime.now(UTC)

    # Every want of the tree has ended at once: the reports, their daily wants and the feeds still awaited.
    wants = stack.bel.wants.query(limit=100)
    assert len(wants) == 18 and all(w.state.is_final for w in wants)
    assert {w.ref: w.state for w in wants} == {
        w.ref: WantState.successful if w.ref in published else WantState.canceled for w in wants
    }
    assert stack.bel.backfills.progress(progress.backfill_id).canceled
    await until(lambda: all(r.state.is_final for r in stack.bel.job_runs.query(limit=100)), seconds=60)
    runs = stack.bel.job_runs.query(limit=100)
    assert {r.job_label for r in runs} == {"reach_daily"} and started_after(runs, returned) == []
    assert all(r.state is JobRunState.cancelled for r in runs)
    assert {p.ref for p in stack.bel.partitions.query(status=PartitionStatus.live, limit=100)} == published


async def test_a_derivative_another_want_needs_goes_on_when_the_backfill_is_cancelled(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:reach")
    progress = await reports_waiting_for_feeds(stack, datetime(2024, 6, 1), 2)
    # An interactive want for the first report needs the same daily/2024-06-01: the same derivative want.
    interactive = await stack.db.want("report/2024-06-01", data_timestamp=datetime(2024, 6, 1, tzinfo=UTC))
    await until(lambda: bool(stack.bel.wants.derivatives_of([interactive.want_id])))

    await stack.db.cancel_backfill(progress.backfill_id)

    derivative, waiting, canceled = WantSource.derivative, WantState.upstream_building, WantState.canceled
    assert {(w.ref, w.source): w.state for w in stack.bel.wants.query(limit=100)} == {
        ("report/2024-06-01", WantSource.cli): waiting,  # the interactive want, and what it needs, go on
        ("daily/2024-06-01", derivative): waiting,
        ("feed/2024-06-01", derivative): waiting,
        ("report/2024-06-01", WantSource.backfill): canceled,
        ("report/2024-06-02", WantSource.backfill): canceled,
        ("daily/2024-06-02", derivative): canceled,
        ("feed/2024-06-02", derivative): canceled,
    }
    await publish_feed(stack, "2024-06-01")
    assert (await stack.db.wait(interactive)).state is WantState.successful
    assert stack.bel.backfills.progress(progress.backfill_id).by_state == {WantState.canceled: 2}


async def test_a_want_that_comes_to_need_a_derivative_of_a_cancelled_backfill_opens_it_again(
    make_stack,
) -> None:
    """The interactive want comes after the cancel, so the cancel reached the derivatives it will need:
    they were cancelled with the backfill, not broken, and the want opens them again instead of failing."""
    stack = await make_stack(graph="tests.graphs:reach")
    progress = await reports_waiting_for_feeds(stack, datetime(2024, 7, 1), 1)
    await stack.db.cancel_backfill(progress.backfill_id)
    await until(
        lambda: all(w.state is WantState.canceled for w in stack.bel.wants.query(limit=100)), "all cancelled"
    )
    cancelled = {w.want_id for w in stack.bel.wants.query(limit=100) if w.source is WantSource.derivative}

    interactive = await stack.db.want("report/2024-07-01", data_timestamp=datetime(2024, 7, 1, tzinfo=UTC))
    await until(lambda: waiting_for_feed(stack.db, "feed/2024-07-01"), "the feed's want waiting again")
    await publish_feed(stack, "2024-07-01")
    assert (await stack.db.wait(interactive)).state is WantState.successful
    retried = {e.want_id for e in stack.bel.events.query(limit=1000) if e.type == "WantRetried"}
    assert retried == cancelled  # daily/2024-07-01 and feed/2024-07-01, each opened again once needed
    assert stack.bel.backfills.progress(progress.backfill_id).by_state == {WantState.canceled: 1}


async def test_a_pause_holds_the_derivative_wants_only_the_backfill_needs(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:reach")
    progress = await reports_waiting_for_feeds(stack, datetime(2024, 8, 1), 2)

    assert (await stack.db.pause_backfill(progress.backfill_id)).paused
    for day in (
        "2024-08-01",
        "2024-08-02",
    ):  # the daily wants could build now, but only the backfill needs them
        await publish_feed(stack, day)
    await until(
        lambda: sum(w.state is WantState.successful for w in stack.bel.wants.query(ref_prefix="feed/")) == 2
    )
    # Each daily want heard its feed is live, came to its next step, and holds there.
    await until_held_by_pause(stack.db, stack.bel.wants.query(ref_prefix="daily/"))
    assert stack.bel.job_runs.query(limit=100) == []

    await stack.db.pause_backfill(progress.backfill_id, paused=False)
    await until(lambda: stack.bel.backfills.progress(progress.backfill_id).finished, seconds=90)
    assert stack.bel.backfills.progress(progress.backfill_id).by_state == {WantState.successful: 2}


def registered(stack: Stack, backfill_id: str) -> int:
    try:
        return stack.bel.backfills.progress(backfill_id).registered
    except NotFoundError:
        return 0


TICKS = BackfillRequest(  # 200 hourly partitions of a trivial job
    pattern="tick/{n}", start=datetime(2024, 7, 1), end=datetime(2024, 7, 9, 7), step=timedelta(hours=1)
)


@pytest.mark.parametrize("action", ["cancel", "pause"])
async def test_a_backfill_cancelled_or_paused_while_it_registers_holds_the_rest_too(
    make_stack, monkeypatch, action: str
) -> None:
    monkeypatch.setattr(client_module, "BACKFILL_CHUNK", 20)
    stack = await make_stack(graph="tests.graphs:reach")
    backfill_id = TICKS.backfill_id
    acted = asyncio.Event()

    async def hold_after_the_first_chunk(done: int) -> None:
        if done == 20:  # the rest is registered after the cancel or pause
            await acted.wait()

    registering = asyncio.create_task(stack.db.backfill(TICKS, on_registered=hold_after_the_first_chunk))
    await until(lambda: registered(stack, backfill_id) >= 20, seconds=60)

    if action == "cancel":
        await stack.db.cancel_backfill(backfill_id)
    else:
        await stack.db.pause_backfill(backfill_id)
    returned = datetime.now(UTC)
    acted.set()
    progress = await registering
    assert progress.registered == progress.partitions == 200

    if action == "cancel":  # every want has ended: those registered after the cancel, cancelled
        assert progress.canceled and progress.finished
        assert progress.by_state[WantState.canceled] >= 200 - len(stack.bel.job_runs.query(limit=1000))
    else:  # the wants registered after the pause wait for the window, which holds them
        assert progress.paused and not progress.finished
        # The window starts none of the wants registered after the pause; every want it had started
        # with no run decides and holds.
        unstarted = stack.bel.backfills.unstarted(backfill_id)
        assert len(unstarted) >= 200 - 20
        idle = [
            w
            for w in stack.bel.wants.query(limit=1000)
            if w.job_run_id is None and not w.state.is_final and w.want_id not in unstarted
        ]
        await until_held_by_pause(stack.db, idle, seconds=120)
    # No want (registered before or after) queued a run after the cancel or pause returned.
    assert [r for r in stack.bel.job_runs.query(limit=1000) if r.created_at >= returned] == []
    if action == "cancel":  # nor did one start: those queued and not started ended with their wants
        await until(lambda: all(r.state.is_final for r in stack.bel.job_runs.query(limit=1000)), seconds=60)
        assert started_after(stack.bel.job_runs.query(limit=1000), returned) == []


async def test_a_cancelled_backfill_retried_opens_its_wants_again_and_finishes(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:reach")
    progress = await reports_waiting_for_feeds(stack, datetime(2024, 9, 1), 2)
    await stack.db.cancel_backfill(progress.backfill_id)
    assert {w.state for w in stack.bel.wants.query(limit=100)} == {WantState.canceled}

    # Every want opens again, the derivative wants below the backfill's too, and waits for its feed.
    retried = await stack.db.retry_backfill(progress.backfill_id)
    assert (retried.reopened, retried.fail_locked) == (2, [])
    for day in ("2024-09-01", "2024-09-02"):
        await until(lambda day=day: waiting_for_feed(stack.db, f"feed/{day}"))
    assert len(stack.bel.wants.query(limit=100)) == 6
    assert stack.bel.backfills.progress(progress.backfill_id).canceled is False
    # Asking for the backfill again cancels nothing: it is no longer cancelled.
    again = await stack.db.backfill(progress.request)
    assert WantState.canceled not in again.by_state

    for day in ("2024-09-01", "2024-09-02"):
        await publish_feed(stack, day)
    await until(lambda: stack.bel.backfills.progress(progress.backfill_id).finished, seconds=90)
    assert stack.bel.backfills.progress(progress.backfill_id).by_state == {WantState.successful: 2}
    # Nothing left to retry; the CLI says so.
    shown = await cli(stack, "retry", progress.backfill_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {"backfill_id": progress.backfill_id, "reopened": 0, "fail_locked": []}
