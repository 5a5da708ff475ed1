"""Bad input gets a clear error naming the problem, and nothing is recorded (SDK and CLI)."""

from datetime import timedelta

import pytest

from databuild.errors import InvalidInputError
from tests.conftest import cli_batch

CASES = [
    (["want", "daily_users//2024-01-01"], "empty segment"),
    (["want", "daily_users/../etc"], "'..' segment"),
    (["want", "daily_users/2024 01 01"], "illegal character"),
    (["want", "x" * 600], "600 characters long"),
    (["want", "no_such_job/2024-01-01"], "no job in graph 'demo' produces 'no_such_job/2024-01-01'"),
    (["want", "daily_users/2024-01-01", "--sla", "-2h"], "negative"),
    (["want", "daily_users/2024-01-01", "--ttl", "soon"], "cannot read duration 'soon'"),
    (["want", "daily_users/2024-01-01", "--ttl", "30d"], "TTL of this want ended"),
    (["want", "daily_users/2024-01-01", "--ttl", "999999999999d"], "durations are at most 36500d"),
    (["want", "daily_users/9999-12-31", "--sla", "2d"], "data_timestamp + sla is after the year 9999"),
    (
        ["events", "--since", "99999999999999999999"],
        "'--since': Input should be less than or equal to 9223372036854775807",
    ),
    (
        ["wants", "list", "--offset", "99999999999999999999"],
        "'--offset': Input should be less than or equal to 92233",
    ),
    (["want", "daily_users/2024-01-01", "--data-timestamp", "yesterday"], "cannot read timestamp"),
    (
        ["want", "daily_users/2024-01-01", "--source", "derivative"],
        "derivative wants are created by DataBuild",
    ),
    (["wants", "show", "w-unknown"], "no want 'w-unknown'"),
    (["job-runs", "show", "jr-unknown"], "no job run 'jr-unknown'"),
    (["partitions", "show", "never/built"], "no partition 'never/built'"),
    (["gc", "--keep", "a week"], "cannot read duration 'a week'"),
    (["publish", "raw_events/2024-06-01"], "raw_events/2024-06-01 is built here by job 'raw_events'"),
    (
        ["want", "daily_users/2024-01-01", "--requires", "raw_events/2024-01-01"],
        "the want cannot require raw_events/2024-01-01: raw_events/2024-01-01 is built here",
    ),
]


async def test_cli_rejects_bad_input_and_records_nothing(make_stack) -> None:
    stack = await make_stack(worker=False)
    # Each command in a process of its own, forked from one that imported the CLI once.
    results = await cli_batch(stack, *(args for args, _ in CASES))
    for (args, message), result in zip(CASES, results, strict=True):
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert message in " ".join(result.stderr.split()), (args, result.stderr)
    assert stack.bel.events.last_idx() == 0
    started = [w async for w in stack.client.list_workflows(f'TaskQueue = "{stack.settings.task_queue}"')]
    assert started == []


async def test_sdk_rejects_bad_input_and_records_nothing(make_stack) -> None:
    stack = await make_stack(worker=False)
    bad = [
        ("a/../b", {}),
        ("no_such_job/1", {}),
        ("daily_users/2024-01-01", {"sla": timedelta(hours=-1)}),
        ("daily_users/2024-01-01", {"ttl": timedelta(days=1)}),
        ("daily_users/9999-12-31", {"ttl": timedelta(days=2)}),  # a deadline past datetime's range
    ]
    for ref, options in bad:
        with pytest.raises(InvalidInputError):
            await stack.db.want(ref, **options)  # type: ignore[arg-type]
    assert stack.bel.events.last_idx() == 0


async def test_cli_json_output(make_stack) -> None:
    import json

    stack = await make_stack(graph="tests.graphs:late")
    # One after the other, each in a process of its own (forked from one that imported the CLI once).
    want, listed, published, shown, events = await cli_batch(
        stack,
        ["want", "feed/json", "--json"],
        ["wants", "list", "--json"],
        ["publish", "feed/json", "--json"],
        ["want", "feed/json", "--wait", "--json"],
        ["events", "--pattern", "feed/*", "--json"],
    )
    assert want.returncode == 0, want.stderr
    registered = json.loads(want.stdout)
    assert registered["want_id"].startswith("w-")
    page = json.loads(listed.stdout)
    assert [w["want_id"] for w in page["data"]] == [registered["want_id"]]
    assert page["page"]["next_offset"] is None
    publish = json.loads(published.stdout)
    assert publish["newly_live"] is True and publish["partition"]["status"] == "live"
    assert shown.returncode == 0, shown.stderr
    tree = json.loads(shown.stdout)  # the fulfillment view, {data, index}
    assert tree["index"]["wants"][tree["data"]["want_id"]]["state"] == "successful"
    found = json.loads(events.stdout)
    assert {e["type"] for e in found["events"]} >= {"WantCreated", "PartitionLive"}
    assert found["next_since_idx"] == found["last_idx"] == stack.bel.events.last_idx()
