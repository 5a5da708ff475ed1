"""One workflow per upstream graph: holds the cursor into its events API and applies what it pulls,
and applies what that graph pushes (the `announce` signal). Deterministic; I/O is in activities."""

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.upstream import UpstreamActivities
    from databuild.temporal import protocol as p

# While the upstream is down, pulls back off to one try every 30 s, and never give up.
PULL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2, maximum_interval=timedelta(seconds=30)
)
PULL_TIMEOUT = timedelta(seconds=90)


@workflow.defn(name=p.UPSTREAM_WORKFLOW)
class UpstreamSyncWorkflow:
    def __init__(self) -> None:
        self._inbox: list[p.Announcement] = []
        self._state: p.UpstreamInput | None = None
        self._steps = 0  # pulls and applied batches in this run

    @workflow.signal(name=p.SIGNAL_ANNOUNCE)
    def announce(self, announcement: p.Announcement) -> None:
        self._inbox.append(announcement)

    @workflow.query(name=p.QUERY_UPSTREAM_STATUS)
    def status(self) -> p.UpstreamStatus:
        s = self._state
        assert s is not None
        return p.UpstreamStatus(
            name=s.name, url=s.url, patterns=s.patterns, cursor=s.cursor, applied=s.applied, refused=s.refused
        )

    @workflow.run
    async def run(self, input: p.UpstreamInput) -> None:
        self._state = input
        workflow.set_current_details(self._details())
        while True:
            await self._apply_inbox()
            more = False
            state = self._state
            if state.url is not None:
                result = await workflow.execute_activity_method(
                    UpstreamActivities.pull_upstream,
                    p.PullInput(name=state.name, url=state.url, patterns=state.patterns, cursor=state.cursor),
                    start_to_close_timeout=PULL_TIMEOUT,
                    retry_policy=PULL_RETRY,
                )
                self._advance(cursor=result.cursor, applied=result.applied, refused=result.refused)
                more = result.more
            if self._steps >= self._state.steps_per_run or workflow.info().is_continue_as_new_suggested():
                await self._apply_inbox()
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self._state)
            if not more:  # wait for the next poll, or for a push
                wait = self._state.poll_every if self._state.url is not None else None
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(lambda: bool(self._inbox), timeout=wait)

    def _advance(self, *, applied: int, cursor: int | None = None, refused: int = 0) -> None:
        assert self._state is not None
        update = {"applied": self._state.applied + applied, "refused": self._state.refused + refused}
        if cursor is not None:
            update["cursor"] = cursor
        self._state = self._state.model_copy(update=update)
        self._steps += 1
        workflow.set_current_details(self._details())

    async def _apply_inbox(self) -> None:
        assert self._state is not None
        while self._inbox:
            batch, self._inbox = self._inbox[:500], self._inbox[500:]
            applied = await workflow.execute_activity_method(
                UpstreamActivities.apply_announcements,
                p.AnnouncementsInput(announcements=batch, patterns=self._state.patterns),
                start_to_close_timeout=PULL_TIMEOUT,
                retry_policy=PULL_RETRY,
            )
            self._advance(applied=applied)

    def _details(self) -> str:
        s = self._state
        assert s is not None
        source = f"pulling {s.url} ({', '.join(s.patterns)})" if s.url else "push only"
        refused = f", {s.refused} refused (see the worker log)" if s.refused else ""
        return f"upstream `{s.name}`: {source}; cursor {s.cursor}, {s.applied} partition(s) applied{refused}"
