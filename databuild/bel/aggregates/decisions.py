"""A want's decision step: the state ``decisions.decide`` reads, loaded under the want's and its outputs' locks."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, bindparam, func, select

from databuild.bel import schema as s
from databuild.bel.aggregates.base import WriteBase, new_job_run_id
from databuild.bel.engine import Row, insert_rows
from databuild.bel.engine.combining import Combiner
from databuild.bel.engine.keys import ref_key, want_key
from databuild.bel.engine.recorder import Recorder
from databuild.bel.engine.transaction import WriteTx
from databuild.bel.reads.rows import (
    derived_above,
    job_run_row,
    open_among,
    partitions_at,
    wants_and_links,
)
from databuild.domain import decisions, reach
from databuild.domain import events as ev
from databuild.domain.decisions import Verdict
from databuild.domain.freshness import Freshness
from databuild.graph import JobTarget, Resolution
from databuild.models import (
    JobRunState,
    Partition,
    PartitionStatus,
    WantSource,
    WantSpec,
    WantState,
)

DEFAULT_LEASE = timedelta(minutes=1)

# Built once (see bel.rows): they are on the path of many decisions.
PAUSED_BACKFILLS = select(s.backfills.c.backfill_id).where(s.backfills.c.paused.is_(True))
ANY_PAUSED = PAUSED_BACKFILLS.limit(1)
OPEN_BATCH = (
    select(s.job_runs.c.job_run_id)
    .where(
        s.job_runs.c.job_label == bindparam("job_label"),
        s.job_runs.c.state == JobRunState.queued.value,
        s.job_runs.c.admitted.is_(False),
        s.job_runs.c.batch_limit.is_not(None),
        func.json_array_length(s.job_runs.c.members) < s.job_runs.c.batch_limit,
    )
    .order_by(s.job_runs.c.created_at, s.job_runs.c.job_run_id)
    .limit(1)
    .with_for_update()
)


@dataclass(frozen=True)
class Step:
    """One want's step to decide (the arguments of ``Decisions.decide``)."""

    want_id: str
    seq: int | None  # None: the step after the last one recorded (a new workflow run's first)
    resolution: Resolution
    lease: timedelta
    fresh: Freshness | None
    opening: int | None = None  # the want's opening the deciding run serves (None: not a run's step)
    registering: WantSpec | None = None  # recorded first, unless it is already

    @property
    def outputs(self) -> list[str]:
        target = self.resolution.target
        return target.outputs if target else [self.resolution.ref]

    @cached_property
    def declared(self) -> list[str]:
        target = self.resolution.target
        return target.job.declared_inputs(target.params) if target is not None else []

    def lock_keys(self) -> list[str]:
        target = self.resolution.target
        # Wants of one batch job decide one at a time, so that each sees the batch the one before opened.
        batch = [f"batch:{target.job.label}"] if target is not None and target.job.batch else []
        return [want_key(self.want_id), *map(ref_key, self.outputs), *batch]

    def touches(self) -> set[str]:
        """The keys of what the step reads or writes: a step that shares none with another of its group
        reads nothing the other writes, and writes nothing the other reads or writes. Runs are covered by
        these keys too: a step reads a run that builds one of its outputs or that its want follows, and
        writes a run it queues (new) or joins (its batch job's, under the ``batch:`` key). As a ref
        resolves to one job only (``Graph.resolve`` refuses a ref that two jobs' patterns match), any step
        that reads a batch run holds that run's batch key."""
        return {*self.lock_keys(), *map(ref_key, self.declared)}


@dataclass(frozen=True)
class Read:
    """What steps read in a statement for all: each want's row with its links, and each partition."""

    wants: dict[str, tuple[Row, dict[str, str]]]
    partitions: dict[str, Partition | None]


def run_plan(conn: Connection, job_run_id: str) -> decisions.RunPlan:
    """A job run as a decision reads it."""
    row = job_run_row(conn, job_run_id)
    return decisions.RunPlan(
        job_run_id=job_run_id,
        job_label=row["job_label"],
        outputs=list(row["outputs"]),
        params=dict(row["params"]),
        members=len(row["members"] or [1]),
    )


