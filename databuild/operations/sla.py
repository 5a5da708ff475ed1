"""A want's SLA estimate from the BEL: what is left of its fulfilment (``domain.estimates.Step``) and
how long those jobs took before."""

from datetime import datetime

from databuild.bel.queries import BelQueries
from databuild.domain.estimates import Estimate, Step, estimate
from databuild.graph import Graph
from databuild.models import JobRunState, PartitionStatus, Want, WantState

# Derivative wants nest as deep as the graph; past this the estimate stops looking (and says less).
MAX_DEPTH = 12


def remaining_step(bel: BelQueries, graph: Graph, want: Want, depth: int = 0) -> Step:
    """What is left of ``want``: its job (a run of it that is going, with its start), after the inputs
    it waits for."""
    target = graph.resolve(want.ref).target
    running_since = None
    if want.state is WantState.building and want.job_run_id:
        run = bel.job_runs.get(want.job_run_id)
        if run.state is JobRunState.running:
            running_since = run.started_at
    inputs: list[Step] = []
    if want.state is WantState.upstream_building and depth < MAX_DEPTH:
        waited = {ref: wid for _, _, ref, wid in bel.wants.derivatives_of([want.want_id])}
        open_wants = [w for w in bel.wants.by_id([w for w in waited.values() if w]) if not w.state.is_final]
        inputs = [remaining_step(bel, graph, w, depth + 1) for w in open_wants]
        unwanted = [ref for ref, wid in waited.items() if wid is None]  # external inputs
        live = {p.ref for p in bel.partitions.by_ref(unwanted) if p.status is PartitionStatus.live}
        inputs += [Step(ref=ref, job_label=None) for ref in unwanted if ref not in live]
    return Step(
        ref=want.ref,
        job_label=target.job.label if target is not None else None,
        running_since=running_since,
        inputs=inputs,
    )


def sla_estimate(bel: BelQueries, graph: Graph, want: Want, now: datetime) -> Estimate | None:
    """When the want's partition will be live, for a want with an SLA that has not ended."""
    if want.sla is None or want.state.is_final:
        return None
    step = remaining_step(bel, graph, want)
    return estimate(step, bel.job_runs.durations(sorted(step.labels())), now)
