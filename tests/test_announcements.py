"""Announcements are accepted only for refs the receiving graph declares external and, through an
upstream subscription, only within its patterns; anything else is refused with the reason and
recorded nowhere. One test per path: pull, push signal, HTTP, CLI and SDK. The downstream graph is
`tests.graphs:late`: `feed/{date}` is external, `report/{date}` is built by its job `report`."""

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from temporalio.service import RPCError, RPCStatusCode

from databuild.bel import BuildEventLog
from databuild.errors import AnnouncementRefusedError
from databuild.models import EventFilter, EventPage
from databuild.temporal.protocol import (
    QUERY_UPSTREAM_STATUS,
    Announcement,
    UpstreamInput,
    UpstreamStatus,
    upstream_workflow_id,
)
from databuild.temporal.wants import announce, start_upstream
from databuild.testing import free_port
from databuild.web import create_app, serving, web_context
from tests.conftest import Stack, cli
from tests.helpers import until

pytestmark = pytest.mark.slow

JOB_OUTPUT = "report/2024-05-01"  # built downstream by its job `report`
OUT_OF_PATTERN = "feed/2024-06-01"  # external downstream, but not what the subscription follows
ALLOWED = "feed/2024-05-01"
PATTERNS = ["feed/2024-05-*"]


def live_events(stack: Stack, after: int = 0) -> list[str]:
    page = stack.bel.events.page(after, 1000, EventFilter(types=["PartitionLive"]))
    return [e.ref or "" for e in page.events]


@asynccontextmanager
async def ignoring_patterns(bel: BuildEventLog) -> AsyncIterator[str]:
    """An upstream events API that sends every live partition, whatever patterns it is asked for."""
    app = FastAPI()

    @app.get("/api/events")
    def events(since_idx: int = 0, limit: int = 100) -> EventPage:
        return bel.events.page(since_idx, limit, EventFilter(types=["PartitionLive"]))

    async with serving(app, "127.0.0.1", free_port()) as base:
        yield base


async def test_pull_skips_what_the_subscription_may_not_announce(make_stack, tmp_path: Path) -> None:
    upstream = BuildEventLog.create(f"sqlite:///{tmp_path / 'up.sqlite'}")
    for ref in (JOB_OUTPUT, OUT_OF_PATTERN, ALLOWED):  # the refused ones first: they must not stall
        upstream.partitions.publish_external(ref, str(uuid.uuid4()))
    down = await make_stack(graph="tests.graphs:late")
    handle = down.client.get_workflow_handle(upstream_workflow_id(down.settings.task_queue, "up"))
    try:
        async with ignoring_patterns(upstream) as url:
            sync = UpstreamInput(
                name="up", url=url, patterns=PATTERNS, poll_every=timedelta(milliseconds=300)
            )
            await start_upstream(down.client, down.settings.task_queue, sync)
            await until(lambda: down.bel.partitions.find(ALLOWED) is not None)
            # The workflow hears how a page went after the activity that applied it: the partition can be
            # there before the status says so (a query in between saw 0, 0, 0 once in CI).
            statuses: list[UpstreamStatus] = []

            async def caught_up() -> bool:
                statuses.append(await handle.query(QUERY_UPSTREAM_STATUS, result_type=UpstreamStatus))
                return statuses[-1].cursor >= upstream.events.last_idx()

            await until(caught_up, "the subscription's status reaching the upstream's last event")
            status = statuses[-1]
        assert live_events(down) == [ALLOWED]
        assert down.bel.partitions.find(JOB_OUTPUT) is None
        assert down.bel.partitions.find(OUT_OF_PATTERN) is None
        assert (status.applied, status.refused, status.cursor) == (1, 2, upstream.events.last_idx())
    finally:
        await handle.terminate("test over")
        upstream.dispose()


