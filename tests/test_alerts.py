"""Alerts reach a real JSON webhook receiver and a real SMTP server on loopback, once per want and kind,
with SLA-at-risk raised before the deadline (time-skipping server: hours in seconds); a flood of one
job's failures goes as a few digests, and a channel that never answers is tried with backoff while the
others get every message at once.

The want, alert and fan-out workflows and activities are the real ones; the job run is ``tests.timed``'s
double, which records real durations in the BEL (its ``pause``), the history the SLA estimate reads."""

import contextlib
import json
import shutil
import socket
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
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.alerts import AlertActivities, raise_alert
from activities.backfills import BackfillActivities
from activities.fanout import FanOutActivities
from activities.wants import WantActivities
from databuild.backfill import BackfillRequest
from databuild.bel import BuildEventLog
from databuild.client import DataBuild
from databuild.config import Settings
from databuild.domain.alerts import Alert, AlertKind, retry_delay
from databuild.models import WantSource, WantState, want_workflow_id
from databuild.temporal import protocol as p
from databuild.temporal.connection import ensure_search_attributes
from databuild.testing import free_port, make_settings, skip_time
from databuild.web import create_app, web_context
from tests.helpers import until
from tests.timed import BROKEN, Failures, TimedBuilds, TimedJobRun, timed, want_steps
from workflows.alert import AlertWorkflow
from workflows.alert_channel import AlertChannelWorkflow
from workflows.backfill import BackfillWindowWorkflow
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


class Silent:
    """A channel that never answers: it takes connections, counts them and says nothing."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self._socket.getsockname()[1]
        self.connections = 0
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return  # closed
            self.connections += 1
            self._open.append(connection)

    def close(self) -> None:
        self._socket.close()
        for connection in self._open:
            connection.close()


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
    silent: Silent


@pytest.fixture(autouse=True)
def no_broken_refs() -> Iterator[None]:
    yield
    BROKEN.clear()


@pytest.fixture
async def alerting(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[AlertStack]:
    """A webhook and a mailbox as channels, and the silent channel too if the test's parameter says
    ``{"silent": True}`` (with its ``alert_give_up_after``, if it says one)."""
    hook, mail, silent = Webhook(), Mailbox(), Silent()
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
    param = getattr(request, "param", {})
    if param.get("silent"):
        urls += f", json://127.0.0.1:{silent.port}/silent?cto=1&rto=0.2"
    give_up = {"alert_give_up_after": param["give_up_after"]} if "give_up_after" in param else {}
    settings = make_settings(
        tmp_path,
        env.client,
        "tests.timed:timed",
        job_lease=timedelta(minutes=10),
        alert_urls=urls,
        dashboard_url="https://databuild.example.com",
        **give_up,
    )
    bel = BuildEventLog.create(settings.database_url.get_secret_value())
    await ensure_search_attributes(env.client, settings.namespace)
    wants = WantActivities(bel, timed, env.client, settings)
    alerts = AlertActivities(settings, env.client)
    worker = Worker(
        env.client,
        task_queue=settings.task_queue,
        workflows=[WantWorkflow, TimedJobRun, AlertWorkflow, AlertChannelWorkflow, BackfillWindowWorkflow],
        activities=[
            *want_steps(wants),
            TimedBuilds(bel, pause=PAUSE).build,
            Failures(bel).fail_job_run,
            *FanOutActivities(bel, env.client, settings).activities(),
            alerts.route_alert,
            alerts.queue_alert,
            alerts.deliver_alert,
            BackfillActivities(bel, env.client, settings).advance_backfill,
        ],
    )
    async with worker:
        yield AlertStack(env, DataBuild(env.client, bel, timed, settings), settings, hook, mail, silent)
    hook.down()
    silent.close()
    smtp.stop()
    bel.dispose()
    await env.shutdown()


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
        await until(lambda spec=spec: db.bel.wants.get(spec.want_id).state.is_final, f"{spec.ref} built")  # type: ignore[misc]
        assert db.bel.wants.get(spec.want_id).state is WantState.successful, db.bel.wants.get(spec.want_id)
    assert db.bel.job_runs.durations(["report_job"])["report_job"].samples == 3

    # The webhook is down; a report due 9 h after its data time waits for its feed.
    start = await env.get_current_time()
    deadline = start + timedelta(hours=9)
    spec = await db.want("report/0/late", data_timestamp=start, sla=timedelta(hours=9), ttl=timedelta(days=2))
    await until(
        lambda: db.bel.wants.get(spec.want_id).state is WantState.upstream_building, "waiting for the feed"
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
    assert not db.bel.wants.get(spec.want_id).sla_at_risk  # the report alone takes seconds: no risk yet
    assert mail.messages == []

    await skip_time(env, timedelta(hours=1, minutes=5), step=timedelta(minutes=5))
    want = db.bel.wants.get(spec.want_id)
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

    hook.up()  # it comes back: the channel's next try (at most 10 minutes on) delivers all three
    await skip_time(env, timedelta(minutes=11), step=timedelta(minutes=11))
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
    run = db.bel.wants.get(first.want_id).job_run_id
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
    # The last wants to end all saw it finished, and each raised its alert. An alert's workflow is started
    # once per key, ever: once every want's workflow and that one have closed, no second can come.
    client = alerting.env.client
    for want in db.bel.wants.query(limit=100):
        with contextlib.suppress(WorkflowFailureError):  # the broken day's want failed: closed too
            await client.get_workflow_handle(want_workflow_id(want.ref, want.want_id)).result()
    await client.get_workflow_handle(
        f"alert:{AlertKind.backfill_finished.value}:{progress.backfill_id}"
    ).result()
    assert hook.kinds().count("backfill_finished") == 1


def by_kind(hook: Webhook, kind: str) -> list[dict[str, Any]]:
    return [r for r in hook.received if r["kind"] == kind]


def counted(hook: Webhook, kind: str) -> int:
    """How many alerts of ``kind`` the webhook's messages tell of (a digest tells of several)."""
    return sum(int(r["count"]) for r in by_kind(hook, kind))


