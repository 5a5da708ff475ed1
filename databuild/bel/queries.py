"""Read side of the build event log: one read service per aggregate, on one recorder.

``BelQueries`` is the read-only view of the log that job contexts, views and operations are given."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from sqlalchemy import Connection, Engine

from databuild.bel.aggregates.backfills import BackfillReads
from databuild.bel.aggregates.costs import CostReads
from databuild.bel.aggregates.events import EventReads
from databuild.bel.aggregates.job_runs import JobRunReads
from databuild.bel.aggregates.partitions import PartitionReads
from databuild.bel.aggregates.wants import WantReads
from databuild.bel.aggregates.workers import WorkerReads
from databuild.bel.engine.recorder import Recorder
from databuild.bel.reads.lineage_facts import LineageFactReads

P = ParamSpec("P")
R = TypeVar("R")


class BelQueries:
    """Every read of the log, by aggregate (``bel.wants.get(id)``, ``bel.partitions.query(...)``)."""

    wants: WantReads
    job_runs: JobRunReads
    partitions: PartitionReads
    backfills: BackfillReads
    events: EventReads
    costs: CostReads
    workers: WorkerReads
    lineage: LineageFactReads

    def __init__(self, log: Recorder) -> None:
        self._log = log
        self._compose(log)

    def _compose(self, log: Recorder) -> None:
        self.wants = WantReads(log)
        self.job_runs = JobRunReads(log)
        self.partitions = PartitionReads(log)
        self.backfills = BackfillReads(log)
        self.events = EventReads(log)
        self.costs = CostReads(log)
        self.workers = WorkerReads(log)
        self.lineage = LineageFactReads(log)

    @property
    def url(self) -> str:
        return self._log.url

    @property
    def reader(self) -> Engine:
        return self._log.reader

    @property
    def writer(self) -> Engine:
        return self._log.writer

    async def call(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` (a BEL call) on the log's threads, off the event loop."""
        return await self._log.call(fn, *args, **kwargs)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Run the enclosed reads on one connection in one read transaction: a view assembled from
        several lookups then sees one state of the log, and costs one connection checkout."""
        with self._log.snapshot():
            yield

    @contextmanager
    def snapshot_connection(self) -> Iterator[Connection]:
        """A connection in a read transaction that sees one state of the log."""
        with self._log.snapshot_connection() as conn:
            yield conn
