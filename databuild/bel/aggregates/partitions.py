"""Partitions and their instances: lineage reads, and the operator's commands (taint, resolve, skip, publish, pin)."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, func, literal, select

from databuild.bel import schema as s
from databuild.bel.aggregates.base import WriteBase, new_instance_id
from databuild.bel.engine.keys import ref_key
from databuild.bel.reads.base import ReadBase
from databuild.bel.reads.rows import (
    PARTITIONS_AT,
    check_from_row,
    chunks,
    instance_from_row,
    partition_at,
    partition_from_row,
    ref_conditions,
    require_partition,
)
from databuild.domain import checks as check_rules
from databuild.domain import decisions
from databuild.domain import events as ev
from databuild.domain import partitions as partition_rules
from databuild.domain.checks import Recheck
from databuild.errors import (
    NotFoundError,
)
from databuild.globs import ref_filter
from databuild.models import (
    CheckResult,
    ImpactedInstance,
    Instance,
    InstanceRef,
    InstanceStatus,
    Partition,
    PartitionStatus,
    TaintImpact,
    TaintResult,
)

# Read for every run's outputs, so built once.
CONSUMERS_OF = (
    select(s.consumers.c.output_instance_id, s.consumers.c.output_ref)
    .where(s.one_of(s.consumers.c.input_instance_id, "ids"))
    .order_by(s.consumers.c.id)
)
# An instance with its commit to its table, if it has one.
_tc = s.table_commits.c
INSTANCES = select(
    s.partition_instances,
    _tc.table_name,
    _tc.format.label("table_format"),
    _tc.snapshot_id,
    _tc.committed_at,
    _tc.removed_at,
).select_from(
    s.partition_instances.outerjoin(
        s.table_commits, s.table_commits.c.instance_id == s.partition_instances.c.instance_id
    )
)
INSTANCES_OF = INSTANCES.where(s.one_of(s.partition_instances.c.instance_id, "ids"))
CHECKS_OF = (
    select(s.instance_checks)
    .where(s.one_of(s.instance_checks.c.instance_id, "ids"))
    .order_by(s.instance_checks.c.instance_id, s.instance_checks.c.name)
)


class PartitionReads(ReadBase):
    """Reads of partitions, instances and the consumer index."""

    def get(self, ref: str) -> Partition:
        found = self.find(ref)
        if found is None:
            raise NotFoundError(f"no partition {ref!r} in the build event log")
        return found

    def find(self, ref: str) -> Partition | None:
        rows = self._all(select(s.partitions).where(s.partitions.c.ref == ref))
        return partition_from_row(rows[0]) if rows else None

    def query(
        self,
        *,
        status: PartitionStatus | None = None,
        ref_prefix: str | None = None,
        ref_glob: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Partition]:
        query = select(s.partitions).where(*ref_conditions(s.partitions.c.ref, ref_prefix, ref_glob))
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
        for chunk in chunks(ids):
            rows += self._all(INSTANCES_OF, {"ids": chunk})
        return self._with_checks(rows)

    def _with_checks(self, rows: Sequence[Any]) -> list[Instance]:
        checks = self.checks_of([r["instance_id"] for r in rows])
        return [instance_from_row(r, checks.get(r["instance_id"], [])) for r in rows]

    def checks_of(self, instance_ids: Sequence[str]) -> dict[str, list[CheckResult]]:
        """The latest result of each check of these instances (live or kept from going live), by name."""
        found: dict[str, list[CheckResult]] = {}
        for chunk in chunks(instance_ids):
            for r in self._all(CHECKS_OF, {"ids": chunk}):
                found.setdefault(r["instance_id"], []).append(check_from_row(r))
        return found

    def instance_history(self, ref: str, limit: int = 20) -> tuple[list[Instance], int]:
        """The ref's instances, newest first (the first ``limit``), and how many there are."""
        where = s.partition_instances.c.ref == ref
        rows = self._all(
            INSTANCES.where(where)
            .order_by(s.partition_instances.c.created_at.desc(), s.partition_instances.c.instance_id)
            .limit(limit)
        )
        total = self._count(select(func.count()).select_from(s.partition_instances).where(where))
        return self._with_checks(rows), total

    def by_ref(self, refs: Sequence[str]) -> list[Partition]:
        rows = []
        for chunk in chunks(refs):
            rows += self._all(PARTITIONS_AT, {"refs": chunk})
        return [partition_from_row(r) for r in rows]

    def generations(self, refs: Sequence[str]) -> dict[str, int]:
        """How many times each ref has been tainted (0 for refs never tainted or never seen)."""
        found = {p.ref: p.generation for p in self.by_ref(refs)}
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
            for chunk in chunks(frontier):
                rows = self._all(CONSUMERS_OF, {"ids": chunk})
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

    def counts(self, globs: Sequence[str]) -> dict[str | None, dict[PartitionStatus, int]]:
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