async def test_a_backfill_of_an_always_failing_job_sends_a_few_messages_that_count_its_failures(
    alerting: AlertStack,
) -> None:
    env, db, hook, mail = alerting.env, alerting.db, alerting.hook, alerting.mail
    hook.up()
    days = [f"2024-03-{d:02d}" for d in range(1, 29)]
    refs = {f"daily/{day}" for day in days}
    BROKEN.update(refs)
    request = BackfillRequest(pattern="daily/{date}", start=datetime(2024, 3, 1), end=datetime(2024, 3, 28))
    progress = await db.backfill(request)
    await until(lambda: counted(hook, "backfill_finished") == 1, "the backfill's end", 180)
    assert (await db.backfill_progress(progress.backfill_id)).by_state == {WantState.failed: 28}
    # The first of each kind went out at once; the rest wait for the end of the group's window.
    failures = ("want_failed", "partition_fail_locked")
    await until(lambda: all(by_kind(hook, kind) for kind in failures), "each kind's first message")
    assert [len(by_kind(hook, kind)) for kind in failures] == [1, 1]

    await skip_time(
        env, alerting.settings.alert_group_window + timedelta(minutes=1), step=timedelta(minutes=1)
    )
    await until(lambda: all(counted(hook, kind) == 28 for kind in failures), "every failure counted")
    for kind in failures:
        messages = by_kind(hook, kind)
        assert len(messages) <= 2, messages  # the first, then one digest of the rest
        named = {ref for message in messages for ref in message["refs"].split(",")}
        assert named == refs
        assert all(m["job_label"] == "daily_job" for m in messages)
    # On a slow machine every failure can be queued before the channel sends the first: then one digest
    # counts them all, and only a digest that follows a message of its group says "more".
    sent = by_kind(hook, "want_failed")
    digest = max(sent, key=lambda message: int(message["count"]))
    more = "more " if digest is not sent[0] else ""
    assert f"wants for {digest['count']} {more}partitions of job daily_job failed" in digest["message"]
    assert digest["link"] == "https://databuild.example.com/job-runs?job=daily_job"
    assert len(hook.received) <= 5  # not 57: one per failed want and one per failed run
    await until(lambda: len(mail.messages) == len(hook.received), "the same messages by mail")
    assert any("want failed (" in subject for subject in mail.subjects())  # a digest's title counts


def tries_within(span: timedelta) -> int:
    """How many times a channel that never answers is tried in ``span`` from its first try."""
    tries, at = 1, timedelta(0)
    while (at := at + retry_delay(tries)) <= span:
        tries += 1
    return tries


@pytest.mark.parametrize("alerting", [{"silent": True, "give_up_after": timedelta(hours=2)}], indirect=True)
async def test_a_channel_that_never_answers_is_tried_with_backoff_while_the_others_get_every_message(
    alerting: AlertStack,
) -> None:
    env, hook, mail, silent = alerting.env, alerting.hook, alerting.mail, alerting.silent
    hook.up()
    start = await env.get_current_time()
    span, every = timedelta(hours=6), timedelta(minutes=30)
    for n in range(int(span / every)):  # a failure of another job every half hour
        failed = Alert(
            kind=AlertKind.want_failed,
            subject=f"want-{n}",
            ref=f"job{n}/2024-01-01",
            job_label=f"job{n}",
            at=start + n * every,
            summary=f"want for job{n}/2024-01-01 failed",
            link=f"/wants/want-{n}",
        )
        assert await raise_alert(env.client, alerting.settings, failed)
        # Each is its group's first: the healthy channels have it at once, whatever the silent one does.
        await until(lambda n=n: len(hook.received) == n + 1 and len(mail.messages) == n + 1, "at once", 30)
        await skip_time(env, every, step=every)
    tried = silent.connections
    # One try at a time with backoff (10 s doubling to 10 min): at most 41 in 6 hours, not a series of
    # tries per alert (each alert retried on its own, 1 s doubling to 5 min, made hundreds).
    assert 10 <= tried <= tries_within(span) + 1, tried
    assert [r["subject"] for r in hook.received] == [f"want-{n}" for n in range(int(span / every))]

    # Its alerts are given up (here) 2 hours after the last of their group came; then nothing tries it.
    handle = env.client.get_workflow_handle(
        p.alert_channel_workflow_id(alerting.settings.task_queue, silent_channel(alerting.settings))
    )
    give_up = alerting.settings.alert_give_up_after
    await skip_time(env, give_up + timedelta(hours=1), step=timedelta(hours=1))
    assert (await handle.describe()).status is WorkflowExecutionStatus.COMPLETED
    assert silent.connections - tried <= tries_within(give_up), silent.connections
    after = silent.connections
    await skip_time(env, timedelta(hours=2), step=timedelta(hours=1))
    assert silent.connections == after


def silent_channel(settings: Settings) -> str:
    from databuild.operations.alerts import channels

    return next(c.id for c in channels(settings) if "/silent" in c.url)
