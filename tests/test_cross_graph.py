"""Two graphs on one machine: two BELs, two task queues on one Temporal dev server, two HTTP servers
on loopback, one shared data lake. A downstream want blocked on an upstream partition is fulfilled by
pull (a durable subscription that survives the upstream's HTTP server going away) and by push."""

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio.client import WorkflowHandle

from databuild.errors import InvalidInputError
from databuild.models import EventFilter, JobRunState, WantState, want_workflow_id
from databuild.temporal.protocol import (
    QUERY_PROGRESS,
    QUERY_UPSTREAM_STATUS,
    Announcement,
    UpstreamInput,
    UpstreamStatus,
    WantProgress,
    upstream_workflow_id,
)
from databuild.temporal.wants import announce, start_upstream
from databuild.testing import free_port
from tests.conftest import Stack, cli
from tests.helpers import TOKEN, http_server, until
from worker.run import running_worker

pytestmark = pytest.mark.slow


def announced(stack: Stack) -> list[str]:
    """Refs recorded live from outside, one entry per PartitionLive event."""
    page = stack.bel.events.page(0, 1000, EventFilter(types=["PartitionLive"], patterns=["feed/*"]))
    return sorted(e.ref or "" for e in page.events)


def waiting_external(stack: Stack, ref: str) -> bool:
    return any(
        w.ref == ref and w.state is WantState.upstream_building for w in stack.bel.wants.query(ref_prefix=ref)
    )


async def test_pull_from_an_upstream_graph_survives_restarts(make_stack, tmp_path: Path) -> None:
    """The downstream worker is replaced, and the upstream's HTTP server goes away and comes back:
    the subscription resumes from its cursor; nothing is missed or applied twice."""
    lake = tmp_path / "lake"
    up = await make_stack(
        graph="tests.graphs:feeds", storage_root=lake, api_tokens=SecretStr(f"down={TOKEN}")
    )
    down = await make_stack(
        graph="tests.graphs:late", storage_root=lake, upstream_tokens=SecretStr(f"up={TOKEN}"), worker=False
    )
    port = free_port()
    subscription = UpstreamInput(
        name="up",
        url=f"http://127.0.0.1:{port}",
        patterns=["feed/*"],
        poll_every=timedelta(milliseconds=300),
        steps_per_run=2,  # continue-as-new every 2 pulls, so the test crosses several runs
    )
    async with running_worker(down.parts), http_server(up, port):
        await start_upstream(down.client, down.settings.task_queue, subscription)
        first = await down.db.want("report/2024-01-01")
        await until(lambda: waiting_external(down, "feed/2024-01-01"))  # blocked, not building it
        built = await up.db.wait(await up.db.want("feed/2024-01-01"))
        assert built.state is WantState.successful
        report = await asyncio.wait_for(down.db.wait(first), 60)
        assert report.state is WantState.successful, report.reason
        # The upstream instance keeps its UUID here: lineage crosses the graphs.
        assert (
            down.bel.partitions.get("feed/2024-01-01").instance_id
            == up.bel.partitions.get("feed/2024-01-01").instance_id
        )
        second = await down.db.want("report/2024-01-02")
        await until(lambda: waiting_external(down, "feed/2024-01-02"))

    # The downstream worker is gone; the upstream builds the next partition while its HTTP server is
    # down too. Then a new worker starts, and later the server comes back on the same port.
    await up.db.wait(await up.db.want("feed/2024-01-02"))
    async with running_worker(down.parts):
        handle = down.client.get_workflow_handle(upstream_workflow_id(down.settings.task_queue, "up"))
        await until(lambda: pull_failed(handle), "a pull that failed and backs off")
        assert down.bel.partitions.find("feed/2024-01-02") is None
        async with http_server(up, port):
            report = await asyncio.wait_for(down.db.wait(second), 90)
        assert report.state is WantState.successful, report.reason
        assert announced(down) == ["feed/2024-01-01", "feed/2024-01-02"]  # nothing missed, nothing twice
        handle = down.client.get_workflow_handle(upstream_workflow_id(down.settings.task_queue, "up"))
        status = await handle.query(QUERY_UPSTREAM_STATUS, result_type=UpstreamStatus)
        last = up.bel.events.page(
            0, 1, EventFilter(refs=["feed/2024-01-02"], types=["PartitionLive"])
        ).events[0]
        assert status.applied == 2 and status.cursor >= last.idx
        described = (await handle.describe()).raw_description.workflow_execution_info
        assert described.first_run_id != described.execution.run_id  # it continued as new, cursor kept
        listed = await cli(down, "upstream", "list", "--json")
        assert '"name": "up"' in listed.stdout, listed.stderr
        removed = await cli(down, "upstream", "remove", "up")
        assert removed.returncode == 0, removed.stderr


