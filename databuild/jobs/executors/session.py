"""Executor (a): the worker's own long-lived SparkSession, local or a client of a cluster master
(``spark://``, ``k8s://``, ``yarn``); one Spark job group per attempt for progress and cancellation."""

import threading
from typing import TYPE_CHECKING

from databuild.domain.cost import SparkCost
from databuild.errors import JobContractError
from databuild.jobs import spark_cost as spark_cost_module
from databuild.jobs.executors.base import Progress
from databuild.jobs.executors.body import (
    BodyResult,
    JobAttempt,
    JobBodies,
    Report,
    spark_cost,
    with_spark_cost,
)
from databuild.jobs.spark import SparkRuntime

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SessionExecutor:
    kind = "session"

    def __init__(self, runtime: SparkRuntime, bodies: JobBodies) -> None:
        self.runtime = runtime
        self._bodies = bodies

    def warm(self) -> None:
        self.runtime.session()

    def run(self, attempt: JobAttempt, *, cancelled: threading.Event, report: Report) -> BodyResult:
        session = self.runtime.session()
        if attempt.spark_conf:
            session = _with_conf(session, attempt)
        context = session.sparkContext
        # Job groups are thread-local and, unlike classic interruptTag, cancellable from another thread.
        context.setJobGroup(attempt.group, attempt.description, True)
        try:
            result = self._bodies.run(session, attempt, cancelled=cancelled, report=report)
        finally:
            # One Py4J call for the group, its description and its interrupt flag (PySpark has no method).
            context._jsc.clearJobGroup()
        if not spark_cost_module.ACCOUNTING:
            return result.model_copy(update={"cost_unknown": "accounting turned off"})
        return with_spark_cost(result, context, attempt.group)

    def spent(self, attempt: JobAttempt) -> tuple[SparkCost | None, str | None]:
        """The Spark work of a failed or cancelled attempt stays in the status store, under its group."""
        if not spark_cost_module.ACCOUNTING:
            return None, "accounting turned off"
        return spark_cost(self.runtime.session().sparkContext, attempt.group)

    def progress(self, attempt: JobAttempt) -> Progress:
        return dict(self.runtime.progress(attempt.group))

    def cancel(self, attempt: JobAttempt) -> None:
        self.runtime.cancel_group(attempt.group)

    def close(self) -> None:
        """The runtime belongs to whoever made it (the worker stops it)."""


def _with_conf(session: "SparkSession", attempt: JobAttempt) -> "SparkSession":
    """A session of its own for a job that declares Spark properties: it shares the worker's Spark
    application, and the properties do not leak into jobs running beside it."""
    own = session.newSession()
    for key, value in attempt.spark_conf.items():
        try:
            own.conf.set(key, value)
        except Exception as error:
            raise JobContractError(
                f"job {attempt.job_label} sets {key}, which the worker's Spark application fixes when it "
                f"starts ({type(error).__name__}); set it per job with executor='submit', or for every job "
                "in the worker's Spark settings"
            ) from None
    return own
