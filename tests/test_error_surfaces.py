"""The error rule on every surface (docs/cli.md, Errors): bad input, a bad setting or a dependency that is down
gives one line naming the problem and the fix (CLI exit 2 for usage and configuration errors, 1 for a
dependency that is down) or an HTTP 4xx/503 with a message; never a traceback, a 500 or a secret; an
unexpected error gives one line saying where its traceback is (with a taken web port, without any server:
tests/test_error_lines.py). And no browser page of another site can change anything, through any route."""

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.routing import BaseRoute
from temporalio.service import RPCError

from databuild.backfill import BackfillRequest
from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.errors import InvalidInputError, NotFoundError, StorageSetupError, TemporalUnavailableError
from databuild.graph import Graph
from databuild.jobs.storage import Storage
from databuild.models import WantSpec, WantState
from databuild.operations.alerts import channels
from databuild.temporal.connection import temporal_binary
from databuild.testing import free_port
from databuild.web import create_app, web_context
from tests import cli_fork as fork_server
from tests.conftest import cli_batch
from tests.helpers import s3_server

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cret-in-a-setting"
BASE = "http://localhost:8000"
LOOPBACK = ("127.0.0.1", 50000)


def forked(home: Path, *commands: tuple[list[str], dict[str, str]]) -> list[subprocess.CompletedProcess[str]]:
    """Each command (arguments, environment) in a process of its own, all at once, forked from one that
    imported the CLI once (tests/cli_fork.py), with no DATABUILD_ setting but ``home`` unless the command
    sets it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
    base = {**clean, "COLUMNS": "500", "DATABUILD_HOME": str(home)}
    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda c: fork_server.cli(c[0], {**base, **c[1]}, ROOT, timeout=180), commands))


def one_line(ran: subprocess.CompletedProcess[str], code: int, says: str) -> None:
    """The rule's CLI half: exit ``code``, one line on stderr that says ``says``, no traceback or secret."""
    shown = ran.stdout + ran.stderr
    assert ran.returncode == code, shown
    assert ran.stderr.startswith("error: ") and ran.stderr.count("\n") == 1, ran.stderr
    assert says in ran.stderr, ran.stderr
    assert "Traceback" not in shown and SECRET not in shown, shown


# A browser's write from another site ------------------------------------------------------------------

CROSS_SITE = [
    {"origin": "https://evil.example", "sec-fetch-site": "cross-site"},
    {"origin": "https://evil.example"},
    {"sec-fetch-site": "cross-site"},
]


