"""Read side of the build event log: one read service per aggregate, on one recorder.

``BelQueries`` is the read-only view of the log that job contexts, views and operations are given."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar, get_type_hints

from sqlalchemy import Connection, Engine

from databuild.bel.aggregates.backfills import BackfillReads
from databuild.bel.aggregates.costs import CostReads
from databuild.bel.aggregates.events import EventReads
from databuild.bel.aggregates.job_runs import JobRunReads
from databuild.bel.aggregates.partitions import PartitionReads
from databuild.bel.aggregates.tables import TableReads
from databuild.bel.aggregates.wants import WantReads
from databuild.bel.aggregates.workers import WorkerReads
from databuild.bel.engine.recorder import Recorder
from databuild.bel.reads.base import ReadBase
from databuild.bel.reads.lineage_facts import LineageFactReads

P = ParamSpec("P")
R = TypeVar("R")


def services_of(cls: type) -> dict[str, type[ReadBase]]:
    """The services of a view of the log: each attribute annotated with a service's class, made on the log's
    recorder (a subclass's annotations narrow them, e.g. to the services with commands)."""
    hints = get_type_hints(cls)
    return {
        name: hint for name, hint in hints.items() if isinstance(hint, type) and issubclass(hint, ReadBase)
    }


class BelQueries:
    """Every read of the log, by aggregate (``bel.wants.get(id)``, ``bel.partitions.query(...)``)."""

    wants: WantReads
    job_runs: JobRunReads
    partitions: PartitionReads
    backfills: BackfillReads
    events: EventReads
    costs: CostReads
    workers: WorkerReads
    tables: TableReads
    lineage: LineageFactReads

    def __init__(self, log: Recorder) -> None:
        self._log = log
        for name, service in services_of(type(self)).items():
            setattr(self, name, service(log))

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
