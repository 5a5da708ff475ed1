"""Wants: their registration, the inputs they wait for, their SLA flags and how they end."""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import RowMapping, bindparam, func, select

from databuild.bel import schema as s
from databuild.bel.aggregates.base import WriteBase
from databuild.bel.aggregates.partitions import PartitionReads
from databuild.bel.engine.keys import ref_key, want_key
from databuild.bel.engine.recorder import Recorder
from databuild.bel.reads.base import ReadBase
from databuild.bel.reads.rows import (
    WANT_ROW,
    chunks,
    job_run_row,
    newest_first,
    open_among,
    partition_at,
    partition_row,
    ref_conditions,
    waiting_on_count,
    want_from_row,
    want_row,
    want_rule_row,
)
from databuild.domain import decisions, endings
from databuild.domain import events as ev
from databuild.domain import wants as wants_rules
from databuild.domain.decisions import DependenciesStatus
from databuild.domain.endings import Finished
from databuild.domain.wants import WantStart
from databuild.errors import (
    NotFoundError,
)
from databuild.models import (
    JobRunState,
    PartitionStatus,
    Subscription,
    Want,
    WantSpec,
    WantState,
)

CANCEL_CHUNK = 200  # wants ended per transaction: each holds their locks (PostgreSQL's lock table is finite)
STATES_OF = select(s.wants.c.want_id, s.wants.c.state).where(s.one_of(s.wants.c.want_id, "ids"))
WANTS_OF = select(s.wants).where(s.one_of(s.wants.c.want_id, "ids"))


# Built once (see bel.rows): a fan-out pages through the subscriptions to a run's outputs, a watch reads
# its want's. Each comes with what a notifier needs to know of its want.
_SUBSCRIBED = select(s.subscriptions, s.wants.c.ref.label("want_ref"), s.wants.c.data_timestamp).join(
    s.wants, s.wants.c.want_id == s.subscriptions.c.want_id
)
_TO_REFS = s.one_of(s.subscriptions.c.ref, "refs")
_SUBSCRIPTIONS = (
    _SUBSCRIBED.where(_TO_REFS, s.subscriptions.c.id > bindparam("after_id"))
    .order_by(s.subscriptions.c.id)
    .limit(bindparam("limit"))
)
DECISION_SEQ = select(s.wants.c.decision_seq).where(s.wants.c.want_id == bindparam("want_id"))
_SUBSCRIPTIONS_OF_WANT = _SUBSCRIBED.where(
    _TO_REFS, s.subscriptions.c.want_id == bindparam("want_id")
).order_by(s.subscriptions.c.id)


