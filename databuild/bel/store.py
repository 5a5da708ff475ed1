"""The build event log: append-only events plus projections, updated in one transaction per command."""

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, RowMapping, Select, delete, func, insert, select, update

from databuild.backfill import BackfillRequest, cancel_reason
from databuild.bel import migrate, projector
from databuild.bel import schema as s
from databuild.bel.queries import BelQueries, partition_from_row, waiting_on_count, want_from_row
from databuild.bel.transaction import WriteTx, make_engines, now, place_pending, write, write_lock
from databuild.domain import decisions, endings, pools, reach
from databuild.domain import events as ev
from databuild.domain.decisions import DependenciesStatus, Verdict
from databuild.domain.endings import Finished
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
    Instance,
    InstanceFacts,
    InstanceRef,
    InstanceStatus,
    JobRun,
    JobRunCause,
    JobRunState,
    Partition,
    PartitionStatus,
    TaintImpact,
    TaintResult,
    Want,
    WantSource,
    WantSpec,
    WantState,
)

DEFAULT_LEASE = timedelta(minutes=1)
CANCEL_CHUNK = 200  # wants ended per transaction: each holds their locks (PostgreSQL's lock table is finite)


def want_key(want_id: str) -> str:
    return f"want:{want_id}"


def run_key(job_run_id: str) -> str:
    return f"run:{job_run_id}"


def ref_key(ref: str) -> str:
    return f"ref:{ref}"


def pool_key(pool: str) -> str:
    return f"pool:{pool}"


def backfill_key(backfill_id: str) -> str:
    return f"backfill:{backfill_id}"


def _canceled(want_id: str, reason: str) -> ev.WantFinished:
    return ev.WantFinished(
        type=ev.FINISH_EVENT_TYPE[WantState.canceled],
        want_id=want_id,
        state=WantState.canceled,
        reason=reason,
    )


def _slots_taken(pools: Iterable[str]) -> Select[tuple[str, int]]:
    """Slots held per pool, of ``pools``."""
    return (
        select(s.run_pools.c.pool, func.count().label("n"))
        .where(s.run_pools.c.pool.in_(list(pools)), s.run_pools.c.granted.is_(True))
        .group_by(s.run_pools.c.pool)
    )


def new_job_run_id() -> str:
    return "jr-" + uuid.uuid4().hex[:16]


def new_instance_id() -> str:
    return str(uuid.uuid4())


