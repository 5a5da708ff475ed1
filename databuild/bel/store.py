"""The build event log: append-only events plus projections, updated in one transaction per command."""

import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, RowMapping, delete, insert, select, update

from databuild.bel import events as ev
from databuild.bel import migrate, projector
from databuild.bel import schema as s
from databuild.bel.queries import BelQueries, partition_from_row, want_from_row
from databuild.bel.transaction import WriteTx, make_engines, now
from databuild.errors import (
    ConcurrentChangeError,
    InvalidInputError,
    InvalidTransitionError,
    NotFoundError,
    StaleAttemptError,
)
from databuild.graph import JobTarget, Resolution
from databuild.models import (
    ImpactedInstance,
    InstanceRef,
    InstanceStatus,
    JobRun,
    JobRunState,
    Partition,
    PartitionStatus,
    TaintImpact,
    TaintResult,
    Want,
    WantSpec,
    WantState,
    job_run_workflow_id,
)
from databuild.protocol import Decision, DecisionKind, DependenciesStatus

DEFAULT_LEASE = timedelta(minutes=1)


def want_key(want_id: str) -> str:
    return f"want:{want_id}"


def run_key(job_run_id: str) -> str:
    return f"run:{job_run_id}"


def ref_key(ref: str) -> str:
    return f"ref:{ref}"


def new_job_run_id() -> str:
    return "jr-" + uuid.uuid4().hex[:16]


def new_instance_id() -> str:
    return str(uuid.uuid4())


def _job_run_fields(job_run_id: str, target: JobTarget, want_id: str) -> dict[str, Any]:
    return {
        "job_run_id": job_run_id,
        "job_label": target.job.label,
        "outputs": target.outputs,
        "params": target.params,
        "want_id": want_id,
        "workflow_id": job_run_workflow_id(target.job.label, job_run_id),
    }


