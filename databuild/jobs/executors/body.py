"""What every executor shares: one attempt of a job run, described as data, and running its body on a
SparkSession through a SparkJobContext to learn what it read, wrote and found missing, keeping the
attempt's log on the storage."""

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from databuild.bel.queries import BelQueries
from databuild.domain.cost import SparkCost
from databuild.errors import MissingInputsError, SparkJobError
from databuild.graph import Graph
from databuild.jobs import java_errors
from databuild.jobs.attempt_log import DEFAULT_MAX_BYTES, AttemptLog, capturing
from databuild.jobs.attempts import attempt_name
from databuild.jobs.context import SparkJobContext
from databuild.jobs.spark_cost import group_cost
from databuild.jobs.storage import Storage
from databuild.models import CheckResult, InstanceFacts, InstanceRef, Model
from databuild.refs import validate_ref

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

Report = Callable[[str], None]

log = logging.getLogger(__name__)


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
    placeholders_in_files: list[str] = Field(
        default=[],
        description="output patterns whose data files hold their placeholder columns (Iceberg tables)",
    )

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
    facts: dict[str, InstanceFacts] = Field(
        default_factory=dict, description="of each output written, by ref"
    )
    locations: dict[str, str] = Field(
        default_factory=dict,
        description="outputs a partitioned write put in its folder: where, relative to the storage root",
    )
    checks: dict[str, list[CheckResult]] = Field(
        default_factory=dict, description="the results of each written output's checks, by ref"
    )
    cost: SparkCost | None = Field(default=None, description="Spark's accounting of the attempt's job group")
    cost_unknown: str | None = Field(default=None, description="why ``cost`` is None")

    @field_validator("missing", "written")
    @classmethod
    def _refs(cls, refs: list[str]) -> list[str]:
        for ref in refs:
            validate_ref(ref)
        return sorted(set(refs))


def spark_cost(context: "SparkContext", group: str) -> tuple[SparkCost | None, str | None]:
    """What Spark accounted for the job group ``group``; a store that cannot be read leaves the cost
    unknown (and says why), never zero, and never fails the attempt."""
    try:
        return group_cost(context, group), None
    except Exception as error:
        log.warning("could not read Spark's accounting of %s: %s", group, error)
        return None, f"Spark's accounting could not be read: {error}"


def with_spark_cost(result: BodyResult, context: "SparkContext", group: str) -> BodyResult:
    """``result`` with what Spark accounted for the job group ``group`` (see ``spark_cost``)."""
    cost, unknown = spark_cost(context, group)
    return result.model_copy(update={"cost": cost, "cost_unknown": unknown})


@dataclass(frozen=True)
class JobBodies:
    """What running a job body takes besides a session: the BEL (to check inputs), the graph, storage
    (outputs and the attempt's log, kept to ``log_max_bytes``)."""

    bel: BelQueries
    graph: Graph
    storage: Storage
    log_max_bytes: int = DEFAULT_MAX_BYTES

    def run(
        self, session: "SparkSession", attempt: JobAttempt, *, cancelled: threading.Event, report: Report
    ) -> BodyResult:
        """Run the job's own code, unchanged whichever executor calls this. Raises what the job raises;
        missing inputs are not an error here but part of the result. Its log is saved however it ends."""
        attempt_log = AttemptLog(self.log_max_bytes)
        try:
            with capturing(attempt_log):
                attempt_log.note(
                    f"job run {attempt.job_run_id} attempt {attempt.attempt}: {attempt.description}"
                )
                try:
                    result = self._run(session, attempt, cancelled=cancelled, report=report)
                except BaseException as error:
                    attempt_log.failure(error)
                    if isinstance(error, Exception) and java_errors.from_jvm(error):
                        java_errors.release(session)
                        # Not chained: the Java trace would travel as the cause, and be the reason again.
                        raise SparkJobError(java_errors.reason(error)) from None
                    raise
                for ref, facts in sorted(result.facts.items()):
                    attempt_log.note(f"wrote {ref}: {facts.summary}")
                if result.missing:
                    attempt_log.note(f"dep-miss: not live: {', '.join(result.missing)}")
                return result
        finally:
            self.save_log(attempt, attempt_log.text())

    def save_log(self, attempt: JobAttempt, text: str) -> None:
        """The log is for people: a storage that cannot take it must not change the attempt's outcome."""
        try:
            self.storage.write_text(self.storage.log_key(attempt.job_run_id, attempt.attempt), text)
        except OSError as error:
            log.warning("could not save the log of %s: %s", attempt.group, error)

    def _run(
        self, session: "SparkSession", attempt: JobAttempt, *, cancelled: threading.Event, report: Report
    ) -> BodyResult:
        ctx = SparkJobContext(
            spark=session,
            bel=self.bel,
            graph=self.graph,
            storage=self.storage,
            job_run_id=attempt.job_run_id,
            job_label=attempt.job_label,
            instances=attempt.instances,
            params=attempt.params,
            partitions=attempt.partitions,
            placeholders_in_files=attempt.placeholders_in_files,
            attempt=attempt.attempt,
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
            facts=ctx.facts,
            locations=ctx.locations,
            checks=ctx.checks,
        )