def open_batch(conn: Connection, target: JobTarget) -> decisions.RunPlan | None:
    """The oldest run of the target's batch job that has not started and has room, locked until this
    transaction ends; a run admitted meanwhile (it takes no more partitions) is passed over."""
    job_run_id = conn.execute(OPEN_BATCH, {"job_label": target.job.label}).scalar()
    return None if job_run_id is None else run_plan(conn, job_run_id)


def want_step(want_id: str, want: Row, links: dict[str, str]) -> decisions.WantStep:
    """The want as its decision reads it, from its row and the relation of each run it is linked to."""
    return decisions.WantStep(
        want_id=want_id,
        ref=want["ref"],
        state=WantState(want["state"]),
        decision_seq=want["decision_seq"],
        opening=want["opening"],
        job_run_id=want["job_run_id"],
        reason=want["reason"],
        relation=links.get(want["job_run_id"]),
        runs=frozenset(links),
    )


def followed_runs(
    conn: Connection, want: Row, partitions: dict[str, Partition | None]
) -> dict[str, decisions.RunPlan]:
    """The runs a decision weighs: those building one of its outputs, and the one the want follows."""
    followed = {p.building_job_run_id for p in partitions.values() if p and p.building_job_run_id}
    if want["job_run_id"]:
        followed.add(want["job_run_id"])
    return {job_run_id: run_plan(conn, job_run_id) for job_run_id in sorted(followed)}


