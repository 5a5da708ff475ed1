"""Read side of the build event log: indexed lookups on the projections, one mixin per aggregate.

``BelQueries`` is the read-only view of the log that job contexts, views and operations are given."""

from databuild.bel.backfills import BackfillReads
from databuild.bel.costs import CostReads
from databuild.bel.events import EventReads
from databuild.bel.job_runs import JobRunReads
from databuild.bel.lineage_facts import LineageFactReads
from databuild.bel.partitions import PartitionReads
from databuild.bel.wants import WantReads
from databuild.bel.workers import WorkerReads


class BelQueries(
    WantReads,
    JobRunReads,
    PartitionReads,
    LineageFactReads,
    BackfillReads,
    EventReads,
    CostReads,
    WorkerReads,
):
    """Every read of the log."""
