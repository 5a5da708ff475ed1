"""The job context a run's body gets in a Spark session, as ``databuild.graph.JobContext`` declares it:
``ctx.read`` checks the BEL, records the read for lineage and reports missing inputs together;
``ctx.write`` writes into each output's own new instance location and records its facts."""

import contextvars
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from pyarrow import ArrowException

from databuild.bel.queries import BelQueries
from databuild.errors import (
    GraphDefinitionError,
    InvalidInputError,
    JobCancelledError,
    JobContractError,
    MissingInputsError,
    NotFoundError,
)
from databuild.graph import Graph
from databuild.jobs.storage import Storage
from databuild.models import Column, InstanceFacts, InstanceRef, InstanceStatus, PartitionStatus

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


class SparkJobContext:
    """The job context of a run in a Spark session (``databuild.graph.JobContext``)."""

    def __init__(
        self,
        *,
        spark: "SparkSession",
        bel: BelQueries,
        graph: Graph,
        storage: Storage,
        job_run_id: str,
        job_label: str,
        instances: dict[str, str],
        params: dict[str, str],
        cancelled: threading.Event,
        partitions: list[dict[str, str]] | None = None,
        report: Callable[[str], None] = lambda _message: None,
    ) -> None:
        self.spark = spark
        self.job_run_id = job_run_id
        self.job_label = job_label
        self.outputs = list(instances)
        self.params = dict(params)
        # Every partition the run builds: one, or a batch's (each its placeholders).
        self.partitions = [dict(each) for each in partitions] if partitions is not None else [dict(params)]
        self.reads: list[InstanceRef] = []
        self.missing: set[str] = set()
        self.written: set[str] = set()
        self.facts: dict[str, InstanceFacts] = {}
        # The job's own logger. INFO unless configured otherwise, so that `ctx.log` lines reach the
        # attempt's log even in a process that configures no logging (whose default is WARNING).
        self.logger = logging.getLogger(f"databuild.job.{job_label}")
        if self.logger.level == logging.NOTSET:
            self.logger.setLevel(logging.INFO)
        self._bel = bel
        self._graph = graph
        self._storage = storage
        self._instances = dict(instances)
        self._cancelled = cancelled
        self._report = report

    def read(self, ref: str) -> "DataFrame":
        """The live data of ``ref``. Raises ``MissingInputsError`` if it is not live."""
        return self.read_all([ref])[0]

    def read_all(self, refs: Sequence[str]) -> list["DataFrame"]:
        """Read several inputs at once, so that every missing one is reported in one dep-miss. Each is
        read from the instance live now, to the end of the job, whatever is built meanwhile."""
        self._check_cancelled()
        found: list[str] = []
        missing: list[str] = []
        for ref in refs:
            try:
                self._graph.resolve(ref)
            except (InvalidInputError, GraphDefinitionError) as error:
                raise JobContractError(
                    f"job {self.job_label} reads {ref!r}, which the graph cannot provide: {error}"
                ) from None
            if ref in self.outputs:
                raise JobContractError(f"job {self.job_label} reads its own output {ref}")
            partition = self._bel.find_partition(ref)
            if (
                partition is None
                or partition.status is not PartitionStatus.live
                or partition.instance_id is None
            ):
                missing.append(ref)
            else:
                found.append(partition.instance_id)
        if missing:
            self.missing.update(missing)
            raise MissingInputsError(missing)
        return [self.read_instance(instance_id) for instance_id in found]

    def read_instance(self, instance_id: str) -> "DataFrame":
        """The data of one instance, live or not (e.g. the one yesterday's run read), recorded as a read
        for lineage. Raises ``JobContractError`` if the BEL knows no such instance or its data was
        garbage-collected."""
        self._check_cancelled()
        try:
            instance = self._bel.instance(instance_id)
        except NotFoundError as error:
            raise JobContractError(f"job {self.job_label} reads instance {instance_id!r}: {error}") from None
        # gc never deletes a live instance; an older one may be gone.
        retired = not instance.external and instance.status is not InstanceStatus.live
        if retired and not self._storage.exists(
            self._storage.instance_key(instance.ref, instance.instance_id)
        ):
            raise JobContractError(
                f"job {self.job_label} reads instance {instance_id} of {instance.ref}, whose data garbage "
                "collection removed; pin instances you mean to read later (`databuild partitions pin`)"
            )
        location = self._storage.instance_location(instance)
        frame = self.spark.read.parquet(location)
        read = InstanceRef(ref=instance.ref, instance_id=instance.instance_id)
        if read not in self.reads:
            self.reads.append(read)
        return frame

    def write(self, ref: str, frame: "DataFrame") -> None:
        """Write an output into its own new instance location. It becomes live when the run succeeds
        and the BEL records it; until then nobody reads it."""
        self._check_cancelled()
        if ref not in self._instances:
            raise JobContractError(
                f"job {self.job_label} wrote {ref}, which is not one of its outputs {self.outputs}"
            )
        if ref in self.written:
            raise JobContractError(f"job {self.job_label} wrote {ref} twice; write each output once")
        # "error": an instance location is written once; finding data there means something is wrong.
        frame.write.mode("error").parquet(self._storage.location(ref, self._instances[ref]))
        self.facts[ref] = self._facts_of(ref, frame)
        self.written.add(ref)

    def _facts_of(self, ref: str, frame: "DataFrame") -> InstanceFacts:
        """The schema as written (the DataFrame's, already analysed: no Spark job), and rows and bytes
        from the Parquet footers just written (a listing and a small read per file, not a count)."""
        columns = [
            Column(name=f.name, type=f.dataType.simpleString(), nullable=f.nullable)
            for f in frame.schema.fields
        ]
        rows = size = files = None
        try:
            rows, size, files = self._storage.parquet_summary(
                self._storage.instance_key(ref, self._instances[ref])
            )
        except (OSError, ArrowException) as error:  # facts describe the data; they never fail its build
            log.warning(
                "could not read the Parquet footers of %s, so its row count and size are unknown: %s",
                ref,
                error,
            )
        return InstanceFacts(rows=rows, bytes=size, files=files, columns=columns)

    def write_all(self, frames: Mapping[str, "DataFrame"], *, parallel: int = 8) -> None:
        """Write several outputs at once (a batch's), as concurrent Spark jobs in the run's job group:
        small writes are mostly waiting, so together they take little more than the longest."""
        from pyspark import inheritable_thread_target  # threads keep the job group (cancellation)

        self._check_cancelled()
        unknown = sorted(set(frames) - set(self._instances))
        if unknown:
            raise JobContractError(
                f"job {self.job_label} wrote {', '.join(unknown)}, not among its outputs {self.outputs}"
            )
        with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(frames)))) as pool:
            write = inheritable_thread_target(self.spark)(self.write)  # with the session: its tags too
            # Each in a copy of this context: what they log goes to the attempt's log.
            writing = [
                pool.submit(contextvars.copy_context().run, write, ref, frame)
                for ref, frame in frames.items()
            ]
            for each in writing:
                each.result()

    def log(self, message: str, *args: object, level: int = logging.INFO) -> None:
        """A line in the attempt's log (`databuild job-runs show ID --log`): ``message % args``, as
        `logging` formats it. Python `logging` records from the job's thread go there too."""
        self.logger.log(level, message, *args)

    def progress(self, message: str) -> None:
        """A line of progress shown in the Temporal UI (heartbeat details) and the CLI."""
        self._check_cancelled()
        self._report(message)

    def _check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise JobCancelledError(f"job run {self.job_run_id} was cancelled")
