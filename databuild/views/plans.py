"""A plan read from the BEL (``databuild.domain.plans``): the partitions the wanted ones reach, a level
at a time, one query per level; the runs that are building some of them; the jobs' durations."""

from collections.abc import Iterable, Sequence
from datetime import datetime

from databuild.bel.queries import BelQueries
from databuild.domain.plans import Action, Node, Plan, Root, action_of, inputs_to_follow, plan
from databuild.domain.staleness import StaleKind, StalePartition
from databuild.errors import InvalidInputError
from databuild.graph import Graph
from databuild.models import JobRunState, Partition, PartitionStatus
from databuild.views.staleness import stale_of

# A plan holds every partition it reaches in memory: past this, it asks for a smaller range.
MAX_PLANNED = 300_000


def plan_wants(
    bel: BelQueries, graph: Graph, roots: Sequence[Root], now: datetime, *, fresh: bool = False
) -> Plan:
    """What wanting ``roots`` would do now (``fresh``: as fresh wants, which rebuild stale partitions).
    Reads only, in one read transaction (one state of the log)."""
    with bel.snapshot():
        return _plan_wants(bel, graph, roots, now, fresh)


def _plan_wants(bel: BelQueries, graph: Graph, roots: Sequence[Root], now: datetime, fresh: bool) -> Plan:
    nodes: dict[str, Node] = {}
    building: dict[str, str] = {}  # ref -> the run building it
    level = list(dict.fromkeys(ref for root in roots for ref in (root.ref, *root.requires)))
    # As a fresh want does: a wanted partition is rebuilt if stale, and so, before it, are the stale inputs
    # it read (fresh derivative wants); any other input is used as it is, stale or not.
    rebuilt = {root.ref for root in roots} if fresh else set()
    while level:
        if len(nodes) + len(level) > MAX_PLANNED:
            raise InvalidInputError(
                f"the plan reaches more than {MAX_PLANNED:,} partitions; plan a smaller range"
            )
        found = {p.ref: p for p in bel.partitions.by_ref(level)}
        stale = _stale(bel, graph, found.values())
        for ref in level:
            partition = found.get(ref)
            nodes[ref] = _node(
                graph, ref, partition, stale.get(partition.instance_id or "") if partition else None
            )
            nodes[ref] = nodes[ref].model_copy(update={"fresh": ref in rebuilt})
            if partition is not None and partition.building_job_run_id:
                building[ref] = partition.building_job_run_id
        expanded = [*level, *_want_fresh(nodes, level, rebuilt)]
        level = list(
            dict.fromkeys(i for ref in expanded for i in inputs_to_follow(nodes[ref]) if i not in nodes)
        )
    started = {
        run.job_run_id: run.started_at
        for run in bel.job_runs.by_id(sorted(set(building.values())))
        if run.state is JobRunState.running and run.started_at is not None
    }
    for ref, run_id in building.items():
        if nodes[ref].status is PartitionStatus.building and run_id in started:
            nodes[ref] = nodes[ref].model_copy(update={"running_since": started[run_id]})
    labels = sorted({n.job_label for n in nodes.values() if n.job_label})
    return plan(roots, nodes, bel.job_runs.durations(labels), now)


def _stale(bel: BelQueries, graph: Graph, found: Iterable[Partition]) -> dict[str, StalePartition]:
    """Of these partitions, the live instances that are stale (by instance id), with the graph's job
    versions (a worker with another graph may judge otherwise)."""
    live = [p.instance_id for p in found if p.status is PartitionStatus.live and p.instance_id]
    return stale_of(bel, graph, live) if live else {}


def _want_fresh(nodes: dict[str, Node], refs: Sequence[str], rebuilt: set[str]) -> list[str]:
    """Adds to ``rebuilt`` the stale inputs the rebuilds among ``refs`` read; returns those already met (as
    a usual input), now wanted fresh too, whose inputs are then to follow."""
    met: list[str] = []
    grown = list(refs)
    while grown:
        wanted = {
            i
            for ref in grown
            if nodes[ref].fresh and action_of(nodes[ref]) is Action.build
            for i in nodes[ref].stale_inputs
        } - rebuilt
        rebuilt |= wanted
        grown = sorted(i for i in wanted if i in nodes)
        for ref in grown:
            nodes[ref] = nodes[ref].model_copy(update={"fresh": True})
        met += grown
    return met


def _node(graph: Graph, ref: str, partition: Partition | None, stale: StalePartition | None) -> Node:
    status = partition.status if partition is not None else PartitionStatus.missing
    target = graph.resolve(ref).target
    if target is None:
        return Node(ref=ref, job_label=None, outputs=[ref], status=status)
    job = target.job
    reasons = stale.reasons if stale is not None else []
    return Node(
        ref=ref,
        job_label=job.label,
        outputs=target.outputs,
        status=status,
        inputs=job.declared_inputs(target.params) if job.inputs is not None else None,
        batch=job.batch,
        stale=[str(r) for r in reasons],
        stale_inputs=sorted(
            {r.input_ref for r in reasons if r.kind is StaleKind.input_stale and r.input_ref}
        ),
    )
