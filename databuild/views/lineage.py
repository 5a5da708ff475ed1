"""The three detail views (want fulfillment, partition lineage, job run detail) and the list views.

Every response is ``{data, index}``: ``data`` holds ids, and ``index`` holds each related want, job
run, partition and partition instance once, so detail types stay flat (docs/lineage.md).
Each view is a fixed handful of indexed lookups, batched per level, whatever the size of the log.
"""

import functools
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Concatenate, Generic, ParamSpec, TypeVar

from pydantic import Field

from databuild.bel.queries import BelQueries
from databuild.domain.cost import RunCost, SparkCost, run_cost
from databuild.domain.estimates import Estimate
from databuild.domain.events import JobRunFailed
from databuild.domain.staleness import StaleReason
from databuild.graph import Graph
from databuild.models import (
    EventFilter,
    Instance,
    JobRun,
    JobRunCause,
    JobRunState,
    Model,
    Partition,
    PartitionStatus,
    Want,
    WantState,
)
from databuild.operations.sla import sla_estimate

FAN_OUT = 20  # downstream consumers, delegations and wanting wants shown before "+N more"

P = ParamSpec("P")
R = TypeVar("R")


def consistent(view: Callable[Concatenate[BelQueries, P], R]) -> Callable[Concatenate[BelQueries, P], R]:
    """Assemble the view from one snapshot of the log (one read transaction, one connection)."""

    @functools.wraps(view)
    def wrapper(bel: BelQueries, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with bel.snapshot():
            return view(bel, *args, **kwargs)

    return wrapper


class RelatedEntities(Model):
    wants: dict[str, Want] = {}
    job_runs: dict[str, JobRun] = {}
    partitions: dict[str, Partition] = Field(default={}, description="current state, by ref")
    instances: dict[str, Instance] = Field(default={}, description="partition instances, by UUID")
    stale: dict[str, list[StaleReason]] = Field(
        default={},
        description="the live instances above that are stale, by UUID, with why (views.staleness.with_staleness; "
        "empty where the graph was not at hand)",
    )


class IndexBuilder:
    """Collects the ids a view mentions, then loads each kind in one batched lookup."""

    def __init__(self) -> None:
        self.want_ids: set[str] = set()
        self.job_run_ids: set[str] = set()
        self.refs: set[str] = set()
        self.instance_ids: set[str] = set()
        # Entities the view loaded already, so the index does not load them again.
        self.wants: dict[str, Want] = {}
        self.job_runs: dict[str, JobRun] = {}
        self.partitions: dict[str, Partition] = {}
        self.instances: dict[str, Instance] = {}

    def add_wants(self, wants: Iterable[Want]) -> None:
        for want in wants:
            self.wants[want.want_id] = want
            self.refs.add(want.ref)
            if want.job_run_id:
                self.job_run_ids.add(want.job_run_id)
            if want.instance_id:
                self.instance_ids.add(want.instance_id)

    def add_job_runs(self, runs: Iterable[JobRun]) -> None:
        for run in runs:
            self.job_runs[run.job_run_id] = run
            self.refs.update(run.outputs)
            for io in (*run.reads, *run.writes):
                self.refs.add(io.ref)
                if io.instance_id:
                    self.instance_ids.add(io.instance_id)

    def add_partitions(self, partitions: Iterable[Partition]) -> None:
        for partition in partitions:
            self.partitions[partition.ref] = partition
            if partition.instance_id:
                self.instance_ids.add(partition.instance_id)
            for run_id in (partition.built_by, partition.building_job_run_id):
                if run_id:
                    self.job_run_ids.add(run_id)

    def add_instances(self, instances: Iterable[Instance]) -> None:
        for instance in instances:
            self.instances[instance.instance_id] = instance
            self.refs.add(instance.ref)

    def build(self, bel: BelQueries) -> RelatedEntities:
        wants = dict(self.wants)
        wants.update({w.want_id: w for w in bel.wants.by_id(sorted(self.want_ids - wants.keys()))})
        runs = dict(self.job_runs)
        runs.update({r.job_run_id: r for r in bel.job_runs.by_id(sorted(self.job_run_ids - runs.keys()))})
        refs = set(self.refs)
        for run in runs.values():
            refs.update(run.outputs)
        partitions = dict(self.partitions)
        partitions.update({p.ref: p for p in bel.partitions.by_ref(sorted(refs - partitions.keys()))})
        instance_ids = set(self.instance_ids)
        for run in runs.values():
            instance_ids.update(io.instance_id for io in (*run.reads, *run.writes) if io.instance_id)
        instance_ids.update(p.instance_id for p in partitions.values() if p.instance_id)
        instances = dict(self.instances)
        instances.update(
            {
                i.instance_id: i
                for i in bel.partitions.instances_by_id(sorted(instance_ids - instances.keys()))
            }
        )
        return RelatedEntities(wants=wants, job_runs=runs, partitions=partitions, instances=instances)


# Want fulfillment ------------------------------------------------------------------------------------


class RunLink(Model):
    job_run_id: str
    relation: str = Field(
        description="executed (queued it), delegated (joined it), batched (its partition joined a queued batch) "
        "or skipped (all was live)"
    )


class RunGroup(Model):
    """Job runs of one want for the same job and outputs: the retries of one build, collapsed."""

    job_label: str
    outputs: list[str]
    runs: list[RunLink] = Field(description="oldest first; the last one is the outcome")

    @property
    def last(self) -> RunLink:
        return self.runs[-1]


class DerivativeEdge(Model):
    want_id: str = Field(description="the derivative want")
    triggered_by: str | None = Field(
        description="the dep-miss job run that asked for it; None: an input its parent's job declares"
    )


class FulfillmentNode(Model):
    want_id: str
    instance_id: str | None = Field(description="the partition instance that fulfilled the want")
    job_runs: list[RunGroup]
    derivatives: list[DerivativeEdge] = Field(description="wants its dep-misses started or joined")


class Fulfillment(Model):
    """The work tree of a want, flat: every want in it appears once in ``nodes`` (derivative wants are
    shared when several wants need the same input), so deep or diamond-shaped trees stay small."""

    want_id: str = Field(description="the root of the tree")
    nodes: dict[str, FulfillmentNode]
    estimate: Estimate | None = Field(
        default=None, description="of a want with an SLA that has not ended: when its partition will be live"
    )


class WantView(Model):
    data: Fulfillment
    index: RelatedEntities


@consistent
def want_view(bel: BelQueries, want_id: str, graph: Graph | None = None, max_wants: int = 5_000) -> WantView:
    """What work fulfilled this want: its job runs, the instance it got, and the derivative wants its
    dep-misses started (or joined), transitively. One batch of lookups per level of the tree. With the
    ``graph``, a want with an SLA that has not ended also gets its estimate (``databuild.operations.sla``)."""
    root = bel.wants.get(want_id)
    wants: dict[str, Want] = {root.want_id: root}
    edges: dict[str, list[DerivativeEdge]] = {}
    level = [root.want_id]
    while level and len(wants) < max_wants:
        following: list[str] = []
        for parent, run_id, _ref, child in bel.wants.derivatives_of(level):
            if child is None:
                continue
            known = edges.setdefault(parent, [])
            if all(e.want_id != child for e in known):
                known.append(DerivativeEdge(want_id=child, triggered_by=run_id))
            if child not in wants and child not in following:
                following.append(child)
        loaded = bel.wants.by_id(following)
        wants.update({w.want_id: w for w in loaded})
        level = [w.want_id for w in loaded]
    links: dict[str, list[RunLink]] = {}
    for owner, run_id, relation in bel.wants.links(list(wants)):
        links.setdefault(owner, []).append(RunLink(job_run_id=run_id, relation=relation))
    index = IndexBuilder()
    index.add_wants(wants.values())
    index.add_job_runs(bel.job_runs.by_id(sorted({link.job_run_id for ls in links.values() for link in ls})))
    related = index.build(bel)

    def created(link: RunLink) -> datetime:
        return related.job_runs[link.job_run_id].created_at

    nodes = {
        want.want_id: FulfillmentNode(
            want_id=want.want_id,
            instance_id=want.instance_id,
            job_runs=_collapse(sorted(links.get(want.want_id, []), key=created), related),
            derivatives=sorted(
                (e for e in edges.get(want.want_id, []) if e.want_id in wants),
                key=lambda e: (wants[e.want_id].ref, e.want_id),
            ),
        )
        for want in wants.values()
    }
    estimate = sla_estimate(bel, graph, root, datetime.now(UTC)) if graph is not None else None
    return WantView(data=Fulfillment(want_id=root.want_id, nodes=nodes, estimate=estimate), index=related)


def _collapse(links: list[RunLink], related: RelatedEntities) -> list[RunGroup]:
    groups: dict[tuple[str, tuple[str, ...]], RunGroup] = {}
    for link in links:
        run = related.job_runs[link.job_run_id]
        key = (run.job_label, tuple(run.outputs))
        if key in groups:
            groups[key].runs.append(link)
        else:
            groups[key] = RunGroup(job_label=run.job_label, outputs=run.outputs, runs=[link])
    return list(groups.values())


class FamilyProgress(Model):
    """How far a want and its fulfillment tree have come: the live view of `databuild want --wait`."""

    want: Want | None = Field(description="the want awaited; None until it is recorded")
    family: list[Want] = Field(description="every want of its tree, the root included")
    job_runs: dict[str, JobRunState] = Field(description="the state of each job run those wants used")


def family_progress(bel: BelQueries, want_id: str, root_want_id: str | None = None) -> FamilyProgress:
    """The progress of ``want_id`` and the tree it belongs to (``root_want_id``: its root, if it is a
    derivative want): one query per look, however many wants the tree has."""
    family, runs = bel.wants.family(root_want_id or want_id)
    want = next((w for w in family if w.want_id == want_id), None)
    if want is None:  # not recorded yet, or beyond the family's first rows
        want = bel.wants.find(want_id)
    return FamilyProgress(want=want, family=family, job_runs=runs)


# Partition lineage ---------------------------------------------------------------------------------


class LineageEdge(Model):
    job_run_id: str
    instance_ids: list[str] = Field(description="what that run built from the focus instance")


class PartitionLineage(Model):
    ref: str
    instance_id: str | None = Field(
        description="the focus instance: the live one unless another was asked for"
    )
    built_by: str | None = Field(description="the job run that wrote the focus instance; None if external")
    upstream: list[str] = Field(description="instance UUIDs the builder read")
    previous: list[str] = Field(
        default=[],
        description="of those, the previous instances of the builder's own outputs it built on "
        "(an incremental job's `ctx.read_previous`)",
    )
    downstream: list[LineageEdge]
    downstream_offset: int
    downstream_total: int
    downstream_more: int = Field(description="consumers after this page")
    history: list[str] = Field(description="instances of this ref, newest first")
    history_total: int


class PartitionView(Model):
    data: PartitionLineage
    index: RelatedEntities
    stale: list[StaleReason] = Field(
        default=[], description="why the shown instance is stale, if it is live and stale (views.staleness)"
    )
    cost: SparkCost | None = Field(
        default=None, description="the shown instance's share of its run's cost (None: unknown, or external)"
    )


@consistent
def partition_view(bel: BelQueries, ref: str, *, fan_out: int = FAN_OUT, offset: int = 0) -> PartitionView:
    """Lineage of the ref's current instance (or, if it has none, its latest one)."""
    partition = bel.partitions.get(ref)
    instance_id = partition.instance_id
    if instance_id is None:
        latest, _ = bel.partitions.instance_history(ref, limit=1)
        instance_id = latest[0].instance_id if latest else None
    return _lineage(bel, partition, instance_id, fan_out=fan_out, offset=offset)


@consistent
def instance_view(
    bel: BelQueries, instance_id: str, *, fan_out: int = FAN_OUT, offset: int = 0
) -> PartitionView:
    """Lineage of one instance, current or not: refs are reused across rebuilds, UUIDs are not."""
    instance = bel.partitions.instance(instance_id)
    return _lineage(bel, bel.partitions.get(instance.ref), instance_id, fan_out=fan_out, offset=offset)


def _lineage(
    bel: BelQueries, partition: Partition, instance_id: str | None, *, fan_out: int, offset: int
) -> PartitionView:
    index = IndexBuilder()
    index.add_partitions([partition])
    focus = bel.partitions.instances_by_id([instance_id]) if instance_id else []
    index.add_instances(focus)
    builder = bel.job_runs.by_id([focus[0].job_run_id]) if focus and focus[0].job_run_id else []
    index.add_job_runs(builder)
    edges, total = bel.partitions.consumers_of(instance_id, fan_out, offset) if instance_id else ([], 0)
    by_run: dict[str, list[str]] = {}
    for run_id, output in edges:
        if output.instance_id:
            by_run.setdefault(run_id, []).append(output.instance_id)
            index.instance_ids.add(output.instance_id)
        index.job_run_ids.add(run_id)
    history, history_total = bel.partitions.instance_history(partition.ref)
    shown = sum(len(ids) for ids in by_run.values())
    index.add_instances(history)
    lineage = PartitionLineage(
        ref=partition.ref,
        instance_id=instance_id,
        built_by=builder[0].job_run_id if builder else None,
        upstream=[r.instance_id for r in (builder[0].reads if builder else []) if r.instance_id],
        previous=[r.instance_id for r in builder[0].reads if r.instance_id and r.ref in builder[0].outputs]
        if builder
        else [],
        downstream=[LineageEdge(job_run_id=run_id, instance_ids=ids) for run_id, ids in by_run.items()],
        downstream_offset=offset,
        downstream_total=total,
        downstream_more=max(total - offset - shown, 0),
        history=[i.instance_id for i in history],
        history_total=history_total,
    )
    cost = run_cost(bel.costs.attempts_of([builder[0].job_run_id]), builder[0].outputs) if builder else None
    share = cost.per_partition.get(partition.ref) if cost is not None else None
    return PartitionView(data=lineage, index=index.build(bel), cost=share)


# Job run detail ------------------------------------------------------------------------------------

HISTORY_EVENTS = (
    "JobRunQueued",
    "JobRunSkipped",
    "JobRunStarted",
    "JobRunSucceeded",
    "JobRunDepMiss",
    "JobRunFailed",
)
_STATE_OF = {
    "JobRunQueued": JobRunState.queued,
    "JobRunSkipped": JobRunState.skipped,
    "JobRunStarted": JobRunState.running,
    "JobRunSucceeded": JobRunState.succeeded,
    "JobRunDepMiss": JobRunState.dep_miss,
}


class StatusChange(Model):
    idx: int
    at: datetime
    state: JobRunState
    detail: str | None = None


class WantLink(Model):
    want_id: str
    relation: str


class DerivativeLink(Model):
    want_id: str = Field(description="the want whose job dep-missed")
    ref: str = Field(description="the missing input")
    derivative_want_id: str | None


class DelegationLink(Model):
    want_id: str
    ref: str
    kind: str = Field(description="active (joined while running) or historical (already built)")
    at: datetime


class JobRunDetail(Model):
    job_run_id: str
    wanted_by: list[WantLink]
    wanted_by_total: int
    status_history: list[StatusChange]
    derivatives: list[DerivativeLink] = Field(description="wants started for missing inputs (dep-miss)")
    delegations: list[DelegationLink] = Field(description="partitions other wants delegated to this run")
    delegations_total: int
    cost: RunCost | None = Field(default=None, description="its attempts' cost, from Spark's accounting")


class JobRunView(Model):
    data: JobRunDetail
    index: RelatedEntities


@consistent
def job_run_view(bel: BelQueries, job_run_id: str, *, fan_out: int = FAN_OUT) -> JobRunView:
    """What a job run did: who wanted it, what it read and wrote (UUIDs, in the index), its status
    history, the derivative wants its dep-miss started, and the delegations pointing at it."""
    run = bel.job_runs.get(job_run_id)
    index = IndexBuilder()
    index.add_job_runs([run])
    wanted, wanted_total = bel.wants.wanted_by(job_run_id, fan_out)
    delegations, delegations_total = bel.wants.delegations_to(job_run_id, fan_out)
    derivatives = bel.wants.derivatives_started_by(job_run_id)
    index.want_ids.update(w for w, _ in wanted)
    index.want_ids.update(d["want_id"] for d in delegations)
    index.want_ids.update(d for _, _, d in derivatives if d)
    index.refs.update(ref for _, ref, _ in derivatives)
    history = [
        StatusChange(
            idx=e.idx, at=e.at, state=_state_of(e.type, e.data), detail=_history_detail(e.type, e.data)
        )
        for e in bel.events.page(
            0, 1000, EventFilter(job_run_ids=[job_run_id], types=list(HISTORY_EVENTS))
        ).events
    ]
    detail = JobRunDetail(
        job_run_id=job_run_id,
        wanted_by=[WantLink(want_id=w, relation=rel) for w, rel in wanted],
        wanted_by_total=wanted_total,
        status_history=history,
        derivatives=[DerivativeLink(want_id=w, ref=ref, derivative_want_id=d) for w, ref, d in derivatives],
        delegations=[
            DelegationLink(want_id=d["want_id"], ref=d["ref"], kind=d["kind"], at=d["at"])
            for d in delegations
        ],
        delegations_total=delegations_total,
        cost=run_cost(bel.costs.attempts_of([job_run_id]), run.outputs),
    )
    return JobRunView(data=detail, index=index.build(bel))


def _state_of(kind: str, data: dict[str, object]) -> JobRunState:
    if kind == "JobRunFailed":  # failed, or cancelled: by its cause (upcast for events recorded before it)
        return JobRunFailed.model_validate(data).cause.state
    return _STATE_OF[kind]


def _history_detail(kind: str, data: dict[str, object]) -> str | None:
    if kind == "JobRunStarted":
        return f"attempt {data.get('attempt')} on {data.get('worker')}"
    if kind == "JobRunDepMiss":
        missing = data.get("missing")
        return f"{len(missing)} input(s) missing" if isinstance(missing, list) else None
    if kind == "JobRunFailed":
        cause = JobRunFailed.model_validate(data).cause
        return str(data.get("reason")) + (f" ({cause.value})" if cause is not JobRunCause.error else "")
    if kind == "JobRunSkipped":
        return str(data.get("message"))
    return None


# Lists ---------------------------------------------------------------------------------------------

T = TypeVar("T")


class Page(Model):
    limit: int
    offset: int
    next_offset: int | None = Field(description="offset of the next page; None on the last page")


class ListView(Model, Generic[T]):
    data: list[T]
    index: RelatedEntities
    page: Page


class PartitionList(ListView[Partition]):
    stale: dict[str, list[StaleReason]] = Field(
        default={},
        description="the listed live partitions that are stale, by ref, with why (views.staleness)",
    )


def _page(rows: list[T], limit: int, offset: int) -> tuple[list[T], Page]:
    """Rows were fetched with ``limit + 1`` so the last page is known without a count."""
    more = len(rows) > limit
    return rows[:limit], Page(limit=limit, offset=offset, next_offset=offset + limit if more else None)


@consistent
def list_wants(
    bel: BelQueries,
    *,
    state: WantState | None = None,
    ref_prefix: str | None = None,
    ref_glob: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> ListView[Want]:
    rows = bel.wants.query(
        state=state, ref_prefix=ref_prefix, ref_glob=ref_glob, limit=limit + 1, offset=offset
    )
    data, page = _page(rows, limit, offset)
    index = IndexBuilder()
    index.add_wants(data)
    return ListView[Want](data=data, index=index.build(bel), page=page)


@consistent
def list_partitions(
    bel: BelQueries,
    *,
    status: PartitionStatus | None = None,
    ref_prefix: str | None = None,
    ref_glob: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> ListView[Partition]:
    rows = bel.partitions.query(
        status=status, ref_prefix=ref_prefix, ref_glob=ref_glob, limit=limit + 1, offset=offset
    )
    data, page = _page(rows, limit, offset)
    index = IndexBuilder()
    index.add_partitions(data)
    return ListView[Partition](data=data, index=index.build(bel), page=page)


@consistent
def list_job_runs(
    bel: BelQueries,
    *,
    state: JobRunState | None = None,
    job_label: str | None = None,
    ref_prefix: str | None = None,
    ref_glob: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> ListView[JobRun]:
    rows = bel.job_runs.query(
        state=state,
        job_label=job_label,
        ref_prefix=ref_prefix,
        ref_glob=ref_glob,
        limit=limit + 1,
        offset=offset,
    )
    data, page = _page(rows, limit, offset)
    index = IndexBuilder()
    index.add_job_runs(data)
    index.want_ids.update(r.want_id for r in data if r.want_id)
    return ListView[JobRun](data=data, index=index.build(bel), page=page)