class BuildEventLog(BelQueries):
    def __init__(self, url: str) -> None:
        self.url = url
        self.writer, reader = make_engines(url)
        super().__init__(reader)

    @classmethod
    def create(cls, url: str) -> "BuildEventLog":
        """Open the log, creating or upgrading its schema (Alembic) first."""
        bel = cls(url)
        with bel.writer.begin() as conn:
            migrate.upgrade(conn)
        return bel

    def dispose(self) -> None:
        self.writer.dispose()
        self.reader.dispose()

    @contextmanager
    def _write(self, *keys: str) -> Iterator[WriteTx]:
        with self.writer.begin() as conn:
            tx = WriteTx(conn)
            tx.lock(*keys)
            yield tx
            tx.close()

    def _write_run(self, job_run_id: str) -> AbstractContextManager[WriteTx]:
        """A write transaction about a job run, holding its lock and its outputs' locks."""
        outputs = self._all(select(s.job_runs.c.outputs).where(s.job_runs.c.job_run_id == job_run_id))
        refs = list(outputs[0]["outputs"]) if outputs else []
        return self._write(run_key(job_run_id), *map(ref_key, refs))

    # Wants ---------------------------------------------------------------------------------------
    def register_want(self, spec: WantSpec) -> tuple[Want, bool]:
        """Record ``WantCreated`` unless the want exists. Returns the want and whether it is new."""
        existing = self.find_want(spec.want_id)  # the common repeat costs a read, not the write lock
        if existing is not None:
            return existing, False
        with self._write(want_key(spec.want_id)) as tx:
            created = self._ensure_want(tx, spec)
            want = self._want_row(tx.conn, spec.want_id)
        return want_from_row(want), created

    def _ensure_want(self, tx: WriteTx, spec: WantSpec) -> bool:
        if self._want_row(tx.conn, spec.want_id, required=False) is not None:
            return False
        tx.append(ev.WantCreated(want_id=spec.want_id, spec=spec, workflow_id=spec.workflow_id))
        return True

    def decide(
        self, want_id: str, seq: int, resolution: Resolution, lease: timedelta = DEFAULT_LEASE
    ) -> Decision:
        """Step 2 of a want, in one transaction (SPEC 3.3): done (historical delegation), wait for an
        active run (active delegation), wait for an operator (fail-lock), or queue a new job run."""
        outputs = resolution.target.outputs if resolution.target else [resolution.ref]
        with self._write(want_key(want_id), *map(ref_key, outputs)) as tx:
            want = self._want_row(tx.conn, want_id)
            if WantState(want["state"]).is_final:
                return self._final_decision(tx.conn, want)
            if want["decision_seq"] >= seq:
                return self._replay_decision(tx.conn, want, resolution)
            rows = {out: self._partition_row(tx.conn, out) for out in outputs}
            statuses = {
                out: row["status"] if row else PartitionStatus.missing.value for out, row in rows.items()
            }
            own = rows[want["ref"]]
            if own is not None and own["status"] == PartitionStatus.live.value:
                self._historical(tx, want_id, resolution)
                tx.append(
                    ev.WantFinished(
                        type="WantSucceeded",
                        want_id=want_id,
                        state=WantState.successful,
                        instance_id=own["instance_id"],
                    )
                )
                return Decision(
                    kind=DecisionKind.live, instance_id=own["instance_id"], job_run_id=own["built_by"]
                )
            retired = [out for out, status in statuses.items() if status == PartitionStatus.skipped.value]
            if retired:
                reason = f"{', '.join(retired)} retired with `databuild skip`; it is never built again"
                tx.append(
                    ev.WantFinished(type="WantFailed", want_id=want_id, state=WantState.failed, reason=reason)
                )
                return Decision(kind=DecisionKind.final, final_state=WantState.failed, reason=reason)
            target = resolution.target
            if target is None:
                tx.append(ev.WantWaitingExternal(want_id=want_id, decision_seq=seq))
                return Decision(kind=DecisionKind.wait_external)
            active = next(
                (r["building_job_run_id"] for r in rows.values() if r and r["building_job_run_id"]), None
            )
            if active is not None and active == want["job_run_id"]:
                return self._replay_decision(tx.conn, want, resolution)  # still following its own run
            if active is not None:
                for out in outputs:
                    message = "delegated to active build"
                    tx.append(
                        ev.Delegation(
                            want_id=want_id, ref=out, delegated_to=active, kind="active", message=message
                        )
                    )
                tx.append(
                    ev.WantBuilding(
                        want_id=want_id, job_run_id=active, relation="delegated", decision_seq=seq
                    )
                )
                return self._run_decision(tx.conn, DecisionKind.delegate, active)
            locked = [out for out, status in statuses.items() if status == PartitionStatus.failed.value]
            if locked and self._took_part_in_failure(tx.conn, want_id, locked):
                # The want ran or joined the build that failed: it ends failed, however late it heard.
                reason = self._fail_lock_reason(tx.conn, locked)
                tx.append(
                    ev.WantFinished(type="WantFailed", want_id=want_id, state=WantState.failed, reason=reason)
                )
                return Decision(kind=DecisionKind.final, final_state=WantState.failed, reason=reason)
            if locked:
                reason = self._fail_lock_reason(tx.conn, locked)
                tx.append(ev.WantBlocked(want_id=want_id, refs=locked, reason=reason, decision_seq=seq))
                return Decision(kind=DecisionKind.blocked, blocked_refs=locked, reason=reason)
            job_run_id = new_job_run_id()
            tx.append(ev.JobRunQueued(**_job_run_fields(job_run_id, target, want_id)))
            for out in outputs:
                tx.append(ev.PartitionBuilding(ref=out, job_run_id=job_run_id))
            tx.append(
                ev.WantBuilding(want_id=want_id, job_run_id=job_run_id, relation="executed", decision_seq=seq)
            )
            self._set_lease(tx.conn, job_run_id, tx.at + lease)
            return self._run_decision(tx.conn, DecisionKind.execute, job_run_id)

    def _final_decision(self, conn: Connection, want: RowMapping) -> Decision:
        own = self._partition_row(conn, want["ref"])
        return Decision(
            kind=DecisionKind.final,
            final_state=WantState(want["state"]),
            reason=want["reason"],
            instance_id=own["instance_id"] if own is not None else None,
        )

    def _failing_runs(self, conn: Connection, refs: list[str]) -> dict[str, dict[str, Any]]:
        """The PartitionFailed event data that fail-locked each ref."""
        found = {}
        for ref in refs:
            data = conn.execute(
                select(s.events.c.data)
                .where(s.events.c.ref == ref, s.events.c.type == "PartitionFailed")
                .order_by(s.events.c.idx.desc())
                .limit(1)
            ).scalar()
            if data:
                found[ref] = data
        return found

    def _took_part_in_failure(self, conn: Connection, want_id: str, refs: list[str]) -> bool:
        runs = {d["job_run_id"] for d in self._failing_runs(conn, refs).values()}
        linked = conn.execute(
            select(s.want_job_runs.c.job_run_id).where(
                s.want_job_runs.c.want_id == want_id, s.want_job_runs.c.job_run_id.in_(runs)
            )
        ).first()
        return linked is not None

    def _fail_lock_reason(self, conn: Connection, refs: list[str]) -> str:
        parts = []
        failures = self._failing_runs(conn, refs)
        for ref in refs:
            failure = failures.get(ref)
            cause = f" (job run {failure['job_run_id']}: {failure['reason']})" if failure else ""
            parts.append(f"{ref} is fail-locked{cause}")
        return "; ".join(parts) + f"; clear it with `databuild resolve {refs[0]}`"

    def _historical(self, tx: WriteTx, want_id: str, resolution: Resolution) -> None:
        """Historical delegation: point at the runs that built the live outputs, and skip the job."""
        if resolution.target is not None:
            target = resolution.target
            live = [
                r
                for r in (self._partition_row(tx.conn, out) for out in target.outputs)
                if r is not None and r["status"] == PartitionStatus.live.value and r["built_by"]
            ]
            for row in live:
                tx.append(
                    ev.Delegation(
                        want_id=want_id,
                        ref=row["ref"],
                        delegated_to=row["built_by"],
                        kind="historical",
                        message="delegated to historical build: partition already available",
                    )
                )
            tx.append(ev.JobRunSkipped(**_job_run_fields(new_job_run_id(), target, want_id)))

    def _replay_decision(self, conn: Connection, want: RowMapping, resolution: Resolution) -> Decision:
        """The answer already given for this decision step (the activity was retried after committing)."""
        if want["state"] == WantState.upstream_building.value and want["job_run_id"] is None:
            if resolution.target is None:
                return Decision(kind=DecisionKind.wait_external)
            locked = [
                out
                for out in resolution.target.outputs
                if (row := self._partition_row(conn, out)) is not None
                and row["status"] == PartitionStatus.failed.value
            ]
            return Decision(kind=DecisionKind.blocked, blocked_refs=locked, reason=want["reason"])
        relation = conn.execute(
            select(s.want_job_runs.c.relation).where(
                s.want_job_runs.c.want_id == want["want_id"],
                s.want_job_runs.c.job_run_id == want["job_run_id"],
            )
        ).scalar_one()
        kind = DecisionKind.execute if relation == "executed" else DecisionKind.delegate
        return self._run_decision(conn, kind, want["job_run_id"])

    def _run_decision(self, conn: Connection, kind: DecisionKind, job_run_id: str) -> Decision:
        row = conn.execute(select(s.job_runs).where(s.job_runs.c.job_run_id == job_run_id)).mappings().one()
        return Decision(
            kind=kind,
            job_run_id=job_run_id,
            job_label=row["job_label"],
            outputs=list(row["outputs"]),
            params=dict(row["params"]),
        )

    def await_dependencies(
        self, want_id: str, job_run_id: str, missing: Sequence[str]
    ) -> tuple[DependenciesStatus, list[WantSpec]]:
        """Record that the want waits for ``missing`` (subscribing to them) and ensure a derivative want
        for each input not live; report, in the same transaction, which inputs are live and which
        derivatives ended without their partition. Returns that and the derivative wants that have not
        ended (to start). A derivative's id includes its ref's taint count, read under the ref's lock, so
        an input tainted since an earlier build is wanted anew."""
        parent = self.want(want_id).spec
        generations = self.generations(missing)
        derivatives = [parent.derive(ref, want_id, generations[ref]) for ref in missing]
        keys = [want_key(want_id), *map(ref_key, missing), *(want_key(d.want_id) for d in derivatives)]
        with self._write(*keys) as tx:
            for ref in missing:
                row = self._partition_row(tx.conn, ref)
                if (row["generation"] if row is not None else 0) != generations[ref]:
                    raise ConcurrentChangeError(f"{ref} was tainted while its want was being derived")
            live = [
                ref
                for ref in missing
                if (row := self._partition_row(tx.conn, ref)) is not None
                and row["status"] == PartitionStatus.live.value
            ]
            # An input that went live since the dep-miss needs no new derivative.
            for spec in derivatives:
                if spec.ref not in live:
                    self._ensure_want(tx, spec)
            found = {d.want_id: self._want_row(tx.conn, d.want_id, required=False) for d in derivatives}
            rows = {want_id: row for want_id, row in found.items() if row is not None}
            recorded = [d for d in derivatives if d.want_id in rows]
            want = self._want_row(tx.conn, want_id)
            if want["state"] != WantState.upstream_building.value or want["job_run_id"] != job_run_id:
                tx.append(
                    ev.WantUpstreamBuilding(
                        want_id=want_id,
                        job_run_id=job_run_id,
                        missing=list(missing),
                        derivative_want_ids=[d.want_id for d in recorded],
                    )
                )
            ended = [d for d in recorded if WantState(rows[d.want_id]["state"]).is_final]
            failed = {}
            for d in ended:
                if d.ref not in live and rows[d.want_id]["state"] != WantState.successful.value:
                    state, reason = rows[d.want_id]["state"], rows[d.want_id]["reason"] or ""
                    failed[d.ref] = f"derivative want {d.want_id} {state}: {reason}".strip()
            # Every recorded derivative that has not ended is started (again: starting is idempotent),
            # also one of an input live by now: recorded by an attempt whose start failed, it would
            # otherwise stay `new` with no workflow.
            unfinished = [d for d in recorded if not WantState(rows[d.want_id]["state"]).is_final]
            return DependenciesStatus(live=live, failed=failed), unfinished

    def await_requirements(self, want_id: str, refs: Sequence[str]) -> list[str]:
        """Record that the want waits for the external partitions it requires (it subscribed to them
        when it was created); returns those already live, read in the same transaction."""
        with self._write(want_key(want_id), *map(ref_key, refs)) as tx:
            want = self._want_row(tx.conn, want_id)
            if want["state"] == WantState.new.value:
                tx.append(ev.WantAwaitingRequirements(want_id=want_id, refs=list(refs)))
            return [
                ref
                for ref in refs
                if (row := self._partition_row(tx.conn, ref)) is not None
                and row["status"] == PartitionStatus.live.value
            ]

    def finish_want(
        self, want_id: str, state: WantState, reason: str | None = None, instance_id: str | None = None
    ) -> Want:
        if not state.is_final:
            raise InvalidTransitionError(f"{state.value} is not a final want state")
        current = self.want(want_id)
        if current.state.is_final:  # already recorded (e.g. by the decision that found it live)
            return current
        with self._write(want_key(want_id)) as tx:
            want = self._want_row(tx.conn, want_id)
            if not WantState(want["state"]).is_final:
                tx.append(
                    ev.WantFinished(
                        type=ev.FINISH_EVENT_TYPE[state],
                        want_id=want_id,
                        state=state,
                        reason=reason,
                        instance_id=instance_id,
                    )
                )
            return want_from_row(self._want_row(tx.conn, want_id))

    def mark_sla_missed(self, want_id: str, deadline: datetime) -> Want:
        current = self.want(want_id)
        if current.sla_missed:
            return current
        with self._write(want_key(want_id)) as tx:
            want = self._want_row(tx.conn, want_id)
            if not want["sla_missed"]:
                tx.append(ev.WantSlaMissed(want_id=want_id, deadline=deadline))
            return want_from_row(self._want_row(tx.conn, want_id))

    # Job runs ------------------------------------------------------------------------------------
    def start_job_run(self, job_run_id: str, attempt: int, worker: str) -> JobRun:
        """Mark an attempt as running. A run that already ended is returned unchanged (retried activity)."""
        with self._write_run(job_run_id) as tx:
            row = self._job_run_row(tx.conn, job_run_id)
            if not JobRunState(row["state"]).is_final:
                tx.append(ev.JobRunStarted(job_run_id=job_run_id, attempt=attempt, worker=worker))
        return self.job_run(job_run_id)

    def succeed_job_run(
        self, job_run_id: str, reads: list[InstanceRef], writes: list[InstanceRef], attempt: int | None = None
    ) -> JobRun:
        with self._write_run(job_run_id) as tx:
            if self._open_run(tx.conn, job_run_id, attempt):
                tx.append(ev.JobRunSucceeded(job_run_id=job_run_id, reads=reads, writes=writes))
                for out in writes:
                    assert out.instance_id is not None
                    tx.append(
                        ev.PartitionLive(ref=out.ref, instance_id=out.instance_id, job_run_id=job_run_id)
                    )
        return self.job_run(job_run_id)

    def dep_miss_job_run(
        self, job_run_id: str, missing: list[str], reads: list[InstanceRef], attempt: int | None = None
    ) -> JobRun:
        with self._write_run(job_run_id) as tx:
            if (row := self._open_run(tx.conn, job_run_id, attempt)) is not None:
                tx.append(ev.JobRunDepMiss(job_run_id=job_run_id, missing=sorted(set(missing)), reads=reads))
                for out in self._locked_outputs(tx.conn, row):
                    tx.append(ev.PartitionReleased(ref=out, job_run_id=job_run_id))
        return self.job_run(job_run_id)

    def fail_job_run(self, job_run_id: str, reason: str, *, release: bool = False) -> JobRun:
        """End the run as failed. Its outputs are fail-locked (an operator resolves them), or with
        ``release`` (a run nobody wants any more, not a broken one) freed for the next build."""
        with self._write_run(job_run_id) as tx:
            if (row := self._open_run(tx.conn, job_run_id)) is not None:
                self._end_failed(tx, row, reason, release=release)
        return self.job_run(job_run_id)

    def _end_failed(
        self, tx: WriteTx, run: RowMapping, reason: str, *, release: bool, lost: bool = False
    ) -> None:
        """Record an open run as failed; its locked outputs are released or fail-locked with it."""
        job_run_id = run["job_run_id"]
        tx.append(ev.JobRunFailed(job_run_id=job_run_id, reason=reason, lost=lost))
        for out in self._locked_outputs(tx.conn, run):
            if release:
                tx.append(ev.PartitionReleased(ref=out, job_run_id=job_run_id))
            else:
                tx.append(ev.PartitionFailed(ref=out, job_run_id=job_run_id, reason=reason))

    def _open_run(self, conn: Connection, job_run_id: str, attempt: int | None = None) -> RowMapping | None:
        """The run if it has not ended. With ``attempt``: only if that attempt is still the current one,
        so an attempt that lost its heartbeat (and was retried elsewhere) can never record an outcome."""
        row = self._job_run_row(conn, job_run_id)
        if JobRunState(row["state"]).is_final:
            return None
        if attempt is not None and row["attempts"] != attempt:
            raise StaleAttemptError(
                f"attempt {attempt} of job run {job_run_id} was superseded by attempt {row['attempts']}"
            )
        return row

    def check_current_attempt(self, job_run_id: str, attempt: int) -> None:
        """Raises ``StaleAttemptError`` unless ``attempt`` may still publish: its run has not ended (it
        may have been failed or abandoned while a lost worker kept going) and no newer attempt started."""
        with self.reader.connect() as conn:
            if self._open_run(conn, job_run_id, attempt) is None:
                raise StaleAttemptError(f"job run {job_run_id} has ended; attempt {attempt} may not publish")

    def _locked_outputs(self, conn: Connection, run: RowMapping) -> list[str]:
        return [
            out
            for out in run["outputs"]
            if (p := self._partition_row(conn, out)) is not None
            and p["building_job_run_id"] == run["job_run_id"]
        ]

    # Leases: a build lock lapses unless its worker keeps renewing it ---------------------------------
    def _set_lease(self, conn: Connection, job_run_id: str, until: datetime) -> None:
        updated = conn.execute(
            update(s.job_run_leases)
            .where(s.job_run_leases.c.job_run_id == job_run_id)
            .values(expires_at=until)
        )
        if updated.rowcount == 0:
            conn.execute(insert(s.job_run_leases).values(job_run_id=job_run_id, expires_at=until))

    def renew_lease(self, job_run_id: str, lease: timedelta) -> None:
        """Called by the worker running the job while it heartbeats (not an event: it is operational)."""
        with self.writer.begin() as conn:
            self._set_lease(conn, job_run_id, now() + lease)

    def lease_expired(self, job_run_id: str) -> bool:
        rows = self._all(
            select(s.job_run_leases.c.expires_at).where(s.job_run_leases.c.job_run_id == job_run_id)
        )
        return not rows or rows[0]["expires_at"] < now()

    def abandon_job_run(self, job_run_id: str, reason: str) -> bool:
        """Release the outputs of a run whose workflow is gone (not a build failure: no fail-lock).
        Returns whether this call abandoned it."""
        with self._write_run(job_run_id) as tx:
            row = self._open_run(tx.conn, job_run_id)
            if row is None:
                return False
            self._end_failed(tx, row, reason, release=True, lost=True)
            return True

    # Partitions ----------------------------------------------------------------------------------
    def resolve(self, ref: str) -> list[Partition]:
        """Clear a fail-lock (operator action): the partition, and the other outputs its failed job run
        fail-locked with it, may be built again. Returns the partitions resolved."""
        siblings = self._failed_with(ref)
        with self._write(*map(ref_key, siblings)) as tx:
            status = partition_from_row(self._require_partition(tx.conn, ref)).status
            if status is not PartitionStatus.failed:
                raise InvalidTransitionError(
                    f"{ref} is {status.value}; only a failed (fail-locked) partition can be resolved"
                )
            resolved = []
            for out in siblings:
                row = self._partition_row(tx.conn, out)
                if row is not None and row["status"] == PartitionStatus.failed.value:
                    tx.append(ev.PartitionResolved(ref=out))
                    resolved.append(partition_from_row(self._require_partition(tx.conn, out)))
            return resolved

    def _failed_with(self, ref: str) -> list[str]:
        """``ref`` and the outputs of the job run that last failed it."""
        failure = self._all(
            select(s.events.c.job_run_id)
            .where(s.events.c.ref == ref, s.events.c.type == "PartitionFailed")
            .order_by(s.events.c.idx.desc())
            .limit(1)
        )
        if not failure:
            return [ref]
        run = self._all(
            select(s.job_runs.c.outputs).where(s.job_runs.c.job_run_id == failure[0]["job_run_id"])
        )
        return sorted({ref, *(run[0]["outputs"] if run else [])})

    def skip(self, ref: str) -> Partition:
        """Retire a partition (operator action): it is never built again, and wants for it fail."""
        with self._write(ref_key(ref)) as tx:
            row = self._partition_row(tx.conn, ref)
            current = partition_from_row(row) if row is not None else None
            if current is not None and current.building_job_run_id:
                raise InvalidTransitionError(
                    f"{ref} is being built by job run {current.building_job_run_id}; skip it after that run ends"
                )
            if current is not None and current.status is PartitionStatus.skipped:
                raise InvalidTransitionError(f"{ref} is already retired")
            tx.append(ev.PartitionSkipped(ref=ref))
            return partition_from_row(self._require_partition(tx.conn, ref))

    def taint_impact(self, ref: str) -> TaintImpact:
        """What `taint` would affect, without recording anything."""
        partition = self._taintable(self.find_partition(ref), ref)
        assert partition.instance_id is not None
        closure = self.downstream_closure(partition.instance_id)
        current = {
            i.instance_id
            for i in self.instances_by_id([ir.instance_id for ir, _ in closure if ir.instance_id])
            if i.status is InstanceStatus.live
        }
        return TaintImpact(
            ref=ref,
            instance_id=partition.instance_id,
            downstream=[
                ImpactedInstance(
                    ref=ir.ref, instance_id=ir.instance_id, depth=depth, current=ir.instance_id in current
                )
                for ir, depth in closure
                if ir.instance_id
            ],
        )

    def taint(
        self, ref: str, *, reason: str | None = None, cascade: bool = False, instance_id: str | None = None
    ) -> TaintResult:
        """Invalidate the live instance of ``ref`` (operator action): the next want rebuilds it, and
        everything built from it shows as stale. With ``cascade`` the current downstream instances
        are tainted too, so wants rebuild them as well. ``instance_id``: refuse if the live instance
        is no longer the one the caller looked at."""
        preview = self.taint_impact(ref)
        cascaded = sorted({d.ref for d in preview.current}) if cascade else []
        with self._write(*map(ref_key, [ref, *cascaded])) as tx:
            # Holding the head lock, no build can commit in between: one that read the instance either
            # committed already (its output is in the impact) or commits after us and inherits the taint.
            tx.lock_head()
            partition = self._taintable(self._partition_row(tx.conn, ref), ref)
            if instance_id is not None and partition.instance_id != instance_id:
                raise InvalidTransitionError(
                    f"the live instance of {ref} is now {partition.instance_id}, not {instance_id}; "
                    "look at the impact again"
                )
            impact = self.taint_impact(ref)
            stale = [InstanceRef(ref=d.ref, instance_id=d.instance_id) for d in impact.downstream]
            tx.append(
                ev.PartitionTainted(ref=ref, instance_id=impact.instance_id, reason=reason, stale=stale)
            )
            tainted = [InstanceRef(ref=ref, instance_id=impact.instance_id)]
            skipped: list[InstanceRef] = []
            for d in impact.current if cascade else []:
                row = self._partition_row(tx.conn, d.ref)
                still_live = (
                    row is not None
                    and row["instance_id"] == d.instance_id
                    and row["status"] == PartitionStatus.live.value
                    and not row["building_job_run_id"]
                )
                if d.ref in cascaded and not still_live:
                    skipped.append(InstanceRef(ref=d.ref, instance_id=d.instance_id))
                elif d.ref in cascaded:  # locked above, and not rebuilt meanwhile
                    tx.append(
                        ev.PartitionTainted(
                            ref=d.ref,
                            instance_id=d.instance_id,
                            reason=f"built from tainted {ref}" + (f": {reason}" if reason else ""),
                            cascaded_from=impact.instance_id,
                        )
                    )
                    tainted.append(InstanceRef(ref=d.ref, instance_id=d.instance_id))
            result = partition_from_row(self._require_partition(tx.conn, ref))
        return TaintResult(partition=result, impact=impact, tainted=tainted, not_tainted=skipped)

    @staticmethod
    def _taintable(row: RowMapping | Partition | None, ref: str) -> Partition:
        if row is None:
            raise NotFoundError(f"no partition {ref!r} in the build event log")
        partition = row if isinstance(row, Partition) else partition_from_row(row)
        if partition.building_job_run_id:
            raise InvalidTransitionError(
                f"{ref} is being built by job run {partition.building_job_run_id}; taint it after that run ends"
            )
        if partition.status is not PartitionStatus.live:
            raise InvalidTransitionError(
                f"{ref} is {partition.status.value}; only a live partition can be tainted"
            )
        return partition

    def _require_partition(self, conn: Connection, ref: str) -> RowMapping:
        row = self._partition_row(conn, ref)
        if row is None:
            raise NotFoundError(f"no partition {ref!r} in the build event log")
        return row

    def publish_external(
        self, ref: str, instance_id: str | None = None, source: str | None = None
    ) -> tuple[Partition, bool]:
        """Announce that ``ref`` is available from outside (``source``: who says so, e.g. the upstream
        graph). Idempotent: without ``instance_id`` a live ref is left as it is; with one (an upstream
        graph's instance UUID) an instance seen before is never applied again, and a new one replaces
        the live instance (the upstream rebuilt it). Returns the partition and whether this call changed it."""
        with self._write(ref_key(ref)) as tx:
            row = self._partition_row(tx.conn, ref)
            if row is not None and row["building_job_run_id"]:
                raise InvalidTransitionError(
                    f"{ref} is being built by job run {row['building_job_run_id']}; "
                    "publish it after that run ends"
                )
            if row is not None and row["status"] == PartitionStatus.skipped.value:
                raise InvalidTransitionError(
                    f"{ref} was retired with `databuild skip`; it cannot become live again"
                )
            if instance_id is None:
                created = row is None or row["status"] != PartitionStatus.live.value
            else:
                seen = tx.conn.execute(
                    select(s.partition_instances.c.ref).where(
                        s.partition_instances.c.instance_id == instance_id
                    )
                ).first()
                if seen is not None and seen.ref != ref:
                    raise InvalidInputError(
                        f"instance {instance_id} is already an instance of {seen.ref}, not {ref}"
                    )
                created = seen is None
            if created:
                tx.append(
                    ev.PartitionLive(
                        ref=ref,
                        instance_id=instance_id or new_instance_id(),
                        job_run_id=None,
                        external=True,
                        source=source,
                    )
                )
            result = self._partition_row(tx.conn, ref)
            assert result is not None
            return partition_from_row(result), created

    # Maintenance ---------------------------------------------------------------------------------
    def rebuild_projections(self) -> int:
        """Throw current state away and derive it again from the events alone. Returns events replayed."""
        with self._write() as tx:
            tx.lock_head()  # no command may run while state is rebuilt
            for table in reversed(s.PROJECTIONS):
                tx.conn.execute(delete(table))
            count = 0
            for row in tx.conn.execute(select(s.events).order_by(s.events.c.idx)).mappings():
                projector.apply(tx.conn, ev.EVENT_ADAPTER.validate_python(row["data"]), row["at"])
                count += 1
            return count

    # Row helpers (inside a transaction) -----------------------------------------------------------
    def _want_row(self, conn: Connection, want_id: str, required: bool = True) -> Any:
        row = conn.execute(select(s.wants).where(s.wants.c.want_id == want_id)).mappings().first()
        if row is None and required:
            raise NotFoundError(f"no want {want_id!r}")
        return row

    def _job_run_row(self, conn: Connection, job_run_id: str) -> RowMapping:
        row = conn.execute(select(s.job_runs).where(s.job_runs.c.job_run_id == job_run_id)).mappings().first()
        if row is None:
            raise NotFoundError(f"no job run {job_run_id!r}")
        return row

    def _partition_row(self, conn: Connection, ref: str) -> RowMapping | None:
        return conn.execute(select(s.partitions).where(s.partitions.c.ref == ref)).mappings().first()