class WantReads(ReadBase):
    """Reads of wants, the runs they link to and the refs they subscribe to."""

    def get(self, want_id: str) -> Want:
        rows = self._all(WANT_ROW, {"want_id": want_id})
        if not rows:
            raise NotFoundError(f"no want {want_id!r}; list wants with `databuild wants list`")
        return want_from_row(rows[0])

    def find(self, want_id: str) -> Want | None:
        rows = self._all(WANT_ROW, {"want_id": want_id})
        return want_from_row(rows[0]) if rows else None

    def decision_seq(self, want_id: str) -> int:
        """The want's last decision step: a new workflow run of the want decides from the next one."""
        rows = self._all(DECISION_SEQ, {"want_id": want_id})
        return int(rows[0]["decision_seq"]) if rows else 0

    def query(
        self,
        *,
        state: WantState | None = None,
        ref_prefix: str | None = None,
        ref_glob: str | None = None,
        root_want_id: str | None = None,
        parent_want_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Want]:
        conditions = ref_conditions(s.wants.c.ref, ref_prefix, ref_glob)
        if state is not None:
            conditions.append(s.wants.c.state == state.value)
        if root_want_id is not None:
            conditions.append(s.wants.c.root_want_id == root_want_id)
        if parent_want_id is not None:
            conditions.append(s.wants.c.parent_want_id == parent_want_id)
        query = newest_first(
            s.wants, conditions, "want_id", limit, offset, filter_first=bool(ref_prefix or ref_glob)
        )
        return [want_from_row(r) for r in self._all(query)]

    def unstarted(self, before: datetime, limit: int = 1000) -> list[Want]:
        """Wants held `new` since before ``before`` that should have a workflow: not those a backfill's
        window has yet to start (a backfill of 100,000 holds most of its wants so, on purpose)."""
        waiting = (
            select(s.backfill_wants.c.want_id)
            .join(s.backfills, s.backfills.c.backfill_id == s.backfill_wants.c.backfill_id)
            .where(
                s.backfill_wants.c.want_id == s.wants.c.want_id,
                s.backfill_wants.c.seq >= s.backfills.c.started,
            )
            .exists()
        )
        query = (
            select(s.wants)
            .where(s.wants.c.state == WantState.new.value, s.wants.c.updated_at < before, ~waiting)
            .order_by(s.wants.c.updated_at)
            .limit(limit)
        )
        return [want_from_row(r) for r in self._all(query)]

    def sla_misses(self, now: datetime | None = None, limit: int = 1000) -> list[Want]:
        """Wants whose SLA passed without their partition: flagged ones, and overdue ones not yet flagged."""
        now = now or datetime.now(UTC)
        query = (
            select(s.wants)
            .where(
                s.wants.c.sla_deadline.is_not(None),
                (s.wants.c.sla_missed.is_(True))
                | (
                    (s.wants.c.sla_deadline < now)
                    & s.wants.c.state.not_in([WantState.successful.value, WantState.canceled.value])
                ),
            )
            .order_by(s.wants.c.sla_deadline)
            .limit(limit)
        )
        return [want_from_row(r) for r in self._all(query)]

    def open_among(self, ids: Sequence[str]) -> set[str]:
        """Those of the wants that have not ended (one indexed lookup per few hundred)."""
        with self._log.reader.connect() as conn:
            return open_among(conn, ids)

    def by_id(self, ids: Sequence[str]) -> list[Want]:
        rows = []
        for chunk in chunks(ids):
            rows += self._all(WANTS_OF, {"ids": chunk})
        return [want_from_row(r) for r in rows]

    def family(self, root_want_id: str, limit: int = 10_000) -> tuple[list[Want], dict[str, JobRunState]]:
        """The wants of one fulfillment tree (``root_want_id`` and its derivative wants, transitively;
        newest first, the first ``limit``) and the state of every job run they queued, joined or
        skipped. One query, however large the tree: progress views run it several times a second."""
        family = (
            select(s.wants)
            .where(s.wants.c.root_want_id == root_want_id)
            .order_by(s.wants.c.created_at.desc(), s.wants.c.want_id)
            .limit(limit)
            .cte("family")
        )
        linked = family.outerjoin(s.want_job_runs, s.want_job_runs.c.want_id == family.c.want_id).outerjoin(
            s.job_runs, s.job_runs.c.job_run_id == s.want_job_runs.c.job_run_id
        )
        query = (
            select(family, s.job_runs.c.job_run_id.label("run_id"), s.job_runs.c.state.label("run_state"))
            .select_from(linked)
            .order_by(family.c.created_at.desc(), family.c.want_id)
        )
        wants: dict[str, Want] = {}
        runs: dict[str, JobRunState] = {}
        for row in self._all(query):
            if row["want_id"] not in wants:
                wants[row["want_id"]] = want_from_row(row)
            if row["run_id"] is not None:
                runs[row["run_id"]] = JobRunState(row["run_state"])
        return list(wants.values()), runs

    def links(self, want_ids: Sequence[str]) -> list[tuple[str, str, str]]:
        """(want_id, job_run_id, relation) for every job run these wants executed, joined or skipped."""
        rows = []
        for chunk in chunks(want_ids):
            rows += self._all(select(s.want_job_runs).where(s.want_job_runs.c.want_id.in_(chunk)))
        return [(r["want_id"], r["job_run_id"], r["relation"]) for r in rows]

    def wanted_by(self, job_run_id: str, limit: int = 100) -> tuple[list[tuple[str, str]], int]:
        """(want_id, relation) of the wants that queued, joined or skipped this run, and how many."""
        where = s.want_job_runs.c.job_run_id == job_run_id
        rows = self._all(
            select(s.want_job_runs).where(where).order_by(s.want_job_runs.c.want_id).limit(limit)
        )
        total = self._count(select(func.count()).select_from(s.want_job_runs).where(where))
        return [(r["want_id"], r["relation"]) for r in rows], total

    def waiting_on(self, job_run_id: str) -> int:
        """How many wants that have not ended queued this run or delegated to it."""
        return self._count(waiting_on_count(job_run_id))

    def delegations_to(self, job_run_id: str, limit: int = 20) -> tuple[list[dict[str, Any]], int]:
        """Delegations pointing at this run (oldest first, the first ``limit``) and how many in all."""
        where = s.delegations.c.delegated_to == job_run_id
        rows = self._all(select(s.delegations).where(where).order_by(s.delegations.c.id).limit(limit))
        total = self._count(select(func.count()).select_from(s.delegations).where(where))
        return [dict(r) for r in rows], total

    def derivatives_of(self, want_ids: Sequence[str]) -> list[tuple[str, str | None, str, str | None]]:
        """(want_id, dep-miss job_run_id or None for a declared input, missing ref, derivative_want_id)
        for these wants' derivative wants."""
        rows = []
        for chunk in chunks(want_ids):
            rows += self._all(
                select(s.derivatives).where(s.derivatives.c.want_id.in_(chunk)).order_by(s.derivatives.c.id)
            )
        return [(r["want_id"], r["job_run_id"], r["ref"], r["derivative_want_id"]) for r in rows]

    def derivatives_started_by(self, job_run_id: str) -> list[tuple[str, str, str | None]]:
        """(want_id, missing ref, derivative_want_id) for the wants this dep-miss run sent upstream."""
        rows = self._all(
            select(s.derivatives).where(s.derivatives.c.job_run_id == job_run_id).order_by(s.derivatives.c.id)
        )
        return [(r["want_id"], r["ref"], r["derivative_want_id"]) for r in rows]

    def subscriptions(self, refs: Sequence[str], after_id: int, limit: int) -> list[Subscription]:
        """A page of the subscriptions to any of ``refs``, in id order."""
        rows = self._all(_SUBSCRIPTIONS, {"refs": list(refs), "after_id": after_id, "limit": limit})
        return [Subscription.model_validate(dict(r)) for r in rows]

    def subscriptions_of(self, want_id: str, refs: Sequence[str]) -> list[Subscription]:
        """The want's subscriptions to any of ``refs``."""
        rows = self._all(_SUBSCRIPTIONS_OF_WANT, {"want_id": want_id, "refs": list(refs)})
        return [Subscription.model_validate(dict(r)) for r in rows]

    def ended_families(self, wants: Sequence[Want]) -> dict[str, list[Want]]:
        """Each of ``wants`` (by id) with the wants it derived, transitively, that ended failed or canceled
        (what a retry reopens): one read of derivatives and one of wants per level for the whole lot,
        however many (a cancelled backfill's retry asks for up to 100,000)."""
        found = {w.want_id: w for w in wants}
        children: dict[str, list[str]] = {}
        level = list(found)
        while level:
            for parent, _, _, child in self.derivatives_of(level):
                if child:
                    children.setdefault(parent, []).append(child)
            loaded = self.by_id(sorted({c for p in level for c in children.get(p, ())} - set(found)))
            found.update({w.want_id: w for w in loaded})
            level = [w.want_id for w in loaded]
        families: dict[str, list[Want]] = {}
        for want in wants:
            seen, stack = {want.want_id: None}, [want.want_id]  # in the order found: the want first
            while stack:
                for child in children.get(stack.pop(), ()):
                    if child not in seen and child in found:
                        seen[child] = None
                        stack.append(child)
            ended = (found[w] for w in seen)
            families[want.want_id] = [w for w in ended if w.state in (WantState.failed, WantState.canceled)]
        return families


