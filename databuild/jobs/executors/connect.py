"""Executor (c): Spark Connect (``sc://host:15002``). The job body runs in the worker against a remote
session; each attempt tags its operations, and cancellation interrupts the tag on the server."""

import threading
from typing import TYPE_CHECKING, Any, cast

from databuild.domain.cost import SparkCost
from databuild.jobs.executors.base import Progress
from databuild.jobs.executors.body import BodyResult, JobAttempt, JobBodies, Report
from databuild.jobs.spark import JOB_SQL_CONF

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as RemoteSession
    from pyspark.sql.connect.shell.progress import ProgressHandler


# Said wherever an attempt's cost shows (unknown, not zero).
CONNECT_COST_UNKNOWN = (
    "Spark Connect does not give its clients Spark's accounting (task metrics) of their operations"
)


def operation_tag(attempt: JobAttempt) -> str:
    return f"databuild-{attempt.group}"


class ConnectExecutor:
    kind = "connect"

    def __init__(self, url: str, bodies: JobBodies) -> None:
        self.url = url
        self._bodies = bodies
        self._session: SparkSession | None = None
        self._lock = threading.Lock()
        # The client calls progress handlers on the thread that runs the operation, so the attempt a
        # report belongs to is the one this thread is running.
        self._running = threading.local()
        self._stages: dict[str, dict[tuple[str | None, int], tuple[int, int]]] = {}

    def session(self) -> "SparkSession":
        with self._lock:
            if self._session is not None and _closed(self._session):
                # The client closes itself when the server says it restarted (INVALID_HANDLE.
                # SESSION_CHANGED); stopping it also clears pyspark's default, so a new one is built.
                self._session.stop()
                self._session = None
            if self._session is None:
                from pyspark.sql import SparkSession

                # The public builder also switches pyspark's functions to Connect for the whole
                # process, which is why a worker cannot run both this and the session executor.
                session = SparkSession.builder.remote(self.url).config(map=JOB_SQL_CONF).getOrCreate()
                # The client only calls a handler, so a bound method serves as a ProgressHandler.
                session.registerProgressHandler(cast("ProgressHandler", self._on_progress))
                self._session = session
            return self._session

    def warm(self) -> None:
        self.session()

    def live_session(self) -> "SparkSession":
        """The session, after one round trip: the first call after a server restart fails and closes
        the client, and that should cost a new session, not the attempt."""
        session = self.session()
        try:
            session.conf.get("spark.sql.session.timeZone")
        except Exception:
            if not _closed(session):
                raise
            session = self.session()
        return session

    def run(self, attempt: JobAttempt, *, cancelled: threading.Event, report: Report) -> BodyResult:
        session = self.live_session()
        tag = operation_tag(attempt)
        self._stages[attempt.group] = {}
        self._running.group = attempt.group
        session.addTag(tag)  # thread-local: only this thread's operations carry it
        try:
            result = self._bodies.run(session, attempt, cancelled=cancelled, report=report)
        finally:
            session.removeTag(tag)
            self._running.group = None
            self._stages.pop(attempt.group, None)
        return result.model_copy(update={"cost": None, "cost_unknown": CONNECT_COST_UNKNOWN})

    def _on_progress(self, stages: Any, inflight_tasks: int, operation_id: str | None, done: bool) -> None:
        group = getattr(self._running, "group", None)
        if group is None or group not in self._stages:
            return
        seen = self._stages[group]
        for stage in stages or ():
            seen[(operation_id, stage.stage_id)] = (stage.num_completed_tasks, stage.num_tasks)

    def spent(self, attempt: JobAttempt) -> tuple[SparkCost | None, str | None]:
        return None, CONNECT_COST_UNKNOWN

    def progress(self, attempt: JobAttempt) -> Progress:
        seen = dict(self._stages.get(attempt.group, {}))
        return {
            "operations": len({operation for operation, _stage in seen}),
            "tasks_done": sum(done for done, _total in seen.values()),
            "tasks_total": sum(total for _done, total in seen.values()),
        }

    def cancel(self, attempt: JobAttempt) -> None:
        # The current session: one replaced after a server restart has no operations left to stop.
        if self._session is not None:
            self._session.interruptTag(operation_tag(attempt))

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.stop()
                self._session = None


def _closed(session: "SparkSession") -> bool:
    # The builder is typed as returning a classic session; with a remote URL it is a Connect one.
    return cast("RemoteSession", session).is_stopped
