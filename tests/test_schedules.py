"""Scheduled wants on the dev server (the time-skipping server has no Schedules)."""

import asyncio
import json
from datetime import UTC, datetime

import pytest
from temporalio.client import WorkflowExecutionStatus

from databuild.models import WantSource
from databuild.temporal.protocol import SCHEDULED_WANT_WORKFLOW
from tests.conftest import Stack, cli, cli_batch

pytestmark = pytest.mark.slow

PATTERN = "feed/{date}"
DAYS = [datetime(2024, 1, d, tzinfo=UTC) for d in (1, 2, 3)]


def scheduled(stack: Stack) -> list[tuple[str, datetime]]:
    wants = stack.bel.wants.query(ref_prefix="feed/", limit=100)
    return sorted((w.ref, w.data_timestamp) for w in wants if w.source is WantSource.schedule)


async def runs_done(stack: Stack, count: int) -> None:
    query = f"WorkflowType = '{SCHEDULED_WANT_WORKFLOW}' AND TaskQueue = '{stack.settings.task_queue}'"
    for _ in range(300):
        done = [
            w
            async for w in stack.client.list_workflows(query)
            if w.status == WorkflowExecutionStatus.COMPLETED
        ]
        if len(done) >= count:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"only {len(done)} of {count} scheduled runs completed")


async def test_a_backfill_of_three_days_registers_three_wants_once(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:late")
    refusals = [
        (["schedule", "add", "feed/daily", "--cron", "0 5 * * *"], "no time placeholder"),
        (["schedule", "add", "feed/{day}", "--cron", "0 5 * * *"], "unknown placeholder(s) day"),
        (["schedule", "add", "nope/{date}", "--cron", "0 5 * * *"], "no job in graph"),
        (
            ["schedule", "backfill", "other/{date}", "--from", "2024-01-01", "--to", "2024-01-02"],
            "no schedule",
        ),
    ]
    # One after the other, each in a process of its own (forked from one that imported the CLI once).
    *refused, added, again = await cli_batch(
        stack,
        *(args for args, _ in refusals),
        ["schedule", "add", PATTERN, "--cron", "0 0 * * *", "--ttl", "3650d", "--paused"],
        ["schedule", "add", PATTERN, "--cron", "0 0 * * *"],
    )
    for (args, message), bad in zip(refusals, refused, strict=True):
        assert bad.returncode == 2 and message in " ".join(bad.stderr.split()), (args, bad.stderr)

    assert added.returncode == 0, added.stderr
    assert again.returncode == 2 and "exists" in again.stderr

    window = ["--from", "2024-01-01T00:00:00", "--to", "2024-01-03T12:00:00"]
    backfill = await cli(stack, "schedule", "backfill", PATTERN, *window)
    assert backfill.returncode == 0, backfill.stderr
    await runs_done(stack, 3)
    expected = [(f"feed/{d:%Y-%m-%d}", d) for d in DAYS]
    assert scheduled(stack) == expected  # the data timestamp is the scheduled time

    repeat = await cli(stack, "schedule", "backfill", PATTERN, *window)
    assert repeat.returncode == 0, repeat.stderr
    await runs_done(stack, 6)
    assert scheduled(stack) == expected  # the same three wants, no more
    created = stack.bel.events.query(types=["WantCreated"], limit=100)
    assert len(created) == 3

    before, removed, after = await cli_batch(
        stack,
        ["schedule", "list", "--json"],
        ["schedule", "remove", PATTERN],
        ["schedule", "list", "--json"],
    )
    assert {"pattern": PATTERN, "cron": "0 0 * * *", "paused": True} in json.loads(before.stdout)
    assert removed.returncode == 0, removed.stderr
    assert all(s["pattern"] != PATTERN for s in json.loads(after.stdout))
