"""Job runs: their lifecycle from start to outcome, and reads of runs and their attempts."""

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select

from databuild.bel import schema as s
from databuild.bel.aggregates.base import WriteBase, new_instance_id
from databuild.bel.aggregates.costs import append_cost
from databuild.bel.aggregates.partitions import PartitionReads
from databuild.bel.aggregates.pools import ADMITTED_NOT_STARTED
from databuild.bel.aggregates.wants import WantReads
from databuild.bel.engine.recorder import Recorder
from databuild.bel.engine.transaction import WriteTx
from databuild.bel.reads import measures
from databuild.bel.reads.base import ReadBase
from databuild.bel.reads.rows import (
    chunks,
    job_run_row,
    newest_first,
    ref_conditions,
)
from databuild.domain import checks as check_rules
from databuild.domain import decisions
from databuild.domain import events as ev
from databuild.domain.estimates import Durations
from databuild.errors import (
    NotFoundError,
    StaleAttemptError,
)
from databuild.models import (
    AttemptOutput,
    CheckResult,
    InstanceFacts,
    InstanceRef,
    JobRun,
    JobRunCause,
    JobRunState,
    Model,
    Subscription,
)

# A run's rows, built once (see bel.rows): every step of a job run reads its run.
_RUNS_BY_ID = select(s.job_runs).where(s.one_of(s.job_runs.c.job_run_id, "ids"))
_WAITING_FOR_POOLS = (
    select(s.run_pools.c.job_run_id, s.run_pools.c.pool)
    .where(s.one_of(s.run_pools.c.job_run_id, "ids"), s.run_pools.c.granted.is_(False))
    .order_by(s.run_pools.c.pool)
)
_READS_OF_RUNS = (
    select(s.read_deps).where(s.one_of(s.read_deps.c.job_run_id, "ids")).order_by(s.read_deps.c.id)
)
_WRITES_OF_RUNS = select(s.partition_instances).where(s.one_of(s.partition_instances.c.job_run_id, "ids"))


