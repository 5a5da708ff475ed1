"""Job executors: where a job body runs on Spark. ``session`` (the worker's own SparkSession, local or a
cluster client), ``submit`` (its own application through spark-submit) and ``connect`` (Spark Connect)
all run the same job code; the settings choose one per graph and may override it per job."""

import os
from pathlib import Path

from databuild.bel.queries import BelQueries
from databuild.config import ExecutorKind, Settings
from databuild.errors import InvalidInputError
from databuild.executors.base import Executor, Progress
from databuild.executors.body import BodyResult, JobAttempt, JobBodies
from databuild.executors.connect import ConnectExecutor
from databuild.executors.session import SessionExecutor
from databuild.executors.submit import SubmitExecutor, SubmitOptions, default_spark_submit
from databuild.graph import Graph
from databuild.spark import SparkRuntime
from databuild.storage import Storage

__all__ = [
    "BodyResult",
    "Executor",
    "Executors",
    "JobAttempt",
    "Progress",
]


class Executors:
    """The executor of every job of one graph."""

    def __init__(self, default: Executor, by_job: dict[str, Executor] | None = None) -> None:
        self.default = default
        self.by_job = dict(by_job or {})

    def for_job(self, label: str) -> Executor:
        return self.by_job.get(label, self.default)

    @property
    def used(self) -> list[Executor]:
        return list({id(e): e for e in (self.default, *self.by_job.values())}.values())

    def warm(self) -> None:
        for executor in self.used:
            executor.warm()

    def close(self) -> None:
        for executor in self.used:
            executor.close()

    @classmethod
    def from_settings(
        cls, settings: Settings, *, graph: Graph, bel: BelQueries, storage: Storage, spark: SparkRuntime
    ) -> "Executors":
        """Raises ``InvalidInputError`` naming the setting to fix."""
        known = {job.label for job in graph.jobs}
        unknown = sorted(set(settings.job_executors) - known)
        if unknown:
            raise InvalidInputError(
                f"DATABUILD_JOB_EXECUTORS names {', '.join(unknown)}, not a job of graph {graph.name!r} "
                f"(its jobs: {', '.join(sorted(known)) or 'none'})"
            )
        kinds = {settings.executor, *settings.job_executors.values()}
        if {"session", "connect"} <= kinds:
            raise InvalidInputError(
                "one worker cannot run jobs on both its own SparkSession (executor 'session') and Spark "
                "Connect: pyspark switches DataFrame functions to Connect for the whole process. Run the "
                "in-process jobs with one of the two, and jobs that need their own application with 'submit'"
            )
        if "connect" in kinds and not settings.spark_connect_url:
            raise InvalidInputError(
                "the 'connect' executor needs DATABUILD_SPARK_CONNECT_URL, e.g. sc://spark-connect:15002"
            )

        spark_submit = (settings.spark_submit or default_spark_submit()) if "submit" in kinds else Path()
        if "submit" in kinds and not (spark_submit.is_file() and os.access(spark_submit, os.X_OK)):
            raise InvalidInputError(
                f"DATABUILD_SPARK_SUBMIT={spark_submit} is not an executable file: point it at "
                "$SPARK_HOME/bin/spark-submit, or unset it to use the pyspark package's"
            )

        bodies = JobBodies(bel, graph, storage)

        def make(kind: ExecutorKind) -> Executor:
            if kind == "session":
                return SessionExecutor(spark, bodies)
            if kind == "connect":
                assert settings.spark_connect_url is not None
                return ConnectExecutor(settings.spark_connect_url, bodies)
            options = SubmitOptions(
                master=settings.spark_submit_master or settings.spark_master,
                driver_memory=settings.spark_driver_memory,
                graph=settings.graph,
                database_url=settings.database_url,
                # Slow shared storage must not stop a healthy application; a dead worker's is stopped soon.
                abandon_after_seconds=max(3 * settings.job_heartbeat_timeout.total_seconds(), 60),
                spark_submit=spark_submit,
                extra_args=tuple(settings.spark_submit_args),
            )
            return SubmitExecutor(options, storage=storage)

        made = {kind: make(kind) for kind in kinds}
        return cls(
            made[settings.executor], {label: made[kind] for label, kind in settings.job_executors.items()}
        )
