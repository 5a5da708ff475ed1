"""What a job body sees: ``ctx.read`` (checked against the BEL, recorded for lineage, missing inputs
reported together) and ``ctx.write`` (into the run's private staging area)."""

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from databuild.bel.queries import BelQueries
from databuild.errors import (
    GraphDefinitionError,
    InvalidInputError,
    JobCancelledError,
    JobContractError,
    MissingInputsError,
)
from databuild.graph import Graph
from databuild.models import InstanceRef, PartitionStatus
from databuild.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class JobContext:
    def __init__(
        self,
        *,
        spark: "SparkSession",
        bel: BelQueries,
        graph: Graph,
        storage: Storage,
        staging: Path,
        job_run_id: str,
        job_label: str,
        outputs: Sequence[str],
        params: dict[str, str],
        cancelled: threading.Event,
        report: Callable[[str], None] = lambda _message: None,
    ) -> None:
        self.spark = spark
        self.job_run_id = job_run_id
        self.job_label = job_label
        self.outputs = list(outputs)
        self.params = dict(params)
        self.reads: list[InstanceRef] = []
        self.missing: set[str] = set()
        self.written: set[str] = set()
        self._bel = bel
        self._graph = graph
        self._storage = storage
        self._staging = staging
        self._cancelled = cancelled
        self._report = report

    def read(self, ref: str) -> "DataFrame":
        """The live data of ``ref``. Raises ``MissingInputsError`` if it is not live."""
        return self.read_all([ref])[0]

    def read_all(self, refs: Sequence[str]) -> list["DataFrame"]:
        """Read several inputs at once, so that every missing one is reported in one dep-miss."""
        self._check_cancelled()
        found: list[InstanceRef] = []
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
                found.append(InstanceRef(ref=ref, instance_id=partition.instance_id))
        if missing:
            self.missing.update(missing)
            raise MissingInputsError(missing)
        self.reads.extend(r for r in found if r not in self.reads)
        return [self.spark.read.parquet(str(self._storage.path(r.ref))) for r in found]

    def write(self, ref: str, frame: "DataFrame") -> None:
        """Write an output. It becomes visible only when the whole run is published."""
        self._check_cancelled()
        if ref not in self.outputs:
            raise JobContractError(
                f"job {self.job_label} wrote {ref}, which is not one of its outputs {self.outputs}"
            )
        frame.write.mode("overwrite").parquet(str(self._storage.staged(self._staging, ref)))
        self.written.add(ref)

    def progress(self, message: str) -> None:
        """A line of progress shown in the Temporal UI (heartbeat details) and the CLI."""
        self._check_cancelled()
        self._report(message)

    def _check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise JobCancelledError(f"job run {self.job_run_id} was cancelled")
