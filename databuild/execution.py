"""Runs one attempt of one job run: BEL start, the job body on Spark, atomic publish, BEL outcome."""

import contextlib
import threading
from collections.abc import Callable

from databuild.bel.store import BuildEventLog, new_instance_id
from databuild.errors import MissingInputsError
from databuild.graph import Graph
from databuild.job_context import JobContext, JobContractError
from databuild.models import InstanceRef, JobRun, JobRunState
from databuild.openlineage import LineageEmitter
from databuild.protocol import JobOutcome
from databuild.spark import SparkRuntime
from databuild.storage import Storage


def outcome_of(run: JobRun) -> JobOutcome:
    return JobOutcome(job_run_id=run.job_run_id, state=run.state, missing=run.missing, reason=run.reason)


def job_group(job_run_id: str, attempt: int) -> str:
    return f"{job_run_id}-{attempt}"


class JobExecutor:
    def __init__(
        self,
        graph: Graph,
        bel: BuildEventLog,
        storage: Storage,
        spark: SparkRuntime,
        worker: str,
        *,
        lineage: LineageEmitter | None = None,
    ) -> None:
        self.graph = graph
        self.bel = bel
        self.storage = storage
        self.spark = spark
        self.worker = worker
        self.lineage = lineage

    def execute(
        self,
        job_run_id: str,
        attempt: int,
        *,
        cancelled: threading.Event,
        report: Callable[[str], None] = lambda _m: None,
    ) -> JobOutcome:
        """Blocking; run it in a thread. Raises on job failure so the caller's retry policy applies."""
        run = self.bel.start_job_run(job_run_id, attempt, self.worker)
        if run.state is not JobRunState.running:
            return outcome_of(run)  # an earlier attempt already recorded the outcome
        if run.attempts != attempt:  # a newer attempt already started elsewhere
            self.bel.check_current_attempt(job_run_id, attempt)
        if self.lineage is not None:
            self.lineage.started(run, attempt)
        job = self.graph.job_by_label(run.job_label)
        session = self.spark.session()
        staging = self.storage.staging_area(job_run_id, attempt)
        ctx = JobContext(
            spark=session,
            bel=self.bel,
            graph=self.graph,
            storage=self.storage,
            staging=staging,
            job_run_id=job_run_id,
            job_label=run.job_label,
            outputs=run.outputs,
            params=run.params,
            cancelled=cancelled,
            report=report,
        )
        context = session.sparkContext
        context.setJobGroup(job_group(job_run_id, attempt), f"{run.job_label} -> {run.outputs}", True)
        try:
            with contextlib.suppress(MissingInputsError):  # ctx.missing holds every input found missing
                job.run(ctx, run.params)
            if ctx.missing:
                missed = self.bel.dep_miss_job_run(job_run_id, sorted(ctx.missing), ctx.reads, attempt)
                return outcome_of(self._finished(missed, JobRunState.dep_miss))
            unwritten = sorted(set(run.outputs) - ctx.written)
            if unwritten:
                raise JobContractError(f"job {run.job_label} finished without writing {', '.join(unwritten)}")
            instances = {ref: new_instance_id() for ref in run.outputs}
            self.bel.check_current_attempt(job_run_id, attempt)  # a superseded attempt must not publish
            self.storage.publish(staging, instances)
            writes = [InstanceRef(ref=ref, instance_id=i) for ref, i in instances.items()]
            succeeded = self.bel.succeed_job_run(job_run_id, ctx.reads, writes, attempt)
            return outcome_of(self._finished(succeeded, JobRunState.succeeded))
        finally:
            context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
            self.storage.discard(staging)

    def fail(self, job_run_id: str, reason: str) -> JobRun:
        """Record that the run failed past its retry policy (idempotent), and emit its lineage FAIL event
        if this call is the one that recorded it (a retried call, or a run that already ended, emits
        nothing)."""
        before = self.bel.job_run(job_run_id)
        run = self.bel.fail_job_run(job_run_id, reason)
        if not before.state.is_final:
            self._finished(run, JobRunState.failed)
        return run

    def _finished(self, run: JobRun, recorded: JobRunState) -> JobRun:
        """Emit the final lineage event of a run, if the BEL call just made recorded ``recorded``: the
        BEL returns a run that had already ended unchanged, and its end was reported then."""
        if self.lineage is not None and run.state is recorded:
            self.lineage.finished(run)
        return run