async def test_push_signal_applies_only_what_the_subscription_may_announce(make_stack) -> None:
    down = await make_stack(graph="tests.graphs:late")
    queue = down.settings.task_queue
    await start_upstream(down.client, queue, UpstreamInput(name="up", patterns=PATTERNS))
    handle = down.client.get_workflow_handle(upstream_workflow_id(queue, "up"))
    try:
        for ref in (JOB_OUTPUT, OUT_OF_PATTERN, ALLOWED):  # applied in order: the refused ones first
            await announce(
                down.client, queue, Announcement(ref=ref, instance_id=str(uuid.uuid4()), graph="up")
            )
        await until(lambda: down.bel.partitions.find(ALLOWED) is not None)
        assert live_events(down) == [ALLOWED]
        assert down.bel.partitions.find(JOB_OUTPUT) is None
        assert down.bel.partitions.find(OUT_OF_PATTERN) is None
    finally:
        await handle.terminate("test over")

    # A sender that has the receiving graph is refused before anything is signalled or started.
    before = down.bel.events.last_idx()
    with pytest.raises(AnnouncementRefusedError, match="built here by job 'report'"):
        await announce(down.client, queue, Announcement(ref=JOB_OUTPUT, graph="other"), graph=down.graph)
    with pytest.raises(RPCError) as missing:
        await down.client.get_workflow_handle(upstream_workflow_id(queue, "other")).describe()
    assert missing.value.status is RPCStatusCode.NOT_FOUND
    assert down.bel.events.last_idx() == before


async def test_http_refuses_what_the_graph_builds_or_does_not_know(make_stack) -> None:
    down = await make_stack(graph="tests.graphs:late", worker=False, api_tokens=SecretStr("up=" + "t" * 20))
    auth = {"authorization": "Bearer " + "t" * 20}
    app = create_app(web_context(down.settings, down.bel))
    async with serving(app, "127.0.0.1", free_port()) as base, httpx.AsyncClient(headers=auth) as client:
        refused = {
            ref: await client.post(f"{base}/api/partitions/{ref}/available", json={"graph": "up"})
            for ref in (JOB_OUTPUT, "orders/2024-05-01")
        }
        assert down.bel.events.last_idx() == 0
        allowed = await client.post(f"{base}/api/partitions/{ALLOWED}/available", json={"graph": "up"})
    assert {ref: r.status_code for ref, r in refused.items()} == {JOB_OUTPUT: 400, "orders/2024-05-01": 400}
    assert refused[JOB_OUTPUT].json() == {
        "error": "report/2024-05-01 is built here by job 'report', so it cannot be announced; only refs "
        "graph 'late' declares external (feed/{date}) can",
        "type": "AnnouncementRefusedError",
    }
    assert "no job builds it" in refused["orders/2024-05-01"].json()["error"]
    assert allowed.status_code == 200 and allowed.json()["newly_live"] is True
    assert live_events(down) == [ALLOWED]


async def test_cli_and_sdk_refuse_a_job_output(make_stack) -> None:
    down = await make_stack(graph="tests.graphs:late", worker=False)
    published = await cli(down, "publish", JOB_OUTPUT, "--graph", "up")
    assert published.returncode == 2, published.stdout
    [line] = published.stderr.strip().splitlines()
    assert "report/2024-05-01 is built here by job 'report', so it cannot be announced" in line
    with pytest.raises(AnnouncementRefusedError, match="built here by job 'report'"):
        await down.db.publish(JOB_OUTPUT)
    with pytest.raises(AnnouncementRefusedError, match="outside the patterns"):
        await down.db.publish(OUT_OF_PATTERN, patterns=PATTERNS)
    assert down.bel.events.last_idx() == 0 and down.bel.partitions.find(JOB_OUTPUT) is None

    assert (await cli(down, "publish", ALLOWED)).returncode == 0
    await down.db.publish(OUT_OF_PATTERN)  # no subscription's patterns: any external ref
    assert live_events(down) == [ALLOWED, OUT_OF_PATTERN]
