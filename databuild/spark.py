"""One long-lived SparkSession per worker process, and progress of the jobs in a job group."""

import threading
from typing import TYPE_CHECKING

from databuild.java import ensure_java

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession


# SQL settings that make a job's results the same whichever executor runs it (runtime settings, so a
# Spark Connect session may set them too). Tuning such as shuffle partitions is left to the cluster.
JOB_SQL_CONF: dict[str, bool | float | int | str | None] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.partitionOverwriteMode": "static",
}


class SparkRuntime:
    def __init__(
        self,
        master: str = "local[2]",
        driver_memory: str = "2g",
        app_name: str = "databuild",
        catalog: dict[str, str] | None = None,
    ) -> None:
        self.master = master
        self.driver_memory = driver_memory
        self.app_name = app_name
        self.catalog = catalog  # Spark settings of a Hive metastore (databuild.catalog), if it has one
        self._session: SparkSession | None = None
        self._lock = threading.Lock()

    def session(self) -> "SparkSession":
        with self._lock:
            if self._session is None:
                ensure_java()
                from pyspark.sql import SparkSession

                self._session = (
                    SparkSession.builder.master(self.master)
                    .appName(self.app_name)
                    .config("spark.driver.memory", self.driver_memory)
                    .config("spark.ui.enabled", "false")
                    .config("spark.sql.shuffle.partitions", "4")  # small jobs; Spark's 200 is for clusters
                    .config(map=JOB_SQL_CONF)
                    .config(map=dict(self.catalog or {}))
                    .getOrCreate()
                )
                self._session.sparkContext.setLogLevel("ERROR")
            return self._session

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
