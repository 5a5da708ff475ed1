"""The application the spark-submit executor submits: runs one attempt's job body on its own
SparkSession and reports through files on shared storage (see ``submission``). It never writes the BEL:
the worker records the outcome from the result file."""

import os
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING

from databuild.bel.engine.recorder import Recorder
from databuild.bel.queries import BelQueries
from databuild.graph import load_graph
from databuild.jobs.executors.body import JobBodies, spark_cost, with_spark_cost
from databuild.jobs.executors.submission import (
    DATABASE_URL_VARIABLE,
    JobFailure,
    SubmitFiles,
    SubmitProgress,
    SubmitResult,
    SubmittedJob,
)
from databuild.jobs.spark import group_progress
from databuild.jobs.storage import Storage

if TYPE_CHECKING:
    from pyspark import SparkContext

WATCH_EVERY = 1.0


class Watchdog(threading.Thread):
    """Publishes progress, and stops the job when the worker cancels it or stops heartbeating."""

    def __init__(self, files: SubmitFiles, job: SubmittedJob, context: "SparkContext") -> None:
        super().__init__(name="databuild-watchdog", daemon=True)
        self.files = files
        self.job = job
        self.context = context
        self.message = "started"
        self.cancelled = threading.Event()
        self.stopped = threading.Event()
        self.reason = ""

    def run(self) -> None:
        # The heartbeat's content changes with every beat; judge its age by this process's own clock,
        # so clocks that differ across hosts of the shared storage do not matter.
        last_beat, changed_at = self._beat(), time.monotonic()
        while not self.stopped.wait(WATCH_EVERY):
            try:
                beat = self._beat()
                if beat != last_beat:
                    last_beat, changed_at = beat, time.monotonic()
                if self.files.exists(SubmitFiles.CANCEL) or not self.files.exists(SubmitFiles.REQUEST):
                    self._cancel("the worker cancelled the job run")
                elif time.monotonic() - changed_at > self.job.abandon_after_seconds:
                    self._cancel(f"no heartbeat from the worker for {self.job.abandon_after_seconds:.0f}s")
                spark = group_progress(self.context, self.job.attempt.group)
                progress = SubmitProgress(message=self.message, **spark)
                self.files.write(SubmitFiles.PROGRESS, progress.model_dump_json())
            except Exception as error:  # a storage or Py4J hiccup must not end the watch
                print(f"databuild watchdog: {error!r}", file=sys.stderr, flush=True)

    def _beat(self) -> str:
        try:
            return self.files.read(SubmitFiles.HEARTBEAT)
        except OSError:
            return ""

    def _cancel(self, reason: str) -> None:
        if not self.cancelled.is_set():
            self.reason = reason
            self.cancelled.set()
        # Again at every tick: a Spark job the body starts just after a cancel must be cancelled too.
        self.context.cancelJobGroup(self.job.attempt.group)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: main.py STORAGE_URI FOLDER (submitted by the databuild spark-submit executor)")
        return 2
    files = SubmitFiles(Storage(argv[0]), argv[1])
    job = SubmittedJob.model_validate_json(files.read(SubmitFiles.REQUEST))
    attempt = job.attempt
    from pyspark.sql import SparkSession

    # Master, resources and settings come from spark-submit's command line, the BEL from the
    # environment (so its credentials are never written to shared storage).
    session = SparkSession.builder.getOrCreate()
    context = session.sparkContext
    context.setLogLevel("WARN")
    log = Recorder(os.environ[DATABASE_URL_VARIABLE])
    watchdog = Watchdog(files, job, context)
    watchdog.start()
    context.setJobGroup(attempt.group, attempt.description, True)

    def report(message: str) -> None:
        watchdog.message = message

    bodies: JobBodies | None = None
    try:
        storage = Storage(job.storage_root)
        bodies = JobBodies(BelQueries(log), load_graph(job.graph), storage, job.log_max_bytes)
        body = bodies.run(session, attempt, cancelled=watchdog.cancelled, report=report)
        # Read here, in the application that did the work: its accounting ends with it.
        result = SubmitResult(body=with_spark_cost(body, context, attempt.group))
    except Exception as error:
        if bodies is None:  # before the body, whose log would have it: the application's output keeps it
            traceback.print_exc()
        kind = "JobCancelledError" if watchdog.cancelled.is_set() else type(error).__name__
        message = watchdog.reason if watchdog.cancelled.is_set() else str(error)
        result = SubmitResult(
            failure=JobFailure(type=kind, message=message, traceback=traceback.format_exc()),
            cost=spark_cost(context, attempt.group)[0],
        )
    finally:
        watchdog.stopped.set()
        watchdog.join()
        log.dispose()
    files.write(SubmitFiles.RESULT, result.model_dump_json())
    session.stop()
    return 0
