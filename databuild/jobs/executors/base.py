"""The interface of a job executor: where and how a job body runs on Spark."""

import threading
from typing import Protocol

from databuild.domain.cost import SparkCost
from databuild.jobs.executors.body import BodyResult, JobAttempt, Report

Progress = dict[str, int | str]


class Executor(Protocol):
    kind: str  # session, submit or connect: recorded with each attempt's cost

    def warm(self) -> None:
        """Start what the first job would otherwise wait for (a session, a connection)."""

    def run(self, attempt: JobAttempt, *, cancelled: threading.Event, report: Report) -> BodyResult:
        """Blocking: run the job body of ``attempt`` and return what it did. Raises what the job
        raised (``JobCancelledError`` once ``cancelled`` is set and the work has stopped)."""
        ...

    def spent(self, attempt: JobAttempt) -> tuple[SparkCost | None, str | None]:
        """After ``run`` raised: what the attempt's Spark work cost until it stopped, or None and why not."""
        ...

    def progress(self, attempt: JobAttempt) -> Progress:
        """Spark progress of a running attempt, for heartbeat details."""
        ...

    def cancel(self, attempt: JobAttempt) -> None:
        """Stop the Spark work of a running attempt; ``run`` then returns by raising."""

    def close(self) -> None: ...
