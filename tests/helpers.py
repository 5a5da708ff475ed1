"""Helpers shared by test modules (and the history recorder): waiting for a condition, a port or a
derivative want, and serving a stack's HTTP API. Tests import these, never each other."""

import asyncio
import inspect
import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from moto.server import ThreadedMotoServer
from pyarrow import fs
from temporalio.api.sdk.v1 import WorkflowMetadata

from databuild.backfill import BackfillProgress, BackfillRequest
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.jobs.storage import Storage
from databuild.models import Want, WantSource, WantState, want_workflow_id
from databuild.testing import free_port
from databuild.web import create_app, serving, web_context
from tests.conftest import Stack


def lake(settings: Settings) -> Path:
    """The local folder of a test stack's storage root (a ``file://`` URI)."""
    return Path(urlsplit(settings.storage_root).path)


def instance_dir(settings: Settings, ref: str, instance_id: str | None) -> Path:
    """Where one instance of ``ref`` is on a test stack's local storage."""
    return lake(settings) / Storage.instance_key(ref, instance_id or "")


class S3Server(NamedTuple):
    endpoint: str
    server: ThreadedMotoServer


@contextmanager
def s3_server(bucket: str) -> Iterator[S3Server]:
    """An S3-compatible server (moto) on loopback holding an empty ``bucket``, stopped on exit. The bucket
    is made with generous timeouts: moto loads its backends on the first request, which takes seconds on
    a loaded machine, past the AWS SDK's default 3 s."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    endpoint = "http://{}:{}".format(*server.get_host_and_port())
    try:
        fs.S3FileSystem(
            endpoint_override=endpoint,
            access_key="k",
            secret_key="s",
            region="us-east-1",
            allow_bucket_creation=True,
            connect_timeout=30,
            request_timeout=60,
        ).create_dir(bucket)
        yield S3Server(endpoint, server)
    finally:
        server.stop()


# The token a downstream graph presents to its upstream in the cross-graph tests.
TOKEN = "token-that-down-presents-to-up"


async def until(
    check: Callable[[], bool | Awaitable[bool]], what: str = "the condition", seconds: float = 60
) -> None:
    """Wait until ``check()`` holds (awaited, if it is a coroutine function), for ``seconds`` of wall time
    (not a count of polls: a starved machine polls less often)."""
    deadline = time.monotonic() + seconds

    async def holds() -> bool:
        found = check()
        return await found if inspect.isawaitable(found) else found

    while not await holds():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {seconds:g} s: {what}")
        await asyncio.sleep(0.1)


def until_listening(port: int, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.05)


PAUSED_NOTE = "paused with its backfill"  # what a want's workflow says of itself while its backfill holds it


async def until_held_by_pause(db: DataBuild, wants: list[Want], seconds: float = 60) -> None:
    """Until each of ``wants`` has come to its next step with its backfill paused, and holds there: its
    workflow's current details (as the Temporal UI shows them) say so."""
    pending = {w.want_id: w.ref for w in wants}

    async def all_held() -> bool:
        for want_id, ref in list(pending.items()):
            handle = db.temporal.get_workflow_handle(want_workflow_id(ref, want_id))
            metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
            if PAUSED_NOTE in metadata.current_details:
                del pending[want_id]
        return not pending

    await until(all_held, f"{len(wants)} wants held by their paused backfill", seconds)


def waiting_for_feed(db: DataBuild, ref: str) -> bool:
    feeds = db.bel.wants.query(ref_prefix=ref)
    return any(w.source is WantSource.derivative and w.state is WantState.upstream_building for w in feeds)


def http_server(stack: Stack, port: int) -> AbstractAsyncContextManager[str]:
    return serving(create_app(web_context(stack.settings, stack.bel)), "127.0.0.1", port)


ROOT = Path(__file__).resolve().parents[1]


def bench(module: str, *args: str) -> dict[str, Any]:
    """Run the benchmark ``module`` in a process of its own; its exit code is 0 (1 on a stalled workflow task
    or a failed want), and its last line is its figures as JSON."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def start_in_own_group(module: str, env: dict[str, str], log: Path) -> "subprocess.Popen[bytes]":
    """`python -m MODULE worker` (a test's worker that dies on purpose) in its own process group, so that
    killing the group takes its Spark JVM too; its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module, "worker"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def backfill_finished(db: DataBuild, backfill_id: str, seconds: float = 120) -> BackfillProgress:
    """The backfill's progress once every want of it ended, waited for ``seconds`` of wall time."""
    deadline = time.monotonic() + seconds
    while not (progress := await db.backfill_progress(backfill_id)).finished:
        assert time.monotonic() < deadline, f"backfill {backfill_id} did not finish: {progress}"
        await asyncio.sleep(0.25)
    return progress


async def wide_days_built(db: DataBuild) -> list[str]:
    """Three days of tests.graphs:lake's ``wide/{day}`` backfilled, all successful (with a batch window, one
    run and one partitioned write): the days."""
    start = datetime(2024, 5, 1, tzinfo=UTC)
    backfill = await db.backfill(
        BackfillRequest(pattern="wide/{day}", start=start, end=start + timedelta(days=2))
    )
    progress = await backfill_finished(db, backfill.backfill_id)
    assert progress.by_state == {WantState.successful: 3}
    return [(start + timedelta(days=k)).date().isoformat() for k in range(3)]
