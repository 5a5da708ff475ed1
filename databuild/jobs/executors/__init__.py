"""Job executors: where a job body runs on Spark. ``session`` (the worker's own SparkSession, local or a
cluster client), ``submit`` (its own application through spark-submit) and ``connect`` (Spark Connect)
all run the same job code; the settings choose one per graph and may override it per job."""

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from databuild.bel.queries import BelQueries
from databuild.config import Settings
from databuild.errors import InvalidInputError
from databuild.graph import Graph
from databuild.jobs.executors.base import Executor, Progress
from databuild.jobs.executors.body import BodyResult, JobAttempt, JobBodies
from databuild.jobs.executors.connect import ConnectExecutor
from databuild.jobs.executors.session import SessionExecutor
from databuild.jobs.executors.submit import SubmitExecutor, SubmitOptions, default_spark_submit
from databuild.jobs.spark import SparkRuntime
from databuild.jobs.storage import Storage
from databuild.models import ExecutorKind

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "BodyResult",
    "Executor",
    "Executors",
    "JobAttempt",
    "Progress",
    "check_session",
]


class Executors:
    """The executor of every job of one graph."""

    def __init__(
        self,
        default: Executor,
        by_job: dict[str, Executor] | None = None,
        spark_conf: dict[str, dict[str, str]] | None = None,
        versions: dict[str, str] | None = None,
    ) -> None:
        self.default = default
        self.by_job = dict(by_job or {})
        self.spark_conf = dict(spark_conf or {})  # job label -> the Spark properties it declares
        # job label -> the code version of this worker's graph: recorded on what it builds, whichever
        # executor ran the body (a submitted application's code is the worker's graph too)
        self.versions = dict(versions or {})

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
        chosen = chosen_executors(settings, graph)
        kinds = {settings.executor, *chosen.values()}
        check_executor_kinds(settings, graph, chosen, kinds)
        spark_submit = _spark_submit(settings) if "submit" in kinds else Path()
        bodies = JobBodies(bel, graph, storage, settings.job_log_max_bytes)
        made = {
            kind: _make(kind, settings, bodies, spark=spark, storage=storage, spark_submit=spark_submit)
            for kind in kinds
        }
        return cls(
            made[settings.executor],
            {label: made[kind] for label, kind in chosen.items()},
            {job.label: job.spark_conf for job in graph.jobs if job.spark_conf},
            {job.label: job.version for job in graph.jobs},
        )


def check_session(executors: Executors, spark: SparkRuntime) -> Callable[[], "SparkSession"]:
    """The session `databuild check` runs checks in on this worker: its Spark Connect session when it
    runs jobs there (pyspark then cannot have a classic session in the process too), else its own."""
    connect = next((e for e in executors.used if isinstance(e, ConnectExecutor)), None)
    return connect.live_session if connect is not None else spark.session


def chosen_executors(settings: Settings, graph: Graph) -> dict[str, ExecutorKind]:
    """The executor kind of every job that does not run on the worker's default: the operator's
    DATABUILD_JOB_EXECUTORS over the graph's `executor=` (over DATABUILD_EXECUTOR, the default)."""
    known = {job.label for job in graph.jobs}
    unknown = sorted(set(settings.job_executors) - known)
    if unknown:
        raise InvalidInputError(
            f"DATABUILD_JOB_EXECUTORS names {', '.join(unknown)}, not a job of graph {graph.name!r} "
            f"(its jobs: {', '.join(sorted(known)) or 'none'})"
        )
    return {
        **{job.label: job.executor for job in graph.jobs if job.executor is not None},
        **settings.job_executors,
    }


def check_executor_kinds(
    settings: Settings, graph: Graph, chosen: dict[str, ExecutorKind], kinds: set[ExecutorKind]
) -> None:
    """Refuse executor kinds one worker cannot run together, or without the settings they need."""
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
    on_connect = [
        label for label in chosen if chosen[label] == "connect" and graph.job_by_label(label).spark_conf
    ]
    if settings.executor == "connect":
        on_connect += [j.label for j in graph.jobs if j.spark_conf and j.label not in chosen]
    if on_connect:
        raise InvalidInputError(
            f"job(s) {', '.join(sorted(on_connect))} declare spark_conf, which the 'connect' executor cannot "
            "apply per job (its session is shared): run them with executor='submit' or 'session'"
        )


def _spark_submit(settings: Settings) -> Path:
    spark_submit = settings.spark_submit or default_spark_submit()
    if not (spark_submit.is_file() and os.access(spark_submit, os.X_OK)):
        raise InvalidInputError(
            f"DATABUILD_SPARK_SUBMIT={spark_submit} is not an executable file: point it at "
            "$SPARK_HOME/bin/spark-submit, or unset it to use the pyspark package's"
        )
    return spark_submit


def _make(
    kind: ExecutorKind,
    settings: Settings,
    bodies: JobBodies,
    *,
    spark: SparkRuntime,
    storage: Storage,
    spark_submit: Path,
) -> Executor:
    if kind == "session":
        return SessionExecutor(spark, bodies)
    if kind == "connect":
        assert settings.spark_connect_url is not None
        return ConnectExecutor(settings.spark_connect_url.get_secret_value(), bodies)
    options = SubmitOptions(
        master=settings.spark_submit_master or settings.spark_master,
        driver_memory=settings.spark_driver_memory,
        graph=settings.graph,
        database_url=settings.database_url.get_secret_value(),
        # Slow shared storage must not stop a healthy application; a dead worker's is stopped soon.
        abandon_after_seconds=max(3 * settings.job_heartbeat_timeout.total_seconds(), 60),
        spark_submit=spark_submit,
        extra_args=tuple(settings.spark_submit_args),
        log_max_bytes=settings.job_log_max_bytes,
    )
    return SubmitExecutor(options, storage=storage)
