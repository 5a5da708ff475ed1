"""Job attempt logs and instance facts on the real stack: what a job logs is kept per attempt (concurrent
attempts apart), failures keep their traceback, long logs keep both ends, the CLI, the API and the
dashboard show it; each written instance records its rows, size and schema, and a rebuild whose schema
differs is flagged. (The `submit` executor's logs and facts: tests/test_executors.py; the rules on their
own: tests/test_job_log_rules.py.)"""

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from rich.console import Console
from temporalio.testing import WorkflowEnvironment

from databuild.cli import render
from databuild.jobs.attempt_log import TRUNCATED
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.storage import Storage
from databuild.models import Want, WantState
from databuild.operations.garbage import collect_garbage
from databuild.views.lineage import partition_view
from databuild.views.logs import AttemptLogView, attempt_log
from databuild.web.app import create_app
from databuild.web.context import web_context
from tests.conftest import Stack, cli, running_stack
from tests.graphs import MEET, NOISY_LINES, SHAPES
from tests.helpers import instance_dir

MAX_BYTES = 8192


@pytest.fixture(scope="module")
async def logs_stack(
    temporal_env: WorkflowEnvironment, spark_runtime: SparkRuntime, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    home = tmp_path_factory.mktemp("logs")
    async with running_stack(
        temporal_env.client,
        spark_runtime,
        home,
        "tests.graphs:logs",
        job_attempts=1,
        job_log_max_bytes=MAX_BYTES,
    ) as stack:
        yield stack


@pytest.fixture
async def api(logs_stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(web_context(logs_stack.settings, logs_stack.bel))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
        yield client


async def build(stack: Stack, ref: str) -> Want:
    return await asyncio.wait_for(stack.db.wait(await stack.db.want(ref)), timeout=120)


def log_of(stack: Stack, want: Want) -> AttemptLogView:
    assert want.job_run_id is not None
    return attempt_log(stack.bel, Storage(stack.settings.storage_root), want.job_run_id)


async def test_concurrent_attempts_keep_their_own_logs(logs_stack: Stack) -> None:
    tag = uuid.uuid4().hex[:8]
    MEET[tag] = threading.Barrier(2)  # each line of one attempt is logged while the other logs too
    five, seven = await asyncio.gather(
        build(logs_stack, f"chatty/{tag}/5"), build(logs_stack, f"chatty/{tag}/7")
    )
    assert five.state is seven.state is WantState.successful, (five.reason, seven.reason)
    for want, n, other in ((five, "5", "7"), (seven, "7", "5")):
        log = log_of(logs_stack, want)
        assert (log.attempt, log.attempts, log.truncated) == (1, 1, False)
        text = log.text
        assert f"INFO databuild.job.chatty: chatty {n} starts" in text  # ctx.log
        for line in range(3):  # Python logging, from the job's thread
            assert f"WARNING tests.graphs.logs: chatty {n} line {line}" in text
        assert f"UserWarning: chatty {n} warns" in text  # warnings.warn
        assert f"wrote chatty/{tag}/{n}: {n} rows" in text
        assert f"chatty {other}" not in text, text


async def test_written_instances_record_rows_size_and_schema(logs_stack: Stack) -> None:
    tag = uuid.uuid4().hex[:8]
    ref = f"chatty/{tag}/6"
    assert (await build(logs_stack, ref)).state is WantState.successful
    partition = logs_stack.bel.partitions.get(ref)
    instance = logs_stack.bel.partitions.instance(partition.instance_id or "")
    facts = instance.facts
    assert facts is not None and not instance.schema_changed
    assert [(c.name, c.type) for c in facts.columns] == [("id", "bigint"), ("score", "double")]
    parquet = [
        f
        for f in instance_dir(logs_stack.settings, ref, instance.instance_id).rglob("*.parquet")
        if f.name[0] not in "._"
    ]
    assert (facts.rows, facts.files, facts.bytes) == (6, len(parquet), sum(f.stat().st_size for f in parquet))


async def test_a_failed_attempt_logs_its_traceback_shown_by_cli_api_and_dashboard(
    logs_stack: Stack, api: httpx.AsyncClient
) -> None:
    n = uuid.uuid4().hex[:8]
    want = await build(logs_stack, f"crash/{n}")
    assert want.state is WantState.failed
    text = log_of(logs_stack, want).text
    assert f"about to fail on {n}" in text
    assert "FutureWarning: Deprecated in 2.1, use degrees instead." in text  # pyspark's own warning
    assert "Traceback (most recent call last)" in text
    assert text.rstrip().endswith(f"ValueError: bad row in {n}")
    run_id = want.job_run_id or ""

    shown = await cli(logs_stack, "job-runs", "show", run_id, "--log")
    as_json = await cli(logs_stack, "job-runs", "show", run_id, "--attempt", "1", "--json")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == text
    assert as_json.returncode == 0, as_json.stderr
    assert AttemptLogView.model_validate(json.loads(as_json.stdout)).text == text

    found = await api.get(f"/api/job-runs/{run_id}/log")
    assert found.status_code == 200, found.text
    assert AttemptLogView.model_validate(found.json()).text == text
    plain = await api.get(f"/api/job-runs/{run_id}/log", params={"attempt": 1, "format": "text"})
    assert plain.headers["content-type"].startswith("text/plain") and plain.text == text
    no_attempt = await api.get(f"/api/job-runs/{run_id}/log", params={"attempt": 2})
    assert no_attempt.status_code == 404 and "has no attempt 2" in no_attempt.json()["error"]
    page = await api.get(f"/job-runs/{run_id}")
    assert page.status_code == 200
    assert 'id="log-text"' in page.text and f"ValueError: bad row in {n}" in page.text


async def test_a_long_log_keeps_its_beginning_and_its_end(logs_stack: Stack) -> None:
    n = uuid.uuid4().hex[:8]
    want = await build(logs_stack, f"noisy/{n}")
    assert want.state is WantState.failed
    log = log_of(logs_stack, want)
    assert log.truncated and TRUNCATED in log.text
    assert len(log.text.encode()) <= MAX_BYTES
    assert f"noisy {n} line 0000" in log.text  # the beginning
    assert f"noisy {n} line {NOISY_LINES // 2:04d}" not in log.text  # the middle went
    assert f"noisy {n} line {NOISY_LINES - 1:04d}" in log.text
    assert log.text.rstrip().endswith(f"RuntimeError: noisy {n} gave up")  # the traceback stays whole


async def test_a_rebuild_with_another_schema_is_flagged(logs_stack: Stack, api: httpx.AsyncClient) -> None:
    n = uuid.uuid4().hex[:8]
    ref = f"shaped/{n}"

    async def rebuild() -> None:
        await logs_stack.db.taint(ref, reason="test rebuild")
        assert (await build(logs_stack, ref)).state is WantState.successful

    assert (await build(logs_stack, ref)).state is WantState.successful
    await rebuild()  # the same columns
    SHAPES[n] = "id;CAST(id AS STRING) AS name"
    await rebuild()
    history, _ = logs_stack.bel.partitions.instance_history(ref)
    assert [(i.schema_changed, [c.name for c in i.facts.columns] if i.facts else None) for i in history] == [
        (True, ["id", "name"]),
        (False, ["id"]),
        (False, ["id"]),
    ]

    shown = Console(width=200, record=True)
    shown.print(render.lineage_view(partition_view(logs_stack.bel, ref)))
    out = shown.export_text()
    assert "facts 4 rows" in out and "schema id bigint, name string  schema changed" in out
    lineage = (await api.get(f"/api/partitions/{ref}")).json()
    live = lineage["index"]["instances"][lineage["data"]["instance_id"]]
    assert live["schema_changed"] is True and live["facts"]["rows"] == 4
    page = await api.get(f"/partitions/{ref}")
    assert 'id="schema-changed"' in page.text and "<code>name string</code>" in page.text


async def test_gc_removes_the_logs_of_ended_runs_after_the_retention(
    logs_stack: Stack, api: httpx.AsyncClient
) -> None:
    """Last in the module: it collects every log the tests above left."""
    n = uuid.uuid4().hex[:8]
    want = await build(logs_stack, f"crash/{n}")
    storage = Storage(logs_stack.settings.storage_root)
    assert not [
        c
        for c in collect_garbage(storage, logs_stack.bel, keep=timedelta(hours=1)).deleted
        if c.kind == "log"
    ]
    report = collect_garbage(storage, logs_stack.bel, keep=timedelta(0))
    logs = {c.job_run_id: c.reason for c in report.deleted if c.kind == "log"}
    assert logs[want.job_run_id or ""].startswith("logs of a job run failed, last written")
    gone = await api.get(f"/api/job-runs/{want.job_run_id}/log")
    assert gone.status_code == 404 and "garbage collection removes" in gone.json()["error"]
    page = await api.get(f"/job-runs/{want.job_run_id}")
    assert page.status_code == 200 and 'id="log-missing"' in page.text
