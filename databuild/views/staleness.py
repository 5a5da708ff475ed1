"""Stale partitions read from the BEL (``databuild.domain.staleness``): the live instances asked about,
then the live instances they read, a level at a time, in bulk; one read transaction."""

import hashlib
from collections.abc import Iterable, Sequence
from typing import TypeVar

from databuild.bel.queries import BelQueries
from databuild.domain.freshness import Freshness
from databuild.domain.staleness import Built, StalePartition, StaleReason, staleness
from databuild.globs import compile_glob
from databuild.graph import Graph
from databuild.models import InstanceStatus, Partition, PartitionStatus, Want
from databuild.views.lineage import JobRunView, ListView, PartitionView, WantView

# Levels of upstream read one by one before the rest is read in bulk (see _add_upstream).
MAX_LEVELS = 8


def stale_partitions(bel: BelQueries, graph: Graph, pattern: str | None = None) -> list[StalePartition]:
    """The stale live partitions whose refs match the glob ``pattern`` (all when None), by ref."""
    if pattern is not None:
        compile_glob(pattern)  # a malformed pattern is refused, naming the problem, before any read
    now = versions(graph)
    with bel.snapshot():
        built = bel.lineage.live_built(pattern, stale_under=now)
        targets = list(built)
        _add_upstream(bel, built)
    found = staleness(built, now, targets)
    return [_stale(built[t], found[t]) for t in targets if t in found]


def stale_of(bel: BelQueries, graph: Graph, instance_ids: list[str]) -> dict[str, StalePartition]:
    """Which of these live instances are stale (the others are left out), by instance id."""
    with bel.snapshot():
        built = bel.lineage.built_by_id(instance_ids)
        _add_upstream(bel, built)
    found = staleness(built, versions(graph), [i for i in instance_ids if i in built])
    return {i: _stale(built[i], reasons) for i, reasons in found.items()}


def stale_upstream(
    bel: BelQueries, graph: Graph, instance_id: str
) -> tuple[dict[str, Built], dict[str, list[StaleReason]]]:
    """A live instance and every live instance it read, transitively, with the reasons of each that is
    stale: what `why` follows down to a root cause."""
    with bel.snapshot():
        built = bel.lineage.built_by_id([instance_id])
        _add_upstream(bel, built)
    return built, staleness(built, versions(graph), built)


def stale_counts(bel: BelQueries, graph: Graph) -> dict[str, int]:
    """The stale live partitions per job that built them (``/metrics``)."""
    counts: dict[str, int] = {}
    for stale in stale_partitions(bel, graph):
        label = stale.job_label or "external"
        counts[label] = counts.get(label, 0) + 1
    return counts


# The views whose index can say which of its instances are stale.
Indexed = TypeVar("Indexed", PartitionView, WantView, JobRunView, ListView[Partition])


def with_staleness(bel: BelQueries, graph: Graph, view: Indexed) -> Indexed:
    """``view`` with the live instances of its index that are stale, and why (``index.stale``); a
    partition view also with the reasons of the instance it shows (``stale``), if that is live and stale."""
    index = view.index
    live = {i.instance_id for i in index.instances.values() if i.status is InstanceStatus.live}
    live |= {
        p.instance_id for p in index.partitions.values() if p.instance_id and p.status is PartitionStatus.live
    }
    found = {i: s.reasons for i, s in stale_of(bel, graph, sorted(live)).items()}
    update: dict[str, object] = {"index": index.model_copy(update={"stale": found})}
    shown = view.data.instance_id if isinstance(view, PartitionView) else None
    if isinstance(view, PartitionView) and shown and index.partitions[view.data.ref].instance_id == shown:
        update["stale"] = found.get(shown, [])
    return view.model_copy(update=update)


def freshness(bel: BelQueries, graph: Graph, want: Want) -> Freshness | None:
    """What a fresh want's decision reads (``databuild.domain.freshness``): its partition's live instance,
    why that is stale under ``graph``'s versions (the worker's), and the inputs the want already waited
    for. None for a want that is not fresh, or whose partition is not live (then it is a usual want)."""
    live = _live(bel, want.ref) if want.fresh else None
    if live is None or live.instance_id is None:
        return None
    stale = stale_of(bel, graph, [live.instance_id]).get(live.instance_id)
    return Freshness(
        instance_id=live.instance_id,
        reasons=tuple(stale.reasons) if stale is not None else (),
        awaited=frozenset(ref for _want, _run, ref, _derivative in bel.wants.derivatives_of([want.want_id])),
    )


def fresh_basis(bel: BelQueries, graph: Graph, ref: str) -> str | None:
    """What a fresh want for ``ref`` is asked against (``WantSpec.fresh_of``): its live instance and why
    that is stale now (None: nothing is live). Asking again while both are the same is the same want;
    after a rebuild, or once the instance is stale for another reason, it is a new one."""
    live = _live(bel, ref)
    if live is None or live.instance_id is None:
        return None
    return basis_of(live.instance_id, stale_of(bel, graph, [live.instance_id]).get(live.instance_id))


def basis_of(instance_id: str, stale: StalePartition | None) -> str:
    """The instance (its id cut short: an announced one's may be long) and a digest of it and its reasons."""
    reasons = [str(r) for r in stale.reasons] if stale is not None else []
    digest = hashlib.sha256("\n".join([instance_id, *reasons]).encode()).hexdigest()[:16]
    return f"{instance_id[:64]}:{digest}"


def stale_among(bel: BelQueries, graph: Graph, refs: Sequence[str]) -> dict[str, StalePartition]:
    """Of ``refs``, the live ones that are stale now, by ref (``backfill --stale-only``)."""
    with bel.snapshot():
        live = [p.instance_id for p in bel.partitions.by_ref(refs) if p.status is PartitionStatus.live]
        found = stale_of(bel, graph, [i for i in live if i is not None])
    return {stale.ref: stale for stale in found.values()}


def _live(bel: BelQueries, ref: str) -> Partition | None:
    found = bel.partitions.find(ref)
    return found if found is not None and found.status is PartitionStatus.live else None


def versions(graph: Graph) -> dict[str, str]:
    return {job.label: job.version for job in graph.jobs}


def _add_upstream(bel: BelQueries, built: dict[str, Built]) -> None:
    """Adds the live instances ``built`` read, transitively: what an input's staleness is derived from.
    A level at a time for a few levels; an upstream deeper than that (a cumulative job reading its own
    previous day reaches back to the first) is read whole instead, in two queries, not one per level."""
    frontier = _unread(built, built.values())
    for _level in range(MAX_LEVELS):
        if not frontier:
            return
        more = bel.lineage.built_by_id(frontier)
        built |= more
        frontier = _unread(built, more.values())
    if frontier:
        built |= {i: b for i, b in bel.lineage.live_built().items() if i not in built}


def _unread(built: dict[str, Built], instances: Iterable[Built]) -> list[str]:
    return sorted(
        {
            r.instance_id
            for b in instances
            for r in b.reads
            if r.live_instance_id == r.instance_id and r.instance_id not in built
        }
    )


def _stale(instance: Built, reasons: list[StaleReason]) -> StalePartition:
    return StalePartition(
        ref=instance.ref,
        instance_id=instance.instance_id,
        job_label=instance.job_label,
        job_run_id=instance.job_run_id,
        job_version=instance.version,
        reasons=reasons,
    )
