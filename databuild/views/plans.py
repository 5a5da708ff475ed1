"""A plan read from the BEL (``databuild.domain.plans``): the partitions the wanted ones reach, a level
at a time, one query per level; the runs that are building some of them; the jobs' durations."""

from collections.abc import Iterable, Sequence
from datetime import datetime

from databuild.bel.queries import BelQueries
from databuild.domain.plans import Node, Plan, Root, inputs_to_follow, plan
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
    while level:
        if len(nodes) + len(level) > MAX_PLANNED:
            raise InvalidInputError(
                f"the plan reaches more than {MAX_PLANNED:,} partitions; plan a smaller range"
            )
        found = {p.ref: p for p in bel.partitions_by_ref(level)}
        stale = _stale(bel, graph, found.values())
        for ref in level:
            partition = found.get(ref)
            nodes[ref] = _node(graph, ref, partition.status if partition else PartitionStatus.missing)
            if partition is not None and partition.instance_id in stale:
                reasons = stale[partition.instance_id].reasons
                nodes[ref] = nodes[ref].model_copy(
                    update={
                        "stale": [str(r) for r in reasons],
                        "stale_inputs": sorted(
                            {r.input_ref for r in reasons if r.kind is StaleKind.input_stale and r.input_ref}
                        ),
                    }
                )
            nodes[ref] = nodes[ref].model_copy(update={"fresh": fresh})
            if partition is not None and partition.building_job_run_id:
                building[ref] = partition.building_job_run_id
        level = list(
            dict.fromkeys(i for ref in level for i in inputs_to_follow(nodes[ref]) if i not in nodes)
        )
    started = {
        run.job_run_id: run.started_at
        for run in bel.job_runs_by_id(sorted(set(building.values())))
        if run.state is JobRunState.running and run.started_at is not None
    }
    for ref, run_id in building.items():
        if nodes[ref].status is PartitionStatus.building and run_id in started:
            nodes[ref] = nodes[ref].model_copy(update={"running_since": started[run_id]})
    labels = sorted({n.job_label for n in nodes.values() if n.job_label})
    return plan(roots, nodes, bel.job_durations(labels), now)


def _stale(bel: BelQueries, graph: Graph, found: Iterable[Partition]) -> dict[str, StalePartition]:
    """Of these partitions, the live instances that are stale (by instance id), with the graph's job
    versions (a worker with another graph may judge otherwise)."""
    live = [p.instance_id for p in found if p.status is PartitionStatus.live and p.instance_id]
    return stale_of(bel, graph, live) if live else {}


def _node(graph: Graph, ref: str, status: PartitionStatus) -> Node:
    target = graph.resolve(ref).target
    if target is None:
        return Node(ref=ref, job_label=None, outputs=[ref], status=status)
    job = target.job
    return Node(
        ref=ref,
        job_label=job.label,
        outputs=target.outputs,
        status=status,
        inputs=job.declared_inputs(target.params) if job.inputs is not None else None,
        batch=job.batch,
    )
