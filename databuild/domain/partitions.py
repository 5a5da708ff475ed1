"""Which events the operator's commands on partitions and instances append: taint,
publish an external partition, pin an instance. (Resolve and skip are in ``decisions``, beside
the fail-locks they clear.) Each rule takes the partitions its command read under their locks."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from databuild.domain import events as ev
from databuild.errors import InvalidInputError, InvalidTransitionError, NotFoundError
from databuild.models import Instance, InstanceRef, Partition, PartitionStatus, TaintImpact


def taintable(partition: Partition | None, ref: str) -> Partition:
    """The partition, if it can be tainted: it exists, is live, and no run is rebuilding it."""
    if partition is None:
        raise NotFoundError(f"no partition {ref!r} in the build event log")
    if partition.building_job_run_id:
        raise InvalidTransitionError(
            f"{ref} is being built by job run {partition.building_job_run_id}; taint it after that run ends"
        )
    if partition.status is not PartitionStatus.live:
        raise InvalidTransitionError(
            f"{ref} is {partition.status.value}; only a live partition can be tainted"
        )
    return partition


@dataclass(frozen=True)
class Tainting:
    events: list[ev.Event]
    tainted: list[InstanceRef]
    not_tainted: list[InstanceRef]  # cascaded refs rebuilt or changed since the impact was read


def taint(
    partition: Partition | None,
    impact: TaintImpact,
    *,
    reason: str | None,
    looked_at: str | None,
    cascaded: Sequence[str],
    now: Mapping[str, Partition | None],
) -> Tainting:
    """Taint the live instance of ``impact.ref``, marking everything built from it stale, and with a
    cascade (``cascaded``: the refs of the current downstream instances the caller locked, ``now``: their
    partitions) taint each of those still live as it was. ``looked_at``: the instance the caller saw;
    another one live now is an error."""
    ref = impact.ref
    live = taintable(partition, ref)
    if looked_at is not None and live.instance_id != looked_at:
        raise InvalidTransitionError(
            f"the live instance of {ref} is now {live.instance_id}, not {looked_at}; look at the impact again"
        )
    stale = [InstanceRef(ref=d.ref, instance_id=d.instance_id) for d in impact.downstream]
    events: list[ev.Event] = [
        ev.PartitionTainted(ref=ref, instance_id=impact.instance_id, reason=reason, stale=stale)
    ]
    tainted = [InstanceRef(ref=ref, instance_id=impact.instance_id)]
    skipped: list[InstanceRef] = []
    for d in impact.current if cascaded else []:
        if d.ref not in cascaded:
            continue
        row = now.get(d.ref)
        still_live = (
            row is not None
            and row.instance_id == d.instance_id
            and row.status is PartitionStatus.live
            and not row.building_job_run_id
        )
        if not still_live:
            skipped.append(InstanceRef(ref=d.ref, instance_id=d.instance_id))
            continue
        events.append(
            ev.PartitionTainted(
                ref=d.ref,
                instance_id=d.instance_id,
                reason=f"built from tainted {ref}" + (f": {reason}" if reason else ""),
                cascaded_from=impact.instance_id,
            )
        )
        tainted.append(InstanceRef(ref=d.ref, instance_id=d.instance_id))
    return Tainting(events, tainted, skipped)


def publish(
    ref: str,
    partition: Partition | None,
    *,
    instance_id: str | None,
    seen_as: str | None,
    new_instance_id: str,
    source: str | None,
    location: str | None,
) -> list[ev.Event]:
    """Announce ``ref`` as available from outside. Without ``instance_id`` a live ref is left as it is;
    with one, an instance seen before (``seen_as``: the ref it is an instance of, if any) is never applied
    again, and a new one replaces the live instance. ``new_instance_id`` names an instance the caller did
    not name."""
    if partition is not None and partition.building_job_run_id:
        raise InvalidTransitionError(
            f"{ref} is being built by job run {partition.building_job_run_id}; publish it after that run ends"
        )
    if partition is not None and partition.status is PartitionStatus.skipped:
        raise InvalidTransitionError(f"{ref} was retired with `databuild skip`; it cannot become live again")
    if instance_id is None:
        fresh = partition is None or partition.status is not PartitionStatus.live
    else:
        if seen_as is not None and seen_as != ref:
            raise InvalidInputError(f"instance {instance_id} is already an instance of {seen_as}, not {ref}")
        fresh = seen_as is None
    if not fresh:
        return []
    return [
        ev.PartitionLive(
            ref=ref,
            instance_id=instance_id or new_instance_id,
            job_run_id=None,
            external=True,
            source=source,
            location=location,
        )
    ]


def pin(instance: Instance, pinned: bool, reason: str | None) -> list[ev.Event]:
    """Keep (or stop keeping) an instance's data from garbage collection; idempotent."""
    if instance.pinned == pinned:
        return []
    if pinned:
        return [ev.InstancePinned(ref=instance.ref, instance_id=instance.instance_id, reason=reason)]
    return [ev.InstanceUnpinned(ref=instance.ref, instance_id=instance.instance_id)]
