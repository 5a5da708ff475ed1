"""Fan-out: when a job run ends, signal every want subscribed to its outputs. Pages through the
subscriptions and heartbeats its cursor, so a retry resumes where the last attempt stopped."""

from datetime import UTC, datetime

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError

from activities.alerts import raise_alert
from databuild.bel import BuildEventLog
from databuild.config import Settings
from databuild.domain import alerts
from databuild.graph import Graph
from databuild.models import JobRunState
from databuild.temporal import protocol as p
from databuild.temporal.late_data import rebuild_late_readers
from databuild.temporal.wants import notify_subscribers, signal_for_run


class FanOutActivities:
    def __init__(
        self,
        bel: BuildEventLog,
        client: Client,
        settings: Settings | None = None,
        page_size: int = 200,
        graph: Graph | None = None,
    ) -> None:
        self.bel = bel
        self.client = client
        self.settings = settings  # None: no alerts (tests of the fan-out alone)
        self.page_size = page_size
        self.graph = graph  # None: no late-data rebuilds (tests of the fan-out alone)

    @activity.defn
    async def fan_out(self, input: p.FanOutInput) -> int:
        run = await self.bel.call(self.bel.job_run, input.job_run_id)
        details = activity.info().heartbeat_details
        cursor = int(details[0]) if details else 0
        told = await notify_subscribers(
            self.client,
            self.bel,
            run.outputs,
            signal_for_run(run),
            after_id=cursor,
            page_size=self.page_size,
            on_page=activity.heartbeat,
        )
        await self._wake_admitted()
        if self.graph is not None and self.settings is not None and run.state is JobRunState.succeeded:
            # Its outputs' newer instances are late data for the readers of the older ones.
            refs = [w.ref for w in run.writes]
            await rebuild_late_readers(self.client, self.bel, self.graph, self.settings.task_queue, refs)
        fail_locked = run.cause is not None and not run.cause.releases_outputs
        if self.settings is not None and fail_locked:
            at = run.ended_at or datetime.now(UTC)
            await raise_alert(self.client, self.settings, alerts.fail_locked(run, at))
        if self.settings is not None and run.state is JobRunState.succeeded and run.writes:
            # Published: only warning checks can have failed, and they alert (blocking ones fail the run).
            ids = [w.instance_id for w in run.writes if w.instance_id]
            checks = await self.bel.call(self.bel.checks_of, ids)
            if failed := [r for results in checks.values() for r in results if not r.passed]:
                at = run.ended_at or datetime.now(UTC)
                await raise_alert(self.client, self.settings, alerts.check_warnings(run, failed, at))
        return told

    async def _wake_admitted(self) -> None:
        """The pool slots the run held went to waiting runs when it ended (in its BEL commit): wake them.
        A run that misses this finds out through its own watch."""
        for workflow_id in await self.bel.call(self.bel.admitted_not_started):
            try:
                await self.client.get_workflow_handle(workflow_id).signal(p.SIGNAL_ADMITTED)
            except RPCError as error:  # it ended meanwhile
                activity.logger.debug("%s not woken: %s", workflow_id, error)