class Decisions(WriteBase):
    """Steps of wants."""

    # Concurrent decisions of this process share one write transaction, this many at most (group commit,
    # bel.combining): on PostgreSQL a transaction's round trips are most of a decision's client time.
    GROUP = 16

    def __init__(self, log: Recorder) -> None:
        super().__init__(log)
        self._decisions: Combiner[Step, tuple[int, Verdict]] = Combiner(self._decide_group, self.GROUP)

    def decide(
        self,
        want_id: str,
        seq: int,
        resolution: Resolution,
        lease: timedelta = DEFAULT_LEASE,
        fresh: Freshness | None = None,
        *,
        opening: int | None = None,
    ) -> Verdict:
        """Step ``seq`` of a want, in one transaction: the rules of ``decisions.decide`` over the state
        of the want and its job's outputs, for a workflow run that serves the want's ``opening``. A newly
        queued run gets its build lease. ``fresh``: of a fresh want, its live partition's staleness, judged
        by the caller with the worker's job versions. The transaction may hold other wants' steps, decided
        before or after this one (group commit)."""
        return self._decisions.submit(Step(want_id, seq, resolution, lease, fresh, opening))[1]

    def first_step(
        self, spec: WantSpec, resolution: Resolution, lease: timedelta = DEFAULT_LEASE, *, opening: int = 0
    ) -> tuple[int, Verdict]:
        """A new workflow run's first step, in one transaction: the want recorded unless it is already,
        then decided from the step after the last one recorded (not 1 for a new run of a want whose
        workflow died). Returns that step and its verdict. Not for a fresh want, whose staleness is judged
        before its decision from what is recorded of it (``wants.register``, then ``decide``)."""
        assert not spec.fresh, "a fresh want registers, then decides"
        step = Step(spec.want_id, None, resolution, lease, None, opening, registering=spec)
        return self._decisions.submit(step)

    def _decide_group(self, steps: list[Step]) -> list[tuple[int, Verdict]]:
        """The steps in order, in one transaction. What they read is read for all of them at once and
        their events are projected together, while they are independent (``Step.touches``): a step that
        touches what an earlier one did has the events before it projected, then reads again. While a
        backfill is paused every step reads alone (``_paused`` reads other wants)."""
        with self._write(*(key for step in steps for key in step.lock_keys())) as tx:
            for step in steps:
                if step.registering is not None:
                    self._ensure_want(tx, step.registering)
            read = self._read(tx.conn, steps)
            paused = self._any_paused(tx.conn, steps, read)
            verdicts: list[tuple[int, Verdict]] = []
            pending: list[tuple[Sequence[ev.Event], timedelta]] = []
            touched: set[str] = set()
            for step in steps:
                touches = step.touches()
                known = read
                if paused or touches & touched:
                    self._project(tx, pending)
                    pending, known = [], self._read(tx.conn, [step])
                state = self._decision_state(tx.conn, step, known, paused)
                seq = step.seq if step.seq is not None else state.want.decision_seq + 1
                decided = decisions.decide(state, seq, new_job_run_id(), step.opening)
                pending.append((decided.events, step.lease))
                touched |= touches
                verdicts.append((seq, decided.verdict))
            self._project(tx, pending)
            return verdicts

    def _project(self, tx: WriteTx, pending: list[tuple[Sequence[ev.Event], timedelta]]) -> None:
        """Append independent steps' events, with the build leases of the runs they queue."""
        tx.extend_each([events for events, _ in pending])
        leases = [
            {"job_run_id": event.job_run_id, "expires_at": tx.at + lease}
            for events, lease in pending
            for event in events
            if isinstance(event, ev.JobRunQueued)  # a new run: its lease is new too
        ]
        insert_rows(tx.conn, s.job_run_leases, leases)

    def _read(self, conn: Connection, steps: list[Step]) -> Read:
        refs = [ref for step in steps for ref in (*step.outputs, *step.declared)]
        return Read(wants_and_links(conn, [step.want_id for step in steps]), partitions_at(conn, refs))

    def _any_paused(self, conn: Connection, steps: list[Step], read: Read) -> bool:
        """Whether some backfill is paused, if one of the steps' wants may be reached by one."""
        reachable = (WantSource.backfill.value, WantSource.derivative.value)
        if not any(read.wants[step.want_id][0]["source"] in reachable for step in steps):
            return False
        return conn.execute(ANY_PAUSED).first() is not None

    def _decision_state(
        self, conn: Connection, step: Step, read: Read, paused: bool
    ) -> decisions.DecisionState:
        want, links = read.wants[step.want_id]
        target = step.resolution.target
        partitions = {out: read.partitions[out] for out in step.outputs}
        failed = [out for out, p in partitions.items() if p and p.status is PartitionStatus.failed]
        batch = open_batch(conn, target) if target is not None and target.job.batch else None
        return decisions.DecisionState(
            batch=batch,
            declared={ref: read.partitions[ref] for ref in step.declared if ref not in step.outputs},
            want=want_step(step.want_id, want, links),
            target=target,
            partitions=partitions,
            runs=followed_runs(conn, want, partitions),
            fail_locks={
                ref: decisions.FailLock(job_run_id=data["job_run_id"], reason=data["reason"])
                for ref, data in self._failing_runs(conn, failed).items()
            },
            paused=paused and self._paused(conn, step.want_id, WantSource(want["source"])),
            fresh=step.fresh,
        )

    def _paused(self, conn: Connection, want_id: str, source: WantSource) -> bool:
        """Whether a paused backfill reaches the want (some backfill is): it is one of its wants, or a
        derivative that only paused backfills need (``reach.reached``, over the wants it was derived from)."""
        if source not in (WantSource.backfill, WantSource.derivative):
            return False
        parents = derived_above(conn, want_id) if source is WantSource.derivative else {}
        involved = {want_id} | {p for ps in parents.values() for p in ps}
        members = set(
            conn.execute(
                select(s.backfill_wants.c.want_id).where(
                    s.backfill_wants.c.want_id.in_(sorted(involved)),
                    s.backfill_wants.c.backfill_id.in_(PAUSED_BACKFILLS),
                )
            ).scalars()
        )
        if want_id in members or not members:
            return want_id in members
        return want_id in reach.reached(members, parents, open_among(conn, involved))

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