class Wants(WantReads, WriteBase):
    """Commands about wants (their decision steps are ``Decisions``)."""

    def __init__(self, log: Recorder) -> None:
        super().__init__(log)
        self._partitions = PartitionReads(log)  # how many times a missing input was built before

    def register(self, spec: WantSpec) -> tuple[Want, bool]:
        """Record ``WantCreated`` unless the want exists. Returns the want and whether it is new. One
        transaction either way: a repeat writes nothing, and a first registration reads nothing before it."""
        with self._write(want_key(spec.want_id)) as tx:
            created = self._ensure_want(tx, spec)
            want = want_row(tx.conn, spec.want_id)
        return want_from_row(want), created

    def cancel(self, want_ids: Sequence[str], reason: str) -> tuple[list[Want], list[str]]:
        """End each of the wants that has not ended `canceled` (``reason``), a few hundred per transaction
        (each holds its wants' locks, so a decision either came before and is cancelled, or comes after
        and finds the want ended). Then each queued run they followed that no open want needs any more
        ends (abandoned) before it could start. Returns the wants cancelled and the workflow ids of the
        runs ended, to tell."""
        cancelled: list[Want] = []
        for start in range(0, len(want_ids), CANCEL_CHUNK):
            chunk = want_ids[start : start + CANCEL_CHUNK]
            with self._write(*(want_key(w) for w in chunk)) as tx:
                states = {row.want_id: row.state for row in tx.conn.execute(STATES_OF, {"ids": list(chunk)})}
                if unknown := [w for w in chunk if w not in states]:
                    raise NotFoundError(f"no want {unknown[0]!r}")
                events = [e for w in chunk for e in wants_rules.cancel(w, WantState(states[w]), reason)]
                tx.extend(events)
                ended = [e.want_id for e in events if isinstance(e, ev.WantFinished)]
                rows = {r["want_id"]: r for r in tx.conn.execute(WANTS_OF, {"ids": ended}).mappings()}
                cancelled += [want_from_row(rows[w]) for w in ended]
        followed = sorted({w.job_run_id for w in cancelled if w.job_run_id is not None})
        return cancelled, [run for run in map(self._end_if_unwanted, followed) if run is not None]

    def _end_if_unwanted(self, job_run_id: str) -> str | None:
        """End a run that has not started and that no open want needs (abandoned); its workflow id."""
        with self._write_run(job_run_id) as tx:
            row = job_run_row(tx.conn, job_run_id)
            waiting = tx.conn.execute(waiting_on_count(job_run_id)).scalar_one()
            events = decisions.unwanted(self._open(tx.conn, job_run_id), JobRunState(row["state"]), waiting)
            tx.extend(events)
            return str(row["workflow_id"]) if events else None

    def await_dependencies(
        self, want_id: str, job_run_id: str | None, missing: Sequence[str], *, opening: int | None = None
    ) -> tuple[DependenciesStatus, list[WantStart], list[WantStart]]:
        """Record that the want waits for ``missing`` (subscribing to them) and ensure a derivative want
        for each input not live; report, in the same transaction, which inputs are live and which
        derivatives ended without their partition. Returns that, the derivative wants that have not
        ended (to start), and those of them it reopened (cancelled with a backfill: see the rule). A run
        that serves an ``opening`` of the want that a retry replaced raises WantReplacedError. A
        derivative's id includes its ref's taint count, read under the ref's lock, so
        an input tainted since an earlier build is wanted anew."""
        parent = self.get(want_id).spec  # a fresh want's inputs are wanted fresh
        generations = self._partitions.generations(missing)
        derivatives = [parent.derive(ref, want_id, generations[ref]) for ref in missing]
        keys = [want_key(want_id), *map(ref_key, missing), *(want_key(d.want_id) for d in derivatives)]
        with self._write(*keys) as tx:
            want = want_row(tx.conn, want_id)
            known = {d.want_id: want_row(tx.conn, d.want_id, required=False) for d in derivatives}
            awaited = wants_rules.await_dependencies(
                wants_rules.Dependencies(
                    want_id=want_id,
                    job_run_id=job_run_id,
                    state=WantState(want["state"]),
                    opening=want["opening"],
                    run_opening=opening,
                    following=want["job_run_id"],
                    missing=missing,
                    generations=generations,
                    partitions={ref: partition_at(tx.conn, ref) for ref in missing},
                    derivatives=derivatives,
                    known={i: want_rule_row(row) for i, row in known.items() if row is not None},
                )
            )
            tx.extend(awaited.events)
            return awaited.status, awaited.unfinished, awaited.reopened

    def await_requirements(self, want_id: str, refs: Sequence[str]) -> list[str]:
        """Record that the want waits for the external partitions it requires (it subscribed to them
        when it was created); returns those already live, read in the same transaction."""
        with self._write(want_key(want_id), *map(ref_key, refs)) as tx:
            state = WantState(want_row(tx.conn, want_id)["state"])
            tx.extend(wants_rules.await_requirements(want_id, state, refs))
            return [
                ref
                for ref in refs
                if (row := partition_row(tx.conn, ref)) is not None
                and row["status"] == PartitionStatus.live.value
            ]

    def finish(
        self,
        want_id: str,
        state: WantState,
        reason: str | None = None,
        instance_id: str | None = None,
        *,
        opening: int | None = None,
    ) -> tuple[Want, Finished]:
        """End the want in ``state`` (``endings.finish``) for a workflow run that serves its ``opening``
        (None: an outside authority), so a run that a retry has replaced changes nothing. Returns the want
        and how the finish went."""

        def ending(row: RowMapping) -> endings.Ending:
            current = WantState(row["state"])
            return endings.finish(
                want_id,
                current,
                row["opening"],
                state,
                reason=reason,
                instance_id=instance_id,
                run_opening=opening,
            )

        with self._write(want_key(want_id)) as tx:  # a repeat, or a stale run, writes nothing in it
            row = want_row(tx.conn, want_id, required=False)
            if row is None:
                raise NotFoundError(f"no want {want_id!r}; list wants with `databuild wants list`")
            decided = ending(row)
            tx.extend(decided.events)
            return want_from_row(want_row(tx.conn, want_id)), decided.finished

    def reopen(self, want_ids: Sequence[str]) -> list[Want]:
        """Open again each of the wants that ended failed or canceled (``endings.reopen``), in one
        transaction; the others are left as they are. Returns the wants reopened."""
        with self._write(*(want_key(w) for w in want_ids)) as tx:
            reopened = []
            for want_id in want_ids:
                row = want_row(tx.conn, want_id)
                events = endings.reopen(want_id, WantState(row["state"]), row["decision_seq"])
                if events:
                    tx.extend(events)
                    reopened.append(want_from_row(want_row(tx.conn, want_id)))
            return reopened

    def mark_sla_missed(self, want_id: str, deadline: datetime) -> Want:
        current = self.get(want_id)
        if current.sla_missed:
            return current
        with self._write(want_key(want_id)) as tx:
            flagged = bool(want_row(tx.conn, want_id)["sla_missed"])
            tx.extend(wants_rules.sla_missed(want_id, flagged, deadline))
            return want_from_row(want_row(tx.conn, want_id))

    def mark_sla_at_risk(
        self, want_id: str, deadline: datetime, eta: datetime, slowest_step: str | None
    ) -> tuple[Want, bool]:
        """Raise the want's at-risk flag; returns the want and whether this call raised it."""
        current = self.get(want_id)
        if current.sla_at_risk or current.state.is_final:
            return current, False
        with self._write(want_key(want_id)) as tx:
            want = want_row(tx.conn, want_id)
            events = wants_rules.sla_at_risk(
                want_id, WantState(want["state"]), bool(want["sla_at_risk"]), deadline, eta, slowest_step
            )
            tx.extend(events)
            raised = bool(events)
            return want_from_row(want_row(tx.conn, want_id)), raised