async def test_push_by_signal_http_and_cli_takes_one_path(make_stack, tmp_path: Path, spark_runtime) -> None:
    lake = tmp_path / "lake"
    down = await make_stack(graph="tests.graphs:late", storage_root=lake, api_tokens=SecretStr(f"up={TOKEN}"))
    days = ["2024-02-01", "2024-02-02", "2024-02-03"]
    for day in days:  # the upstream graph wrote these to the shared lake
        spark_runtime.session().range(2).write.parquet(str(lake / "feed" / day))
    specs = [await down.db.want(f"report/{day}") for day in days]
    for day in days:
        await until(lambda day=day: waiting_external(down, f"feed/{day}"))

    # 1. A typed Temporal signal (signal-with-start on upstream:up), sent twice.
    sent = Announcement(ref=f"feed/{days[0]}", instance_id=str(uuid.uuid4()), graph="up")
    await announce(down.client, down.settings.task_queue, sent)
    await announce(down.client, down.settings.task_queue, sent)
    assert (await asyncio.wait_for(down.db.wait(specs[0]), 60)).state is WantState.successful

    # 2. HTTP, with the upstream's token, twice.
    async with http_server(down, free_port()) as base, httpx.AsyncClient() as client:
        body = {"instance_id": str(uuid.uuid4()), "graph": "up"}
        url = f"{base}/api/partitions/feed/{days[1]}/available"
        refused = await client.post(url, json=body)
        assert refused.status_code == 401
        auth = {"authorization": f"Bearer {TOKEN}"}
        answers = [(await client.post(url, json=body, headers=auth)).json() for _ in range(2)]
    assert [a["newly_live"] for a in answers] == [True, False]
    assert (await asyncio.wait_for(down.db.wait(specs[1]), 60)).state is WantState.successful

    # 3. The CLI, twice.
    instance = str(uuid.uuid4())
    for _ in range(2):
        published = await cli(down, "publish", f"feed/{days[2]}", "--instance-id", instance, "--graph", "up")
        assert published.returncode == 0, published.stderr
    assert (await asyncio.wait_for(down.db.wait(specs[2]), 60)).state is WantState.successful

    assert announced(down) == [f"feed/{day}" for day in days]  # each announcement applied once
    assert down.bel.partitions.get(f"feed/{days[0]}").instance_id == sent.instance_id
    await down.client.get_workflow_handle(upstream_workflow_id(down.settings.task_queue, "up")).terminate(
        "test over"
    )


async def pull_failed(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the upstream's pull is being retried after a failure (its server is down)."""
    pending = (await handle.describe()).raw_description.pending_activities
    return any(a.attempt > 1 and a.HasField("last_failure") for a in pending)


async def test_a_want_with_external_requirements_waits_before_its_job_runs(make_stack) -> None:
    stack = await make_stack(graph="tests.graphs:chain")
    before = stack.bel.events.last_idx()
    with pytest.raises(InvalidInputError, match=r"'\.\.' segment"):
        await stack.db.want("base/req", requires=["gate/../x"])
    assert stack.bel.events.last_idx() == before  # a bad requirement records nothing

    spec = await stack.db.want("base/req", requires=["gate/2024-03-01", "gate/2024-03-02"])
    want = stack.client.get_workflow_handle(want_workflow_id(spec.ref, spec.want_id))

    async def waiting_for(refs: list[str]) -> bool:
        return (await want.query(QUERY_PROGRESS, result_type=WantProgress)).waiting_for == refs

    await until(lambda: waiting_for(["gate/2024-03-01", "gate/2024-03-02"]), "the want held for its gates")
    assert stack.bel.job_runs.query(ref_prefix="base/req") == []  # held back: nothing dispatched
    await stack.db.publish("gate/2024-03-01")
    await until(lambda: waiting_for(["gate/2024-03-02"]), "the want heard of one gate, still held")
    assert stack.bel.job_runs.query(ref_prefix="base/req") == []  # one of two is not enough
    await stack.db.publish("gate/2024-03-02", source="upstream-b")
    done = await asyncio.wait_for(stack.db.wait(spec), 60)
    assert done.state is WantState.successful, done.reason
    [run] = stack.bel.job_runs.query(ref_prefix="base/req")
    assert run.state is JobRunState.succeeded
