"""The build event log: append-only events plus projections, updated in one transaction per command.

Three layers, each a package: ``bel.engine`` (the recorder: engines, the one write path with its locks,
group commit, outages, and one module per backend holding every dialect difference), ``bel.aggregates``
(one set of commands per aggregate: wants, decisions, job runs, partitions, pools, backfills, costs,
workers, tables, the log itself) and ``bel.reads`` (the read models). ``BuildEventLog`` composes the aggregates'
services on one recorder; which events a command appends is decided in ``databuild.domain``."""

import tempfile
from pathlib import Path

from databuild.bel import migrate
from databuild.bel.aggregates.backfills import Backfills
from databuild.bel.aggregates.base import new_instance_id, new_job_run_id
from databuild.bel.aggregates.costs import Costs
from databuild.bel.aggregates.decisions import Decisions
from databuild.bel.aggregates.events import Events
from databuild.bel.aggregates.job_runs import JobRuns
from databuild.bel.aggregates.partitions import Partitions
from databuild.bel.aggregates.pools import Pools
from databuild.bel.aggregates.tables import Tables
from databuild.bel.aggregates.wants import Wants
from databuild.bel.aggregates.workers import Workers
from databuild.bel.engine import backend_for
from databuild.bel.engine.keys import backfill_key, pool_key, ref_key, run_key, want_key
from databuild.bel.engine.recorder import Recorder
from databuild.bel.engine.transaction import place_pending
from databuild.bel.queries import BelQueries

__all__ = [
    "BuildEventLog",
    "backfill_key",
    "new_instance_id",
    "new_job_run_id",
    "pool_key",
    "ref_key",
    "run_key",
    "want_key",
]


class BuildEventLog(BelQueries):
    """The log: one service per aggregate (``bel.wants``, ``bel.job_runs``, ``bel.partitions``, ...), each
    with its commands and reads, all on one recorder (the read side's ``lineage`` as ``BelQueries`` has it)."""

    wants: Wants
    job_runs: JobRuns
    partitions: Partitions
    backfills: Backfills
    events: Events
    costs: Costs
    workers: Workers
    tables: Tables
    decisions: Decisions
    pools: Pools

    def __init__(self, url: str) -> None:
        super().__init__(Recorder(url))

    @classmethod
    def create(cls, url: str) -> "BuildEventLog":
        """Open the log, creating or upgrading its schema (Alembic) first."""
        bel = cls(url)
        with bel._log.write_lock, bel.writer.begin() as conn:
            migrate.upgrade(conn)
        place_pending(bel.writer)  # events of a writer that died between its COMMIT and placing them
        return bel

    @classmethod
    def create_to_read(cls, url: str) -> "BuildEventLog":
        """Open the log for reads alone: a SQLite file that does not exist yet is read as the empty log
        it would be, in a scratch file removed on ``dispose``, so a plan on a fresh home leaves nothing."""
        path = backend_for(url).file_of(url)
        if path is None or path.exists():
            return cls.create(url)
        scratch = tempfile.TemporaryDirectory(prefix="databuild-empty-bel-")
        bel = cls.create(f"sqlite:///{Path(scratch.name) / 'bel.sqlite'}")
        bel._scratch = scratch
        return bel

    _scratch: tempfile.TemporaryDirectory[str] | None = None

    def dispose(self) -> None:
        self._log.dispose()
        if self._scratch is not None:
            self._scratch.cleanup()
