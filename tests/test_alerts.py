"""Alerts reach a real JSON webhook receiver and a real SMTP server on loopback, once per want and kind,
with SLA-at-risk raised before the deadline (time-skipping server: hours in seconds).

The want, alert and fan-out workflows and activities are the real ones; the job run is ``tests.timed``'s
double, which records real durations in the BEL (its ``pause``), the history the SLA estimate reads."""

import asyncio
import json
import shutil
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from fastapi.testclient import TestClient
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.alerts import AlertActivities, raise_alert
from activities.fanout import FanOutActivities
from activities.wants import WantActivities
from databuild.backfill import BackfillRequest
from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.domain.alerts import Alert, AlertKind
from databuild.errors import InvalidInputError
from databuild.models import WantSource, WantState
from databuild.temporal import ensure_search_attributes
from databuild.testing import free_port, make_settings, skip_time
from databuild.web import create_app, web_context
from tests.timed import BROKEN, Failures, TimedBuilds, TimedJobRun, timed, want_steps
from workflows.alert import AlertWorkflow
from workflows.want import WantWorkflow

PAUSE = 2.0  # seconds each double's build takes: the report job's p90


class Webhook:
    """A JSON webhook receiver that can be down (nothing listening on its port) and come back."""

    def __init__(self) -> None:
        self.port = free_port()
        self.received: list[dict[str, Any]] = []
        self._server: HTTPServer | None = None

    def up(self) -> None:
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append({**json.loads(body), "path": self.path})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        self._server = HTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def kinds(self) -> list[str]:
        return sorted(r["kind"] for r in self.received)


@dataclass
class Mailbox:
    messages: list[Message] = field(default_factory=list)

    async def handle_DATA(self, _server: object, _session: object, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"

    def subjects(self) -> list[str]:
        return sorted(str(m["Subject"]) for m in self.messages)


@dataclass
class AlertStack:
    env: WorkflowEnvironment
    db: DataBuild
    settings: Settings
    hook: Webhook
    mail: Mailbox


@pytest.fixture(autouse=True)
def no_broken_refs() -> Iterator[None]:
    yield
    BROKEN.clear()


@pytest.fixture
async def alerting(tmp_path: Path) -> AsyncIterator[AlertStack]:
    hook, mail = Webhook(), Mailbox()
    smtp = Controller(mail, hostname="127.0.0.1", port=free_port())
    smtp.start()
    path = shutil.which("temporal-test-server") or str(Path(sys.executable).parent / "temporal-test-server")
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=path, data_converter=pydantic_data_converter
    )
    urls = (
        f"json://127.0.0.1:{hook.port}/hook, "
        f"mailto://127.0.0.1:{smtp.port}?from=databuild@example.com&to=oncall@example.com"
    )
    settings = make_settings(
        tmp_path,
        env.client,
        "tests.timed:timed",
        job_lease=timedelta(minutes=10),
        alert_urls=urls,
        dashboard_url="https://databuild.example.com",
    )
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    await ensure_search_attributes(env.client, settings.namespace)
    wants = WantActivities(bel, timed, env.client, settings)
    alerts = AlertActivities(settings)
    worker = Worker(
        env.client,
        task_queue=settings.task_queue,
        workflows=[WantWorkflow, TimedJobRun, AlertWorkflow],
        activities=[
            *want_steps(wants),
            TimedBuilds(bel, pause=PAUSE).build,
            Failures(bel).fail_job_run,
            FanOutActivities(bel, env.client, settings).fan_out,
            alerts.route_alert,
            alerts.deliver_alert,
        ],
    )
    async with worker:
        yield AlertStack(env, DataBuild(env.client, bel, timed, settings), settings, hook, mail)
    hook.down()
    smtp.stop()
    bel.dispose()
    await env.shutdown()


async def until(condition: Any, what: str, seconds: float = 60) -> None:
    for _ in range(int(seconds * 10)):
        if condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


