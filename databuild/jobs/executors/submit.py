"""Executor (b): each attempt is its own Spark application, launched with ``spark-submit``. The worker
heartbeats it through a file, reads its progress and result from files on shared storage, and kills
the application when the job run is cancelled."""

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from databuild.domain.cost import SparkCost
from databuild.errors import JobCancelledError, JobContractError, SubmittedJobError
from databuild.jobs.attempt_log import DEFAULT_MAX_BYTES, with_application_output
from databuild.jobs.executors.base import Progress
from databuild.jobs.executors.body import BodyResult, JobAttempt, Report
from databuild.jobs.executors.submission import (
    DATABASE_URL_VARIABLE,
    ENTRY_SCRIPT,
    SubmitFiles,
    SubmitProgress,
    SubmitResult,
    SubmittedJob,
)
from databuild.jobs.java import ensure_java
from databuild.jobs.spark import JOB_SQL_CONF
from databuild.jobs.storage import Storage

HEARTBEAT_EVERY = 1.0
KILL_GRACE = 10.0  # seconds between SIGTERM and SIGKILL of a cancelled application
LOG_TAIL = 3000

logger = logging.getLogger(__name__)


def default_spark_submit() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


@dataclass(frozen=True)
class SubmitOptions:
    master: str
    driver_memory: str
    graph: str
    database_url: str
    abandon_after_seconds: float
    spark_submit: Path
    extra_args: tuple[str, ...] = ()
    log_max_bytes: int = DEFAULT_MAX_BYTES


