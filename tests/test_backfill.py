"""Backfills: one want per partition of a range, idempotently, through the CLI, the SDK and the API,
with progress by state; bad ranges are refused before anything is recorded."""

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from databuild.backfill import BackfillProgress, BackfillRequest, backfill_partitions
from databuild.errors import InvalidInputError
from databuild.graph import load_graph
from databuild.models import JobRunState, PartitionStatus, WantSource, WantState
from databuild.web import create_app, web_context
from tests import graphs
from tests.conftest import cli, cli_batch
from tests.helpers import lake, until, waiting_for_feed

pytestmark = pytest.mark.slow


def test_partitions_of_a_range_are_a_pure_function_of_the_request() -> None:
    graph = load_graph("examples.demo:graph")
    days = BackfillRequest(pattern="raw_events/{date}", start=datetime(2024, 2, 1), end=datetime(2024, 2, 3))
    assert backfill_partitions(days, graph) == [
        (f"raw_events/2024-02-0{d}", datetime(2024, 2, d, tzinfo=UTC)) for d in (1, 2, 3)
    ]
    hours = BackfillRequest(
        pattern="raw_events/{date}",
        start=datetime(2024, 2, 1, 22),
        end=datetime(2024, 2, 2, 1),
        step=timedelta(hours=1),
    )
    assert [ref for ref, _ in backfill_partitions(hours, graph)] == [
        "raw_events/2024-02-01T22",
        "raw_events/2024-02-01T23",
        "raw_events/2024-02-02T00",
        "raw_events/2024-02-02T01",
    ]
    assert days.backfill_id == BackfillRequest(**days.model_dump()).backfill_id != hours.backfill_id
    with pytest.raises(InvalidInputError, match="not an output pattern"):
        backfill_partitions(BackfillRequest(pattern="nope/{date}", start=days.start, end=days.end), graph)
    for bad, reason in (
        ({"end": datetime(2024, 1, 1)}, "before it starts"),
        ({"step": timedelta(minutes=90)}, "whole number of hours or days"),
        ({"end": datetime(2040, 1, 1), "step": timedelta(hours=1)}, "at most 100000"),
    ):
        with pytest.raises(ValueError, match=reason):
            BackfillRequest(**{**days.model_dump(), **bad})


async def test_a_backfill_builds_every_partition_once_and_asking_again_registers_nothing(make_stack) -> None:
    stack = await make_stack(graph="examples.demo:graph")
    args = ["backfill", "raw_events/{date}", "--from", "2024-02-01", "--to", "2024-02-03"]
    first = await cli(stack, *args, "--wait", "--json")
    assert first.returncode == 0, first.stderr
    progress = BackfillProgress.model_validate(json.loads(first.stdout))
    assert (progress.partitions, progress.registered, progress.finished) == (3, 3, True)
    assert progress.by_state == {WantState.successful: 3}
    wants = stack.bel.wants(limit=100)
    assert sorted(w.ref for w in wants) == [f"raw_events/2024-02-0{d}" for d in (1, 2, 3)]
    assert {w.source for w in wants} == {WantSource.backfill}

    events = len(stack.bel.events(limit=10_000))
    again = await cli(stack, *args, "--json")
    assert again.returncode == 0, again.stderr
    assert BackfillProgress.model_validate(json.loads(again.stdout)).finished
    assert len(stack.bel.events(limit=10_000)) == events  # nothing new recorded
    assert len(stack.bel.wants(limit=100)) == 3
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
    assert len(stack.bel.events(limit=10_000)) == events


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
    assert stack.bel.events(limit=10) == []


async def test_cancelling_a_backfill_cancels_its_wants_and_stops_their_builds(
    make_stack, monkeypatch
) -> None:
    monkeypatch.setattr(graphs, "SLOW_SECONDS", 60.0)  # far longer than the cancellation takes
    stack = await make_stack(graph="tests.graphs:slow")
    request = BackfillRequest(pattern="slow/{n}", start=datetime(2024, 2, 1), end=datetime(2024, 2, 3))
    progress = await stack.db.backfill(request)
    assert progress.registered == 3
    await until(lambda: any(r.state is JobRunState.running for r in stack.bel.job_runs()), seconds=60)

    cancelled = await cli(stack, "cancel", progress.backfill_id, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["wants_cancelled"] == 3
    await until(lambda: stack.bel.backfill_progress(progress.backfill_id).finished, seconds=60)
    after = stack.bel.backfill_progress(progress.backfill_id)
    assert after.by_state == {WantState.canceled: 3}
    # Nobody else needed their builds: each stopped (abandoned), and nothing became live.
    await until(lambda: all(r.state.is_final for r in stack.bel.job_runs()), seconds=60)
    assert all(r.state is JobRunState.cancelled for r in stack.bel.job_runs())
    assert stack.bel.partitions(status=PartitionStatus.live) == []

    want_id = stack.bel.wants(limit=1)[0].want_id
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
    await asyncio.sleep(3)
    reports = [r for r in stack.bel.job_runs(limit=100) if r.job_label == "report"]
    assert {r.state for r in reports} == {JobRunState.dep_miss}  # no new run while paused
    assert stack.bel.backfill_progress(progress.backfill_id).done == 0

    resumed = await cli(stack, "resume", progress.backfill_id, "--json")
    assert resumed.returncode == 0 and not BackfillProgress.model_validate(json.loads(resumed.stdout)).paused
    await until(lambda: stack.bel.backfill_progress(progress.backfill_id).finished, seconds=60)
    assert stack.bel.backfill_progress(progress.backfill_id).by_state == {WantState.successful: 2}