class Partitions(PartitionReads, WriteBase):
    """Commands about partitions and instances."""

    def resolve(self, ref: str) -> list[Partition]:
        """Clear a fail-lock (operator action): the partition, and the other outputs its failed job run
        fail-locked with it, may be built again. Returns the partitions resolved."""
        siblings = self._failed_with(ref)
        with self._write(*map(ref_key, siblings)) as tx:
            partitions = {out: partition_at(tx.conn, out) for out in siblings}
            if partitions.get(ref) is None:
                raise NotFoundError(f"no partition {ref!r} in the build event log")
            events = decisions.resolve(ref, partitions)
            tx.extend(events)
            return [partition_from_row(require_partition(tx.conn, e.ref)) for e in events]

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
            tx.extend(decisions.skip(ref, partition_at(tx.conn, ref)))
            return partition_from_row(require_partition(tx.conn, ref))

    def taint_impact(self, ref: str) -> TaintImpact:
        """What `taint` would affect, without recording anything."""
        partition = partition_rules.taintable(self.find(ref), ref)
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
            partition_rules.taintable(partition_at(tx.conn, ref), ref)
            impact = self.taint_impact(ref)
            tainting = partition_rules.taint(
                partition_at(tx.conn, ref),
                impact,
                reason=reason,
                looked_at=instance_id,
                cascaded=cascaded,
                now={d: partition_at(tx.conn, d) for d in cascaded},
            )
            tx.extend(tainting.events)
            result = partition_from_row(require_partition(tx.conn, ref))
        return TaintResult(
            partition=result, impact=impact, tainted=tainting.tainted, not_tainted=tainting.not_tainted
        )

    def publish_external(
        self, ref: str, instance_id: str | None = None, source: str | None = None, location: str | None = None
    ) -> tuple[Partition, bool]:
        """Announce that ``ref`` is available from outside (``source``: who says so, e.g. the upstream
        graph). Idempotent: without ``instance_id`` a live ref is left as it is; with one (an upstream
        graph's instance UUID) an instance seen before is never applied again, and a new one replaces
        the live instance (the upstream rebuilt it). Returns the partition and whether this call changed it."""
        with self._write(ref_key(ref)) as tx:
            seen = None
            if instance_id is not None:
                seen = tx.conn.execute(
                    select(s.partition_instances.c.ref).where(
                        s.partition_instances.c.instance_id == instance_id
                    )
                ).scalar()
            events = partition_rules.publish(
                ref,
                partition_at(tx.conn, ref),
                instance_id=instance_id,
                seen_as=seen,
                new_instance_id=new_instance_id(),
                source=source,
                location=location,
            )
            tx.extend(events)
            return partition_from_row(require_partition(tx.conn, ref)), bool(events)

    def pin_instance(self, instance_id: str, *, pinned: bool = True, reason: str | None = None) -> Instance:
        """Keep (or stop keeping) an instance's data from garbage collection. Idempotent."""
        instance = self.instance(instance_id)
        with self._write(ref_key(instance.ref)) as tx:
            tx.extend(partition_rules.pin(instance, pinned, reason))
        return self.instance(instance_id)

    def recheck(
        self, ref: str, instance_id: str, results: Sequence[CheckResult], recheck_id: str | None = None
    ) -> Partition:
        """Record the results of re-running ``ref``'s checks on its live instance ``instance_id`` (by the
        request ``recheck_id``): a blocking failure retires the instance (what was built from it shows
        stale) and fail-locks the partition. Refused, recording nothing, if another instance went live
        meanwhile."""
        check_rules.checkable(self.find(ref), ref)
        with self._write(ref_key(ref), alone=True) as tx:  # alone: the impact is what readers built
            impact = self._impact(ref, instance_id)
            partition = partition_at(tx.conn, ref)
            tx.extend(check_rules.rechecked(partition, instance_id, results, impact, recheck_id))
            return partition_from_row(require_partition(tx.conn, ref))

    def recorded_recheck(self, ref: str, recheck_id: str) -> Recheck | None:
        """What the re-check request ``recheck_id`` recorded on ``ref``, if it did: a retry of it (its
        answer was lost) returns that, rather than refusing the instance it took out of service itself.
        Re-checks of one ref run one at a time, so a recorded one is the ref's latest."""
        rows = self._all(
            select(s.events.c.data)
            .where(
                s.events.c.ref == ref,
                s.events.c.type == "InstanceChecked",
                s.events.c.job_run_id.is_(None),
            )
            .order_by(s.events.c.idx.desc())
            .limit(1)
        )
        if not rows:
            return None
        event = ev.InstanceChecked.model_validate(rows[0]["data"])
        if event.recheck_id != recheck_id:
            return None
        partition = self.get(ref)
        return Recheck(ref=ref, instance_id=event.instance_id, results=event.results, partition=partition)

    def _impact(self, ref: str, instance_id: str) -> TaintImpact:
        closure = self.downstream_closure(instance_id)
        return TaintImpact(
            ref=ref,
            instance_id=instance_id,
            downstream=[
                ImpactedInstance(ref=ir.ref, instance_id=ir.instance_id, depth=depth, current=False)
                for ir, depth in closure
                if ir.instance_id
            ],
        )