async def test_sla_at_risk_then_missed_reach_a_webhook_that_comes_back_and_a_mailbox_once(
    alerting: AlertStack,
) -> None:
    env, db, hook, mail = alerting.env, alerting.db, alerting.hook, alerting.mail
    # The report job's history: three runs of PAUSE seconds each.
    start = await env.get_current_time()
    history = [await db.want(f"report/0/{n}", data_timestamp=start) for n in "abc"]
    for n in "abc":
        await db.publish(f"feed/0/{n}")
    for spec in history:
        await until(lambda spec=spec: db.bel.want(spec.want_id).state.is_final, f"{spec.ref} built")  # type: ignore[misc]
        assert db.bel.want(spec.want_id).state is WantState.successful, db.bel.want(spec.want_id)
    assert db.bel.job_durations(["report_job"])["report_job"].samples == 3

    # The webhook is down; a report due 9 h after its data time waits for its feed.
    start = await env.get_current_time()
    deadline = start + timedelta(hours=9)
    spec = await db.want("report/0/late", data_timestamp=start, sla=timedelta(hours=9), ttl=timedelta(days=2))
    await until(
        lambda: db.bel.want(spec.want_id).state is WantState.upstream_building, "waiting for the feed"
    )
    view = await db.want_view(spec.want_id)
    assert view.data.estimate is not None and view.data.estimate.external == ["feed/0/late"]
    app = create_app(web_context(alerting.settings, db.bel))
    with TestClient(app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 50000)) as web:
        estimate = web.get(f"/api/wants/{spec.want_id}").json()["data"]["estimate"]
        assert estimate["confidence"] == "none" and estimate["slowest_step"] == "report_job (report/0/late)"
        page = web.get(f"/wants/{spec.want_id}").text
        assert "Estimated live" in page and "waits for external feed/0/late" in page

    await skip_time(env, timedelta(hours=8), step=timedelta(minutes=30))
    assert not db.bel.want(spec.want_id).sla_at_risk  # the report alone takes seconds: no risk yet
    assert mail.messages == []

    await skip_time(env, timedelta(hours=1, minutes=5), step=timedelta(minutes=5))
    want = db.bel.want(spec.want_id)
    assert want.sla_at_risk and want.sla_missed and want.state is WantState.upstream_building
    expected = sorted(["sla_at_risk", "upstream_late", "sla_missed"])
    await until(lambda: len(mail.messages) == 3, "three mails")
    assert [s.split(":")[1].strip() for s in mail.subjects()] == [
        "SLA at risk",
        "SLA missed",
        "upstream partition late",
    ]
    assert all("https://databuild.example.com/wants/" in m.as_string() for m in mail.messages)
    assert hook.received == []  # down: its copies wait, the mails did not

    hook.up()  # it comes back: the retries deliver
    await skip_time(env, timedelta(minutes=10), step=timedelta(minutes=10))
    await until(lambda: len(hook.received) == 3, "three webhook calls")
    assert hook.kinds() == expected
    at_risk = next(r for r in hook.received if r["kind"] == "sla_at_risk")
    assert at_risk["ref"] == "report/0/late" and at_risk["want_id"] == spec.want_id
    assert at_risk["deadline"] == deadline.isoformat() and at_risk["link"].endswith(f"/wants/{spec.want_id}")
    assert at_risk["at"] < deadline.isoformat() < at_risk["eta"]  # predicted before the miss
    assert "report_job" in at_risk["message"]  # the slowest remaining step is named
    late = next(r for r in hook.received if r["kind"] == "upstream_late")
    assert late["ref"] == "feed/0/late"

    # The feed arrives; the want ends well, and nothing is sent twice (retries, other workers).
    await db.publish("feed/0/late")
    assert (await db.wait(spec)).state is WantState.successful
    for kind in ("sla_missed", "sla_at_risk"):
        alert = next(r for r in hook.received if r["kind"] == kind)
        again = Alert(
            kind=AlertKind(kind),
            subject=spec.want_id,
            at=start,
            summary="again",
            link=alert["link"],
        )
        assert not await raise_alert(env.client, alerting.settings, again)  # no workflow, nothing sent
    assert len(hook.received) == 3 and len(mail.messages) == 3


async def test_a_failed_build_alerts_its_fail_lock_and_the_failed_want_once(alerting: AlertStack) -> None:
    env, db, hook, mail = alerting.env, alerting.db, alerting.hook, alerting.mail
    hook.up()
    BROKEN.add("timed/0")
    start = await env.get_current_time()
    first = await db.want("timed/0", data_timestamp=start, source=WantSource.api)
    assert (await db.wait(first)).state is WantState.failed
    await until(lambda: len(hook.received) == 2, "two webhook calls")
    assert hook.kinds() == ["partition_fail_locked", "want_failed"]
    locked = next(r for r in hook.received if r["kind"] == "partition_fail_locked")
    run = db.bel.want(first.want_id).job_run_id
    assert locked["subject"] == run and locked["link"].endswith(f"/job-runs/{run}")
    assert "databuild resolve timed/0" in locked["message"]
    await until(lambda: len(mail.messages) == 2, "two mails")


async def test_a_finished_backfill_alerts_once_with_its_counts(alerting: AlertStack) -> None:
    db, hook = alerting.db, alerting.hook
    hook.up()
    BROKEN.add("daily/2024-01-02")
    request = BackfillRequest(pattern="daily/{date}", start=datetime(2024, 1, 1), end=datetime(2024, 1, 3))
    progress = await db.backfill(request)
    await until(lambda: hook.kinds().count("backfill_finished") == 1, "the backfill's alert", 120)
    assert (await db.backfill_progress(progress.backfill_id)).finished
    done = next(r for r in hook.received if r["kind"] == "backfill_finished")
    assert done["subject"] == progress.backfill_id and done["link"].endswith(
        f"/backfills/{progress.backfill_id}"
    )
    assert "2 successful" in done["message"] and "1 failed" in done["message"]
    await asyncio.sleep(1)
    assert hook.kinds().count("backfill_finished") == 1  # the last wants to end all saw it finished


def test_a_url_apprise_cannot_use_is_refused_with_the_fix(tmp_path: Path) -> None:
    from databuild.alerts import channels

    settings = Settings(home=tmp_path, alert_urls="nosuchscheme://x")
    with pytest.raises(InvalidInputError, match=r"DATABUILD_ALERT_URLS .*apprise"):
        channels(settings)
    missing = Settings(home=tmp_path, alert_config=tmp_path / "nope.yml")
    with pytest.raises(InvalidInputError, match="DATABUILD_ALERT_CONFIG"):
        channels(missing)
