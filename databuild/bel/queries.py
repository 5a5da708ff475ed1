"""Read side of the build event log: indexed lookups on the projections, one mixin per aggregate.

``BelQueries`` is the read-only view of the log that job contexts, views and operations are given."""

from databuild.bel.aggregates.backfills import BackfillReads
from databuild.bel.aggregates.costs import CostReads
from databuild.bel.aggregates.events import EventReads
from databuild.bel.aggregates.job_runs import JobRunReads
from databuild.bel.aggregates.partitions import PartitionReads
from databuild.bel.aggregates.wants import WantReads
from databuild.bel.aggregates.workers import WorkerReads
from databuild.bel.reads.lineage_facts import LineageFactReads


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
