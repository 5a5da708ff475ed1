"""Fan-out: when a job run ends, signal every want subscribed to its outputs. Pages through the
subscriptions and heartbeats its cursor, so a retry resumes where the last attempt stopped."""

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError

from activities.alerts import raise_alert
from databuild.bel import BuildEventLog
from databuild.bel.aggregates.job_runs import RunEnded
from databuild.config import Settings
from databuild.domain import alerts
from databuild.graph import Graph
from databuild.models import JobRun, JobRunState, Subscription
from databuild.temporal import protocol as p
from databuild.temporal.late_data import rebuild_late_readers
from databuild.temporal.wants import Notified, notify_subscribers, signal_for_run

# Pages of subscribers the local first step of a fan-out signals (``fan_out_first``).
FIRST_PAGES = 1


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

    def activities(self) -> list[Callable[..., Awaitable[object]]]:
        """Both steps, for a worker to run (the workflows call the first as a local activity)."""
        return [self.fan_out, self.fan_out_first]

    @activity.defn
    async def fan_out(self, input: p.FanOutInput) -> int:
        """Every subscriber (after ``input.after_id``), then what follows a run's end."""
        details = activity.info().heartbeat_details
        cursor = int(details[0]) if details else input.after_id
        return (await self._fan_out(input.job_run_id, cursor, None, activity.heartbeat)).heard

    @activity.defn
    async def fan_out_first(self, input: p.FanOutInput) -> p.FanOutResult:
        """The first page of subscribers, and what follows a run's end if that was all of them: run as a
        local activity, since most runs have a few subscribers. The rest is ``fan_out``'s, from the
        cursor (a local activity cannot heartbeat one)."""
        return await self._fan_out(input.job_run_id, input.after_id, FIRST_PAGES, lambda _cursor: None)

    async def tell(self, ended: RunEnded) -> p.FanOutResult:
        """Signal the first page of an ended run's subscribers, from its job activity just after the commit
        that recorded its outcome (``ended``: the run as that commit left it, with what the commit read
        for its fan-out), so its wants need not wait for the run's workflow to hear of it; if that was all
        of them, what follows the run's end too (``done``: the run's workflow has nothing left to fan
        out). Else the subscription its fan-out resumes after."""
        run = ended.run
        first = None if ended.subscribers is None else (ended.subscribers, ended.subscribers_limit)
        notified = await self._notify(run, 0, FIRST_PAGES, first_page=first)
        done = notified.done
        if done:
            try:
                await self._ended(ended)
            except Exception as error:  # the run's workflow does it again
                activity.logger.warning(
                    "what follows the end of %s is left to its run: %s", run.job_run_id, error
                )
                done = False
        return p.FanOutResult(heard=notified.heard, after_id=notified.cursor, done=done)

    async def _fan_out(
        self, job_run_id: str, cursor: int, pages: int | None, on_page: Callable[[int], None]
    ) -> p.FanOutResult:
        run = await self.bel.call(self.bel.job_runs.get, job_run_id)
        notified = await self._notify(run, cursor, pages, on_page)
        if notified.done:
            await self._ended(RunEnded(run=run))
        return p.FanOutResult(heard=notified.heard, after_id=notified.cursor, done=notified.done)

    async def _notify(
        self,
        run: JobRun,
        cursor: int,
        pages: int | None,
        on_page: Callable[[int], None] = lambda _c: None,
        first_page: tuple[list[Subscription], int] | None = None,
    ) -> Notified:
        """Signal the run's subscribers after ``cursor``, up to ``pages`` pages (all when None), the first
        page ``first_page`` if it was read already."""
        return await notify_subscribers(
            self.client,
            self.bel,
            run.outputs,
            signal_for_run(run),
            after_id=cursor,
            page_size=self.page_size,
            on_page=on_page,
            max_pages=pages,
            first_page=first_page,
        )

    async def _ended(self, ended: RunEnded) -> None:
        """What follows a run's end once its wants heard: waiting runs woken, late data rebuilt, alerts
        (from what the commit of its outcome read, where it did)."""
        run = ended.run
        await self._wake_admitted(ended.admitted)
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
            checks = ended.checks
            if checks is None:
                ids = [w.instance_id for w in run.writes if w.instance_id]
                checks = await self.bel.call(self.bel.partitions.checks_of, ids)
            if failed := [r for results in checks.values() for r in results if not r.passed]:
                at = run.ended_at or datetime.now(UTC)
                await raise_alert(self.client, self.settings, alerts.check_warnings(run, failed, at))

    async def _wake_admitted(self, admitted: list[str] | None) -> None:
        """The pool slots the run held went to waiting runs when it ended (in its BEL commit): wake them
        (``admitted``, if that commit read them). A run that misses this finds out through its own watch."""
        if admitted is None:
            admitted = await self.bel.call(self.bel.pools.admitted_not_started)
        for workflow_id in admitted:
            try:
                await self.client.get_workflow_handle(workflow_id).signal(p.SIGNAL_ADMITTED)
            except RPCError as error:  # it ended meanwhile
                activity.logger.debug("%s not woken: %s", workflow_id, error)
