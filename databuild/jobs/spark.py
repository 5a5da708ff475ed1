"""One long-lived SparkSession per worker process, and progress of the jobs in a job group."""

import logging
import os
import subprocess
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from databuild.errors import SparkStartError
from databuild.jobs.java import ensure_java

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession


# SQL settings that make a job's results the same whichever executor runs it (runtime settings, so a
# Spark Connect session may set them too). Tuning such as shuffle partitions is left to the cluster.
JOB_SQL_CONF: dict[str, bool | float | int | str | None] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.partitionOverwriteMode": "static",
    # Timestamps as Parquet's standard microseconds, which every engine and Iceberg read (Spark's default,
    # INT96, is a legacy of Impala that an Iceberg table cannot take).
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
# The log4j2 configuration of a driver whose output goes to a log file (see SparkRuntime.log_file).
LOG4J_CONFIG = Path(__file__).with_name("spark-log4j2.properties")

log = logging.getLogger(__name__)


class SparkRuntime:
    def __init__(
        self,
        master: str = "local[2]",
        driver_memory: str = "2g",
        app_name: str = "databuild",
        catalog: dict[str, str] | None = None,
        log_file: Path | None = None,
    ) -> None:
        self.master = master
        self.driver_memory = driver_memory
        self.app_name = app_name
        self.catalog = (
            catalog  # Spark settings of a Hive metastore (databuild.jobs.tables.hive), if it has one
        )
        # Where the driver JVM writes (log4j, and what it prints itself), so that it never writes over
        # the terminal of `databuild dev`; None: this process's stderr, at level ERROR (tests).
        self.log_file = log_file
        self._session: SparkSession | None = None
        self._lock = threading.Lock()

    def session(self) -> "SparkSession":
        with self._lock:
            if self._session is None:
                ensure_java()
                from pyspark.sql import SparkSession

                conf = self.conf()
                try:
                    if self.log_file is not None:
                        start_logging_to(self.log_file, conf)
                    self._session = SparkSession.builder.config(map={**conf}).getOrCreate()
                except Exception as error:
                    if self.log_file is None:
                        raise
                    # Why it failed is in the log, where the JVM's output went, not on the terminal. No
                    # chained cause: a job run's failure shows the innermost error, which must be this.
                    raise SparkStartError(
                        f"Spark did not start ({error}); its output is in {self.log_file}"
                    ) from None
                if self.log_file is None:  # Spark's warnings would be on this process's stderr
                    self._session.sparkContext.setLogLevel("ERROR")
                else:
                    log.info("Spark driver started (master %s); its log is %s", self.master, self.log_file)
            return self._session

    def conf(self) -> dict[str, str]:
        """The settings of the session, all of them known before its JVM starts."""
        conf = {
            "spark.master": self.master,
            "spark.app.name": self.app_name,
            "spark.driver.memory": self.driver_memory,
            "spark.ui.enabled": "false",
            # DataBuild shows each job's progress itself; Spark's bar would draw over it.
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "4",  # small jobs; Spark's 200 is for clusters
            **{key: str(value) for key, value in JOB_SQL_CONF.items()},
            **(self.catalog or {}),
        }
        if self.log_file is not None:
            options = conf.get("spark.driver.extraJavaOptions", "")  # the catalog's, if any
            conf["spark.driver.extraJavaOptions"] = (
                f'{options} -Dlog4j2.configurationFile="{LOG4J_CONFIG}"'.strip()
            )
        return conf

    def cancel_group(self, group: str) -> None:
        if self._session is not None:
            self._session.sparkContext.cancelJobGroup(group)

    def progress(self, group: str) -> dict[str, int]:
        return {} if self._session is None else group_progress(self._session.sparkContext, group)

    def stop(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.stop()
                self._session = None


def start_logging_to(path: Path, conf: dict[str, str]) -> None:
    """Start the driver JVM (unless this process has one) with its stdout and stderr on ``path``.
    The JVM writes to the file descriptors it inherits, which no redirection of Python's sys.stderr
    reaches: what it prints before log4j starts (JVM warnings), and log4j itself, whose configuration
    (``LOG4J_CONFIG``) writes to stderr. pyspark's own launcher takes ``popen_kwargs`` for this; the
    builder then finds the context made here."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # one JVM per process: an earlier session's, with its output
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as out:
        # Appended to by every start: a line tells the runs apart.
        out.write(f"--- {datetime.now(UTC):%Y-%m-%d %H:%M:%S} Spark driver of pid {os.getpid()}\n".encode())
        out.flush()
        spark_conf = SparkConf().setAll(list(conf.items()))
        redirect = {"stdout": out, "stderr": subprocess.STDOUT}
        gateway = launch_gateway(spark_conf, popen_kwargs=redirect)  # type: ignore[no-untyped-call]
    SparkContext(conf=spark_conf, gateway=gateway)


def group_progress(context: "SparkContext", group: str) -> dict[str, int]:
    """Tasks done/total over every Spark job started in ``group`` so far."""
    tracker = context.statusTracker()
    done = total = 0
    job_ids = tracker.getJobIdsForGroup(group)
    for job_id in job_ids:
        info = tracker.getJobInfo(job_id)
        for stage_id in info.stageIds if info else []:
            stage = tracker.getStageInfo(stage_id)
            if stage:
                done += stage.numCompletedTasks
                total += stage.numTasks
    return {"spark_jobs": len(job_ids), "tasks_done": done, "tasks_total": total}
