"""What a job body sees, as the graph declares it: ``ctx.read`` (checked against the BEL, recorded for
lineage, missing inputs reported together; ``ctx.read_instance`` for any instance by UUID;
``ctx.read_previous`` for the live instance of one of the job's own outputs, an incremental job's),
``ctx.write`` (into each output's own new instance location, recording its facts; ``ctx.write_partitioned``
for a batch's partitions in one Spark write) and ``ctx.log`` (into
the attempt's log). The executors pass an implementation (``databuild.jobs.context``)."""

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class JobContext(Protocol):
    spark: "SparkSession"
    job_run_id: str
    job_label: str
    outputs: list[str]
    params: dict[str, str]
    # Every partition the run builds: one, or a batch's (each its placeholders).
    partitions: list[dict[str, str]]
    logger: logging.Logger

    def read(self, ref: str) -> "DataFrame":
        """The live data of ``ref``. Raises ``MissingInputsError`` if it is not live."""

    def read_all(self, refs: Sequence[str]) -> list["DataFrame"]:
        """Read several inputs at once, so that every missing one is reported in one dep-miss. Each is
        read from the instance live now, to the end of the job, whatever is built meanwhile."""

    def read_instance(self, instance_id: str) -> "DataFrame":
        """The data of one instance, live or not (e.g. the one yesterday's run read), recorded as a read
        for lineage. Raises ``JobContractError`` if the BEL knows no such instance or its data was
        garbage-collected."""

    def read_previous(self, ref: str) -> "DataFrame | None":
        """The live data of one of the job's own outputs, to build its new instance on (a cumulative
        table, a merge, a slowly changing dimension); None when it has no live instance (its first build,
        or after a taint). Recorded in lineage as the previous instance, which is never late data for, nor
        makes stale, the instance built on it."""

    def write(self, ref: str, frame: "DataFrame") -> None:
        """Write an output into its own new instance location. It becomes live when the run succeeds
        and the BEL records it; until then nobody reads it."""

    def read_partitioned(self, refs: Sequence[str]) -> "DataFrame":
        """Several inputs as one DataFrame (a batch's, say), each row with its partition's placeholder
        values as text columns (``date`` for ``raw_events/{date}``) where its data has none of that name
        (a partitioned write keeps them in folder names). The inputs are read as one scan, but for a
        published one whose folder is not flat (its data in sub-folders, or outside the storage), which
        is read on its own. Every missing input is reported together, as ``read_all`` does."""

    def write_partitioned(self, frame: "DataFrame", output: str | None = None) -> None:
        """Write one DataFrame into every partition of the run of the output pattern ``output`` (the
        job's only one by default), as one Spark ``partitionBy`` write by the pattern's placeholders: a
        row goes to the partition its placeholder columns name (``date`` for ``raw_events/{date}``).
        The write goes to a folder of this attempt, ``raw_events/~<job run>-<attempt>``, and each
        partition's sub-folder (``date=2024-01-01``) is its instance location, with its own facts and
        lineage. As with ``partitionBy``, the placeholder columns are in the folder names, not the
        files; ``read_partitioned`` gives them back. Every partition of the run must have rows, and
        every row must be one of the run's partitions; otherwise the run fails naming them, and
        publishes nothing."""

    def write_all(self, frames: Mapping[str, "DataFrame"], *, parallel: int = 8) -> None:
        """Write several outputs at once (a batch's), as concurrent Spark jobs in the run's job group:
        small writes are mostly waiting, so together they take little more than the longest."""

    def log(self, message: str, *args: object, level: int = logging.INFO) -> None:
        """A line in the attempt's log (`databuild job-runs show ID --log`): ``message % args``, as
        `logging` formats it. Python `logging` records from the job's thread go there too."""

    def progress(self, message: str) -> None:
        """A line of progress shown in the Temporal UI (heartbeat details) and the CLI."""
