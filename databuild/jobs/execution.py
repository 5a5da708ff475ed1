"""Runs one attempt of one job run: BEL start (with the instance each output goes to), the job body on its
executor, the BEL outcome (whose commit publishes the outputs)."""

import contextlib
import logging
import posixpath
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import NoReturn

from databuild.bel.aggregates.job_runs import RunEnded
from databuild.bel.engine.outages import PATIENCE, through_outages
from databuild.bel.store import BuildEventLog
from databuild.domain import checks as check_rules
from databuild.domain import events as ev
from databuild.domain.cost import SparkCost, run_cost
from databuild.errors import CheckFailedError, DataBuildError, JobContractError, TableSchemaError
from databuild.jobs import spark_cost
from databuild.jobs.attempt_log import line
from databuild.jobs.executors import BodyResult, Executor, Executors, JobAttempt, Progress
from databuild.jobs.openlineage import LineageEmitter
from databuild.jobs.storage import INSTANCE_PREFIX, Storage
from databuild.jobs.tables.publisher import TablePublisher
from databuild.models import CheckResult, InstanceRef, JobRun, JobRunCause, JobRunState
from databuild.temporal.protocol import JobOutcome

log = logging.getLogger(__name__)


def outcome_of(run: JobRun) -> JobOutcome:
    return JobOutcome(
        job_run_id=run.job_run_id, state=run.state, missing=run.missing, reason=run.reason, cause=run.cause
    )


