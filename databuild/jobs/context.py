"""The job context a run's body gets in a Spark session, as ``databuild.graph.JobContext`` declares it:
``ctx.read`` checks the BEL, records the read for lineage and reports missing inputs together;
``ctx.write`` writes into each output's own new instance location and records its facts;
``ctx.write_partitioned`` writes a batch's partitions as one Spark ``partitionBy`` write, each partition's
folder its instance location."""

import contextvars
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING
from urllib.parse import unquote

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
from databuild.graph import Graph, Pattern
from databuild.jobs.checks import run_checks
from databuild.jobs.storage import Storage
from databuild.jobs.tagged_read import read_tagged
from databuild.models import (
    CheckResult,
    Column,
    Instance,
    InstanceFacts,
    InstanceRef,
    InstanceStatus,
    PartitionStatus,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
# A partitioned write whose files keep their placeholder columns is partitioned by copies of them, named so.
KEPT_SUFFIX = "__partition"


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
        placeholders_in_files: Sequence[str] = (),
        attempt: int = 1,
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
        # The results of each written output's checks, by ref (databuild.graph.checks).
        self.checks: dict[str, list[CheckResult]] = {}
        # Where a partitioned write put each of its outputs (keys under the storage root); every other
        # output is at its own instance location.
        self.locations: dict[str, str] = {}
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
        self._attempt = attempt
        # Output patterns whose files keep their placeholder columns (an Iceberg table reads them there).
        self._in_files = set(placeholders_in_files)

    def read(self, ref: str) -> "DataFrame":
        """The live data of ``ref``. Raises ``MissingInputsError`` if it is not live."""
        return self.read_all([ref])[0]

    def read_all(self, refs: Sequence[str]) -> list["DataFrame"]:
        """Read several inputs at once, so that every missing one is reported in one dep-miss. Each is
        read from the instance live now, to the end of the job, whatever is built meanwhile."""
        return [self.read_instance(instance_id) for instance_id in self._live(refs)]

    def _live(self, refs: Sequence[str]) -> list[str]:
        """The instance live now of each of ``refs``; every missing one is reported together."""
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
            partition = self._bel.partitions.find(ref)
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
        return found

    def read_partitioned(self, refs: Sequence[str]) -> "DataFrame":
        """Several inputs as one DataFrame (a batch's, say), each row with its partition's placeholder
        values as text columns (``date`` for ``raw_events/{date}``) where its data has none of that name
        (a partitioned write keeps them in folder names). The inputs are read as one scan, but for a
        published one whose folder is not flat (its data in sub-folders, or outside the storage), which
        is read on its own. Every missing input is reported together, as ``read_all`` does."""
        from pyspark.sql import functions as F

        if not refs:
            raise JobContractError(
                f"job {self.job_label} reads no inputs with read_partitioned: give it refs"
            )
        ours: dict[str, dict[str, str]] = {}
        frames = []
        for instance_id in dict.fromkeys(self._live(refs)):
            instance, location = self._locate(instance_id)
            pattern = self._graph.pattern_for(instance.ref)
            values = (pattern.match(instance.ref) if pattern else None) or {}
            if self._one_folder(instance):
                ours[location] = values
                continue
            frame = self.spark.read.parquet(location)
            columns = {name: F.lit(value) for name, value in values.items() if name not in frame.columns}
            frames.append(frame.withColumns(columns) if columns else frame)
        if ours:
            frames.insert(0, read_tagged(self.spark, ours))
        return functools.reduce(lambda all_, one: all_.unionByName(one, allowMissingColumns=True), frames)

    def _one_folder(self, instance: Instance) -> bool:
        """Whether the instance's data is one flat folder: always, if DataBuild wrote it."""
        if not instance.external:
            return True
        key = self._storage.key_of(instance)
        return key is not None and self._storage.is_flat(key)

    def read_instance(self, instance_id: str) -> "DataFrame":
        """The data of one instance, live or not (e.g. the one yesterday's run read), recorded as a read
        for lineage. Raises ``JobContractError`` if the BEL knows no such instance or its data was
        garbage-collected."""
        return self.spark.read.parquet(self._locate(instance_id)[1])

    def read_previous(self, ref: str) -> "DataFrame | None":
        """The live data of one of the job's own outputs, to build its new instance on; None when it has no
        live instance. Its read is recorded as any other: a read of one of the run's own outputs is the
        previous instance in lineage, and never late data nor a reason to be stale."""
        self._check_cancelled()
        if ref not in self._instances:
            raise JobContractError(
                f"job {self.job_label} reads the previous instance of {ref}, which is not one of its outputs "
                f"{self.outputs}: read_previous is for the job's own outputs, ctx.read for its inputs"
            )
        partition = self._bel.partitions.find(ref)
        if partition is None or partition.instance_id is None:
            return None
        instance = self._bel.partitions.instance(partition.instance_id)
        if instance.status is not InstanceStatus.live:  # tainted or failed: nothing to build on
            return None
        return self.read_instance(instance.instance_id)

    def _locate(self, instance_id: str) -> tuple[Instance, str]:
        """The instance and where its data is, its read recorded for lineage."""
        self._check_cancelled()
        try:
            instance = self._bel.partitions.instance(instance_id)
        except NotFoundError as error:
            raise JobContractError(f"job {self.job_label} reads instance {instance_id!r}: {error}") from None
        # gc never deletes a live instance; an older one may be gone.
        retired = not instance.external and instance.status is not InstanceStatus.live
        key = self._storage.key_of(instance)
        if retired and key is not None and not self._storage.exists(key):
            raise JobContractError(
                f"job {self.job_label} reads instance {instance_id} of {instance.ref}, whose data garbage "
                "collection removed; pin instances you mean to read later (`databuild partitions pin`)"
            )
        read = InstanceRef(ref=instance.ref, instance_id=instance.instance_id)
        if read not in self.reads:
            self.reads.append(read)
        return instance, self._storage.instance_location(instance)

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
        frame = self._with_placeholders(ref, frame)
        # "error": an instance location is written once; finding data there means something is wrong.
        frame.write.mode("error").parquet(self._storage.location(ref, self._instances[ref]))
        key = self._storage.instance_key(ref, self._instances[ref])
        self.facts[ref] = self._facts_of(ref, frame, lambda: self._storage.parquet_summary(key))
        self._check(ref, self._storage.location(ref, self._instances[ref]))
        self.written.add(ref)

    def write_partitioned(self, frame: "DataFrame", output: str | None = None) -> None:
        """Write one DataFrame into every partition of the run of the output pattern ``output`` (the
        job's only one by default), as one Spark ``partitionBy`` write by the pattern's placeholders: a
        row goes to the partition its placeholder columns name (``date`` for ``raw_events/{date}``).
        The write goes to a folder of this attempt, ``raw_events/~<job run>-<attempt>``, and each
        partition's sub-folder (``date=2024-01-01``) is its instance location, with its own facts and
        lineage. As with ``partitionBy``, the placeholder columns are in the folder names, not the
        files (``read_partitioned`` gives them back), but for an output whose table reads them from its
        files (Iceberg): its files keep them as the DataFrame has them. Every partition of the run must
        have rows, and every row must be one of the run's partitions; otherwise the run fails naming
        them, and publishes nothing."""
        self._check_cancelled()
        pattern = self._output_pattern(output)
        owned = {ref: values for ref in self._instances if (values := pattern.match(ref)) is not None}
        twice = sorted(set(owned) & self.written)
        if twice:
            raise JobContractError(
                f"job {self.job_label} wrote {', '.join(twice)} twice; write each output once"
            )
        columns = pattern.placeholders
        absent = [name for name in columns if name not in frame.columns]
        if absent:
            raise JobContractError(
                f"job {self.job_label} writes a DataFrame partitioned as {pattern.text} without the "
                f"column {', '.join(absent)}: give it one column per placeholder, named as the placeholder"
            )
        key = self._storage.write_key(pattern.prefix, self.job_run_id, self._attempt)
        kept = pattern.text in self._in_files
        by = [f"{c}{KEPT_SUFFIX}" for c in columns] if kept else list(columns)
        if kept:  # partitioned by copies, so that the files keep the placeholder columns themselves
            from pyspark.sql import functions as F

            taken = sorted(set(by) & set(frame.columns))
            if taken:
                raise JobContractError(
                    f"job {self.job_label} writes a DataFrame with the column {', '.join(taken)}, a name "
                    "DataBuild keeps for its partitioned writes: rename it"
                )
            frame = frame.withColumns({b: F.col(c) for b, c in zip(by, columns, strict=True)})
        frame.write.mode("error").partitionBy(*by).parquet(self._storage.uri_of(key))
        folders = {
            ref: self._storage.partition_folder({b: values[c] for b, c in zip(by, columns, strict=True)})
            for ref, values in owned.items()
        }
        files = self._storage.partition_files(key, depth=len(columns))  # one listing for all of them
        found = set(files)
        strays = sorted(found - set(folders.values()))
        if strays:
            shown = ", ".join(unquote(folder) for folder in strays[:5]) + (
                " and more" if len(strays) > 5 else ""
            )
            raise JobContractError(
                f"job {self.job_label} wrote rows for {shown}, which this run does not build: keep only "
                f"the rows of its partitions (ctx.partitions); nothing of the run is published"
            )
        missing = sorted(ref for ref, folder in folders.items() if folder not in found)
        if missing:
            raise JobContractError(
                f"job {self.job_label} wrote no rows for {', '.join(missing)}: the DataFrame must hold rows "
                "for every partition of the run; nothing of the run is published"
            )
        for ref, folder in folders.items():
            self.locations[ref] = f"{key}/{folder}"
            summary = functools.partial(self._storage.summary_of, files[folder])
            self.facts[ref] = self._facts_of(ref, frame, summary, but=by if kept else columns)
            self._check(ref, self._storage.uri_of(self.locations[ref]))
            self.written.add(ref)

    def _with_placeholders(self, ref: str, frame: "DataFrame") -> "DataFrame":
        """``frame`` with its partition's placeholder values as text columns where it has none of that name,
        if its table reads them from the files (a column the job wrote, of any type, is kept: its table
        checks that it holds the partition's value)."""
        pattern = self._graph.pattern_for(ref)
        if pattern is None or pattern.text not in self._in_files:
            return frame
        from pyspark.sql import functions as F

        values = pattern.match(ref) or {}
        missing = {name: F.lit(values[name]) for name in pattern.placeholders if name not in frame.columns}
        return frame.withColumns(missing) if missing else frame

    def _check(self, ref: str, location: str) -> None:
        """Run the checks of the output just written on its instance, before anything can publish it."""
        checks = self._graph.job_by_label(self.job_label).checks_of(ref)
        if not checks:
            return
        self._check_cancelled()
        pattern = self._graph.pattern_for(ref)
        results = run_checks(
            self.spark,
            checks,
            ref=ref,
            instance_id=self._instances[ref],
            params=(pattern.match(ref) if pattern else None) or {},
            location=location,
            facts=self.facts.get(ref),
        )
        self._check_cancelled()  # a check cut short by a cancel found nothing about the data
        self.checks[ref] = results
        for result in results:
            self.logger.log(logging.INFO if result.passed else logging.WARNING, "%s: %s", ref, result.line)

    def _output_pattern(self, output: str | None) -> Pattern:
        patterns = self._graph.job_by_label(self.job_label).outputs
        if output is None and len(patterns) == 1:
            return patterns[0]
        chosen = next((p for p in patterns if p.text == output), None)
        if chosen is None:
            raise JobContractError(
                f"job {self.job_label} writes a partitioned DataFrame of {output!r}: name one of its output "
                f"patterns ({', '.join(p.text for p in patterns)}) as output="
            )
        return chosen

    def _facts_of(
        self,
        ref: str,
        frame: "DataFrame",
        summary: Callable[[], tuple[int, int, int]],
        but: Sequence[str] = (),
    ) -> InstanceFacts:
        """The schema as written (the DataFrame's, already analysed: no Spark job; without the columns
        ``but`` in folder names), and rows, bytes and files from ``summary`` of the Parquet footers just
        written (a listing and a small read per file, not a count)."""
        columns = [
            Column(name=f.name, type=f.dataType.simpleString(), nullable=f.nullable)
            for f in frame.schema.fields
            if f.name not in but
        ]
        rows = size = files = None
        try:
            rows, size, files = summary()
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