class SubmitExecutor:
    kind = "submit"

    def __init__(self, options: SubmitOptions, *, storage: Storage) -> None:
        self.options = options
        self._storage = storage
        self._files: dict[str, SubmitFiles] = {}
        self._spent: dict[str, SparkCost] = {}  # of attempts whose application reported a failure

    def warm(self) -> None:
        ensure_java()

    def command(self, attempt: JobAttempt, files: SubmitFiles, entry: Path) -> list[str]:
        o = self.options
        return [
            str(o.spark_submit),
            *("--master", o.master),
            *("--name", f"databuild:{attempt.job_label}:{attempt.group}"),
            *("--driver-memory", o.driver_memory),
            *("--conf", "spark.ui.enabled=false"),
            # Its output is kept (and its end quoted in a failure): no progress bar redrawn in there.
            *("--conf", "spark.ui.showConsoleProgress=false"),
            *(arg for key, value in JOB_SQL_CONF.items() for arg in ("--conf", f"{key}={value}")),
            *o.extra_args,  # after the defaults, so a user's --conf wins
            *(arg for key, value in attempt.spark_conf.items() for arg in ("--conf", f"{key}={value}")),
            str(entry),
            files.storage.uri,
            files.key,
        ]

    def environment(self) -> dict[str, str]:
        # The driver imports the graph as this worker does: same interpreter, same module path ('' on
        # sys.path is the worker's working directory). Executors on other hosts need PYSPARK_PYTHON set
        # to their own interpreter.
        paths = [p or os.getcwd() for p in (*os.environ.get("PYTHONPATH", "").split(os.pathsep), *sys.path)]
        return {
            **os.environ,
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
            DATABASE_URL_VARIABLE: self.options.database_url,
        }

    def launch(self, attempt: JobAttempt, local: Path) -> tuple[subprocess.Popen[bytes], SubmitFiles]:
        """Write the attempt's request into its folder on the storage and start its application, with
        its entry script and spark-submit's output in ``local``."""
        files = SubmitFiles(self._storage, self._storage.submission_key(attempt.job_run_id, attempt.attempt))
        job = SubmittedJob(
            attempt=attempt,
            graph=self.options.graph,
            storage_root=self._storage.uri,
            abandon_after_seconds=self.options.abandon_after_seconds,
            log_max_bytes=self.options.log_max_bytes,
        )
        files.write(SubmitFiles.REQUEST, job.model_dump_json())
        files.write(SubmitFiles.HEARTBEAT, "0")
        entry = local / "main.py"
        entry.write_text(ENTRY_SCRIPT)
        ensure_java()
        with (local / SubmitFiles.LOG).open("ab") as log:
            process = subprocess.Popen(
                self.command(attempt, files, entry),
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the JVM and the Python driver go together
            )
        return process, files

    def run(self, attempt: JobAttempt, *, cancelled: threading.Event, report: Report) -> BodyResult:
        with tempfile.TemporaryDirectory(prefix="databuild-submit-") as local:
            process, files = self.launch(attempt, Path(local))
            self._files[attempt.group] = files
            try:
                self._supervise(process, files, cancelled)
            finally:
                self._files.pop(attempt.group, None)
                if process.poll() is None:  # the worker is giving up on it (e.g. shutting down)
                    _kill(process)
            log = _tail(Path(local) / SubmitFiles.LOG)
            self._save_log(attempt, Path(local) / SubmitFiles.LOG)
        if cancelled.is_set():
            self._storage.delete(files.key)
            raise JobCancelledError(
                f"job run {attempt.job_run_id} was cancelled; its application was stopped"
            )
        try:
            body = self._result(process, files, log)
        except Exception:
            # A failed attempt keeps its folder, with the end of the application's log, for a while.
            with contextlib.suppress(OSError):
                files.write(SubmitFiles.LOG, log)
            raise
        self._storage.delete(files.key)
        return body

    def _save_log(self, attempt: JobAttempt, output: Path) -> None:
        """The attempt's log as the application saved it (the job body's), then the application's own
        output: JVM warnings and errors are only there. Written once the application has ended, so
        nothing else writes the log meanwhile."""
        key = self._storage.log_key(attempt.job_run_id, attempt.attempt)
        try:
            body = self._storage.read_text(key)
        except FileNotFoundError:
            body = (
                "(no log of the job body: the application ended before it ran the body, or could not save it)"
            )
        text = with_application_output(
            body, _tail(output, self.options.log_max_bytes), self.options.log_max_bytes
        )
        try:
            self._storage.write_text(key, text)
        except OSError as error:  # the log is for people: it never changes the attempt's outcome
            logger.warning("could not save the log of %s: %s", attempt.group, error)

    def _supervise(
        self, process: subprocess.Popen[bytes], files: SubmitFiles, cancelled: threading.Event
    ) -> None:
        beat = 0
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=HEARTBEAT_EVERY)
                return
            beat += 1
            with contextlib.suppress(OSError):  # a storage hiccup: the application tolerates missed beats
                files.write(SubmitFiles.HEARTBEAT, str(beat))
            if cancelled.is_set():
                with contextlib.suppress(OSError):  # reaches a driver that runs elsewhere (cluster mode)
                    files.write(SubmitFiles.CANCEL, "")
                _kill(process)
                return

    def _result(self, process: subprocess.Popen[bytes], files: SubmitFiles, log: str) -> BodyResult:
        """What the application reported."""
        try:
            result = SubmitResult.model_validate_json(files.read(SubmitFiles.RESULT))
        except FileNotFoundError:
            raise SubmittedJobError(
                f"the Spark application exited with code {process.returncode} without a result; "
                f"its log ({files.location(SubmitFiles.LOG)}) ends:\n{log}"
            ) from None
        except ValidationError as error:
            raise SubmittedJobError(
                f"the Spark application wrote an unreadable {files.location(SubmitFiles.RESULT)}: {error}"
            ) from None
        if result.failure is not None:
            if result.cost is not None:
                self._spent[files.key] = result.cost
            failure = result.failure
            if failure.type == "JobContractError":
                raise JobContractError(failure.message)
            if failure.type == "JobCancelledError":
                raise JobCancelledError(failure.message)
            raise SubmittedJobError(failure.message, kind=failure.type, traceback=failure.traceback)
        if result.body is None:
            raise SubmittedJobError(
                f"{files.location(SubmitFiles.RESULT)} holds neither an outcome nor an error"
            )
        return result.body

    def spent(self, attempt: JobAttempt) -> tuple[SparkCost | None, str | None]:
        cost = self._spent.pop(self._storage.submission_key(attempt.job_run_id, attempt.attempt), None)
        return cost, None if cost is not None else "the application ended without reporting its cost"

    def progress(self, attempt: JobAttempt) -> Progress:
        files = self._files.get(attempt.group)
        if files is None:
            return {}
        try:
            progress = SubmitProgress.model_validate_json(files.read(SubmitFiles.PROGRESS))
        except (OSError, ValidationError):
            return {"application": "starting"}
        return progress.model_dump()

    def cancel(self, attempt: JobAttempt) -> None:
        """``run`` sees the cancelled event within a heartbeat and kills the application."""

    def close(self) -> None:
        pass


def _kill(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the application's process group (JVM shutdown hooks stop the SparkContext, so the
    cluster manager frees its executors), then SIGKILL whatever is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=KILL_GRACE)
    with contextlib.suppress(ProcessLookupError):  # the JVM, or a Python driver that outlived it
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _tail(path: Path, limit: int = LOG_TAIL) -> str:
    """The last ``limit`` bytes of a file that may be large (a long application's output)."""
    try:
        with path.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - limit))
            return file.read().decode(errors="replace")
    except OSError:
        return "(no log)"