class JobExecutor:
    def __init__(
        self,
        bel: BuildEventLog,
        storage: Storage,
        executors: Executors,
        worker: str,
        *,
        lineage: LineageEmitter | None = None,
        tables: TablePublisher | None = None,
        patience: timedelta = PATIENCE,
    ) -> None:
        self.bel = bel
        # How long an attempt rides out a database outage while it records its start or its outcome: the
        # work is not lost, nor an attempt spent, nor data that was written correctly fail-locked.
        self.patience = patience
        self.storage = storage
        self.executors = executors
        self.worker = worker
        self.lineage = lineage
        self.tables = tables
        self._running: dict[str, JobAttempt] = {}

    def execute(
        self,
        job_run_id: str,
        attempt: int,
        *,
        cancelled: threading.Event,
        report: Callable[[str], None] = lambda _m: None,
        lease: timedelta | None = None,
    ) -> RunEnded:
        """Blocking; run it in a thread. The run as the attempt left it (its outcome: ``outcome_of``).
        Raises on job failure so the caller's retry policy applies. ``lease``: the run's build lease,
        renewed when the attempt starts."""
        # Each output is written straight into a new instance location, planned and recorded by the start
        # before a byte is written, so garbage collection knows it is being written.
        started = through_outages(
            lambda: self.bel.job_runs.start_attempt(job_run_id, attempt, self.worker, lease),
            patience=self.patience,
            waiting=report,
            stop=cancelled,
        )
        run, planned = started.run, started.instances
        instances = [InstanceRef(ref=ref, instance_id=i) for ref, i in planned.items()]
        if run.state is not JobRunState.running:  # an earlier attempt already recorded the outcome ...
            if run.state is JobRunState.succeeded:
                self._publish(run)  # ... and may have died before committing to its tables
            return RunEnded(run=run)
        if run.attempts != attempt:  # a newer attempt already started elsewhere
            self.bel.job_runs.check_current_attempt(job_run_id, attempt)
        if self.lineage is not None:
            self.lineage.started(run, attempt)
        executor = self.executors.for_job(run.job_label)
        job = JobAttempt(
            job_run_id=job_run_id,
            attempt=attempt,
            job_label=run.job_label,
            params=run.params,
            instances=planned,
            partitions=run.partitions,
            spark_conf=self.executors.spark_conf.get(run.job_label, {}),
            placeholders_in_files=[]
            if self.tables is None
            else self.tables.placeholders_in_files(run.job_label),
        )
        self._running[job.group] = job
        try:
            body = self._run(executor, job, cancelled, report)
            # What the attempt cost goes in the commit of its outcome (one transaction less per run) ...
            cost = self._cost(job, executor.kind, body.cost, body.cost_unknown)
            try:
                return through_outages(
                    lambda: self._conclude(job, run, body, instances, cost),
                    patience=self.patience,
                    waiting=report,
                    stop=cancelled,
                )
            except Exception:
                self._record_cost_alone(job, cost)  # ... or alone if that commit never came
                raise
        finally:
            self._running.pop(job.group, None)

    def _conclude(
        self,
        job: JobAttempt,
        run: JobRun,
        body: BodyResult,
        instances: list[InstanceRef],
        cost: ev.JobRunCostRecorded | None,
    ) -> RunEnded:
        """Record the attempt's outcome, ``cost`` in the same commit: a dep-miss, or the publish."""
        if body.missing:
            missed = self.bel.job_runs.dep_miss(
                job.job_run_id, body.missing, body.reads, job.attempt, body.missing_for, cost
            )
            self._finished(missed.run, JobRunState.dep_miss)
            return missed
        self._verify(job, run, body, instances)
        locations = {ref: self.storage.location(ref, i) for ref, i in job.instances.items()}
        locations |= {ref: self._written_at(job, key) for ref, key in body.locations.items()}
        self._audit(job, locations)
        # The commit is the publish: a superseded attempt is refused inside it.
        succeeded = self.bel.job_runs.succeed(
            job.job_run_id,
            body.reads,
            instances,
            job.attempt,
            locations,
            body.inputs_of,
            body.facts,
            body.checks,
            self.executors.versions.get(run.job_label),
            cost,
        )
        self._publish(succeeded.run)
        self._finished(succeeded.run, JobRunState.succeeded)
        return succeeded

    @staticmethod
    def _cost(
        job: JobAttempt, executor: str, cost: SparkCost | None, unknown: str | None
    ) -> ev.JobRunCostRecorded | None:
        """What the attempt cost, recorded however it ended: the work was done even if the attempt failed,
        or its outcome is then refused (superseded, a broken contract, a failed blocking check). None while
        the accounting is turned off (as bench_orchestration does to measure it): nothing is recorded."""
        if not spark_cost.ACCOUNTING:
            return None
        return ev.JobRunCostRecorded(
            job_run_id=job.job_run_id,
            attempt=job.attempt,
            job_label=job.job_label,
            executor=executor,
            cost=cost,
            unknown_reason=None if cost is not None else unknown or "not reported",
        )

    def _run(
        self, executor: Executor, job: JobAttempt, cancelled: threading.Event, report: Callable[[str], None]
    ) -> BodyResult:
        """Run the body on its executor; a body that fails has what it cost recorded before it is raised
        (the caller records a body's cost with its outcome)."""
        try:
            return executor.run(job, cancelled=cancelled, report=report)
        except Exception:
            self._record_failed_cost(job, executor)
            raise

    def _record_failed_cost(self, job: JobAttempt, executor: Executor) -> None:
        """A failed or cancelled attempt's work cost too."""
        try:
            cost = self._cost(job, executor.kind, *executor.spent(job))
        except Exception as error:
            log.warning("could not read the cost of failed attempt %s: %s", job.group, error)
            return
        self._record_cost_alone(job, cost)

    def _record_cost_alone(self, job: JobAttempt, cost: ev.JobRunCostRecorded | None) -> None:
        """Record ``cost`` in a commit of its own (once: a cost already recorded is left); recording it
        must not hide why the attempt failed or was refused."""
        if cost is None:
            return
        try:
            self.bel.costs.record(cost)
        except Exception as error:
            log.warning("could not record the cost of attempt %s: %s", job.group, error)

    def _verify(self, job: JobAttempt, run: JobRun, body: BodyResult, instances: list[InstanceRef]) -> None:
        """Refuse a body's result that breaks the job's contract, or whose blocking checks failed (their
        results recorded with the instances they kept from going live)."""
        # JobContext refuses stray writes already; a result read back from a submitted application is
        # checked again here, where it crosses into the BEL.
        strays = sorted(set(body.written) - set(run.outputs))
        if strays:
            self._refuse(job, f"job {run.job_label} wrote {', '.join(strays)}, not among its outputs")
        unwritten = sorted(set(run.outputs) - set(body.written))
        if unwritten:
            self._refuse(job, f"job {run.job_label} finished without writing {', '.join(unwritten)}")
        strays = sorted(
            {ref for ref, results in body.checks.items() if results and ref not in body.written}
            | {r.ref for ref, results in body.checks.items() for r in results if r.ref != ref}
        )
        if strays:
            self._refuse(job, f"job {run.job_label} reports checks of {', '.join(strays)}, not its outputs")
        if failures := check_rules.blocking_failures(body.checks):
            # Not published, and not retried: the same code on the same inputs writes the same data.
            self.bel.job_runs.record_checks(job.job_run_id, job.attempt, instances, body.checks)
            self._refuse(job, check_rules.failure_reason(failures), CheckFailedError)

    def _written_at(self, job: JobAttempt, key: str) -> str:
        """The location of an output a partitioned write put in this attempt's folder; a result read back
        from a submitted application could name any, so it is checked where it crosses into the BEL."""
        folder = f"{INSTANCE_PREFIX}{job.group}"
        if posixpath.normpath(key) != key or key.startswith(("/", "..")) or folder not in key.split("/")[:-1]:
            self._refuse(job, f"job {job.job_label} reports an output at {key}, outside its attempt's folder")
        return self.storage.uri_of(key)

    def _refuse(
        self, job: JobAttempt, message: str, error: type[DataBuildError] = JobContractError
    ) -> NoReturn:
        """The body ended, but its result breaks the job's contract (or its checks): said at the end of the
        attempt's log too, where whoever reads it looks for why the attempt failed."""
        key = self.storage.log_key(job.job_run_id, job.attempt)
        with contextlib.suppress(OSError):  # no log (FileNotFoundError included): the reason still says it
            self.storage.write_text(key, self.storage.read_text(key) + line(message, "ERROR") + "\n")
        raise error(message)

    def _audit(self, job: JobAttempt, locations: dict[str, str]) -> None:
        """Refuse outputs whose tables cannot take them without losing data (a dropped column, say),
        before anything is published: the tables keep what they had."""
        if self.tables is None:
            return
        try:
            self.tables.audit(locations, job.instances)
        except TableSchemaError as error:
            self._refuse(job, str(error), TableSchemaError)

    def _publish(self, run: JobRun) -> None:
        """Commit the run's outputs to their tables, in the background. The BEL is the truth: a table
        commit that fails is logged and caught up when a worker starts, never a failed build."""
        if self.tables is not None:
            self.tables.follow_later(run.outputs)

    def progress(self, group: str) -> Progress:
        job = self._running.get(group)
        return {} if job is None else self.executors.for_job(job.job_label).progress(job)

    def cancel(self, group: str) -> None:
        job = self._running.get(group)
        if job is not None:
            self.executors.for_job(job.job_label).cancel(job)

    def fail(self, job_run_id: str, reason: str, cause: JobRunCause = JobRunCause.error) -> JobRun:
        """Record that the run failed past its retry policy, or was cancelled (idempotent), and emit its
        final lineage event if this call is the one that recorded it (a retried call, or a run that
        already ended, emits nothing)."""
        before = self.bel.job_runs.get(job_run_id)
        run = self.bel.job_runs.fail(job_run_id, reason, cause)
        if not before.state.is_final:
            self._finished(run, cause.state)
        return run

    def _checks_of(self, run: JobRun) -> dict[str, list[CheckResult]]:
        """The check results of what the run published, or else of what its latest attempt wrote (the
        instances a blocking check kept from going live), by ref."""
        if run.writes:
            ids = [w.instance_id for w in run.writes if w.instance_id]
        else:
            attempts = self.bel.job_runs.attempt_outputs_of(run.job_run_id)
            latest = max((a.attempt for a in attempts), default=0)
            ids = [a.instance_id for a in attempts if a.attempt == latest]
        found: dict[str, list[CheckResult]] = {}
        for results in self.bel.partitions.checks_of(ids).values():
            found.setdefault(results[0].ref, []).extend(results)
        return found

    def _finished(self, run: JobRun, recorded: JobRunState) -> JobRun:
        """Emit the final lineage event of a run, if the BEL call just made recorded ``recorded``: the
        BEL returns a run that had already ended unchanged, and its end was reported then."""
        if self.lineage is not None and run.state is recorded:
            cost = run_cost(self.bel.costs.attempts_of([run.job_run_id]), run.outputs)
            read = self.bel.partitions.checks_of([r.instance_id for r in run.reads if r.instance_id])
            self.lineage.finished(run, self._checks_of(run), cost, read)
        return run
