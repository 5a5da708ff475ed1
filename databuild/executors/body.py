"""What every executor shares: one attempt of a job run, described as data, and running its body on a
SparkSession through a JobContext to learn what it read, wrote and found missing."""

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from databuild.bel.queries import BelQueries
from databuild.errors import MissingInputsError
from databuild.graph import Graph
from databuild.job_context import JobContext
from databuild.models import InstanceRef, Model, attempt_name
from databuild.refs import validate_ref
from databuild.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Report = Callable[[str], None]


class JobAttempt(Model):
    job_run_id: str
    attempt: int
    job_label: str
    params: dict[str, str]
    instances: dict[str, str] = Field(description="each output's new instance id, in output order")
    partitions: list[dict[str, str]] | None = Field(
        default=None, description="of a batch run: the placeholders of each partition it builds"
    )
    spark_conf: dict[str, str] = Field(default={}, description="Spark properties the job declares")

    @property
    def outputs(self) -> list[str]:
        return list(self.instances)

    @property
    def group(self) -> str:
        return attempt_name(self.job_run_id, self.attempt)

    @property
    def description(self) -> str:
        return f"{self.job_label} -> {', '.join(self.outputs)}"


class BodyResult(Model):
    """What a job body did. Executors that run the body out of process send this back as JSON, so the
    refs are checked again when it is read."""

    reads: list[InstanceRef]
    missing: list[str]
    written: list[str]
    # Of a batch: the reads each output was built from, and the missing inputs each output waits for.
    inputs_of: dict[str, list[str]] | None = None
    missing_for: dict[str, list[str]] | None = None

    @field_validator("missing", "written")
    @classmethod
    def _refs(cls, refs: list[str]) -> list[str]:
        for ref in refs:
            validate_ref(ref)
        return sorted(set(refs))


@dataclass(frozen=True)
class JobBodies:
    """What running a job body takes besides a session: the BEL (to check inputs), the graph, storage."""

    bel: BelQueries
    graph: Graph
    storage: Storage

    def run(
        self, session: "SparkSession", attempt: JobAttempt, *, cancelled: threading.Event, report: Report
    ) -> BodyResult:
        """Run the job's own code, unchanged whichever executor calls this. Raises what the job raises;
        missing inputs are not an error here but part of the result."""
        ctx = JobContext(
            spark=session,
            bel=self.bel,
            graph=self.graph,
            storage=self.storage,
            job_run_id=attempt.job_run_id,
            job_label=attempt.job_label,
            instances=attempt.instances,
            params=attempt.params,
            partitions=attempt.partitions,
            cancelled=cancelled,
            report=report,
        )
        job = self.graph.job_by_label(attempt.job_label)
        with contextlib.suppress(MissingInputsError):  # ctx.missing holds every input found missing
            job.run(ctx, attempt.params, ctx.partitions)
        missing = sorted(ctx.missing)
        batch = attempt.partitions
        return BodyResult(
            reads=ctx.reads,
            missing=missing,
            written=sorted(ctx.written),
            # Of a batch: which inputs are whose.
            inputs_of=job.inputs_by_output(batch, [read.ref for read in ctx.reads]) if batch else None,
            missing_for=job.inputs_by_output(batch, missing) if batch and missing else None,
        )