async def test_a_browser_write_from_another_site_is_refused_on_every_route(make_stack) -> None:
    stack = await make_stack(worker=False)
    want = await stack.db.want("daily_users/2024-01-01")
    backfill = await stack.db.backfill(
        BackfillRequest(
            pattern="raw_events/{date}",
            start=datetime(2024, 1, 1, tzinfo=UTC),
            end=datetime(2024, 1, 2, tzinfo=UTC),
        )
    )
    app = create_app(web_context(stack.settings, stack.bel, client=stack.db))
    ids = {
        "want_id": want.want_id,
        "backfill_id": backfill.backfill_id,
        "ref": "daily_users/2024-01-01",
        "instance_id": str(uuid.uuid4()),
    }
    writes = [
        (method, re.sub(r"\{(\w+)(?::path)?\}", lambda m: ids.get(m[1], "x"), route.path))
        for route in api_routes(app.routes)
        for method in sorted(route.methods & {"POST", "PUT", "PATCH", "DELETE"})
    ]
    assert len(writes) >= 15, writes  # the API's and the dashboard's forms
    before = stack.bel.events.last_idx()
    with TestClient(app, base_url=BASE, client=LOOPBACK) as client:
        for method, path in writes:
            for headers in CROSS_SITE:
                # text/plain, as a page of another site may send without asking (no CORS preflight)
                refused = client.request(
                    method, path, content="x", headers={**headers, "content-type": "text/plain"}
                )
                assert refused.status_code == 403, (method, path, headers, refused.text)
                assert "another site" in refused.text, (method, path, refused.text)
        assert stack.bel.events.last_idx() == before
        assert stack.bel.wants.get(want.want_id).state is WantState.new
        assert not stack.bel.backfills.progress(backfill.backfill_id).paused

        # Scripts (no Origin) and this server's own pages (its own Origin) go on working.
        paused = client.post(f"/api/backfills/{backfill.backfill_id}/pause")
        assert paused.status_code == 200 and paused.json()["paused"], paused.text
        own_page = {"origin": BASE, "sec-fetch-site": "same-origin"}
        resumed = client.post(f"/api/backfills/{backfill.backfill_id}/resume", headers=own_page)
        assert resumed.status_code == 200 and not resumed.json()["paused"], resumed.text
        cancelled = client.post(f"/api/wants/{want.want_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text


def api_routes(routes: list[BaseRoute]) -> Iterator[APIRoute]:
    """Every route of an app's routers (FastAPI 0.16x keeps an included router as one route of its own)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        yield from api_routes(getattr(getattr(route, "original_router", None), "routes", []))


# Times at the edges of the calendar ---------------------------------------------------------------------

OUTSIDE = "is outside the calendar in UTC (0001-01-01 to 9999-12-31)"


async def test_times_at_the_edges_of_the_calendar(make_stack) -> None:
    stack = await make_stack(worker=False)
    refused = [
        (
            ["backfill", "raw_events/{date}", "--from", "9999-12-31T23:00-05:00", "--to", "9999-12-31"],
            OUTSIDE,
        ),
        (
            ["backfill", "raw_events/{date}", "--from", "0001-01-01T00:00+01:00", "--to", "0001-01-02"],
            OUTSIDE,
        ),
        (["want", "daily_users/2024-01-01", "--data-timestamp", "9999-12-31T23:00-05:00"], OUTSIDE),
        (["want", "daily_users/2024-01-01", "--data-timestamp", "0001-01-01T00:00+01:00"], OUTSIDE),
        (
            ["backfill", "raw_events/{date}", "--from", "9999-12-31", "--to", "9999-12-31", "--ttl", "2d"],
            "data_timestamp + ttl is after the year 9999",
        ),
    ]
    for (_args, says), ran in zip(refused, await cli_batch(stack, *(a for a, _ in refused)), strict=True):
        one_line(ran, 2, says)
    assert stack.bel.events.last_idx() == 0

    # The calendar's last day, and a step that would leave the calendar, are ranges like any other.
    last_day, long_step = await cli_batch(
        stack,
        ["backfill", "raw_events/{date}", "--from", "9999-12-31", "--to", "9999-12-31", "--json"],
        ["backfill", "raw_events/{date}", "--from", "9950-01-01", "--to", "9999-01-01", "--step", "36500d"],
    )
    assert last_day.returncode == 0, last_day.stderr
    assert json.loads(last_day.stdout)["partitions"] == 1
    assert long_step.returncode == 0 and "1/1 wants registered" in long_step.stdout, long_step.stderr

    app = create_app(web_context(stack.settings, stack.bel, client=stack.db))
    before = stack.bel.events.last_idx()
    bad_requests = [
        ("/api/backfills", {"start": "9999-12-31T23:00-05:00", "end": "9999-12-31T23:00-05:00"}, OUTSIDE),
        ("/api/backfills", {"start": "0001-01-01T00:00+01:00", "end": "0001-01-02"}, OUTSIDE),
        (
            "/api/backfills",
            {"start": "2024-01-01", "end": "2024-01-02", "step": "P999999999D"},
            "at most 36500d",
        ),
        ("/api/backfills", {"start": "2024-01-01", "end": "2024-01-02", "ttl": "P99999D"}, "at most 36500d"),
        ("/api/wants", {"data_timestamp": "9999-12-31T23:00-05:00"}, OUTSIDE),
        ("/api/wants", {"data_timestamp": "0001-01-01T00:00+01:00"}, OUTSIDE),
    ]
    with TestClient(app, base_url=BASE, client=LOOPBACK) as client:
        for path, fields, says in bad_requests:
            what = "raw_events/{date}" if path == "/api/backfills" else "daily_users/2024-01-01"
            body = {("pattern" if path == "/api/backfills" else "ref"): what, **fields}
            response = client.post(path, json=body)
            assert response.status_code == 400 and says in response.json()["error"], (body, response.text)
        assert stack.bel.events.last_idx() == before
        edge = {"pattern": "raw_events/{date}", "start": "9950-01-01", "end": "9999-01-01", "step": "P36500D"}
        accepted = client.post("/api/backfills", json=edge)
        assert accepted.status_code == 200 and accepted.json()["partitions"] == 1, accepted.text


# Settings and dependencies ----------------------------------------------------------------------------


def test_a_bad_setting_or_a_store_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    database_down = f"postgresql+psycopg://databuild:{SECRET}@127.0.0.1:{free_port()}/bel"
    started = time.monotonic()
    down, malformed, bad_port, temporal, dev_null, gcs = forked(
        tmp_path,
        (["wants", "list"], {"DATABUILD_DATABASE_URL": database_down}),
        (["wants", "list"], {"DATABUILD_DATABASE_URL": "nonsense"}),
        (["wants", "list"], {"DATABUILD_DATABASE_URL": f"postgresql://u:{SECRET}@host:port/db"}),
        (["want", "daily_users/2024-01-01"], {"DATABUILD_TEMPORAL_ADDRESS": "not a host"}),
        (["gc"], {"DATABUILD_STORAGE_ROOT": "/dev/null"}),
        # Without a retry limit, pyarrow tries a GCS it cannot reach for 15 minutes.
        (["gc", "--dry-run"], {"DATABUILD_STORAGE_ROOT": "gs://bucket/lake"}),
    )
    assert time.monotonic() - started < 100
    one_line(down, 1, "the build event log's database does not answer")
    one_line(malformed, 2, "DATABUILD_DATABASE_URL")
    one_line(bad_port, 2, "DATABUILD_DATABASE_URL")
    one_line(temporal, 2, "DATABUILD_TEMPORAL_ADDRESS='not a host' is not host:port")
    one_line(
        dev_null, 2, "cannot use the storage at file:///dev/null: Not a directory; set DATABUILD_STORAGE_ROOT"
    )
    one_line(gcs, 1, "cannot reach the storage at gs://bucket/lake")

    # What a worker checks before it serves: a root it can write, and alert channels it can use.
    for root in ("/dev/null", "/proc/self"):
        with pytest.raises(StorageSetupError, match="set DATABUILD_STORAGE_ROOT to a folder"):
            Storage(root).probe()
    Storage(tmp_path / "new" / "lake").probe()
    with pytest.raises(InvalidInputError, match="names no channel apprise can read"):
        channels(Settings(home=tmp_path, alert_config=Path("/etc/passwd")))


async def test_temporal_without_databuilds_search_attributes_or_killed_during_a_registration(
    tmp_path: Path,
) -> None:
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        *[temporal_binary(), "server", "start-dev", "--port", str(port), "--ui-port", str(free_port())],
        *["--headless", "--log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = {"DATABUILD_TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
    settings = Settings(home=tmp_path, temporal_address=address["DATABUILD_TEMPORAL_ADDRESS"])
    db = await DataBuild.connect(settings, lazy=True)
    try:
        await serving(db)
        # A namespace no worker has prepared, as in the first seconds of `databuild dev`.
        (first,) = await asyncio.to_thread(forked, tmp_path, (["want", "daily_users/2024-01-01"], address))
        assert first.returncode == 0 and "registered" in first.stdout, first.stdout + first.stderr

        # 90 years of days: long enough to record that the server is gone before it has (it then cannot
        # wake the backfill's window).
        request = BackfillRequest(
            pattern="raw_events/{date}",
            start=datetime(2000, 1, 1, tzinfo=UTC),
            end=datetime(2089, 12, 31, tzinfo=UTC),
        )
        clean = {k: v for k, v in os.environ.items() if not k.startswith("DATABUILD_")}
        registering = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "worker", "backfill", request.pattern],
            *["--from", "2000-01-01", "--to", "2089-12-31", "--json"],
            cwd=tmp_path,
            env={**clean, **address, "PYTHONPATH": str(ROOT), "DATABUILD_HOME": str(tmp_path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        ended = asyncio.ensure_future(registering.communicate())
        deadline = time.monotonic() + 60
        while registered(db.bel, request.backfill_id) < 100:  # its first chunk of wants
            assert time.monotonic() < deadline and not ended.done(), await ended
            await asyncio.sleep(0.1)
        server.kill()
        await server.wait()
        out, err = await asyncio.wait_for(ended, 120)
        assert registering.returncode is not None
        stopped = subprocess.CompletedProcess([], registering.returncode, out.decode(), err.decode())
        one_line(stopped, 1, "Temporal stopped answering")

        # The API, through a client connected before the server went: 503 with the message.
        app = create_app(web_context(settings, db.bel, client=db))
        transport = httpx.ASGITransport(app=app, client=LOOPBACK)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            response = await client.post("/api/wants", json={"ref": "daily_users/2024-01-02"})
        assert response.status_code == 503 and "Temporal stopped answering" in response.json()["error"]
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
        db.bel.dispose()


async def serving(db: DataBuild) -> None:
    """Until the dev server that has just started answers for its namespace."""
    deadline = time.monotonic() + 60
    while True:
        try:
            await (await db.temporal_client()).count_workflows()
            return
        except (TemporalUnavailableError, RPCError):
            assert time.monotonic() < deadline, "the Temporal dev server did not answer"
            await asyncio.sleep(0.2)


def registered(bel: BuildEventLog, backfill_id: str) -> int:
    try:
        return bel.backfills.progress(backfill_id).registered
    except NotFoundError:
        return 0


# Storage that stops answering ---------------------------------------------------------------------------

LOGGED = Graph("logged")
LOGGED.job("p/{n}")(lambda ctx, n: None)


def test_storage_that_stops_answering(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with s3_server("lake") as s3:
        aws = {
            "AWS_ENDPOINT_URL": s3.endpoint,
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        for name, value in aws.items():
            monkeypatch.setenv(name, value)
        root = "s3a://lake/graph"
        url = f"sqlite:///{tmp_path / 'bel.sqlite'}"
        bel = BuildEventLog.create(url)
        try:
            spec = WantSpec(ref="p/1", data_timestamp=datetime(2024, 1, 1, tzinfo=UTC))
            bel.wants.register(spec)
            decision = bel.decisions.decide(spec.want_id, 1, LOGGED.resolve("p/1"))
            job_run_id = decision.job_run_id
            assert job_run_id is not None
            bel.job_runs.start(job_run_id, 1, "w")
            storage = Storage(root)
            storage.write_text(storage.log_key(job_run_id, 1), "hello from the job\n")
            settings = Settings(home=tmp_path, storage_root=root)
            app = create_app(web_context(settings, bel))
            env = {**aws, "DATABUILD_STORAGE_ROOT": root, "DATABUILD_DATABASE_URL": url}
            with TestClient(app, base_url=BASE, client=LOOPBACK) as client, ThreadPoolExecutor(1) as cli:
                up = client.get(f"/api/job-runs/{job_run_id}/log", params={"format": "text"})
                assert up.status_code == 200 and up.text == "hello from the job\n"
                s3.server.stop()
                # Each call to a store that is down takes pyarrow's retries (seconds): the CLI meanwhile.
                commands = (["job-runs", "show", job_run_id, "--log"], env), (["gc", "--dry-run"], env)
                by_cli = cli.submit(forked, tmp_path, *commands)
                log = client.get(f"/api/job-runs/{job_run_id}/log")
                assert log.status_code == 503, log.text
                assert log.json()["error"].startswith(f"cannot reach the storage at {root}: "), log.text
                page = client.get(f"/job-runs/{job_run_id}")  # the run, with why its log cannot be shown
                assert page.status_code == 200 and "cannot reach the storage at s3a://lake/graph" in page.text
                shown, collected = by_cli.result()
            one_line(shown, 1, f"cannot reach the storage at {root}: ")
            one_line(collected, 1, f"cannot reach the storage at {root}: ")
        finally:
            bel.dispose()


# What a live display leaves behind -----------------------------------------------------------------------


async def test_a_live_display_ends_its_line_in_a_pipe(make_stack) -> None:
    # A ref of this module's own: want ids (hence workflow ids) are shared across the session's Temporal,
    # and tests/test_registration.py counts the runs of feed/2024-03-01's.
    stack = await make_stack(graph="tests.graphs:late")
    published, waited = await cli_batch(
        stack, ["publish", "feed/2024-03-20"], ["want", "feed/2024-03-20", "--wait"]
    )
    assert published.returncode == 0 and waited.returncode == 0, waited.stderr
    # The progress's last line, then the fulfillment tree's first, each on its own line.
    lines = waited.stdout.splitlines()
    assert sum(line.startswith("want feed/2024-03-20") for line in lines) == 2, waited.stdout
    assert all(line.count("feed/2024-03-20 [") <= 1 for line in lines), waited.stdout
