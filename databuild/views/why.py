"""Why a partition is in its state (`databuild why REF`): a chain of recorded facts. A live partition's
build (run, time, version, inputs); if it is stale, each reason, following a stale input down to the
root cause: the version change, the taint and its reason, or the newer instance, the run that built it
and the want it was built for."""

from datetime import datetime

from pydantic import Field

from databuild.bel.queries import BelQueries
from databuild.domain.staleness import Built, StaleKind, StaleReason
from databuild.errors import NotFoundError
from databuild.graph import Graph
from databuild.models import Instance, Model, PartitionStatus
from databuild.refs import validate_ref
from databuild.views.staleness import stale_upstream


class WhyFact(Model):
    """One recorded fact in the explanation of a partition's state."""

    ref: str
    instance_id: str | None = None
    job_run_id: str | None = None
    at: datetime | None = Field(default=None, description="when it was recorded")
    text: str


class Why(Model):
    """Why a partition is in its state: a chain of recorded facts, from its own state down to the root
    cause (``databuild why REF``)."""

    ref: str
    status: PartitionStatus
    stale: bool = Field(description="live, but built from what has changed since")
    chain: list[WhyFact]


# How many stale inputs `why` follows down before it stops: each level is one more fact of the chain.
MAX_DEPTH = 50


def why(bel: BelQueries, graph: Graph, ref: str) -> Why:
    validate_ref(ref)
    with bel.snapshot():
        return _why(bel, graph, ref)


def _why(bel: BelQueries, graph: Graph, ref: str) -> Why:
    partition = bel.partitions.find(ref)
    if partition is None:
        fact = WhyFact(
            ref=ref, text="missing: no instance of it has been recorded (nobody has wanted it yet)"
        )
        return Why(ref=ref, status=PartitionStatus.missing, stale=False, chain=[fact])
    chain: list[WhyFact] = []
    if partition.building_job_run_id is not None:
        chain.append(
            WhyFact(
                ref=ref,
                job_run_id=partition.building_job_run_id,
                text=f"building: job run {partition.building_job_run_id} is building it",
            )
        )
    status, stale = partition.status, False
    if status is PartitionStatus.live and partition.instance_id is not None:
        built, reasons = stale_upstream(bel, graph, partition.instance_id)
        chain.append(
            _built_fact(bel, bel.partitions.instance(partition.instance_id), built.get(partition.instance_id))
        )
        stale = bool(reasons.get(partition.instance_id))
        _follow(bel, partition.instance_id, built, reasons, chain, depth=0)
    elif status is PartitionStatus.tainted:
        instance = bel.partitions.instance(partition.instance_id) if partition.instance_id else None
        chain.append(
            WhyFact(
                ref=ref,
                instance_id=partition.instance_id,
                at=instance.retired_at if instance else partition.updated_at,
                text=f"tainted: {partition.reason or 'no reason was given'}",
            )
        )
    elif status is PartitionStatus.failed:
        chain.append(
            WhyFact(
                ref=ref, at=partition.updated_at, text=f"failed: {partition.reason or 'no reason recorded'}"
            )
        )
    elif status is PartitionStatus.skipped:
        chain.append(WhyFact(ref=ref, at=partition.updated_at, text="skipped: retired with `databuild skip`"))
    elif status is PartitionStatus.missing and partition.building_job_run_id is None:
        chain.append(WhyFact(ref=ref, at=partition.updated_at, text="missing: it has no live instance"))
    return Why(ref=ref, status=status, stale=stale, chain=chain)


def _built_fact(bel: BelQueries, instance: Instance, built: Built | None) -> WhyFact:
    inputs = (
        ", ".join(f"{r.ref} {r.instance_id}" for r in built.reads) if built and built.reads else "nothing"
    )
    if instance.job_run_id is None:
        text = f"live: instance {instance.instance_id}, announced externally"
    else:
        run = bel.job_runs.get(instance.job_run_id)
        version = instance.job_version or "not recorded"
        text = (
            f"live: instance {instance.instance_id}, built by job run {run.job_run_id} "
            f"(job {run.job_label}, version {version}) from {inputs}"
        )
    return WhyFact(
        ref=instance.ref,
        instance_id=instance.instance_id,
        job_run_id=instance.job_run_id,
        at=instance.created_at,
        text=text,
    )


def _follow(
    bel: BelQueries,
    instance_id: str,
    built: dict[str, Built],
    reasons: dict[str, list[StaleReason]],
    chain: list[WhyFact],
    depth: int,
) -> None:
    """Each reason ``instance_id`` is stale, and below the first stale input, its reasons, and so on."""
    ref = built[instance_id].ref
    found = reasons.get(instance_id, [])
    for reason in found:
        chain.append(_reason_fact(bel, ref, instance_id, built[instance_id], reason))
    below = next((r for r in found if r.kind is StaleKind.input_stale), None)
    if below is not None and below.input_instance_id in built and depth < MAX_DEPTH:
        _follow(bel, below.input_instance_id, built, reasons, chain, depth + 1)


def _reason_fact(bel: BelQueries, ref: str, instance_id: str, built: Built, reason: StaleReason) -> WhyFact:
    read = f"read {reason.input_ref} instance {reason.input_instance_id}"
    if reason.kind is StaleKind.code_changed:
        return WhyFact(
            ref=ref,
            instance_id=instance_id,
            job_run_id=built.job_run_id,
            text=f"stale: job {built.job_label}'s version changed from {reason.built_version} "
            f"(which built it) to {reason.current_version}",
        )
    if reason.kind is StaleKind.input_stale:
        return WhyFact(ref=ref, instance_id=instance_id, text=f"stale: {read}, which is stale:")
    assert reason.input_instance_id is not None
    read_instance = bel.partitions.instance(reason.input_instance_id)
    if reason.kind is StaleKind.input_tainted:
        return WhyFact(
            ref=ref,
            instance_id=instance_id,
            at=read_instance.retired_at,
            text=f"stale: {read}, which was tainted: {read_instance.reason or 'no reason was given'}",
        )
    assert reason.live_instance_id is not None
    newer = bel.partitions.instance(reason.live_instance_id)
    return WhyFact(
        ref=ref,
        instance_id=instance_id,
        job_run_id=newer.job_run_id,
        at=newer.created_at,
        text=f"stale: {read}, which was superseded by instance {newer.instance_id} {_origin(bel, newer)}",
    )


def _origin(bel: BelQueries, instance: Instance) -> str:
    if instance.job_run_id is None:
        return "(announced externally)"
    run = bel.job_runs.get(instance.job_run_id)
    if run.want_id is None:
        return f"built by job run {run.job_run_id}"
    try:
        want = bel.wants.get(run.want_id)
    except NotFoundError:
        return f"built by job run {run.job_run_id} for want {run.want_id}"
    return f"built by job run {run.job_run_id} for want {want.want_id} ({want.source.value}, {want.ref})"
