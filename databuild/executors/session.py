"""Executor (a): the worker's own long-lived SparkSession, local or a client of a cluster master
(``spark://``, ``k8s://``, ``yarn``); one Spark job group per attempt for progress and cancellation."""

import threading

from databuild.executors.base import Progress
from databuild.executors.body import BodyResult, JobAttempt, JobBodies, Report
from databuild.spark import SparkRuntime


class SessionExecutor:
    def __init__(self, runtime: SparkRuntime, bodies: JobBodies) -> None:
        self.runtime = runtime
        self._bodies = bodies

    def warm(self) -> None:
        self.runtime.session()

    def run(self, attempt: JobAttempt, *, cancelled: threading.Event, report: Report) -> BodyResult:
        session = self.runtime.session()
        context = session.sparkContext
        # Job groups are thread-local and, unlike classic interruptTag, cancellable from another thread.
        context.setJobGroup(attempt.group, attempt.description, True)
        try:
            return self._bodies.run(session, attempt, cancelled=cancelled, report=report)
        finally:
            context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]

    def progress(self, attempt: JobAttempt) -> Progress:
        return dict(self.runtime.progress(attempt.group))

    def cancel(self, attempt: JobAttempt) -> None:
        self.runtime.cancel_group(attempt.group)

    def close(self) -> None:
        """The runtime belongs to whoever made it (the worker stops it)."""
