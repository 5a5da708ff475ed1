"""Read side of the build event log: indexed lookups on the projections."""

import asyncio
import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, RowMapping, Select, Table, case, func, literal, or_, select

from databuild.backfill import BackfillProgress, BackfillRequest
from databuild.bel import schema as s
from databuild.domain import reach
from databuild.domain.estimates import Durations, durations_of
from databuild.errors import NotFoundError
from databuild.globs import compile_glob, like_prefix, ref_filter
from databuild.models import (
    FINAL_WANT_STATES,
    AttemptOutput,
    BuildStats,
    EventFilter,
    EventPage,
    EventRecord,
    Instance,
    InstanceRef,
    InstanceStatus,
    JobRun,
    JobRunCause,
    JobRunState,
    JobStats,
    Partition,
    PartitionStatus,
    Subscription,
    Want,
    WantSource,
    WantState,
)

P = ParamSpec("P")
R = TypeVar("R")


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def want_from_row(row: Any) -> Want:
    return Want(
        want_id=row["want_id"],
        ref=row["ref"],
        data_timestamp=row["data_timestamp"],
        sla=_seconds(row["sla_seconds"]),
        ttl=_seconds(row["ttl_seconds"]),
        source=WantSource(row["source"]),
        parent_want_id=row["parent_want_id"],
        root_want_id=row["root_want_id"],
        state=WantState(row["state"]),
        sla_missed=bool(row["sla_missed"]),
        sla_at_risk=bool(row["sla_at_risk"]),
        reason=row["reason"],
        job_run_id=row["job_run_id"],
        workflow_id=row["workflow_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        generation=row["generation"],
        instance_id=row["instance_id"],
    )


def instance_from_row(row: Any) -> Instance:
    return Instance(
        instance_id=row["instance_id"],
        ref=row["ref"],
        job_run_id=row["job_run_id"],
        external=bool(row["external"]),
        status=InstanceStatus(row["status"]),
        stale_cause=row["stale_cause"],
        reason=row["reason"],
        created_at=row["created_at"],
        retired_at=row["retired_at"],
        pinned=bool(row["pinned"]),
        location=row["location"],
        facts=row["facts"],
        schema_changed=bool(row["schema_changed"]),
    )


def partition_from_row(row: Any) -> Partition:
    building = row["building_job_run_id"]
    status = PartitionStatus(row["status"])
    return Partition(
        ref=row["ref"],
        # A live partition stays live (its instance readable) while a rebuild holds the lock.
        status=PartitionStatus.building if building and status is not PartitionStatus.live else status,
        instance_id=row["instance_id"],
        built_by=row["built_by"],
        building_job_run_id=building,
        external=bool(row["external"]),
        updated_at=row["updated_at"],
        generation=row["generation"],
        reason=row["reason"],
    )


CHUNK = 500  # ids per IN (...) list


def _chunks(ids: Sequence[str]) -> list[list[str]]:
    unique = list(dict.fromkeys(i for i in ids if i))
    return [unique[i : i + CHUNK] for i in range(0, len(unique), CHUNK)]


def waiting_on_count(job_run_id: str) -> Select[Any]:
    """Counts the wants that have not ended that queued the run or delegated to it."""
    linked = s.want_job_runs.join(s.wants, s.wants.c.want_id == s.want_job_runs.c.want_id)
    return (
        select(func.count())
        .select_from(linked)
        .where(
            s.want_job_runs.c.job_run_id == job_run_id,
            s.wants.c.state.not_in([state.value for state in FINAL_WANT_STATES]),
        )
    )


def _newest_first(
    table: Table, conditions: list[Any], key: str, limit: int, offset: int, *, filter_first: bool
) -> Select[Any]:
    """A page of ``table`` newest first. With ``filter_first`` the matching rows are selected before
    they are sorted: refs of one period cluster in time, and a plan that walks the ``created_at``
    index backwards would otherwise scan the log back to them (PostgreSQL picks that plan)."""
    if not filter_first:
        source: Any = table
        query = select(table).where(*conditions)
    else:
        source = select(table).where(*conditions).cte("matching").prefix_with("MATERIALIZED")
        query = select(source)
    return query.order_by(source.c.created_at.desc(), source.c[key]).limit(limit).offset(offset)


def _ref_conditions(column: Any, ref_prefix: str | None, ref_glob: str | None) -> list[Any]:
    conditions = []
    if ref_prefix:
        conditions.append(like_prefix(column, ref_prefix))
    if ref_glob:
        conditions.append(ref_filter(column, ref_glob))
    return conditions


class BelQueries:
    # Threads that run BEL calls for async code (workers, the SDK, the web server), apart from asyncio's
    # default executor, so BEL steps of workflow tasks never queue behind unrelated blocking work. Few:
    # each call is short, and runnable threads contend with the event loop for the GIL (with 16, loop
    # callbacks stretched past 100 ms under a burst of wants; the registration rate was the same).
    THREADS = 4

    def __init__(self, reader: Engine) -> None:
        self.reader = reader
        self._pinned = threading.local()  # this thread's snapshot connection, if any
        self._threads = ThreadPoolExecutor(self.THREADS, thread_name_prefix="databuild-bel")

    async def call(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` (a BEL call) on the log's threads, off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, functools.partial(fn, *args, **kwargs))

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Run the enclosed reads on one connection in one read transaction: a view assembled from
        several lookups then sees one state of the log, and costs one connection checkout."""
        if getattr(self._pinned, "conn", None) is not None:
            yield
            return
        with self.reader.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                self._pinned.conn = conn
                try:
                    yield
                finally:
                    self._pinned.conn = None

    def _all(self, query: Select[Any]) -> list[Any]:
        pinned: Connection | None = getattr(self._pinned, "conn", None)
        if pinned is not None:
            return list(pinned.execute(query).mappings())
        with self.reader.connect() as conn:
            return list(conn.execute(query).mappings())

    def _count(self, query: Select[Any]) -> int:
        pinned: Connection | None = getattr(self._pinned, "conn", None)
        if pinned is not None:
            return int(pinned.execute(query).scalar_one())
        with self.reader.connect() as conn:
            return int(conn.execute(query).scalar_one())

    # Wants -------------------------------------------------------------------------------------
    def want(self, want_id: str) -> Want:
        rows = self._all(select(s.wants).where(s.wants.c.want_id == want_id))
        if not rows:
            raise NotFoundError(f"no want {want_id!r}; list wants with `databuild wants list`")
        return want_from_row(rows[0])

    def find_want(self, want_id: str) -> Want | None:
        rows = self._all(select(s.wants).where(s.wants.c.want_id == want_id))
        return want_from_row(rows[0]) if rows else None

    def decision_seq(self, want_id: str) -> int:
        """The want's last decision step: a new workflow run of the want decides from the next one."""
        rows = self._all(select(s.wants.c.decision_seq).where(s.wants.c.want_id == want_id))
        return int(rows[0]["decision_seq"]) if rows else 0

    def wants(
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
        conditions = _ref_conditions(s.wants.c.ref, ref_prefix, ref_glob)
        if state is not None:
            conditions.append(s.wants.c.state == state.value)
        if root_want_id is not None:
            conditions.append(s.wants.c.root_want_id == root_want_id)
        if parent_want_id is not None:
            conditions.append(s.wants.c.parent_want_id == parent_want_id)
        query = _newest_first(
            s.wants, conditions, "want_id", limit, offset, filter_first=bool(ref_prefix or ref_glob)
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

    def wants_by_id(self, ids: Sequence[str]) -> list[Want]:
        rows = []
        for chunk in _chunks(ids):
            rows += self._all(select(s.wants).where(s.wants.c.want_id.in_(chunk)))
        return [want_from_row(r) for r in rows]

    def want_family(
        self, root_want_id: str, limit: int = 10_000
    ) -> tuple[list[Want], dict[str, JobRunState]]:
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

    def want_links(self, want_ids: Sequence[str]) -> list[tuple[str, str, str]]:
        """(want_id, job_run_id, relation) for every job run these wants executed, joined or skipped."""
        rows = []
        for chunk in _chunks(want_ids):
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
        for chunk in _chunks(want_ids):
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

    def want_job_runs(self, want_id: str) -> list[tuple[str, JobRun]]:
        rows = self._all(
            select(s.want_job_runs.c.relation, s.want_job_runs.c.job_run_id).where(
                s.want_job_runs.c.want_id == want_id
            )
        )
        runs = {r.job_run_id: r for r in self.job_runs_by_id([row["job_run_id"] for row in rows])}
        result = [(row["relation"], runs[row["job_run_id"]]) for row in rows]
        return sorted(result, key=lambda pair: pair[1].created_at)

    # Partitions ----------------------------------------------------------------------------------
    def partition(self, ref: str) -> Partition:
        found = self.find_partition(ref)
        if found is None:
            raise NotFoundError(f"no partition {ref!r} in the build event log")
        return found

    def find_partition(self, ref: str) -> Partition | None:
        rows = self._all(select(s.partitions).where(s.partitions.c.ref == ref))
        return partition_from_row(rows[0]) if rows else None

    def partitions(
        self,
        *,
        status: PartitionStatus | None = None,
        ref_prefix: str | None = None,
        ref_glob: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Partition]:
        query = select(s.partitions).where(*_ref_conditions(s.partitions.c.ref, ref_prefix, ref_glob))
        live = PartitionStatus.live.value
        if status is PartitionStatus.building:
            query = query.where(
                s.partitions.c.building_job_run_id.is_not(None), s.partitions.c.status != live
            )
        elif status is PartitionStatus.live:
            query = query.where(s.partitions.c.status == live)
        elif status is not None:
            query = query.where(
                s.partitions.c.status == status.value, s.partitions.c.building_job_run_id.is_(None)
            )
        query = query.order_by(s.partitions.c.ref).limit(limit).offset(offset)
        return [partition_from_row(r) for r in self._all(query)]

    def instances(self, ref: str) -> list[InstanceRef]:
        rows = self._all(
            select(s.partition_instances)
            .where(s.partition_instances.c.ref == ref)
            .order_by(s.partition_instances.c.created_at)
        )
        return [InstanceRef(ref=r["ref"], instance_id=r["instance_id"]) for r in rows]

    def instance(self, instance_id: str) -> Instance:
        found = self.instances_by_id([instance_id])
        if not found:
            raise NotFoundError(
                f"no partition instance {instance_id!r}; `databuild partitions show REF` lists a ref's instances"
            )
        return found[0]

    def instances_by_id(self, ids: Sequence[str]) -> list[Instance]:
        rows = []
        for chunk in _chunks(ids):
            rows += self._all(
                select(s.partition_instances).where(s.partition_instances.c.instance_id.in_(chunk))
            )
        return [instance_from_row(r) for r in rows]

    def instance_history(self, ref: str, limit: int = 20) -> tuple[list[Instance], int]:
        """The ref's instances, newest first (the first ``limit``), and how many there are."""
        where = s.partition_instances.c.ref == ref
        rows = self._all(
            select(s.partition_instances)
            .where(where)
            .order_by(s.partition_instances.c.created_at.desc(), s.partition_instances.c.instance_id)
            .limit(limit)
        )
        total = self._count(select(func.count()).select_from(s.partition_instances).where(where))
        return [instance_from_row(r) for r in rows], total

    def partitions_by_ref(self, refs: Sequence[str]) -> list[Partition]:
        rows = []
        for chunk in _chunks(refs):
            rows += self._all(select(s.partitions).where(s.partitions.c.ref.in_(chunk)))
        return [partition_from_row(r) for r in rows]

    def generations(self, refs: Sequence[str]) -> dict[str, int]:
        """How many times each ref has been tainted (0 for refs never tainted or never seen)."""
        found = {p.ref: p.generation for p in self.partitions_by_ref(refs)}
        return {ref: found.get(ref, 0) for ref in refs}

    def downstream_closure(self, instance_id: str, limit: int = 100_000) -> list[tuple[InstanceRef, int]]:
        """Every instance built from this one, directly or through others, with its distance; breadth
        first over the consumer index, one indexed lookup per level and chunk."""
        seen = {instance_id}
        found: list[tuple[InstanceRef, int]] = []
        frontier = [instance_id]
        depth = 0
        while frontier and len(found) < limit:
            depth += 1
            following: list[str] = []
            for chunk in _chunks(frontier):
                rows = self._all(
                    select(s.consumers.c.output_instance_id, s.consumers.c.output_ref)
                    .where(s.consumers.c.input_instance_id.in_(chunk))
                    .order_by(s.consumers.c.id)
                )
                for row in rows:
                    out = row["output_instance_id"]
                    if out not in seen:
                        seen.add(out)
                        following.append(out)
                        found.append((InstanceRef(ref=row["output_ref"], instance_id=out), depth))
            frontier = following
        return found[:limit]

    def consumers_of(
        self, instance_id: str, limit: int = 20, offset: int = 0
    ) -> tuple[list[tuple[str, InstanceRef]], int]:
        """(job run, output instance) pairs built from this instance, a page of them, and how many
        there are in all."""
        where = s.consumers.c.input_instance_id == instance_id
        rows = self._all(
            select(s.consumers).where(where).order_by(s.consumers.c.id).limit(limit).offset(offset)
        )
        total = self._count(select(func.count()).select_from(s.consumers).where(where))
        edges = [
            (r["job_run_id"], InstanceRef(ref=r["output_ref"], instance_id=r["output_instance_id"]))
            for r in rows
        ]
        return edges, int(total)

    def backfill_progress(self, backfill_id: str) -> BackfillProgress:
        """The backfill and its wants counted by state: one query for the counts."""
        with self.reader.connect() as conn:
            row = self._backfill_row(conn, backfill_id)
            counts = conn.execute(
                select(s.wants.c.state, func.count())
                .select_from(s.backfill_wants.join(s.wants, s.wants.c.want_id == s.backfill_wants.c.want_id))
                .where(s.backfill_wants.c.backfill_id == backfill_id)
                .group_by(s.wants.c.state)
            ).all()
        return BackfillProgress(
            backfill_id=backfill_id,
            request=BackfillRequest.model_validate(row["request"]),
            partitions=row["partitions"],
            registered=sum(n for _, n in counts),  # a want is added to its backfill once it exists
            by_state={WantState(state): n for state, n in counts},
            created_at=row["created_at"],
            paused=bool(row["paused"]),
            canceled=bool(row["canceled"]),
        )

    def finished_backfills_of(self, want_id: str) -> list[BackfillProgress]:
        """The progress of each backfill the want belongs to that has finished. Counting a backfill's
        wants is done only once none is open (the first open one found answers), so a backfill of N
        wants does not count N times N rows as they end."""
        ids = self._all(select(s.backfill_wants.c.backfill_id).where(s.backfill_wants.c.want_id == want_id))
        final = [state.value for state in FINAL_WANT_STATES]
        finished = []
        for row in ids:
            open_want = self._all(
                select(s.backfill_wants.c.want_id)
                .join(s.wants, s.wants.c.want_id == s.backfill_wants.c.want_id)
                .where(s.backfill_wants.c.backfill_id == row["backfill_id"], s.wants.c.state.not_in(final))
                .limit(1)
            )
            if not open_want and (progress := self.backfill_progress(row["backfill_id"])).finished:
                finished.append(progress)
        return finished

    def any_backfill_paused(self) -> bool:
        return bool(
            self._all(select(s.backfills.c.backfill_id).where(s.backfills.c.paused.is_(True)).limit(1))
        )

    def backfill_reach(self, backfill_id: str, *, everything_below: bool = False) -> list[Want]:
        """The open wants a cancel or pause of the backfill reaches: its own, then the derivative wants
        below them that no open want outside needs (``reach.reached``), older first (a parent before the
        wants it derived). ``everything_below``: every open derivative below them instead, for a resume
        to wake (each decides again whether it is still paused). NotFoundError for an unknown backfill."""
        with self.reader.connect() as conn:
            self._backfill_row(conn, backfill_id)
            members = set(
                conn.execute(
                    select(s.backfill_wants.c.want_id).where(s.backfill_wants.c.backfill_id == backfill_id)
                ).scalars()
            )
            parents = self._derived_below(conn, members)
            involved = members | set(parents) | {p for ps in parents.values() for p in ps}
            open_ids = self._open_among(conn, involved)
            below = (
                reach.descendants(members, parents)
                if everything_below
                else reach.reached(members, parents, open_ids)
            )
            rows: list[RowMapping] = []
            for chunk in _chunks(sorted((members | below) & open_ids)):
                rows += conn.execute(select(s.wants).where(s.wants.c.want_id.in_(chunk))).mappings().all()
        wants = [want_from_row(r) for r in rows]
        return sorted(wants, key=lambda w: (w.source is WantSource.derivative, w.created_at, w.want_id))

    @staticmethod
    def _derived_below(conn: Connection, roots: Iterable[str]) -> dict[str, set[str]]:
        """Every derivative want below ``roots``, with every want that derived it (derivative -> its
        parents), also those that are not below ``roots``: a derivative may be shared."""
        derivatives = s.derivatives.c
        parents: dict[str, set[str]] = {}
        level = sorted(set(roots))
        while level:
            found: set[str] = set()
            for chunk in _chunks(level):
                for parent, child in conn.execute(
                    select(derivatives.want_id, derivatives.derivative_want_id).where(
                        derivatives.want_id.in_(chunk), derivatives.derivative_want_id.is_not(None)
                    )
                ):
                    if child not in parents:
                        found.add(child)
                    parents.setdefault(child, set()).add(parent)
            level = sorted(found)
        for chunk in _chunks(sorted(parents)):
            for parent, child in conn.execute(
                select(derivatives.want_id, derivatives.derivative_want_id).where(
                    derivatives.derivative_want_id.in_(chunk)
                )
            ):
                parents[child].add(parent)
        return parents

    @staticmethod
    def _derived_above(conn: Connection, want_id: str) -> dict[str, set[str]]:
        """The wants ``want_id`` was derived from, transitively: each derivative on the way (the want
        itself included) with every want that derived it (derivative -> its parents)."""
        derivatives = s.derivatives.c
        parents: dict[str, set[str]] = {}
        level = [want_id]
        while level:
            found: set[str] = set()
            for chunk in _chunks(level):
                for parent, child in conn.execute(
                    select(derivatives.want_id, derivatives.derivative_want_id).where(
                        derivatives.derivative_want_id.in_(chunk)
                    )
                ):
                    parents.setdefault(child, set()).add(parent)
                    found.add(parent)
            level = sorted(found - set(parents) - {want_id})
        return parents

    @staticmethod
    def _open_among(conn: Connection, want_ids: Iterable[str]) -> set[str]:
        final = [state.value for state in FINAL_WANT_STATES]
        found: set[str] = set()
        for chunk in _chunks(sorted(set(want_ids))):
            found.update(
                conn.execute(
                    select(s.wants.c.want_id).where(
                        s.wants.c.want_id.in_(chunk), s.wants.c.state.not_in(final)
                    )
                ).scalars()
            )
        return found

    @staticmethod
    def _backfill_row(conn: Connection, backfill_id: str) -> Any:
        row = (
            conn.execute(select(s.backfills).where(s.backfills.c.backfill_id == backfill_id))
            .mappings()
            .first()
        )
        if row is None:
            raise NotFoundError(
                f"no backfill {backfill_id!r}; `databuild backfill PATTERN --from --to` starts one"
            )
        return row

    def attempt_outputs(self, ids: Sequence[str]) -> dict[str, AttemptOutput]:
        """Which attempt writes (or wrote) each of these instance ids, for those an attempt planned."""
        found: dict[str, AttemptOutput] = {}
        for chunk in _chunks(ids):
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

    def oldest_open_job_run(self) -> datetime | None:
        """When the oldest job run that has not ended was created: it may still read anything that was
        live since then."""
        open_states = [JobRunState.queued.value, JobRunState.running.value]
        with self.reader.connect() as conn:
            oldest: datetime | None = conn.execute(
                select(func.min(s.job_runs.c.created_at)).where(s.job_runs.c.state.in_(open_states))
            ).scalar()
        return oldest

    # Job runs ------------------------------------------------------------------------------------
    def job_run(self, job_run_id: str) -> JobRun:
        runs = self.job_runs_by_id([job_run_id])
        if not runs:
            raise NotFoundError(f"no job run {job_run_id!r}; list them with `databuild job-runs list`")
        return runs[0]

    def job_runs_by_id(self, ids: Sequence[str]) -> list[JobRun]:
        runs = []
        for chunk in _chunks(ids):
            runs += self._hydrate_runs(
                self._all(select(s.job_runs).where(s.job_runs.c.job_run_id.in_(chunk)))
            )
        return runs

    def job_runs(
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
        by_ref = _ref_conditions(s.job_run_outputs.c.ref, ref_prefix, ref_glob)
        if by_ref:  # runs with an output matching
            outputs = select(s.job_run_outputs.c.job_run_id).where(*by_ref)
            conditions.append(s.job_runs.c.job_run_id.in_(outputs))
        if state is not None:
            conditions.append(s.job_runs.c.state == state.value)
        if job_label is not None:
            conditions.append(s.job_runs.c.job_label == job_label)
        query = _newest_first(s.job_runs, conditions, "job_run_id", limit, offset, filter_first=bool(by_ref))
        return self._hydrate_runs(self._all(query))

    def _hydrate_runs(self, rows: list[Any]) -> list[JobRun]:
        ids = [r["job_run_id"] for r in rows]
        reads: dict[str, list[InstanceRef]] = {i: [] for i in ids}
        writes: dict[str, list[InstanceRef]] = {i: [] for i in ids}
        waiting: dict[str, list[str]] = {i: [] for i in ids}
        queued = [r["job_run_id"] for r in rows if r["state"] == JobRunState.queued.value]
        if queued:
            for r in self._all(
                select(s.run_pools.c.job_run_id, s.run_pools.c.pool)
                .where(s.run_pools.c.job_run_id.in_(queued), s.run_pools.c.granted.is_(False))
                .order_by(s.run_pools.c.pool)
            ):
                waiting[r["job_run_id"]].append(r["pool"])
        if ids:
            for r in self._all(
                select(s.read_deps).where(s.read_deps.c.job_run_id.in_(ids)).order_by(s.read_deps.c.id)
            ):
                reads[r["job_run_id"]].append(InstanceRef(ref=r["ref"], instance_id=r["instance_id"]))
            for r in self._all(
                select(s.partition_instances).where(s.partition_instances.c.job_run_id.in_(ids))
            ):
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

    def job_durations(self, labels: Sequence[str], last: int = 50) -> dict[str, Durations]:
        """Each job's p50 and p90 over its ``last`` succeeded runs (latest attempt's start to the end)."""
        result = {}
        for label in dict.fromkeys(labels):
            rows = self._all(
                select(s.job_runs.c.started_at, s.job_runs.c.ended_at)
                .where(
                    s.job_runs.c.job_label == label,
                    s.job_runs.c.state == JobRunState.succeeded.value,
                    s.job_runs.c.ended_at.is_not(None),
                    s.job_runs.c.started_at.is_not(None),
                )
                .order_by(s.job_runs.c.ended_at.desc())
                .limit(last)
            )
            result[label] = durations_of([(r["ended_at"] - r["started_at"]).total_seconds() for r in rows])
        return result

    def stats(self) -> BuildStats:
        counts: dict[str, dict[str, int]] = {}
        rows = self._all(
            select(s.job_runs.c.job_label, s.job_runs.c.state, func.count().label("n")).group_by(
                s.job_runs.c.job_label, s.job_runs.c.state
            )
        )
        for row in rows:
            counts.setdefault(row["job_label"], {})[row["state"]] = int(row["n"])
        jobs = []
        for label, by_state in sorted(counts.items()):
            good = by_state.get("succeeded", 0) + by_state.get("skipped", 0)
            finished = good + by_state.get("failed", 0)
            jobs.append(
                JobStats(
                    job_label=label,
                    succeeded=by_state.get("succeeded", 0),
                    skipped=by_state.get("skipped", 0),
                    failed=by_state.get("failed", 0),
                    dep_miss=by_state.get("dep_miss", 0),
                    cancelled=by_state.get("cancelled", 0),
                    in_progress=by_state.get("queued", 0) + by_state.get("running", 0),
                    success_rate=good / finished if finished else None,
                )
            )
        kinds = {
            r["kind"]: int(r["n"])
            for r in self._all(
                select(s.delegations.c.kind, func.count().label("n")).group_by(s.delegations.c.kind)
            )
        }
        joined = self._all(
            select(func.count().label("n"))
            .select_from(s.want_job_runs)
            .where(s.want_job_runs.c.relation == "delegated")
        )[0]["n"]
        return BuildStats(
            jobs=jobs,
            delegations_active=kinds.get("active", 0),
            delegations_historical=kinds.get("historical", 0),
            builds_avoided=sum(j.skipped for j in jobs) + int(joined),
        )

    def partition_counts(self, globs: Sequence[str]) -> dict[str | None, dict[PartitionStatus, int]]:
        """How many partitions match each of ``globs`` (the graph's patterns), by status as the views show
        it, in one GROUP BY (one pass over the partitions: no index counts by pattern). A ref counts under
        the first glob it matches; refs no glob matches (a job since renamed) count under None."""
        p = s.partitions.c
        glob: Any = case(*((ref_filter(p.ref, g), literal(g)) for g in globs)) if globs else literal(None)
        building = p.building_job_run_id.is_not(None) & (p.status != PartitionStatus.live.value)
        status = case((building, PartitionStatus.building.value), else_=p.status)
        # Grouped outside: PostgreSQL would not see the bound CASE in GROUP BY as the one selected.
        shown = select(glob.label("glob"), status.label("status")).subquery()
        by = (shown.c.glob, shown.c.status)
        rows = self._all(select(*by, func.count().label("n")).group_by(*by))
        counts: dict[str | None, dict[PartitionStatus, int]] = {}
        for r in rows:
            counts.setdefault(r["glob"], {})[PartitionStatus(r["status"])] = int(r["n"])
        return counts

    def latest_succeeded_runs(self, labels: Sequence[str]) -> list[JobRun]:
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
        return self.job_runs_by_id([run_id for run_id in row.values() if run_id])

    def subscriptions(self, refs: Sequence[str], after_id: int, limit: int) -> list[Subscription]:
        """A page of the subscriptions to any of ``refs``, in id order."""
        rows = self._all(
            select(s.subscriptions, s.wants.c.ref.label("want_ref"), s.wants.c.data_timestamp)
            .join(s.wants, s.wants.c.want_id == s.subscriptions.c.want_id)
            .where(s.subscriptions.c.ref.in_(list(refs)), s.subscriptions.c.id > after_id)
            .order_by(s.subscriptions.c.id)
            .limit(limit)
        )
        return [Subscription.model_validate(dict(r)) for r in rows]

    # Events ----------------------------------------------------------------------------------------
    def last_idx(self) -> int:
        rows = self._all(select(s.head.c.last_idx))
        return int(rows[0]["last_idx"]) if rows else 0

    def event_page(self, since_idx: int, limit: int, where: EventFilter) -> EventPage:
        """Events after ``since_idx`` that match, oldest first, and the cursor to continue from. Read in
        one snapshot: the index is gap-free in commit order, so every event up to the head read here is
        visible, and the cursor can skip past events that did not match."""
        for pattern in where.patterns:
            compile_glob(pattern)  # a clear error for a bad pattern, before any SQL
        with self.snapshot():
            head = self.last_idx()
            query = select(s.events).where(s.events.c.idx > since_idx, s.events.c.idx <= head)
            by_ref = [ref_filter(s.events.c.ref, p) for p in where.patterns]
            if where.refs:
                by_ref.append(s.events.c.ref.in_(where.refs))
            if by_ref:
                query = query.where(or_(*by_ref))
            if where.job_labels:
                runs = select(s.job_runs.c.job_run_id).where(s.job_runs.c.job_label.in_(where.job_labels))
                query = query.where(s.events.c.job_run_id.in_(runs))
            if where.job_run_ids:
                query = query.where(s.events.c.job_run_id.in_(where.job_run_ids))
            if where.want_ids:
                query = query.where(s.events.c.want_id.in_(where.want_ids))
            if where.types:
                query = query.where(s.events.c.type.in_(where.types))
            rows = self._all(query.order_by(s.events.c.idx).limit(limit))
        found = [_event_record(r) for r in rows]
        following = found[-1].idx if len(found) == limit else head
        return EventPage(events=found, next_since_idx=max(following, since_idx), last_idx=head)

    def events(
        self,
        *,
        since_idx: int = 0,
        limit: int = 100,
        pattern: str | None = None,
        want_id: str | None = None,
        job_run_id: str | None = None,
        types: Sequence[str] = (),
    ) -> list[EventRecord]:
        """Shorthand for ``event_page`` with one value per filter."""
        where = EventFilter(
            patterns=[pattern] if pattern else [],
            want_ids=[want_id] if want_id else [],
            job_run_ids=[job_run_id] if job_run_id else [],
            types=list(types),
        )
        return self.event_page(since_idx, limit, where).events


def _event_record(row: Any) -> EventRecord:
    return EventRecord(
        idx=row["idx"],
        type=row["type"],
        at=row["at"],
        want_id=row["want_id"],
        job_run_id=row["job_run_id"],
        ref=row["ref"],
        data=row["data"],
    )