class BuildEventLog(BelQueries):
    def __init__(self, url: str) -> None:
        self.url = url
        self.writer, reader = make_engines(url)
        self._write_lock = write_lock(url)
        super().__init__(reader)

    @classmethod
    def create(cls, url: str) -> "BuildEventLog":
        """Open the log, creating or upgrading its schema (Alembic) first."""
        bel = cls(url)
        with bel._write_lock, bel.writer.begin() as conn:
            migrate.upgrade(conn)
        place_pending(bel.writer)  # events of a writer that died between its COMMIT and placing them
        return bel

    def dispose(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        self.writer.dispose()
        self.reader.dispose()

    @contextmanager
    def _write(self, *keys: str, alone: bool = False) -> Iterator[WriteTx]:
        with write(self.writer, self._write_lock, *keys, alone=alone) as tx:
            yield tx

    @contextmanager
    def _write_run(self, job_run_id: str) -> Iterator[WriteTx]:
        """A write transaction about a job run, holding its lock and its outputs' locks, and the locks of
        the pools it holds a slot of: when the run ends in it, its slots go to the runs waiting for them."""
        outputs = self._all(select(s.job_runs.c.outputs).where(s.job_runs.c.job_run_id == job_run_id))
        refs = list(outputs[0]["outputs"]) if outputs else []
        held = self._all(select(s.run_pools.c.pool).where(s.run_pools.c.job_run_id == job_run_id))
        pools = self._pool_locks([row["pool"] for row in held])
        with self._write(run_key(job_run_id), *map(ref_key, refs), *map(pool_key, pools)) as tx:
            yield tx
            if pools:
                self._admit(tx, pools)

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

    def record_backfill(
        self, request: BackfillRequest, partitions: int, specs: Sequence[WantSpec]
    ) -> list[WantSpec]:
        """Record the backfill (the first time it is asked for) and ``specs`` as its wants (each recorded
        unless it exists). Whether the backfill was cancelled is read in the same transaction, under its
        lock: then the open wants of ``specs`` end `canceled` here, so a cancel during the registration
        reaches every want registered after it. Returns the wants that are open, to start (none once
        cancelled; a paused backfill's wants start, and decide that they are paused)."""
        backfill_id = request.backfill_id
        with self._write(backfill_key(backfill_id), *(want_key(spec.want_id) for spec in specs)) as tx:
            known = tx.conn.execute(
                select(s.backfills.c.canceled).where(s.backfills.c.backfill_id == backfill_id)
            ).first()
            if known is None:
                tx.append(
                    ev.BackfillRegistered(backfill_id=backfill_id, request=request, partitions=partitions)
                )
            for spec in specs:
                self._ensure_want(tx, spec)
            recorded = set(
                tx.conn.execute(
                    select(s.backfill_wants.c.want_id).where(s.backfill_wants.c.backfill_id == backfill_id)
                ).scalars()
            )
            new = [w for w in dict.fromkeys(spec.want_id for spec in specs) if w not in recorded]
            if new:
                tx.append(ev.BackfillWantsAdded(backfill_id=backfill_id, want_ids=new))
            unfinished = [
                spec
                for spec in specs
                if not WantState(self._want_row(tx.conn, spec.want_id)["state"]).is_final
            ]
            if known is None or not known.canceled:
                return unfinished
            for spec in unfinished:
                tx.append(_canceled(spec.want_id, cancel_reason(backfill_id)))
            return []

    def cancel_backfill(self, backfill_id: str) -> bool:
        """Record that the backfill is cancelled; False if it already was. NotFoundError for an unknown
        backfill. Its wants are cancelled by ``cancel_wants``; those it registers later, by
        ``record_backfill``."""
        with self._write(backfill_key(backfill_id)) as tx:
            if self._backfill_row(tx.conn, backfill_id)["canceled"]:
                return False
            tx.append(ev.BackfillCanceled(backfill_id=backfill_id))
        return True

    def cancel_wants(self, want_ids: Sequence[str], reason: str) -> tuple[list[Want], list[str]]:
        """End each of the wants that has not ended `canceled` (``reason``), a few hundred per transaction
        (each holds its wants' locks, so a decision either came before and is cancelled, or comes after
        and finds the want ended). Then each queued run they followed that no open want needs any more
        ends (abandoned) before it could start. Returns the wants cancelled and the workflow ids of the
        runs ended, to tell."""
        cancelled: list[Want] = []
        for start in range(0, len(want_ids), CANCEL_CHUNK):
            chunk = want_ids[start : start + CANCEL_CHUNK]
            with self._write(*(want_key(w) for w in chunk)) as tx:
                for want_id in chunk:
                    if not WantState(self._want_row(tx.conn, want_id)["state"]).is_final:
                        tx.append(_canceled(want_id, reason))
                        cancelled.append(want_from_row(self._want_row(tx.conn, want_id)))
        followed = sorted({w.job_run_id for w in cancelled if w.job_run_id is not None})
        return cancelled, [run for run in map(self._end_if_unwanted, followed) if run is not None]

    def _end_if_unwanted(self, job_run_id: str) -> str | None:
        """End a run that has not started and that no open want needs (abandoned); its workflow id."""
        with self._write_run(job_run_id) as tx:
            row = self._job_run_row(tx.conn, job_run_id)
            if JobRunState(row["state"]) is not JobRunState.queued:
                return None
            if tx.conn.execute(waiting_on_count(job_run_id)).scalar_one():
                return None
            run = self._open(tx.conn, job_run_id)
            assert run is not None  # queued
            tx.extend(decisions.ended_without_output(run, ev.ABANDONED_REASON, JobRunCause.abandoned))
            return str(row["workflow_id"])

    def retry_backfill(self, backfill_id: str) -> list[Want]:
        """Record that the backfill is retried (``BackfillRetried``: a cancelled one is no longer, so the
        wants it registers from then on start); returns its wants that ended failed or canceled, for the
        caller to reopen. NotFoundError for an unknown backfill."""
        with self._write(backfill_key(backfill_id)) as tx:
            self._backfill_row(tx.conn, backfill_id)
            tx.append(ev.BackfillRetried(backfill_id=backfill_id))
            rows = tx.conn.execute(
                select(s.wants)
                .join(s.backfill_wants, s.backfill_wants.c.want_id == s.wants.c.want_id)
                .where(
                    s.backfill_wants.c.backfill_id == backfill_id,
                    s.wants.c.state.in_([WantState.failed.value, WantState.canceled.value]),
                )
            ).mappings()
            return [want_from_row(row) for row in rows]

    def pause_backfill(self, backfill_id: str, paused: bool) -> bool:
        """Record that the backfill is paused (or resumed); False if it already was. Raises NotFoundError
        for an unknown backfill."""
        with self._write(backfill_key(backfill_id)) as tx:
            if bool(self._backfill_row(tx.conn, backfill_id)["paused"]) == paused:
                return False
            tx.append(
                ev.BackfillPaused(backfill_id=backfill_id)
                if paused
                else ev.BackfillResumed(backfill_id=backfill_id)
            )
        return True

    def _ensure_want(self, tx: WriteTx, spec: WantSpec) -> bool:
        if self._want_row(tx.conn, spec.want_id, required=False) is not None:
            return False
        tx.append(ev.WantCreated(want_id=spec.want_id, spec=spec, workflow_id=spec.workflow_id))
        return True

    def decide(
        self, want_id: str, seq: int, resolution: Resolution, lease: timedelta = DEFAULT_LEASE
    ) -> Verdict:
        """Step ``seq`` of a want, in one transaction: the rules of ``decisions.decide`` over the state
        of the want and its job's outputs. A newly queued run gets its build lease."""
        target = resolution.target
        outputs = target.outputs if target else [resolution.ref]
        # Wants of one batch job decide one at a time, so that each sees the batch the one before opened.
        batch = [f"batch:{target.job.label}"] if target is not None and target.job.batch else []
        with self._write(want_key(want_id), *map(ref_key, outputs), *batch) as tx:
            state = self._decision_state(tx.conn, want_id, resolution.target, outputs)
            decided = decisions.decide(state, seq, new_job_run_id())
            for event in decided.events:
                tx.append(event)
                if isinstance(event, ev.JobRunQueued):
                    self._set_lease(tx.conn, event.job_run_id, tx.at + lease)
            return decided.verdict

    def _decision_state(
        self, conn: Connection, want_id: str, target: JobTarget | None, outputs: list[str]
    ) -> decisions.DecisionState:
        want = self._want_row(conn, want_id)
        links = {
            row.job_run_id: row.relation
            for row in conn.execute(
                select(s.want_job_runs.c.job_run_id, s.want_job_runs.c.relation).where(
                    s.want_job_runs.c.want_id == want_id
                )
            )
        }
        partitions = {out: self._partition(conn, out) for out in outputs}
        followed = {p.building_job_run_id for p in partitions.values() if p and p.building_job_run_id}
        if want["job_run_id"]:
            followed.add(want["job_run_id"])
        failed = [out for out, p in partitions.items() if p and p.status is PartitionStatus.failed]
        declared = target.job.declared_inputs(target.params) if target is not None else []
        batch = self._open_batch(conn, target) if target is not None and target.job.batch else None
        return decisions.DecisionState(
            batch=batch,
            declared={ref: self._partition(conn, ref) for ref in declared if ref not in outputs},
            want=decisions.WantStep(
                want_id=want_id,
                ref=want["ref"],
                state=WantState(want["state"]),
                decision_seq=want["decision_seq"],
                job_run_id=want["job_run_id"],
                reason=want["reason"],
                relation=links.get(want["job_run_id"]),
                runs=frozenset(links),
            ),
            target=target,
            partitions=partitions,
            runs={job_run_id: self._run_plan(conn, job_run_id) for job_run_id in sorted(followed)},
            fail_locks={
                ref: decisions.FailLock(job_run_id=data["job_run_id"], reason=data["reason"])
                for ref, data in self._failing_runs(conn, failed).items()
            },
            paused=self._paused(conn, want_id, WantSource(want["source"])),
        )

    def _paused(self, conn: Connection, want_id: str, source: WantSource) -> bool:
        """Whether a paused backfill reaches the want: it is one of its wants, or a derivative that only
        paused backfills need (``reach.reached``, over the wants it was derived from). One lookup while no
        backfill is paused."""
        if source not in (WantSource.backfill, WantSource.derivative):
            return False
        paused = select(s.backfills.c.backfill_id).where(s.backfills.c.paused.is_(True))
        if conn.execute(paused.limit(1)).first() is None:
            return False
        parents = self._derived_above(conn, want_id) if source is WantSource.derivative else {}
        involved = {want_id} | {p for ps in parents.values() for p in ps}
        members = set(
            conn.execute(
                select(s.backfill_wants.c.want_id).where(
                    s.backfill_wants.c.want_id.in_(sorted(involved)),
                    s.backfill_wants.c.backfill_id.in_(paused),
                )
            ).scalars()
        )
        if want_id in members or not members:
            return want_id in members
        return want_id in reach.reached(members, parents, self._open_among(conn, involved))

    def _open_batch(self, conn: Connection, target: JobTarget) -> decisions.RunPlan | None:
        """The oldest run of the target's batch job that has not started and has room, locked until this
        transaction ends; a run admitted meanwhile (it takes no more partitions) is passed over."""
        query = (
            select(s.job_runs.c.job_run_id)
            .where(
                s.job_runs.c.job_label == target.job.label,
                s.job_runs.c.state == JobRunState.queued.value,
                s.job_runs.c.admitted.is_(False),
                s.job_runs.c.batch_limit.is_not(None),
                func.json_array_length(s.job_runs.c.members) < s.job_runs.c.batch_limit,
            )
            .order_by(s.job_runs.c.created_at, s.job_runs.c.job_run_id)
            .limit(1)
            .with_for_update()
        )
        job_run_id = conn.execute(query).scalar()
        return None if job_run_id is None else self._run_plan(conn, job_run_id)

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

    def _run_plan(self, conn: Connection, job_run_id: str) -> decisions.RunPlan:
        row = self._job_run_row(conn, job_run_id)
        return decisions.RunPlan(
            job_run_id=job_run_id,
            job_label=row["job_label"],
            outputs=list(row["outputs"]),
            params=dict(row["params"]),
            members=len(row["members"] or [1]),
        )

    def await_dependencies(
        self, want_id: str, job_run_id: str | None, missing: Sequence[str]
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
            current = WantState(self._want_row(tx.conn, want_id)["state"])
            if current.is_final:  # cancelled meanwhile (with its backfill, say): it starts nothing more
                why = f"want {want_id} has ended ({current.value})"
                return DependenciesStatus(live=[], failed=dict.fromkeys(missing, why)), []
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
        self,
        want_id: str,
        state: WantState,
        reason: str | None = None,
        instance_id: str | None = None,
        *,
        seq: int | None = None,
    ) -> tuple[Want, Finished]:
        """End the want in ``state`` (``endings.finish``): ``seq`` is the decision step the finishing run
        has reached, so a run that a retry has replaced changes nothing. Returns the want and how the
        finish went."""

        def ending(row: RowMapping) -> endings.Ending:
            current = WantState(row["state"])
            return endings.finish(
                want_id, current, row["decision_seq"], state, reason=reason, instance_id=instance_id, seq=seq
            )

        read = self._all(select(s.wants).where(s.wants.c.want_id == want_id))
        if not read:
            raise NotFoundError(f"no want {want_id!r}; list wants with `databuild wants list`")
        if not (seen := ending(read[0])).events:  # a repeat, or stale: nothing to write
            return want_from_row(read[0]), seen.finished
        with self._write(want_key(want_id)) as tx:
            decided = ending(self._want_row(tx.conn, want_id))
            tx.extend(decided.events)
            return want_from_row(self._want_row(tx.conn, want_id)), decided.finished

    def reopen_wants(self, want_ids: Sequence[str]) -> list[Want]:
        """Open again each of the wants that ended failed or canceled (``endings.reopen``), in one
        transaction; the others are left as they are. Returns the wants reopened."""
        with self._write(*(want_key(w) for w in want_ids)) as tx:
            reopened = []
            for want_id in want_ids:
                row = self._want_row(tx.conn, want_id)
                events = endings.reopen(want_id, WantState(row["state"]), row["decision_seq"])
                if events:
                    tx.extend(events)
                    reopened.append(want_from_row(self._want_row(tx.conn, want_id)))
            return reopened

    def mark_sla_missed(self, want_id: str, deadline: datetime) -> Want:
        current = self.want(want_id)
        if current.sla_missed:
            return current
        with self._write(want_key(want_id)) as tx:
            want = self._want_row(tx.conn, want_id)
            if not want["sla_missed"]:
                tx.append(ev.WantSlaMissed(want_id=want_id, deadline=deadline))
            return want_from_row(self._want_row(tx.conn, want_id))

    def mark_sla_at_risk(
        self, want_id: str, deadline: datetime, eta: datetime, slowest_step: str | None
    ) -> tuple[Want, bool]:
        """Raise the want's at-risk flag; returns the want and whether this call raised it."""
        current = self.want(want_id)
        if current.sla_at_risk or current.state.is_final:
            return current, False
        with self._write(want_key(want_id)) as tx:
            want = self._want_row(tx.conn, want_id)
            raised = not want["sla_at_risk"] and not WantState(want["state"]).is_final
            if raised:
                tx.append(
                    ev.WantSlaAtRisk(want_id=want_id, deadline=deadline, eta=eta, slowest_step=slowest_step)
                )
            return want_from_row(self._want_row(tx.conn, want_id)), raised

    # Job runs ------------------------------------------------------------------------------------
    def start_job_run(
        self, job_run_id: str, attempt: int, worker: str, instances: Sequence[InstanceRef] = ()
    ) -> JobRun:
        """Mark an attempt as running, with the instance each output will be written to. A run that
        already ended is returned unchanged (retried activity)."""
        with self._write_run(job_run_id) as tx:
            row = self._job_run_row(tx.conn, job_run_id)
            if not JobRunState(row["state"]).is_final:
                if instances and {i.ref for i in instances} != set(row["outputs"]):
                    # A batch that took another partition after the caller read it: read it again.
                    raise ConcurrentChangeError(
                        f"job run {job_run_id} now builds {', '.join(row['outputs'])}; plan its instances again"
                    )
                tx.append(
                    ev.JobRunStarted(
                        job_run_id=job_run_id, attempt=attempt, worker=worker, instances=list(instances)
                    )
                )
        return self.job_run(job_run_id)

    def pin_instance(self, instance_id: str, *, pinned: bool = True, reason: str | None = None) -> Instance:
        """Keep (or stop keeping) an instance's data from garbage collection. Idempotent."""
        instance = self.instance(instance_id)
        with self._write(ref_key(instance.ref)) as tx:
            if instance.pinned != pinned:
                if pinned:
                    tx.append(ev.InstancePinned(ref=instance.ref, instance_id=instance_id, reason=reason))
                else:
                    tx.append(ev.InstanceUnpinned(ref=instance.ref, instance_id=instance_id))
        return self.instance(instance_id)

    def succeed_job_run(
        self,
        job_run_id: str,
        reads: list[InstanceRef],
        writes: list[InstanceRef],
        attempt: int | None = None,
        locations: Mapping[str, str] | None = None,
        inputs_of: dict[str, list[str]] | None = None,
        facts: Mapping[str, InstanceFacts] | None = None,
    ) -> JobRun:
        """Publish: the commit makes each written instance live (at ``locations``, by ref, with
        ``facts``). ``inputs_of``: of a batch, the reads each output was built from."""
        with self._write_run(job_run_id) as tx:
            if (run := self._open(tx.conn, job_run_id, attempt)) is not None:
                tx.extend(decisions.succeeded(run, reads, writes, locations, inputs_of, facts))
        return self.job_run(job_run_id)

    def dep_miss_job_run(
        self,
        job_run_id: str,
        missing: list[str],
        reads: list[InstanceRef],
        attempt: int | None = None,
        missing_for: dict[str, list[str]] | None = None,
    ) -> JobRun:
        with self._write_run(job_run_id) as tx:
            if (run := self._open(tx.conn, job_run_id, attempt)) is not None:
                tx.extend(decisions.dep_missed(run, missing, reads, missing_for))
        return self.job_run(job_run_id)

    def fail_job_run(self, job_run_id: str, reason: str, cause: JobRunCause = JobRunCause.error) -> JobRun:
        """End the run without its outputs: failed (``cause`` error) or cancelled. Broken or cancelled
        builds fail-lock their outputs (an operator resolves them); abandoned or lost ones release them."""
        with self._write_run(job_run_id) as tx:
            if (run := self._open(tx.conn, job_run_id)) is not None:
                tx.extend(decisions.ended_without_output(run, reason, cause))
        return self.job_run(job_run_id)

    # Admission: batches close, pools hand out slots ----------------------------------------------------
    def request_admission(self, job_run_id: str, slots: Mapping[str, int]) -> bool:
        """May the queued run start? It may once it holds a slot of each pool in ``slots`` (name ->
        capacity); until then it waits in line (most urgent first, then oldest), and the slots of runs
        that end go to the head of the line. Admitted, a batch run takes no more partitions. True also
        for a run that has ended (its job then finds nothing to do)."""
        locks = self._pool_locks(slots)
        with self._write(run_key(job_run_id), *map(pool_key, locks)) as tx:
            row = self._job_run_row(tx.conn, job_run_id)
            if row["admitted"] or JobRunState(row["state"]) is not JobRunState.queued:
                return True
            if not slots:
                tx.append(ev.JobRunAdmitted(job_run_id=job_run_id))
                return True
            waiting = tx.conn.execute(
                select(s.run_pools.c.pool).where(s.run_pools.c.job_run_id == job_run_id)
            ).first()
            if waiting is None:
                tx.append(ev.JobRunWaiting(job_run_id=job_run_id, pools=dict(slots)))
            return job_run_id in self._admit(tx, locks)

    def _pool_locks(self, names: Iterable[str]) -> list[str]:
        """``names`` and every other pool that a run waiting in one of them needs: admitting runs from
        these pools reads (and so locks) them all."""
        wanted = set(names)
        if not wanted:
            return []
        waiting = select(s.run_pools.c.job_run_id).where(
            s.run_pools.c.pool.in_(wanted), s.run_pools.c.granted.is_(False)
        )
        others = select(s.run_pools.c.pool).where(s.run_pools.c.job_run_id.in_(waiting)).distinct()
        return sorted(wanted | {row["pool"] for row in self._all(others)})

    def _admit(self, tx: WriteTx, locked: Sequence[str]) -> list[str]:
        """Admit the runs waiting in the ``locked`` pools that fit now (``pools.admit``); a run that also
        needs a pool not locked here waits for the next admission."""
        conn, locked_set = tx.conn, set(locked)
        waiting_ids = select(s.run_pools.c.job_run_id).where(
            s.run_pools.c.pool.in_(locked_set), s.run_pools.c.granted.is_(False)
        )
        needs: dict[str, dict[str, int]] = {}
        queued_at: dict[str, datetime] = {}
        for row in conn.execute(
            select(s.run_pools).where(s.run_pools.c.job_run_id.in_(waiting_ids))
        ).mappings():
            needs.setdefault(row["job_run_id"], {})[row["pool"]] = row["slots"]
            queued_at[row["job_run_id"]] = row["queued_at"]
        candidates = [run for run, wants in needs.items() if set(wants) <= locked_set]
        if not candidates:
            return []
        taken = {row.pool: int(row.n) for row in conn.execute(_slots_taken(locked_set))}
        priority = self._run_priorities(conn, candidates)
        waiting = [
            pools.Waiting(
                job_run_id=run,
                pools=needs[run],
                priority=priority.get(run, pools.BACKGROUND),
                queued_at=queued_at[run],
            )
            for run in candidates
        ]
        admitted = pools.admit(waiting, taken)
        tx.extend([ev.JobRunAdmitted(job_run_id=run) for run in admitted])
        return admitted

    def _run_priorities(self, conn: Connection, job_run_ids: Sequence[str]) -> dict[str, int]:
        """Each run's priority: that of the most urgent want still waiting on it."""
        want, root = s.wants.alias("want"), s.wants.alias("root")
        open_states = [state.value for state in WantState if not state.is_final]
        rows = conn.execute(
            select(s.want_job_runs.c.job_run_id, want.c.source, root.c.source.label("root_source"))
            .join(want, want.c.want_id == s.want_job_runs.c.want_id)
            .join(root, root.c.want_id == want.c.root_want_id, isouter=True)
            .where(s.want_job_runs.c.job_run_id.in_(job_run_ids), want.c.state.in_(open_states))
        )
        found: dict[str, int] = {}
        for row in rows:
            rank = pools.want_priority(
                WantSource(row.source), WantSource(row.root_source) if row.root_source else None
            )
            found[row.job_run_id] = min(found.get(row.job_run_id, rank), rank)
        return found

    def batch_is_full(self, job_run_id: str) -> bool:
        rows = self._all(
            select(s.job_runs.c.members, s.job_runs.c.batch_limit).where(
                s.job_runs.c.job_run_id == job_run_id
            )
        )
        return (
            bool(rows)
            and rows[0]["batch_limit"] is not None
            and len(rows[0]["members"]) >= rows[0]["batch_limit"]
        )

    def pools_have_room(self, slots: Mapping[str, int]) -> bool:
        """Whether each pool (name -> slots) has a slot no run holds (a read: admission decides)."""
        taken = {row["pool"]: int(row["n"]) for row in self._all(_slots_taken(slots))}
        return all(taken.get(pool, 0) < n for pool, n in slots.items())

    def admitted_not_started(self) -> list[str]:
        """Workflow ids of the runs given a pool slot that have not started yet: the runs to wake."""
        granted = select(s.run_pools.c.job_run_id).where(s.run_pools.c.granted.is_(True))
        rows = self._all(
            select(s.job_runs.c.workflow_id).where(
                s.job_runs.c.state == JobRunState.queued.value,
                s.job_runs.c.admitted.is_(True),
                s.job_runs.c.job_run_id.in_(granted),
            )
        )
        return [row["workflow_id"] for row in rows]

    def _open(
        self, conn: Connection, job_run_id: str, attempt: int | None = None
    ) -> decisions.OpenRun | None:
        row = self._open_run(conn, job_run_id, attempt)
        if row is None:
            return None
        return decisions.OpenRun(job_run_id=job_run_id, locked_outputs=self._locked_outputs(conn, row))

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
        with self._write_lock, self.writer.begin() as conn:
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
            run = self._open(tx.conn, job_run_id)
            if run is None:
                return False
            tx.extend(decisions.ended_without_output(run, reason, JobRunCause.lost))
            return True

    # Partitions ----------------------------------------------------------------------------------
    def resolve(self, ref: str) -> list[Partition]:
        """Clear a fail-lock (operator action): the partition, and the other outputs its failed job run
        fail-locked with it, may be built again. Returns the partitions resolved."""
        siblings = self._failed_with(ref)
        with self._write(*map(ref_key, siblings)) as tx:
            partitions = {out: self._partition(tx.conn, out) for out in siblings}
            if partitions.get(ref) is None:
                raise NotFoundError(f"no partition {ref!r} in the build event log")
            events = decisions.resolve(ref, partitions)
            tx.extend(events)
            return [partition_from_row(self._require_partition(tx.conn, e.ref)) for e in events]

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
            tx.extend(decisions.skip(ref, self._partition(tx.conn, ref)))
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
        # Alone, no build can commit in between: one that read the instance either committed already
        # (its output is in the impact) or commits after us and inherits the taint.
        with self._write(*map(ref_key, [ref, *cascaded]), alone=True) as tx:
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
        self, ref: str, instance_id: str | None = None, source: str | None = None, location: str | None = None
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
                        location=location,
                    )
                )
            result = self._partition_row(tx.conn, ref)
            assert result is not None
            return partition_from_row(result), created

    # Maintenance ---------------------------------------------------------------------------------
    def rebuild_projections(self) -> int:
        """Throw current state away and derive it again from the events alone. Returns events replayed."""
        with self._write(alone=True) as tx:  # no command may run while state is rebuilt
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

    def _partition(self, conn: Connection, ref: str) -> Partition | None:
        row = self._partition_row(conn, ref)
        return partition_from_row(row) if row is not None else None