class JobRunReads(ReadBase):
    """Reads of job runs."""

    def get(self, job_run_id: str) -> JobRun:
        runs = self.by_id([job_run_id])
        if not runs:
            raise NotFoundError(f"no job run {job_run_id!r}; list them with `databuild job-runs list`")
        return runs[0]

    def by_id(self, ids: Sequence[str]) -> list[JobRun]:
        runs = []
        with self._log.snapshot():  # a run and what it read and wrote, as one state of the log (one checkout)
            for chunk in chunks(ids):
                runs += self._hydrate_runs(self._all(_RUNS_BY_ID, {"ids": chunk}))
        return runs

    def query(
        self,
        *,
        state: JobRunState | None = None,
        job_label: str | None = None,
        ref_prefix: str | None = None,
        ref_glob: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[JobRun]:
        conditions: list[Any] = []
        by_ref = ref_conditions(s.job_run_outputs.c.ref, ref_prefix, ref_glob)
        if by_ref:  # runs with an output matching
            outputs = select(s.job_run_outputs.c.job_run_id).where(*by_ref)
            conditions.append(s.job_runs.c.job_run_id.in_(outputs))
        if state is not None:
            conditions.append(s.job_runs.c.state == state.value)
        if job_label is not None:
            conditions.append(s.job_runs.c.job_label == job_label)
        query = newest_first(s.job_runs, conditions, "job_run_id", limit, offset, filter_first=bool(by_ref))
        with self._log.snapshot():
            return self._hydrate_runs(self._all(query))

    def _hydrate_runs(self, rows: list[Any]) -> list[JobRun]:
        ids = [r["job_run_id"] for r in rows]
        reads: dict[str, list[InstanceRef]] = {i: [] for i in ids}
        writes: dict[str, list[InstanceRef]] = {i: [] for i in ids}
        waiting: dict[str, list[str]] = {i: [] for i in ids}
        queued = [r["job_run_id"] for r in rows if r["state"] == JobRunState.queued.value]
        if queued:
            for r in self._all(_WAITING_FOR_POOLS, {"ids": queued}):
                waiting[r["job_run_id"]].append(r["pool"])
        if ids:
            for r in self._all(_READS_OF_RUNS, {"ids": ids}):
                reads[r["job_run_id"]].append(InstanceRef(ref=r["ref"], instance_id=r["instance_id"]))
            for r in self._all(_WRITES_OF_RUNS, {"ids": ids}):
                writes[r["job_run_id"]].append(InstanceRef(ref=r["ref"], instance_id=r["instance_id"]))
        return [
            JobRun(
                job_run_id=r["job_run_id"],
                lost=bool(r["lost"]),
                cause=JobRunCause(r["cause"]) if r["cause"] else None,
                job_label=r["job_label"],
                outputs=list(r["outputs"]),
                params=dict(r["params"]),
                state=JobRunState(r["state"]),
                want_id=r["want_id"],
                attempts=r["attempts"],
                reason=r["reason"],
                missing=list(r["missing"]),
                reads=reads[r["job_run_id"]],
                writes=sorted(writes[r["job_run_id"]], key=lambda w: w.ref),
                workflow_id=r["workflow_id"],
                created_at=r["created_at"],
                updated_at=r["updated_at"],
                started_at=r["started_at"],
                ended_at=r["ended_at"],
                partitions=r["members"],
                missing_for=r["missing_for"],
                waiting_for_pools=waiting[r["job_run_id"]],
            )
            for r in rows
        ]

    def of_want(self, want_id: str) -> list[tuple[str, JobRun]]:
        rows = self._all(
            select(s.want_job_runs.c.relation, s.want_job_runs.c.job_run_id).where(
                s.want_job_runs.c.want_id == want_id
            )
        )
        runs = {r.job_run_id: r for r in self.by_id([row["job_run_id"] for row in rows])}
        result = [(row["relation"], runs[row["job_run_id"]]) for row in rows]
        return sorted(result, key=lambda pair: pair[1].created_at)

    def durations(self, labels: Sequence[str], last: int = 50) -> dict[str, Durations]:
        """Each job's p50 and p90 over its ``last`` succeeded runs (latest attempt's start to the end)."""
        return measures.job_durations(self._all, labels, last)

    def latest_succeeded(self, labels: Sequence[str]) -> list[JobRun]:
        """Each job's latest succeeded run (none for a job that has not succeeded): one index seek per
        job (ix_job_runs_durations), all in one statement."""
        c = s.job_runs.c
        latest = [
            select(c.job_run_id)
            .where(c.job_label == label, c.state == JobRunState.succeeded.value, c.ended_at.is_not(None))
            .order_by(c.ended_at.desc())
            .limit(1)
            .scalar_subquery()
            for label in dict.fromkeys(labels)
        ]
        if not latest:
            return []
        row = self._all(select(*(q.label(f"j{n}") for n, q in enumerate(latest))))[0]
        return self.by_id([run_id for run_id in row.values() if run_id])

    def attempt_outputs(self, ids: Sequence[str]) -> dict[str, AttemptOutput]:
        """Which attempt writes (or wrote) each of these instance ids, for those an attempt planned."""
        found: dict[str, AttemptOutput] = {}
        for chunk in chunks(ids):
            for row in self._all(select(s.attempt_outputs).where(s.attempt_outputs.c.instance_id.in_(chunk))):
                found[row["instance_id"]] = AttemptOutput.model_validate(dict(row))
        return found

    def attempt_outputs_of(self, job_run_id: str) -> list[AttemptOutput]:
        """The instances every attempt of a job run wrote (or writes) to, by attempt."""
        rows = self._all(
            select(s.attempt_outputs)
            .where(s.attempt_outputs.c.job_run_id == job_run_id)
            .order_by(s.attempt_outputs.c.attempt, s.attempt_outputs.c.ref)
        )
        return [AttemptOutput.model_validate(dict(r)) for r in rows]

    def attempt_outputs_of_runs(self, job_run_ids: Sequence[str]) -> list[AttemptOutput]:
        """The instances every attempt of these job runs wrote (or writes) to."""
        rows = []
        for chunk in chunks(job_run_ids):
            rows += self._all(select(s.attempt_outputs).where(s.attempt_outputs.c.job_run_id.in_(chunk)))
        return [AttemptOutput.model_validate(dict(r)) for r in rows]

    def oldest_open(self) -> datetime | None:
        """When the oldest job run that has not ended was created: it may still read anything that was
        live since then."""
        open_states = [JobRunState.queued.value, JobRunState.running.value]
        with self._log.reader.connect() as conn:
            oldest: datetime | None = conn.execute(
                select(func.min(s.job_runs.c.created_at)).where(s.job_runs.c.state.in_(open_states))
            ).scalar()
        return oldest


class StartedAttempt(Model):
    """An attempt as its start left its run, with the instance each output is to be written to."""

    run: JobRun
    instances: dict[str, str]  # ref -> instance id


class RunEnded(Model):
    """A run as the commit of its outcome left it, with what telling its wants reads first, read in that
    commit: the first page of subscriptions to its outputs, the runs that commit gave a pool slot (the
    workflows to wake), and the check results of the instances it published. None: not read with it."""

    run: JobRun
    subscribers: list[Subscription] | None = None
    subscribers_limit: int = 0  # the page's limit: a page this long may have more after it
    admitted: list[str] | None = None
    checks: dict[str, list[CheckResult]] | None = None


class JobRuns(JobRunReads, WriteBase):
    """Commands about job runs. Each returns what it recorded from inside its transaction."""

    # Subscriptions read back with a run's outcome (``RunEnded``): most runs have a few.
    SUBSCRIBERS_PAGE = 200

    def __init__(self, log: Recorder) -> None:
        super().__init__(log)
        # An outcome comes back with its subscribers and its instances' checks.
        self._wants = WantReads(log)
        self._partitions = PartitionReads(log)

    def check_current_attempt(self, job_run_id: str, attempt: int) -> None:
        """Raises ``StaleAttemptError`` unless ``attempt`` may still publish: its run has not ended (it
        may have been failed or abandoned while a lost worker kept going) and no newer attempt started."""
        with self._log.reader.connect() as conn:
            if self._open_run(conn, job_run_id, attempt) is None:
                raise StaleAttemptError(f"job run {job_run_id} has ended; attempt {attempt} may not publish")

    def start(
        self,
        job_run_id: str,
        attempt: int,
        worker: str,
        instances: Sequence[InstanceRef] = (),
        lease: timedelta | None = None,
    ) -> JobRun:
        """Mark an attempt as running, with the instance each output will be written to, and its build
        lease renewed for ``lease`` (in the same commit: an attempt may start long after its run was
        queued). A run that already ended is returned unchanged (retried activity)."""
        return self._start(job_run_id, attempt, worker, instances, lease).run

    def start_attempt(
        self, job_run_id: str, attempt: int, worker: str, lease: timedelta | None = None
    ) -> StartedAttempt:
        """``job_runs.start`` with a new instance planned for each output, in the transaction that reads
        them: a batch that takes another partition cannot come between the plan and the start."""
        return self._start(job_run_id, attempt, worker, None, lease)

    def _start(
        self,
        job_run_id: str,
        attempt: int,
        worker: str,
        instances: Sequence[InstanceRef] | None,
        lease: timedelta | None,
    ) -> StartedAttempt:
        with self._write_run(job_run_id) as tx:
            row = job_run_row(tx.conn, job_run_id)
            state = JobRunState(row["state"])
            if instances is None:
                instances = [InstanceRef(ref=ref, instance_id=new_instance_id()) for ref in row["outputs"]]
            started = decisions.started(job_run_id, state, row["outputs"], attempt, worker, instances)
            tx.extend(started)
            if started and lease is not None:
                self._set_lease(tx.conn, job_run_id, tx.at + lease)
            planned = {i.ref: i.instance_id for i in instances if i.instance_id}
            return StartedAttempt(run=self._as_written(tx, job_run_id), instances=planned)

    def succeed(
        self,
        job_run_id: str,
        reads: list[InstanceRef],
        writes: list[InstanceRef],
        attempt: int | None = None,
        locations: Mapping[str, str] | None = None,
        inputs_of: dict[str, list[str]] | None = None,
        facts: Mapping[str, InstanceFacts] | None = None,
        checks: Mapping[str, Sequence[CheckResult]] | None = None,
        job_version: str | None = None,
        cost: ev.JobRunCostRecorded | None = None,
    ) -> RunEnded:
        """Publish: the commit makes each written instance live (at ``locations``, by ref, with
        ``facts``, the results of its ``checks`` and the ``job_version`` that built it). ``inputs_of``: of
        a batch, the reads each output was built from. ``cost``: what the attempt cost, recorded first in
        the same commit (see ``costs.record``)."""
        with self._write_run(job_run_id) as tx:
            if cost is not None:
                append_cost(tx, cost)
            if (run := self._open(tx.conn, job_run_id, attempt)) is not None:
                tx.extend(
                    decisions.succeeded(run, reads, writes, locations, inputs_of, facts, checks, job_version)
                )
            return self._ended(tx, job_run_id)

    def record_checks(
        self,
        job_run_id: str,
        attempt: int,
        instances: Sequence[InstanceRef],
        checks: Mapping[str, Sequence[CheckResult]],
    ) -> bool:
        """Record the check results of instances an attempt wrote that will not go live (a blocking check
        failed), while the attempt may still decide its run's outcome. Returns whether it recorded them."""
        with self._write_run(job_run_id) as tx:
            if self._open(tx.conn, job_run_id, attempt) is None:
                return False
            tx.extend(check_rules.checked(job_run_id, instances, checks))
            return True

    def dep_miss(
        self,
        job_run_id: str,
        missing: list[str],
        reads: list[InstanceRef],
        attempt: int | None = None,
        missing_for: dict[str, list[str]] | None = None,
        cost: ev.JobRunCostRecorded | None = None,
    ) -> RunEnded:
        """The attempt found inputs ``missing``; ``cost`` as ``job_runs.succeed`` takes it."""
        with self._write_run(job_run_id) as tx:
            if cost is not None:
                append_cost(tx, cost)
            if (run := self._open(tx.conn, job_run_id, attempt)) is not None:
                tx.extend(decisions.dep_missed(run, missing, reads, missing_for))
            return self._ended(tx, job_run_id)

    def fail(self, job_run_id: str, reason: str, cause: JobRunCause = JobRunCause.error) -> JobRun:
        """End the run without its outputs: failed (``cause`` error) or cancelled. Broken or cancelled
        builds fail-lock their outputs (an operator resolves them); abandoned or lost ones release them."""
        with self._write_run(job_run_id) as tx:
            if (run := self._open(tx.conn, job_run_id)) is not None:
                tx.extend(decisions.ended_without_output(run, reason, cause))
            return self._as_written(tx, job_run_id)

    def abandon(self, job_run_id: str, reason: str) -> bool:
        """Release the outputs of a run whose workflow is gone (not a build failure: no fail-lock).
        Returns whether this call abandoned it."""
        with self._write_run(job_run_id) as tx:
            run = self._open(tx.conn, job_run_id)
            if run is None:
                return False
            tx.extend(decisions.ended_without_output(run, reason, JobRunCause.lost))
            return True

    def _as_written(self, tx: WriteTx, job_run_id: str) -> JobRun:
        """The run as ``tx`` leaves it, read inside it (the projections hold its events already)."""
        with self._log.reading_on(tx.conn):
            return self.get(job_run_id)

    def _ended(self, tx: WriteTx, job_run_id: str) -> RunEnded:
        """The run as ``tx`` leaves it, with what its fan-out reads first (``RunEnded``), read inside it
        once the slots it freed went to the runs waiting for them."""
        self._admit(tx)
        with self._log.reading_on(tx.conn):
            run = self.get(job_run_id)
            return RunEnded(
                run=run,
                subscribers=self._wants.subscriptions(run.outputs, 0, self.SUBSCRIBERS_PAGE),
                subscribers_limit=self.SUBSCRIBERS_PAGE,
                admitted=[row["workflow_id"] for row in self._all(ADMITTED_NOT_STARTED)],
                checks=self._partitions.checks_of([w.instance_id for w in run.writes if w.instance_id]),
            )
